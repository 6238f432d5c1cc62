"""The cap on a text answer's length, pure: a harness asking for its ceiling gets a short answer
that finishes as one that ended on its own, and usage counts what was sent."""

from __future__ import annotations

import json

import pytest

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.sse import SSEEvent, parse
from proxycheck.core.testbed import synth, wire

TIMING = synth.Timing(ttft_base=0.0, ttft_per_kb=0.0, interval=0.0)
STOPPED = {"anthropic_messages": "end_turn", "openai_chat": "stop", "openai_completions": "stop",
           "sglang_generate": "stop"}


def request(dialect: str, n: int, **extra) -> dict:
    if dialect == "openai_completions":
        return {"prompt": "say", "max_tokens": n, **extra}
    if dialect == "sglang_generate":
        return {"text": "say", "sampling_params": {"max_new_tokens": n, **extra}}
    return {"model": "m", "messages": [{"role": "user", "content": "say"}], "max_tokens": n, **extra}


def planned(dialect: str, req: dict, cap: int | None, draw: int | None = None) -> synth.Plan:
    return synth.plan(dialect, req, json.dumps(req).encode(), TIMING, max_answer_tokens=cap, draw=draw)


@pytest.mark.parametrize("dialect", sorted(STOPPED))
def test_a_request_for_128k_tokens_gets_the_cap_and_a_truthful_end(dialect: str) -> None:
    plan = planned(dialect, request(dialect, 128_000), synth.DEFAULT_MAX_ANSWER_TOKENS)
    assert len(plan.tokens) == plan.completion_tokens == 256
    assert plan.finish_reason == STOPPED[dialect]  # not length / max_tokens: it ended before the limit
    encoded = wire.encode(dialect, plan, wire.Meta("m", 1, include_usage=True))
    acc = dialects.accumulator(dialect)
    for event in parse(b"".join(data for _, data in encoded.events)):
        if isinstance(event, SSEEvent):
            acc.feed(event.type, event.data)
    streamed = acc.result()
    assert streamed.finish_reason == STOPPED[dialect] and streamed.text == plan.text
    if dialect != "sglang_generate":
        assert streamed.usage is not None and streamed.usage.completion_tokens == 256
    whole = dialects.parse_body(dialect, encoded.body)
    assert whole.finish_reason == STOPPED[dialect] and whole.text == plan.text


@pytest.mark.parametrize("n", [1, 7, 255, 256])
def test_lengths_up_to_the_cap_are_exact_as_before(n: int) -> None:
    req = request("openai_chat", n)
    capped = planned("openai_chat", req, 256)
    assert len(capped.tokens) == n and capped == planned("openai_chat", req, None)


def test_the_cap_is_deterministic_and_a_prefix_of_the_uncapped_answer() -> None:
    req = request("anthropic_messages", 1000)
    first = planned("anthropic_messages", req, 10)
    assert first == planned("anthropic_messages", req, 10)
    whole = planned("anthropic_messages", req, None)
    assert len(whole.tokens) == 1000 and whole.tokens[:10] == first.tokens


@pytest.mark.parametrize("dialect", ["openai_chat", "sglang_generate"])
def test_ignore_eos_asks_for_exactly_max_tokens_and_is_never_capped(dialect: str) -> None:
    plan = planned(dialect, request(dialect, 600, ignore_eos=True), 256)
    assert len(plan.tokens) == 600 and plan.finish_reason == "length"


def test_a_sampled_capped_answer_never_claims_to_reach_max_tokens() -> None:
    req = request("openai_chat", 5000, temperature=1.0)
    plans = [planned("openai_chat", req, 20, draw=d) for d in range(60)]
    assert all(1 <= len(p.tokens) <= 20 and p.finish_reason == "stop" for p in plans)
    assert len({len(p.tokens) for p in plans}) > 1  # still varied, as a sampling engine's are


def test_extended_thinking_stays_within_the_cap() -> None:
    req = request("anthropic_messages", 64_000, thinking={"type": "enabled", "budget_tokens": 2048})
    plan = planned("anthropic_messages", req, 256)
    assert plan.thinking and plan.completion_tokens == 256 and plan.finish_reason == "end_turn"
