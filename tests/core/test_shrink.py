"""Shrinking request bodies (proxycheck.core.shrink): bytes in, a smaller valid body out."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.shrink import shrink_to, text_fields


def chat(*contents: str, compact: bool = False, utf8: bool = False) -> bytes:
    doc = {"model": "m", "stream": True, "max_tokens": 16,
           "messages": [{"role": "system", "content": "be brief"}]
           + [{"role": "user" if i % 2 == 0 else "assistant", "content": c} for i, c in enumerate(contents)]}  # fmt: skip
    return json.dumps(doc, separators=(",", ":") if compact else None, ensure_ascii=not utf8).encode()


def test_the_largest_message_is_cut_and_the_rest_kept() -> None:
    body = chat("a" * 100, "b" * 5000, "c" * 300)
    out = shrink_to(body, 2000)
    assert out is not None and len(out) <= 2000 and len(out) >= 1990
    doc = json.loads(out)
    assert [m["content"][:1] for m in doc["messages"]] == ["b", "a", "b", "c"]
    assert doc["messages"][1]["content"] == "a" * 100 and doc["messages"][3]["content"] == "c" * 300
    assert doc["model"] == "m" and doc["max_tokens"] == 16 and doc["stream"] is True


def test_separators_utf8_and_escapes_are_kept() -> None:
    out = shrink_to(chat("é" * 3000, compact=True, utf8=True), 1500)
    assert out is not None and 1490 <= len(out) <= 1500
    assert b'":"' in out and b'": "' not in out and "é".encode() in out
    out = shrink_to(chat("é" * 3000), 1500)  # an ASCII body: \u00e9, six bytes a character
    assert out is not None and 1490 <= len(out) <= 1500 and b"\\u00e9" in out


def test_anthropic_blocks_and_a_completion_prompt() -> None:
    anthropic = {"model": "m", "max_tokens": 8, "system": "s" * 50,
                 "messages": [{"role": "user", "content": [{"type": "text", "text": "t" * 4000},
                                                           {"type": "tool_result", "tool_use_id": "x",
                                                            "content": "r" * 2000}]}]}  # fmt: skip
    paths = [p for p, _ in text_fields(anthropic)]
    assert ("messages", 0, "content", 0, "text") in paths and ("messages", 0, "content", 1, "content") in paths
    out = shrink_to(json.dumps(anthropic).encode(), 3000)
    assert out is not None and len(out) <= 3000
    assert json.loads(out)["messages"][0]["content"][1]["tool_use_id"] == "x"
    prompt = json.dumps({"model": "m", "prompt": "p" * 900}).encode()
    assert len(shrink_to(prompt, 200) or b"") <= 200


def test_what_cannot_shrink_says_so() -> None:
    assert shrink_to(b"not json", 10) is None
    assert shrink_to(json.dumps({"model": "m", "messages": []}).encode(), 5) is None
    assert shrink_to(chat("x" * 10), 20) is None  # the envelope alone is larger


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(max_size=300), min_size=1, max_size=6), st.integers(100, 3000))
def test_never_larger_than_asked_and_always_valid(contents: list[str], size: int) -> None:
    body = chat(*contents)
    out = shrink_to(body, size)
    if out is not None:
        assert len(out) <= size
        assert len(json.loads(out)["messages"]) == len(contents) + 1
