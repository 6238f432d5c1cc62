"""The Responses API encoder (`wire.openai_responses`), the Responses branches of `synth`, and the
engine's store of its own responses (`response_store`), without a server."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.analysis import StreamTracker
from proxycheck.core.testbed import synth, wire
from proxycheck.core.testbed.response_store import ResponseStore, UnknownResponse

TIMING = synth.Timing(0.0, 0.0, 0.0)
TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
         {"type": "web_search"}]  # fmt: skip


def plan_for(req: dict, rate: float = 0.0) -> synth.Plan:
    return synth.plan("openai_responses", req, json.dumps(req).encode(), TIMING, tool_call_rate=rate)


def analysed(w: wire.Wire):
    tracker = StreamTracker("openai_responses")
    tracker.feed(b"".join(data for _, data in w.events), 0.1)
    tracker.close(0.2)
    return tracker.analysis()


def test_max_output_tokens_and_function_tools_are_read() -> None:
    req = {"input": "hi", "max_output_tokens": 5, "tools": TOOLS}
    assert synth.max_tokens_of("openai_responses", req) == 5
    assert [name for name, _ in synth.offered_tools("openai_responses", req)] == ["read_file"]
    assert synth.offered_tools("openai_responses", {**req, "tool_choice": "none"}) == []


def test_the_conversation_of_responses_items() -> None:
    items = [{"role": "user", "content": "go"},
             {"type": "reasoning", "summary": []},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
             {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
             {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "x"},
             {"type": "function_call_output", "call_id": "c2", "output": "y"},
             {"type": "function_call", "call_id": "c3", "name": "a", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c3", "output": "z"}]  # fmt: skip
    conversation = synth.conversation_of("openai_responses", {"input": items})
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "tool", "assistant", "tool"]
    assert synth.assistant_turns(conversation) == 2
    assert synth.tool_rounds_since_user("openai_responses", conversation) == 2
    assert synth.conversation_of("openai_responses", {"input": "hi"}) == [{"role": "user", "content": "hi"}]


def test_an_answer_cut_at_the_length_limit_is_incomplete() -> None:
    plan = replace(plan_for({"input": "hi", "max_output_tokens": 3}), finish_reason="length")
    w = wire.encode("openai_responses", plan, wire.Meta("m", 1))
    last = json.loads(w.events[-1][1].split(b"data: ", 1)[1])
    assert last["type"] == "response.incomplete" and last["response"]["status"] == "incomplete"
    result = analysed(w).result
    assert result.terminal and result.choices[0].finish_reason == "max_output_tokens"
    assert dialects.parse_body("openai_responses", w.body).text == plan.text


def test_steps_pace_the_deltas_and_the_events_are_numbered() -> None:
    w = wire.encode("openai_responses", plan_for({"input": "hi", "max_output_tokens": 4}), wire.Meta("m", 1))
    docs = [json.loads(data.split(b"data: ", 1)[1]) for _, data in w.events]
    assert [d["sequence_number"] for d in docs] == list(range(len(docs)))
    assert [s for (s, _), d in zip(w.events, docs) if d["type"] == "response.output_text.delta"] == [0, 1, 2, 3]
    assert w.steps == 4


def test_the_store_continues_chains_refuses_unknown_ids_and_is_bounded() -> None:
    store = ResponseStore(capacity=2)
    store.remember("resp_a", {"input": "one"}, [{"type": "message", "role": "assistant", "content": "A"}])
    store.remember("resp_b", {"input": [{"role": "user", "content": "two"}], "previous_response_id": "resp_a"},
                   [{"type": "message", "role": "assistant", "content": "B"}])  # fmt: skip
    expanded = store.expand({"input": "three", "previous_response_id": "resp_b"})
    assert [item["content"] for item in expanded["input"]] == ["one", "A", "two", "B", "three"]
    store.remember("resp_x", {"input": "kept?", "store": False}, [])
    with pytest.raises(UnknownResponse) as raised:
        store.expand({"input": "more", "previous_response_id": "resp_x"})
    assert raised.value.error_body()["error"]["code"] == "previous_response_not_found"
    store.remember("resp_c", {"input": "other"}, [])  # evicts the least recently used: resp_a
    assert len(store) == 2
    assert [item["content"] for item in store.expand({"input": "x", "previous_response_id": "resp_b"})["input"]] == [
        "two", "B", "x"]  # fmt: skip
