"""The reference engine as a real process, driven as Anthropic clients drive the Messages API:
their headers and newer body members, extended thinking sent and sent back, `cache_control` and
its usage fields, `/v1/messages/count_tokens`."""

from __future__ import annotations

import httpx
import pytest
from processes import EngineFactory

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.analysis import StreamTracker
from proxycheck.core.protocol.requestparts import parts_of
from proxycheck.core.testbed import synth
from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(60)

# What a current Claude Code sends besides the conversation.
HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-test",
           "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27"}
NEWER_MEMBERS = {"metadata": {"user_id": "user_abc_account_123_session_456"},
                 "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
                 "mcp_servers": [], "container": "container_011", "service_tier": "auto",
                 "output_config": {"effort": "medium"}, "betas": ["x"]}  # fmt: skip
SYSTEM = [{"type": "text", "text": "You are Claude Code. " * 50, "cache_control": {"type": "ephemeral"}}]


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.002", "--ttft-base", "0.01")


def post(engine: Managed, doc: dict, path: str = "/v1/messages") -> httpx.Response:
    return httpx.post(engine.url + path, json=doc, headers=HEADERS, timeout=20)


def stream(engine: Managed, doc: dict):
    tracker = StreamTracker("anthropic_messages")
    with httpx.stream("POST", engine.url + "/v1/messages", json={**doc, "stream": True}, headers=HEADERS,
                      timeout=20) as resp:  # fmt: skip
        assert resp.status_code == 200, resp.read()
        for i, chunk in enumerate(resp.iter_raw()):
            tracker.feed(chunk, i * 0.001)
        tracker.close(1.0)
    return tracker.analysis().result


def conversation(*texts: str, sent_back: list[dict] | None = None, **extra) -> dict:
    messages: list[dict] = []
    for i, text in enumerate(texts):
        if i:
            messages.append({"role": "assistant", "content": [*(sent_back or []), {"type": "text", "text": "ok"}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude-sonnet-4-5", "max_tokens": 32, "system": SYSTEM, "messages": messages, **extra}


def test_claude_code_headers_and_newer_body_members_are_answered(engine) -> None:
    doc = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], **NEWER_MEMBERS}
    resp = post(engine, doc)
    assert resp.status_code == 200, resp.text
    assert resp.json()["type"] == "message" and resp.json()["usage"]["output_tokens"] == 8


def test_thinking_streams_first_and_sent_back_with_its_signature_is_accepted(engine) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = conversation("plan the change", thinking=thinking)
    result = stream(engine, first)
    assert result.terminal and result.malformed == 0 and not result.errors and result.finish_reason
    assert result.reasoning and result.text
    assert result.usage is not None and result.usage.completion_tokens == 32
    body = post(engine, first).json()
    block = body["content"][0]
    assert block["type"] == "thinking" and block["thinking"] == result.reasoning and block["signature"]
    # The next turn sends the thinking block back, signature and all, as the API requires.
    second = conversation("plan the change", "go on", sent_back=[block], thinking=thinking)
    again = stream(engine, second)
    assert again.terminal and again.reasoning and again.text


def test_a_conversation_reads_from_the_cache_what_its_last_turn_wrote(engine) -> None:
    # A system prompt of this test's own: the module's engine has cached the others'.
    own = {"system": [{**SYSTEM[0], "text": "You are the cache test. " * 50}]}
    first = post(engine, conversation("open the repository", **own)).json()["usage"]
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0
    assert first["cache_creation"]["ephemeral_5m_input_tokens"] == first["cache_creation_input_tokens"]
    second = post(engine, conversation("open the repository", "now the tests", **own)).json()["usage"]
    assert second["cache_read_input_tokens"] >= first["cache_creation_input_tokens"]
    # Without breakpoints: no cache, every input token is input.
    plain = post(engine, {"model": "claude-sonnet-4-5", "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]})
    usage = plain.json()["usage"]
    assert usage["cache_read_input_tokens"] == usage["cache_creation_input_tokens"] == 0 and usage["input_tokens"] > 0
    # What the dialect reads: cache tokens are part of the prompt, as OpenAI counts them.
    doc = conversation("open the repository", "now the tests")
    parsed = dialects.parse_body("anthropic_messages", post(engine, doc).content)
    assert parsed.usage.prompt_tokens == synth.prompt_tokens_of(parts_of(doc))


def test_count_tokens_answers_the_engines_own_estimate(engine) -> None:
    doc = {"model": "claude-sonnet-4-5", "system": SYSTEM, "messages": [{"role": "user", "content": "count me"}],
           "tools": [{"name": "Read", "input_schema": {"type": "object"}}], "thinking": {"type": "enabled", "budget_tokens": 2048}}
    resp = post(engine, doc, "/v1/messages/count_tokens")
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"input_tokens": synth.prompt_tokens_of(parts_of(doc))}
    assert resp.json()["input_tokens"] > 250  # the system prompt alone is about 1 KB
    assert "x-proxycheck-request-sha256" in resp.headers
    bad = httpx.post(engine.url + "/v1/messages/count_tokens", content=b"{not json", headers=HEADERS, timeout=10)
    assert bad.status_code == 400 and bad.json()["message"] == "the request body is not a JSON object"
