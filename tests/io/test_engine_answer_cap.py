"""The reference engine as a process serving what a harness asks: a capped answer length
(`--max-answer-tokens`) and tool calls a harness validates and can run."""

from __future__ import annotations

import json
import time

import httpx
import jsonschema
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory

from proxycheck.core.protocol.analysis import StreamTracker
from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(60)

READ = {"type": "object", "properties": {"file_path": {"type": "string"}, "offset": {"type": "number"},
                                         "limit": {"type": "number"}},
        "required": ["file_path"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}
BASH = {"type": "object", "properties": {"command": {"type": "string"}, "timeout": {"type": "number"},
                                         "description": {"type": "string"}},
        "required": ["command"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    # The default cap; tokens paced so a 128k answer would take over two minutes.
    return module_engines("--token-interval", "0.001", "--ttft-base", "0")


def claude_code_turn(max_tokens: int, **extra) -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": max_tokens, "stream": True,
            "messages": [{"role": "user", "content": "What is in this directory?"}], **extra}


def streamed(url: str, path: str, doc: dict, dialect: str):
    tracker = StreamTracker(dialect)
    t0 = time.monotonic()
    with httpx.Client(timeout=30) as client, client.stream("POST", url + path, json=doc) as resp:
        for chunk in resp.iter_raw():
            tracker.feed(chunk, time.monotonic() - t0)
        tracker.close(time.monotonic() - t0)
    return resp, tracker.analysis(), time.monotonic() - t0


def test_a_harness_asking_for_128k_tokens_gets_a_short_answer_that_ends_on_its_own(engine: Managed) -> None:
    resp, analysis, took = streamed(engine.url, "/v1/messages", claude_code_turn(128_000), "anthropic_messages")
    assert resp.status_code == 200 and analysis.result.terminal
    assert analysis.result.finish_reason == "end_turn"  # not max_tokens: it stopped before the limit
    assert analysis.result.usage is not None and analysis.result.usage.completion_tokens == 256
    assert len(analysis.result.text.split()) == 256 and took < 20
    whole = {**claude_code_turn(128_000), "stream": False}
    body = httpx.post(engine.url + "/v1/messages", json=whole, timeout=30).json()
    assert body["stop_reason"] == "end_turn" and body["usage"]["output_tokens"] == 256
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 100_000,
            "stream": False}
    answer = httpx.post(engine.url + "/v1/chat/completions", json=chat, timeout=30).json()
    assert answer["choices"][0]["finish_reason"] == "stop" and answer["usage"]["completion_tokens"] == 256


def test_below_the_cap_an_answer_is_exactly_max_tokens_long(engine: Managed) -> None:
    _, analysis, _ = streamed(engine.url, "/v1/messages", claude_code_turn(40), "anthropic_messages")
    assert analysis.result.usage is not None and analysis.result.usage.completion_tokens == 40
    assert len(analysis.result.text.split()) == 40


@pytest.mark.parametrize("cap,asked,expected", [("5", 300, 5), ("0", 300, 300)])
def test_the_cap_is_set_with_max_answer_tokens(engines: EngineFactory, cap: str, asked: int, expected: int) -> None:
    engine = engines("--max-answer-tokens", cap, "--token-interval", "0", "--ttft-base", "0")
    doc = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": asked, "stream": False}
    answer = httpx.post(engine.url + "/v1/chat/completions", json=doc, timeout=30).json()
    assert answer["usage"]["completion_tokens"] == expected
    assert len(answer["choices"][0]["message"]["content"].split()) == expected


def test_a_bad_cap_is_one_line_and_exit_2() -> None:
    result = run_proxycheck("engine", "--listen", "127.0.0.1:0", "--max-answer-tokens", "many", timeout=30)
    assert result.returncode == 2 and "--max-answer-tokens" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_tool_calls_pick_the_read_only_tool_with_arguments_its_schema_accepts(engine: Managed) -> None:
    tools = [{"name": "Bash", "description": "run", "input_schema": BASH},
             {"name": "Read", "description": "read", "input_schema": READ}]
    calls = []
    for turn in range(12):
        doc = {**claude_code_turn(32_000, tools=tools, system=f"session {turn}"), "stream": False}
        body = httpx.post(engine.url + "/v1/messages", json=doc, timeout=30).json()
        calls += [block for block in body["content"] if block["type"] == "tool_use"]
    assert calls, "no turn called a tool"
    for call in calls:
        assert call["name"] == "Read" and call["input"]["file_path"] == "README.md"
        jsonschema.Draft7Validator(READ).validate(call["input"])
        assert json.loads(json.dumps(call["input"])) == call["input"]
