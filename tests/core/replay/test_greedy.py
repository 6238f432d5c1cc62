"""Greedy decoding for replays (proxycheck.core.replay.greedy): each dialect's body gets its own names
for temperature 0 and a fixed seed; nothing else of the request changes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxycheck.core.protocol.requestparts import parts_of
from proxycheck.core.replay.greedy import greedy_body


def rewritten(dialect: str, doc: dict) -> dict:
    return json.loads(greedy_body(dialect, json.dumps(doc).encode()))


MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("dialect", "doc", "want"),
    [
        ("openai_chat", {"model": "m", "messages": MESSAGES, "temperature": 0.7, "top_p": 0.9, "top_k": 20},
         {"model": "m", "messages": MESSAGES, "temperature": 0, "seed": 0, "top_p": 1}),
        ("openai_chat", {"messages": MESSAGES}, {"messages": MESSAGES, "temperature": 0, "seed": 0}),
        ("openai_chat", {"messages": MESSAGES, "seed": 1234}, {"messages": MESSAGES, "temperature": 0, "seed": 0}),
        ("openai_completions", {"prompt": "p", "temperature": 1.2}, {"prompt": "p", "temperature": 0, "seed": 0}),
        ("openai_responses", {"input": "p", "temperature": 1, "top_p": 0.5}, {"input": "p", "temperature": 0, "top_p": 1}),
        ("anthropic_messages", {"messages": MESSAGES, "max_tokens": 8, "top_p": 0.9, "top_k": 5},
         {"messages": MESSAGES, "max_tokens": 8, "temperature": 0}),
        ("sglang_generate", {"text": "p", "sampling_params": {"temperature": 0.8, "top_k": 4, "max_new_tokens": 9}},
         {"text": "p", "sampling_params": {"temperature": 0, "max_new_tokens": 9}}),
        ("sglang_generate", {"text": "p"}, {"text": "p", "sampling_params": {"temperature": 0}}),
        ("sglang_generate", {"text": ["a", "b"], "sampling_params": [{"temperature": 1}, {"top_p": 0.3}]},
         {"text": ["a", "b"], "sampling_params": [{"temperature": 0}, {"temperature": 0, "top_p": 1}]}),
    ],
)  # fmt: skip
def test_each_dialect_gets_its_own_names(dialect: str, doc: dict, want: dict) -> None:
    assert rewritten(dialect, doc) == want


def test_no_seed_where_the_api_has_none() -> None:
    # Anthropic's and the Responses API have no seed; SGLang's native one is not in every version.
    assert "seed" not in rewritten("anthropic_messages", {"messages": MESSAGES})
    assert "seed" not in rewritten("openai_responses", {"input": "x"})
    params = rewritten("sglang_generate", {"text": "x", "sampling_params": {}})["sampling_params"]
    assert set(params) == {"temperature"}


@pytest.mark.parametrize(
    ("dialect", "body"),
    [
        ("openai_chat", b"not json"),
        ("openai_chat", b"[1, 2]"),
        (None, b'{"messages": [], "temperature": 1}'),
        ("openai_chat", b'{"messages":[],"temperature":0,"seed":0}'),  # already greedy
        ("openai_chat", b'{"messages": [], "temperature": 0.0, "seed": 0, "top_p": 1.0}'),  # the same, spelled otherwise
    ],
)
def test_what_it_cannot_or_need_not_rewrite_is_sent_as_it_is(dialect: str | None, body: bytes) -> None:
    assert greedy_body(dialect, body) is body


def test_only_the_sampling_parameters_change_in_what_the_model_sees() -> None:
    body = json.dumps({"model": "m", "messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f"}}],
                       "max_tokens": 9, "temperature": 0.7, "stream": True}).encode()  # fmt: skip
    before, after = parts_of(json.loads(body)), parts_of(json.loads(greedy_body("openai_chat", body)))
    assert after.params != before.params
    assert (after.messages, after.tools, after.system) == (before.messages, before.tools, before.system)


@pytest.mark.parametrize(
    "body",
    [
        b'{"messages":[{"role":"user","content":"caf\xc3\xa9"}],"temperature":1}',  # compact, raw UTF-8
        b'{"messages": [{"role": "user", "content": "caf\\u00e9"}], "temperature": 1}',  # spaced, escaped
        b'{"messages":[{"role":"tool","content":"{\\"path\\": \\"a.py\\"}"}]}',  # compact, `": ` in a string
    ],
)
def test_the_rewritten_body_keeps_the_recorded_form(body: bytes) -> None:
    out = greedy_body("openai_chat", body)
    assert len(body) < len(out) <= len(body) + len(b', "temperature": 0, "seed": 0')
    assert out.isascii() == body.isascii()
    assert out.startswith(body[: body.index(b"[")])  # `{"messages":` or `{"messages": `: the same form


def test_a_lone_surrogate_escape_survives() -> None:
    body = b'{"messages":[{"role":"user","content":"\\ud800 \xc3\xa9"}]}'
    assert json.loads(greedy_body("openai_chat", body))["messages"][0]["content"] == "\ud800 \u00e9"


@given(st.dictionaries(st.sampled_from(["temperature", "top_p", "top_k", "seed", "max_tokens", "stop"]),
                       st.one_of(st.integers(-5, 5), st.floats(0, 2), st.none(), st.text(max_size=3))))  # fmt: skip
def test_rewriting_twice_is_rewriting_once(params: dict) -> None:
    for dialect in ("openai_chat", "openai_responses", "anthropic_messages"):
        once = greedy_body(dialect, json.dumps({"messages": MESSAGES, **params}).encode())
        assert greedy_body(dialect, once) is once
        assert json.loads(once)["temperature"] == 0
