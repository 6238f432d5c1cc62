"""The reference engine's Anthropic answers, pure: extended thinking (blocks, deltas, signature),
shaped like a real capture and read back by our dialect parser, and the prompt-cache rule."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.result import EventKind
from proxycheck.core.protocol.sse import SSEEvent, parse
from proxycheck.core.testbed import synth, wire
from proxycheck.core.testbed.promptcache import CacheUse, PromptCache

TIMING = synth.Timing(ttft_base=0.1, ttft_per_kb=0.01, interval=0.02)
DIALECT = "anthropic_messages"
REAL_THINKING = Path(__file__).parents[2] / "fixtures" / "wire" / "anthropic-messages-thinking-signature.sse"
TOOLS = [{"name": "Read", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}]


def thinking_request(n: int = 40, thinking: dict | None = None, **extra) -> dict:
    return {"model": "claude-x", "max_tokens": n, "messages": [{"role": "user", "content": "think first"}],
            "thinking": thinking or {"type": "enabled", "budget_tokens": 1024}, **extra}  # fmt: skip


def answer(req: dict, meta: wire.Meta | None = None, **options) -> tuple[synth.Plan, wire.Wire]:
    plan = synth.plan(DIALECT, req, json.dumps(req).encode(), TIMING, **options)
    return plan, wire.encode(DIALECT, plan, meta or wire.Meta("claude-x", 1))


def events_of(data: bytes) -> list[SSEEvent]:
    return [e for e in parse(data) if isinstance(e, SSEEvent)]


def shape(events: list[SSEEvent]) -> list[str]:
    """Each event as TYPE[/block or delta type], runs of the same collapsed to one."""
    out: list[str] = []
    for e in events:
        doc = json.loads(e.data)
        kind = doc["type"]
        if kind == "content_block_start":
            kind += "/" + doc["content_block"]["type"]
        elif kind == "content_block_delta":
            kind += "/" + doc["delta"]["type"]
        if not out or out[-1] != kind:
            out.append(kind)
    return out


def test_a_thinking_stream_has_the_shape_of_a_real_one_and_parses_as_a_complete_answer() -> None:
    plan, w = answer(thinking_request())
    ours = events_of(b"".join(d for _, d in w.events))
    real = events_of(REAL_THINKING.read_bytes())
    assert shape(ours) == shape(real)  # thinking block (deltas, one signature_delta, stop), then text
    start = json.loads(ours[0].data)["message"]["usage"]
    assert set(start) == set(json.loads(real[0].data)["message"]["usage"])  # cache fields, service_tier

    acc = dialects.accumulator(DIALECT)
    kinds = [acc.feed(e.type, e.data) for e in ours]
    result = acc.result()
    assert result.terminal and result.malformed == 0 and not result.errors
    assert result.finish_reason == "end_turn" and result.text == plan.text and plan.text
    assert result.reasoning == "".join(plan.thinking) and plan.thinking
    assert kinds.count(EventKind.CONTENT) == 40  # thinking and text tokens are content
    # max_tokens bounds thinking and text together, and thinking counts as output.
    assert len(plan.thinking) + len(plan.tokens) == 40
    assert result.usage is not None and result.usage.completion_tokens == 40
    # The thinking is paced before the text: the text starts at the step after the last thought.
    steps = [s for s, _ in w.events]
    assert steps == sorted(steps) and w.steps == 40


def test_the_whole_body_has_the_thinking_block_first_with_its_signature() -> None:
    req = thinking_request()
    plan, w = answer(req)
    body = json.loads(w.body)
    first, second = body["content"]
    assert first == {"type": "thinking", "thinking": "".join(plan.thinking), "signature": plan.signature}
    assert second["type"] == "text" and body["usage"]["output_tokens"] == 40
    assert len(base64.b64decode(first["signature"], validate=True)) >= 128
    assert answer(req)[0].signature == plan.signature  # deterministic per request
    assert answer(thinking_request(messages=[{"role": "user", "content": "other"}]))[0].signature != plan.signature
    whole = dialects.parse_body(DIALECT, w.body)
    assert whole.terminal and whole.reasoning == first["thinking"] and whole.text == plan.text
    # The signature streamed is the one in the body.
    deltas = [json.loads(e.data)["delta"] for e in events_of(b"".join(d for _, d in w.events))
              if json.loads(e.data)["type"] == "content_block_delta"]  # fmt: skip
    assert [d["signature"] for d in deltas if d["type"] == "signature_delta"] == [plan.signature]


@pytest.mark.parametrize("thinking,budget", [
    ({"type": "enabled", "budget_tokens": 3}, 3),
    ({"type": "adaptive"}, synth.THINKING_TOKENS),
])  # fmt: skip
def test_the_budget_bounds_the_thinking_and_adaptive_thinks_too(thinking: dict, budget: int) -> None:
    plan, _ = answer(thinking_request(thinking=thinking))
    assert len(plan.thinking) == budget


def test_omitted_thinking_sends_the_signature_but_not_the_text() -> None:
    plan, w = answer(thinking_request(thinking={"type": "enabled", "budget_tokens": 2000, "display": "omitted"}))
    kinds = shape(events_of(b"".join(d for _, d in w.events)))
    assert "content_block_delta/thinking_delta" not in kinds and "content_block_delta/signature_delta" in kinds
    assert json.loads(w.body)["content"][0] == {"type": "thinking", "thinking": "", "signature": plan.signature}
    assert json.loads(w.body)["usage"]["output_tokens"] == 40  # the thinking was still spent


@pytest.mark.parametrize("thinking", [None, {"type": "disabled"}, {"type": "enabled"}, "yes"])
def test_no_thinking_unless_asked_properly(thinking) -> None:
    req = {"model": "m", "max_tokens": 6, "messages": [{"role": "user", "content": "hi"}]}
    if thinking is not None:
        req["thinking"] = thinking
    plan, w = answer(req)
    assert plan.thinking == () and len(plan.tokens) == 6
    assert [b["type"] for b in json.loads(w.body)["content"]] == ["text"]


def test_a_tool_call_after_thinking_is_block_one_and_reads_back() -> None:
    req = thinking_request(tools=TOOLS)
    plan, w = answer(req, tool_call_rate=1.0)
    (call,) = plan.tool_calls
    assert plan.thinking and plan.finish_reason == "tool_use"
    body = json.loads(w.body)
    assert [b["type"] for b in body["content"]] == ["thinking", "tool_use"]
    acc = dialects.accumulator(DIALECT)
    for e in events_of(b"".join(d for _, d in w.events)):
        acc.feed(e.type, e.data)
    result = acc.result()
    assert result.terminal and result.malformed == 0 and result.reasoning
    assert [(c.name, c.arguments) for c in result.tool_calls] == [(call.name, call.arguments)]


def test_usage_splits_the_input_by_the_prompt_cache_and_keeps_the_sum() -> None:
    req = thinking_request()
    plan, w = answer(req, wire.Meta("m", 1, prompt_cache=CacheUse(read=5, written_5m=3, written_1h=2)))
    usage = json.loads(w.body)["usage"]
    assert usage["cache_read_input_tokens"] == 5 and usage["cache_creation_input_tokens"] == 5
    assert usage["cache_creation"] == {"ephemeral_5m_input_tokens": 3, "ephemeral_1h_input_tokens": 2}
    assert usage["input_tokens"] + 10 == plan.prompt_tokens
    assert dialects.parse_body(DIALECT, w.body).usage.prompt_tokens == plan.prompt_tokens
    # Estimates bigger than the whole input are scaled into it.
    _, w = answer(req, wire.Meta("m", 1, prompt_cache=CacheUse(read=10**6, written_5m=10**6)))
    usage = json.loads(w.body)["usage"]
    assert usage["input_tokens"] >= 0
    parts = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    assert sum(usage[k] for k in parts) == plan.prompt_tokens


SYSTEM = [{"type": "text", "text": "You are a careful agent. " * 40, "cache_control": {"type": "ephemeral"}}]


def turn(*texts: str, ttl: str | None = None) -> dict:
    """A conversation whose last user block carries a breakpoint (as Claude Code sends them)."""
    messages: list[dict] = []
    for i, text in enumerate(texts):
        if i:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
    marker = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    messages[-1]["content"][-1]["cache_control"] = marker
    return {"model": "claude-x", "system": SYSTEM, "messages": messages, "max_tokens": 8}


def test_the_prompt_cache_writes_a_prefix_then_reads_it_on_the_next_turn() -> None:
    cache = PromptCache()
    first = cache.use(turn("read the file " * 20))
    assert first.read == 0 and first.written_5m > 0 and first.written_1h == 0
    again = cache.use(turn("read the file " * 20))
    assert again == CacheUse(read=first.written_5m)  # the same request reads all it wrote
    # Turn 2 moved the breakpoint to its new message: it reads turn 1's prefix, writes the rest (1h).
    second = cache.use(turn("read the file " * 20, "and then?", ttl="1h"))
    assert second.read == first.written_5m and second.written_1h > 0 and second.written_5m == 0
    # Another system prompt shares nothing; no breakpoints, no cache at all.
    other = turn("read the file " * 20)
    other["system"] = [{**SYSTEM[0], "text": "Another prompt."}]
    assert cache.use(other).read == 0
    assert cache.use({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}) == CacheUse()
    # Odd shapes are blocks without breakpoints, never an error.
    assert cache.use({"messages": [3, {"content": None}], "system": 7, "tools": "x"}) == CacheUse()


def test_the_prompt_cache_is_bounded() -> None:
    def alone(text: str) -> dict:
        return {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": text * 40, "cache_control": {"type": "ephemeral"}}]}]}  # fmt: skip

    cache = PromptCache(size=2)
    for text in ("a", "b", "c"):
        cache.use(alone(text))
    assert cache.use(alone("c")).read > 0
    assert cache.use(alone("a")).read == 0  # forgotten: least recently used
