"""The reference engine as a sampling engine (proxycheck.core.testbed.synth, `--sampling`): which requests
sample, and a draw that varies the words, the tool calls and the finish reason of the answer."""

from __future__ import annotations

import json
import random

import pytest

from proxycheck.core.replay.greedy import greedy_body
from proxycheck.core.testbed import synth

TIMING = synth.Timing(ttft_base=0.1, ttft_per_kb=0.0, interval=0.02)
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]  # fmt: skip
CHAT = {"messages": [{"role": "user", "content": "fix the bug"}], "max_tokens": 12, "tools": TOOLS}


@pytest.mark.parametrize(
    ("dialect", "req", "sampled"),
    [
        ("openai_chat", {}, True),  # no temperature: the default, 1
        ("openai_chat", {"temperature": 0.7}, True),
        ("openai_chat", {"temperature": None}, True),
        ("openai_chat", {"temperature": 0}, False),
        ("openai_chat", {"temperature": 0.0, "seed": 3}, False),
        ("openai_chat", {"temperature": 1, "seed": 3}, False),  # a seeded request's sampling is reproducible
        ("openai_chat", {"temperature": 1, "seed": True}, True),  # not a seed
        ("anthropic_messages", {"temperature": 1, "seed": 3}, True),  # the API has no seed
        ("anthropic_messages", {"temperature": 0}, False),
        ("sglang_generate", {"sampling_params": {"temperature": 0.5}}, True),
        ("sglang_generate", {"sampling_params": {"temperature": 0.5, "sampling_seed": 1}}, False),
        ("sglang_generate", {"temperature": 0}, True),  # not where SGLang reads it
        ("sglang_generate", {"sampling_params": {"temperature": 0}}, False),
    ],
)
def test_which_requests_sample(dialect: str, req: dict, sampled: bool) -> None:
    assert synth.samples(dialect, req) is sampled


def plan(draw: int | None, req: dict = CHAT) -> synth.Plan:
    return synth.plan("openai_chat", req, json.dumps(req).encode(), TIMING, tool_call_rate=0.5, draw=draw)


def shape(p: synth.Plan) -> tuple:
    return (p.finish_reason, tuple(c.name for c in p.tool_calls), len(p.tokens))


def test_without_a_draw_the_answer_is_the_one_of_every_time() -> None:
    assert plan(None) == plan(None)
    text = {**CHAT, "tools": []}
    assert shape(plan(None, text)) == ("stop", (), 12)  # exactly max_tokens, as without --sampling


def test_draws_vary_the_words_the_tool_calls_and_the_finish_reason() -> None:
    rnd = random.Random(1)
    plans = [plan(rnd.getrandbits(64)) for _ in range(60)]
    assert len({p.text for p in plans if not p.tool_calls}) > 10
    assert {p.finish_reason for p in plans} == {"stop", "length", "tool_calls"}
    for p in plans:
        if p.finish_reason == "length":
            assert len(p.tokens) == 12
        elif p.finish_reason == "stop":
            assert 6 <= len(p.tokens) < 12  # stopped on its own, within half the limit
    assert plan(12345) == plan(12345)  # a draw is a seed: the same draw, the same answer


def test_ignore_eos_answers_keep_their_length_when_sampled() -> None:
    req = {**CHAT, "ignore_eos": True}
    del req["tools"]
    rnd = random.Random(2)
    assert {shape(plan(rnd.getrandbits(64), req)) for _ in range(20)} == {("length", (), 12)}


def test_a_greedy_body_is_one_a_sampling_engine_answers_the_same_way() -> None:
    for dialect, body in (("openai_chat", CHAT), ("anthropic_messages", CHAT),
                          ("sglang_generate", {"text": "x", "sampling_params": {"temperature": 0.9}})):  # fmt: skip
        assert synth.samples(dialect, body)
        assert not synth.samples(dialect, json.loads(greedy_body(dialect, json.dumps(body).encode())))
