"""The reference engine's answers, pure: deterministic plans, and wire bytes our dialects read back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.result import EventKind
from proxycheck.core.protocol.sse import SSEEvent, parse
from proxycheck.core.recording.sessions import turn_number
from proxycheck.core.testbed import synth, wire

TIMING = synth.Timing(ttft_base=0.1, ttft_per_kb=0.01, interval=0.02)
TOOLS_OPENAI = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}}}}}]
TOOLS_ANTHROPIC = [{"name": "read_file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]


def request(dialect: str, n: int = 5, **extra) -> dict:
    if dialect == "openai_completions":
        return {"prompt": "say", "max_tokens": n, **extra}
    if dialect == "sglang_generate":
        return {"text": "say", "sampling_params": {"max_new_tokens": n}, **extra}
    return {"messages": [{"role": "user", "content": "say"}], "max_tokens": n, **extra}


def read_stream(dialect: str, w: wire.Wire):
    acc = dialects.accumulator(dialect)
    kinds = [acc.feed(e.type, e.data) for e in parse(b"".join(d for _, d in w.events)) if isinstance(e, SSEEvent)]
    return acc.result(), kinds


@pytest.mark.parametrize("dialect", ["openai_chat", "openai_completions", "anthropic_messages", "sglang_generate"])
def test_streams_and_bodies_read_back_as_the_plan(dialect: str) -> None:
    req = request(dialect, 7, stream_options={"include_usage": True})
    body = json.dumps(req).encode()
    plan = synth.plan(dialect, req, body, TIMING)
    w = wire.encode(dialect, plan, wire.Meta("m", 1, include_usage=True))
    result, kinds = read_stream(dialect, w)
    assert result.text == plan.text and len(plan.tokens) == 7
    assert result.terminal and result.malformed == 0 and not result.errors
    assert result.finish_reason == plan.finish_reason
    assert kinds.count(EventKind.CONTENT) == 7  # one content event per token
    assert result.usage is not None and result.usage.completion_tokens == 7
    whole = dialects.parse_body(dialect, w.body)
    assert whole.text == plan.text and whole.terminal
    # Tokens are paced: the first at step 0, the last at step n - 1.
    assert w.steps == 7 and [s for s, _ in w.events] == sorted(s for s, _ in w.events)


@pytest.mark.parametrize("dialect,tools", [("openai_chat", TOOLS_OPENAI), ("anthropic_messages", TOOLS_ANTHROPIC)])
def test_tool_calls_are_valid_json_for_the_offered_tool(dialect: str, tools: list) -> None:
    req = request(dialect, tools=tools)
    plan = synth.plan(dialect, req, json.dumps(req).encode(), TIMING, tool_call_rate=1.0)
    (call,) = plan.tool_calls
    result, _ = read_stream(dialect, wire.encode(dialect, plan, wire.Meta("m", 1)))
    (got,) = result.tool_calls
    assert got.name == "read_file" and got.arguments_valid and got.arguments == call.arguments
    assert set(got.parsed) <= {"path", "limit"} and isinstance(got.parsed["path"], str)
    assert result.finish_reason == ("tool_use" if dialect == "anthropic_messages" else "tool_calls")
    body_calls = dialects.parse_body(dialect, wire.encode(dialect, plan, wire.Meta("m", 1)).body).tool_calls
    assert [c.parsed for c in body_calls] == [got.parsed]


def test_agent_loops_end_after_two_tool_rounds() -> None:
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                                   "function": {"name": "read_file", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": "c", "content": "x"}
    history = [{"role": "user", "content": "go"}, call, result, call, result]
    req = {"messages": history, "tools": TOOLS_OPENAI}
    assert synth.tool_rounds_since_user("openai_chat", history) == 2
    assert not synth.plan("openai_chat", req, json.dumps(req).encode(), TIMING, tool_call_rate=1.0).tool_calls
    assert turn_number(req) == 3
    req["tool_choice"] = "none"
    assert synth.offered_tools("openai_chat", req) == []


def test_same_content_same_answer_other_content_other_answer() -> None:
    req = request("openai_chat", 12)
    body = json.dumps(req).encode()
    first = synth.plan("openai_chat", req, body, TIMING)
    assert first == synth.plan("openai_chat", req, body, TIMING)
    # Other bytes of the same content (a gateway re-serialized it), and members the model does
    # not see (the model name a gateway maps, stream options): the same answer.
    respelled = json.loads(body)
    assert synth.plan("openai_chat", respelled, json.dumps(respelled, indent=2).encode(), TIMING).tokens == first.tokens
    unseen = {**req, "model": "alias", "stream": True, "stream_options": {"include_usage": True}}
    assert synth.plan("openai_chat", unseen, json.dumps(unseen).encode(), TIMING).tokens == first.tokens
    # What the model sees, changed: another answer; so is another engine seed.
    hotter = {**req, "temperature": 0.7}
    assert synth.plan("openai_chat", hotter, json.dumps(hotter).encode(), TIMING).tokens != first.tokens
    asked = {**req, "messages": [{"role": "user", "content": "say more"}]}
    assert synth.plan("openai_chat", asked, json.dumps(asked).encode(), TIMING).tokens != first.tokens
    assert synth.plan("openai_chat", req, body, TIMING, seed=1).tokens != first.tokens


def test_a_tool_schema_in_another_member_order_gets_the_same_tool_call() -> None:
    props = {"path": {"type": "string"}, "limit": {"type": "integer"}, "all": {"type": "boolean"}}
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": props}}}]
    req = request("openai_chat", tools=tools)
    flipped = json.loads(json.dumps(req))
    schema = flipped["tools"][0]["function"]["parameters"]
    schema["properties"] = dict(reversed(list(props.items())))
    first = synth.plan("openai_chat", req, json.dumps(req).encode(), TIMING, tool_call_rate=1.0)
    again = synth.plan("openai_chat", flipped, json.dumps(flipped).encode(), TIMING, tool_call_rate=1.0)
    assert first.tool_calls and first.tool_calls == again.tool_calls


def test_timing_model_and_lengths() -> None:
    req = request("openai_chat", 3)
    plan = synth.plan("openai_chat", req, b"x" * 2048, TIMING)
    assert plan.ttft == pytest.approx(0.1 + 0.02)
    assert synth.max_tokens_of("openai_chat", {"max_completion_tokens": 9, "max_tokens": 3}) == 9
    assert synth.max_tokens_of("openai_chat", {"max_tokens": 0}) == synth.DEFAULT_MAX_TOKENS
    ignore = synth.plan("sglang_generate", {"sampling_params": {"max_new_tokens": 2, "ignore_eos": True}}, b"{}", TIMING)
    assert ignore.finish_reason == "length"


@settings(max_examples=60)
@given(st.sampled_from(["openai_chat", "openai_completions", "anthropic_messages", "sglang_generate"]),
       st.integers(1, 40), st.binary(max_size=64), st.booleans())
def test_any_plan_reads_back(dialect: str, n: int, salt: bytes, tools: bool) -> None:
    extra = {"tools": TOOLS_ANTHROPIC if dialect == "anthropic_messages" else TOOLS_OPENAI} if tools else {}
    req = request(dialect, n, **extra)
    plan = synth.plan(dialect, req, json.dumps(req).encode() + salt, TIMING)
    result, _ = read_stream(dialect, wire.encode(dialect, plan, wire.Meta("m", 1)))
    assert result.terminal and result.malformed == 0
    assert result.text == plan.text
    assert [c.arguments for c in result.tool_calls] == [c.arguments for c in plan.tool_calls]
