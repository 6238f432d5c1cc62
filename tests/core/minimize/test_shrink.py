"""Shrinking request bodies (proxycheck.core.minimize.shrink): bytes in, a smaller valid body out."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.minimize.shrink import drop_units, message_units, shrink_to, text_fields


def chat(*contents: str, compact: bool = False, utf8: bool = False) -> bytes:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": c} for i, c in enumerate(contents)]
    system = {"role": "system", "content": "be brief"}
    doc = {"model": "m", "stream": True, "max_tokens": 16, "messages": [system, *turns]}
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


# ------------------------------------------------------------------------- dropping messages


def dumps(doc: object) -> bytes:
    return json.dumps(doc).encode()


def call(i: str) -> dict[str, object]:
    return {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def test_openai_parallel_tool_calls_go_with_their_results() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"},
                {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
                {"role": "tool", "tool_call_id": "a", "content": "ra"},
                {"role": "tool", "tool_call_id": "b", "content": "rb"},
                {"role": "assistant", "content": "done"}, {"role": "user", "content": "q2"}]  # fmt: skip
    body = dumps({"model": "m", "messages": messages})
    assert message_units(body) == [(1,), (2, 3, 4), (5,)]
    out = drop_units(body, [(2, 3, 4)])
    assert out is not None and json.loads(out)["messages"] == [messages[i] for i in (0, 1, 5, 6)]
    out = drop_units(body, message_units(body))
    assert out is not None and json.loads(out) == {"model": "m", "messages": [messages[0], messages[6]]}


def test_anthropic_tool_result_carries_its_user_message_and_the_first_stays_the_users() -> None:
    messages = [{"role": "user", "content": "q1"},
                {"role": "assistant", "content": [{"type": "text", "text": "look"},
                                                  {"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r"},
                                             {"type": "text", "text": "and also"}]},
                {"role": "assistant", "content": "ok"}, {"role": "user", "content": "q2"}]  # fmt: skip
    body = dumps({"model": "m", "system": "s", "max_tokens": 8, "messages": messages})
    assert message_units(body) == [(0,), (1, 2), (3,)]
    assert drop_units(body, [(0,)]) is None  # the conversation would open with the assistant
    out = drop_units(body, [(1, 2), (3,)])
    assert out is not None and json.loads(out)["messages"] == [messages[0], messages[4]]
    assert json.loads(out)["system"] == "s"


def test_responses_items_pair_by_call_id_and_reasoning_stays_with_its_call() -> None:
    items = [{"role": "developer", "content": "s"}, {"role": "user", "content": "q1"},
             {"type": "reasoning", "id": "rs_1", "summary": []},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "r1"},
             {"type": "function_call_output", "call_id": "c2", "output": "r2"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
             {"role": "user", "content": "q2"}]  # fmt: skip
    body = dumps({"model": "m", "input": items})
    assert message_units(body) == [(1,), (2, 3, 4, 5, 6), (7,)]
    out = drop_units(body, [(2, 3, 4, 5, 6)])
    assert out is not None and json.loads(out)["input"] == [items[i] for i in (0, 1, 7, 8)]


def test_a_pending_tool_result_keeps_its_call() -> None:
    openai = [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call("x")]},
              {"role": "tool", "tool_call_id": "x", "content": "r"}]  # fmt: skip
    assert message_units(dumps({"messages": openai})) == [(0,)]
    anthropic = [{"role": "user", "content": "q"},
                 {"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]  # fmt: skip
    assert message_units(dumps({"messages": anthropic})) == [(0,)]
    assert drop_units(dumps({"messages": anthropic}), [(0,)]) is None
    responses = [{"role": "user", "content": "q"}, {"type": "function_call", "call_id": "x", "name": "f"},
                 {"type": "function_call_output", "call_id": "x", "output": "r"}]  # fmt: skip
    assert message_units(dumps({"input": responses})) == [(0,)]


def test_bodies_without_messages() -> None:
    for body in (b"not json", dumps({"model": "m", "prompt": "p"}), dumps({"input": "a string"}), dumps([1])):
        assert message_units(body) == []
    assert message_units(chat("q")) == []  # a system prompt and the question: nothing to drop
    assert drop_units(b"not json", []) is None
    prompt = dumps({"model": "m", "prompt": "p"})
    assert drop_units(prompt, []) == prompt
    # Nothing but system messages left is no request.
    assert drop_units(chat("q"), [(1,)]) is None


def test_dropping_keeps_separators_and_utf8() -> None:
    body = chat("é1", "é2", "é3", compact=True, utf8=True)
    assert message_units(body) == [(1,), (2,)]
    out = drop_units(body, [(1,)])
    assert out is not None and b'":"' in out and b'": "' not in out and "é3".encode() in out
    assert [m["content"] for m in json.loads(out)["messages"]] == ["be brief", "é2", "é3"]
    out = drop_units(chat("é1", "é2", "é3"), [(1,)])
    assert out is not None and b'": "' in out and b"\\u00e93" in out
    assert drop_units(body, []) == body


# A conversation: per turn, the tool rounds the model made (each a number of parallel calls).
# The last turn ends with its question, or with the results of its last round (still to answer).
conversations = st.lists(st.lists(st.integers(1, 3), max_size=2), min_size=1, max_size=4)


def render(dialect: str, turns: list[list[int]]) -> tuple[bytes, str]:
    items: list[dict[str, object]] = []
    for t, rounds in enumerate(turns):
        items.append({"role": "user", "content": f"q{t}"})
        for r, n in enumerate(rounds):
            ids = [f"c{t}_{r}_{j}" for j in range(n)]
            if dialect == "openai":
                items.append({"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]})
                items += [{"role": "tool", "tool_call_id": i, "content": "r"} for i in ids]
            elif dialect == "anthropic":
                uses = [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]
                items.append({"role": "assistant", "content": [{"type": "text", "text": "t"}, *uses]})
                items.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": i} for i in ids]})
            else:
                items.append({"type": "reasoning", "id": f"rs{t}_{r}", "summary": []})
                items += [{"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"} for i in ids]
                items += [{"type": "function_call_output", "call_id": i, "output": "r"} for i in ids]
        if t < len(turns) - 1:
            items.append({"role": "assistant", "content": f"a{t}"})
    if dialect == "anthropic":
        return dumps({"model": "m", "system": "s", "messages": items}), "messages"
    system = {"role": "system" if dialect == "openai" else "developer", "content": "s"}
    return dumps({"model": "m", "messages" if dialect == "openai" else "input": [system, *items]}), (
        "messages" if dialect == "openai" else "input"
    )


def calls_and_answers(items: list[dict[str, object]]) -> tuple[list[object], list[object]]:
    calls: list[object] = []
    answers: list[object] = []
    for m in items:
        content = m.get("content") if isinstance(m.get("content"), list) else []
        calls += [c["id"] for c in m.get("tool_calls") or []]  # type: ignore[attr-defined,index]
        calls += [b["id"] for b in content if b.get("type") == "tool_use"]  # type: ignore[union-attr]
        answers += [b["tool_use_id"] for b in content if b.get("type") == "tool_result"]  # type: ignore[union-attr]
        if m.get("role") == "tool":
            answers.append(m["tool_call_id"])
        if m.get("type") == "function_call":
            calls.append(m["call_id"])
        if m.get("type") == "function_call_output":
            answers.append(m["call_id"])
    return calls, answers


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["openai", "anthropic", "responses"]), conversations, st.data())
def test_any_units_dropped_leave_a_valid_request(dialect: str, turns: list[list[int]], data: st.DataObject) -> None:
    body, key = render(dialect, turns)
    items = json.loads(body)[key]
    units = message_units(body)
    flat = [i for u in units for i in u]
    assert len(flat) == len(set(flat)) and units == sorted(units) and all(list(u) == sorted(u) for u in units)
    chosen = data.draw(st.lists(st.sampled_from(units), unique=True) if units else st.just([]))
    out = drop_units(body, chosen)
    dropped = {i for u in chosen for i in u}
    kept = [m for i, m in enumerate(items) if i not in dropped]
    if out is None:  # only an Anthropic conversation opening with the assistant is refused
        assert dialect == "anthropic" and kept[0]["role"] == "assistant"
        return
    doc = json.loads(out)
    assert doc[key] == kept and doc["model"] == "m"
    assert kept[-1] == items[-1]
    if dialect == "anthropic":
        assert doc["system"] == "s"
    else:
        assert kept[0] == items[0]
    calls, answers = calls_and_answers(kept)
    assert sorted(calls) == sorted(answers)  # no call without its result, no result without its call
    for i, m in enumerate(kept):
        if m.get("type") == "reasoning":
            assert kept[i + 1]["type"] == "function_call"
