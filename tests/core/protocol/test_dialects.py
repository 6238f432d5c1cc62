"""Tests for proxycheck.core.protocol.dialects: hand-written fixtures per dialect, every real wire
capture, detect(), and property tests that feeding never raises."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.dialects import (
    DIALECTS,
    accumulator,
    detect,
    is_streaming_request,
    parse_body,
    parse_events,
)
from proxycheck.core.protocol.result import EventKind, Result, StreamError, Usage

TESTS = Path(__file__).resolve().parents[2]
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures" / "dialects"
_COPIED_WIRE = TESTS / "fixtures" / "wire"
WIRE = _COPIED_WIRE if list(_COPIED_WIRE.glob("*.sse")) else REPO.parent / "shared" / "wire"


def sse_events(text: str) -> list[tuple[str, str]]:
    """(event_type, data) pairs of a clean LF-only SSE body: blank-line separated blocks of
    `event:` and `data:` lines (one optional space after the colon, data lines joined by LF)."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        event_type, data = "message", []
        for line in block.split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event_type = value
            elif field == "data":
                data.append(value)
        events.append((event_type, "\n".join(data)))
    return events


def fixture_events(name: str) -> list[tuple[str, str]]:
    return sse_events((FIXTURES / name).read_text(encoding="utf-8"))


def wire_events(name: str) -> list[tuple[str, str]]:
    return sse_events((WIRE / name).read_text(encoding="utf-8"))


def run(dialect: str, events: list[tuple[str, str]]) -> tuple[Result, list[EventKind]]:
    acc = accumulator(dialect)
    kinds = [acc.feed(t, d) for t, d in events]
    return acc.result(), kinds


def body(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


# --------------------------------------------------------------------------------------------
# the module itself
# --------------------------------------------------------------------------------------------


def test_dialect_names_are_the_file_format() -> None:
    assert DIALECTS == (
        "openai_chat",
        "openai_completions",
        "openai_responses",
        "anthropic_messages",
        "sglang_generate",
    )
    for name in DIALECTS:
        assert accumulator(name).dialect == name
        assert parse_events(name, []).dialect == name


def test_unknown_dialect_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="unknown dialect"):
        accumulator("gemini")
    with pytest.raises(ValueError):
        parse_body("gemini", b"{}")


def test_dialects_module_imports_only_the_standard_library_and_the_core() -> None:
    tree = ast.parse(Path(dialects.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or name.startswith("proxycheck.core"), name


# --------------------------------------------------------------------------------------------
# openai_chat
# --------------------------------------------------------------------------------------------


def test_chat_text_stream() -> None:
    r, kinds = run("openai_chat", fixture_events("openai-chat-text.sse"))
    assert r.text == "Hello! How can I help you today?"
    assert r.finish_reason == "stop"
    assert r.terminal and r.malformed == 0 and r.errors == ()
    assert r.model == "gpt-4o-mini-2024-07-18" and r.response_id == "chatcmpl-fx01"
    assert r.usage == Usage(
        prompt_tokens=12, completion_tokens=9, total_tokens=21, reasoning_tokens=0, cached_tokens=0
    )
    # role chunk, 9 content chunks, finish chunk (empty delta), usage-only chunk, [DONE]
    assert kinds == [EventKind.META] + [EventKind.CONTENT] * 9 + [
        EventKind.META,
        EventKind.META,
        EventKind.TERMINAL,
    ]
    assert r.content_events == 9


def test_chat_truncated_stream_is_not_terminal() -> None:
    r, _ = run("openai_chat", fixture_events("openai-chat-truncated.sse"))
    assert r.text == "Hello! How can I"
    assert not r.terminal
    assert r.finish_reason is None and r.usage is None


def test_chat_parallel_tool_calls_assemble_by_index() -> None:
    r, kinds = run("openai_chat", fixture_events("openai-chat-tool-calls.sse"))
    assert r.text == "" and r.finish_reason == "tool_calls" and r.terminal
    first, second = r.tool_calls
    assert (first.index, first.id, first.name) == (0, "call_fx_weather_01", "get_weather")
    assert first.arguments == '{"location": "Paris, France", "unit": "celsius"}'
    assert (
        first.parsed == {"location": "Paris, France", "unit": "celsius"} and first.arguments_valid
    )
    assert (second.index, second.id, second.name) == (1, "call_fx_time_02", "get_local_time")
    assert second.parsed == {"timezone": "Europe/Paris"}
    # the name chunks and every argument fragment are progress; role and finish chunks are not
    assert kinds.count(EventKind.CONTENT) == 2 + 6 + 4
    assert kinds[0] is EventKind.META and kinds[-2:] == [EventKind.META, EventKind.TERMINAL]


def test_chat_reasoning_content() -> None:
    r, _ = run("openai_chat", fixture_events("openai-chat-reasoning.sse"))
    assert r.reasoning == "The user asks for 2 + 2. That is 4."
    assert r.text == "2 + 2 = 4."
    assert r.usage is not None and r.usage.reasoning_tokens == 12 and r.usage.total_tokens == 35
    assert r.content_events == 6


def test_chat_reasoning_field_of_newer_vllm() -> None:
    r, _ = run("openai_chat", fixture_events("openai-chat-reasoning-vllm.sse"))
    assert r.reasoning == "Okay, a greeting."
    assert r.text == "\n\nHi there!"
    assert r.usage is None  # "usage": null on every chunk
    assert r.finish_reason == "stop" and r.terminal


def test_chat_reasoning_sent_in_both_fields_is_taken_once() -> None:
    chunk = {
        "choices": [{"index": 0, "delta": {"reasoning_content": "think", "reasoning": "think"}}]
    }
    r = parse_events("openai_chat", [("message", json.dumps(chunk))])
    assert r.reasoning == "think"


def test_chat_error_chunk_mid_stream() -> None:
    r, kinds = run("openai_chat", fixture_events("openai-chat-error.sse"))
    assert r.text == "Once upon a"
    assert kinds[-1] is EventKind.ERROR
    assert r.errors == (
        StreamError(
            "server_error",
            "The server had an error while processing your request. Sorry about that!",
            None,
        ),
    )
    assert not r.terminal and r.malformed == 0


def test_chat_vllm_bare_error_object() -> None:
    data = (
        '{"object":"error","message":"max_tokens is too large",'
        '"type":"BadRequestError","param":null,"code":400}'
    )
    acc = accumulator("openai_chat")
    assert acc.feed("message", data) is EventKind.ERROR
    assert acc.result().errors == (
        StreamError("BadRequestError", "max_tokens is too large", "400"),
    )


def test_chat_non_streamed_body() -> None:
    r = parse_body("openai_chat", body("openai-chat-body.json"))
    assert r.terminal and r.malformed == 0
    assert r.text == "Let me look that up."
    (call,) = r.tool_calls
    assert (call.id, call.name, call.parsed) == (
        "call_fx_search_01",
        "search",
        {"query": "proxy chains"},
    )
    assert r.finish_reason == "tool_calls"
    assert r.usage == Usage(40, 18, 58, 0, 32)
    assert r.content_events == 1


def test_chat_error_body() -> None:
    r = parse_body("openai_chat", body("openai-chat-error-body.json"))
    assert not r.terminal and r.choices == ()
    (err,) = r.errors
    assert err.type == "requests" and err.code == "rate_limit_exceeded"
    assert err.message.startswith("Rate limit reached")


# --------------------------------------------------------------------------------------------
# openai_completions
# --------------------------------------------------------------------------------------------


def test_completions_text_stream() -> None:
    r, kinds = run("openai_completions", fixture_events("openai-completions-text.sse"))
    assert r.text == "\n\nRoses are red, violets"
    assert r.finish_reason == "length" and r.terminal
    assert r.usage == Usage(5, 6, 11, None, None)
    assert kinds == [EventKind.CONTENT] * 6 + [EventKind.META, EventKind.TERMINAL]


def test_completions_truncated_and_n2_and_error() -> None:
    r, _ = run("openai_completions", fixture_events("openai-completions-truncated.sse"))
    assert (r.text, r.terminal) == ("\n\nRoses are", False)

    r, _ = run("openai_completions", fixture_events("openai-completions-n2.sse"))
    assert [(c.index, c.text, c.finish_reason) for c in r.choices] == [
        (0, "Yes.", "stop"),
        (1, "Nope", "stop"),
    ]

    r, kinds = run("openai_completions", fixture_events("openai-completions-error.sse"))
    assert r.text == "def main" and kinds[-2:] == [EventKind.ERROR, EventKind.TERMINAL]
    assert r.errors == (StreamError("internal_error", "Internal error", "500"),)


def test_completions_non_streamed_body() -> None:
    r = parse_body("openai_completions", body("openai-completions-body.json"))
    assert r.terminal and r.text == "\n\nThis is indeed a test" and r.finish_reason == "length"
    assert r.usage == Usage(5, 7, 12, None, None)


# --------------------------------------------------------------------------------------------
# openai_responses
# --------------------------------------------------------------------------------------------


def test_responses_text_stream() -> None:
    r, kinds = run("openai_responses", fixture_events("openai-responses-text.sse"))
    assert r.text == "Hi! How can I help?"
    assert r.terminal and r.finish_reason == "completed"
    assert r.response_id == "resp_fx01" and r.model == "gpt-4.1-2025-04-14"
    assert r.usage == Usage(37, 11, 48, 0, 0)
    assert r.content_events == 7  # the .done events repeat text already streamed: META
    assert kinds[-1] is EventKind.TERMINAL and kinds[0] is EventKind.META


def test_responses_truncated_stream() -> None:
    r, _ = run("openai_responses", fixture_events("openai-responses-truncated.sse"))
    assert r.text == "Hi! How can" and not r.terminal and r.finish_reason is None


def test_responses_tool_calls() -> None:
    r, kinds = run("openai_responses", fixture_events("openai-responses-tool-calls.sse"))
    assert [(c.index, c.id, c.name, c.arguments) for c in r.tool_calls] == [
        (0, "call_fx_a1", "get_weather", '{"city": "Berlin"}'),
        (1, "call_fx_b2", "get_weather", '{"city": "Tokyo"}'),
    ]
    assert r.terminal and r.usage is not None and r.usage.total_tokens == 120
    assert kinds.count(EventKind.CONTENT) == 2 * (1 + 3)  # item added (name) + three fragments


def test_responses_reasoning_summary_and_text() -> None:
    r, _ = run("openai_responses", fixture_events("openai-responses-reasoning.sse"))
    assert r.reasoning == "**Checking the sum**\n\nAdding 17 and 25 gives 42. Double-check: 40 + 2."
    assert r.text == "17 + 25 = 42"
    assert r.usage is not None and r.usage.reasoning_tokens == 64


def test_responses_error_then_failed() -> None:
    r, kinds = run("openai_responses", fixture_events("openai-responses-error.sse"))
    assert r.text == "The answer"
    assert kinds[-2:] == [EventKind.ERROR, EventKind.TERMINAL]
    # the error event and response.failed carry the same error: recorded once
    assert r.errors == (
        StreamError(
            "server_error", "The server had an error processing your request.", "server_error"
        ),
    )
    assert r.terminal and r.finish_reason == "failed"


def test_responses_incomplete() -> None:
    r, kinds = run("openai_responses", fixture_events("openai-responses-incomplete.sse"))
    assert r.text == "Once upon a" and r.terminal and kinds[-1] is EventKind.TERMINAL
    assert r.finish_reason == "max_output_tokens"
    assert r.usage == Usage(9, 3, 12, 0, 0)


def test_responses_arguments_only_in_done_events_are_used() -> None:
    events = [
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "f",
                "arguments": "",
            },
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 0,
            "arguments": '{"a":1}',
        },
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "f",
                "arguments": '{"a":1}',
            },
        },
    ]
    acc = accumulator("openai_responses")
    kinds = [acc.feed(e["type"], json.dumps(e)) for e in events]
    assert kinds == [EventKind.CONTENT, EventKind.CONTENT, EventKind.META]
    assert acc.result().tool_calls[0].arguments == '{"a":1}'


def test_responses_event_type_from_sse_field_when_json_has_none() -> None:
    r = parse_events(
        "openai_responses", [("response.output_text.delta", '{"item_id":"m","delta":"x"}')]
    )
    assert r.text == "x"


def test_responses_non_streamed_body() -> None:
    r = parse_body("openai_responses", body("openai-responses-body.json"))
    assert r.terminal and r.finish_reason == "completed"
    assert r.text == "Checking the weather in Oslo."
    assert r.reasoning == "Need the weather tool."
    (call,) = r.tool_calls
    assert (call.id, call.name, call.parsed) == ("call_fx_oslo", "get_weather", {"city": "Oslo"})
    assert r.usage == Usage(50, 30, 80, 10, 16)


def test_responses_error_body() -> None:
    r = parse_body(
        "openai_responses",
        b'{"error":{"message":"Invalid model","type":"invalid_request_error",'
        b'"param":"model","code":"model_not_found"}}',
    )
    assert not r.terminal
    assert r.errors == (StreamError("invalid_request_error", "Invalid model", "model_not_found"),)


# --------------------------------------------------------------------------------------------
# anthropic_messages
# --------------------------------------------------------------------------------------------


def test_anthropic_text_stream() -> None:
    r, kinds = run("anthropic_messages", fixture_events("anthropic-text.sse"))
    assert r.text == "Hello! How can I help?"
    assert r.finish_reason == "end_turn" and r.terminal
    assert (r.model, r.response_id) == ("claude-sonnet-4-5-20250929", "msg_fx01")
    # prompt = input + cache creation + cache reads (OpenAI's prompt_tokens includes cached ones)
    assert r.usage == Usage(
        prompt_tokens=125, completion_tokens=15, total_tokens=140, cached_tokens=100
    )
    assert kinds == [EventKind.META] * 3 + [EventKind.CONTENT] * 4 + [EventKind.META] * 2 + [
        EventKind.TERMINAL
    ]


def test_anthropic_truncated_stream() -> None:
    r, _ = run("anthropic_messages", fixture_events("anthropic-truncated.sse"))
    assert r.text == "Hello! How" and not r.terminal and r.finish_reason is None


def test_anthropic_text_then_tool_use() -> None:
    r, _ = run("anthropic_messages", fixture_events("anthropic-tool-use.sse"))
    assert r.text == "Okay, let's check the weather for San Francisco, CA:"
    weather, clock = r.tool_calls
    assert (weather.index, weather.id, weather.name) == (0, "toolu_fx01", "get_weather")
    assert weather.arguments == '{"location": "San Francisco, CA", "unit": "fahrenheit"}'
    # no non-empty input_json_delta: the arguments are json.dumps of the start block's input
    assert (clock.index, clock.name, clock.arguments, clock.parsed) == (1, "get_time", "{}", {})
    assert r.finish_reason == "tool_use" and r.usage is not None and r.usage.completion_tokens == 89


def test_anthropic_thinking_stream() -> None:
    r, kinds = run("anthropic_messages", fixture_events("anthropic-thinking.sse"))
    assert (
        r.reasoning == "I need to find the GCD of 1071 and 462.\n\n"
        "1071 = 2 * 462 + 147\n462 = 3 * 147 + 21\n147 = 7 * 21"
    )
    assert r.text == "The GCD of 1071 and 462 is **21**."
    assert dict(r.extra) == {"redacted_thinking_blocks": 1}
    assert kinds.count(EventKind.CONTENT) == 5  # four thinking deltas and one text delta


def test_anthropic_overloaded_error_mid_stream() -> None:
    r, kinds = run("anthropic_messages", fixture_events("anthropic-error.sse"))
    assert r.text == "Here is the first part of"
    assert kinds[-1] is EventKind.ERROR
    assert r.errors == (StreamError("overloaded_error", "Overloaded"),)
    assert not r.terminal


def test_anthropic_non_streamed_body() -> None:
    r = parse_body("anthropic_messages", body("anthropic-body.json"))
    assert r.terminal and r.finish_reason == "tool_use"
    assert r.reasoning == "The user wants the weather; call the tool."
    assert r.text == "I'll check the weather."
    (call,) = r.tool_calls
    assert (call.index, call.id, call.name, call.arguments) == (
        0,
        "toolu_fx05",
        "get_weather",
        '{"location": "Paris"}',
    )
    assert r.usage == Usage(420, 42, 462, None, 300)


def test_anthropic_error_body() -> None:
    r = parse_body("anthropic_messages", body("anthropic-error-body.json"))
    assert not r.terminal and r.malformed == 0
    assert r.errors == (StreamError("overloaded_error", "Overloaded"),)


def test_anthropic_padding_and_event_field_fallback() -> None:
    acc = accumulator("anthropic_messages")
    assert acc.feed("message_stop", '{"type":"message_stop"          }') is EventKind.TERMINAL
    assert acc.feed("ping", "{}") is EventKind.META  # type only in the SSE field
    assert acc.feed("message", "{}") is EventKind.META  # an unknown type is META...
    assert acc.feed("message", "[1]") is EventKind.MALFORMED  # ...a non-object is not


# --------------------------------------------------------------------------------------------
# sglang_generate
# --------------------------------------------------------------------------------------------


def test_sglang_cumulative_text() -> None:
    r, kinds = run("sglang_generate", fixture_events("sglang-generate-text.sse"))
    assert r.text == " Paris is the capital of France."
    assert r.finish_reason == "stop" and r.terminal
    assert r.response_id == "8f3c0e4a5b6d4c2e9a1b"
    assert r.usage == Usage(9, 7, 16, None, 4)
    assert kinds == [EventKind.CONTENT] * 7 + [EventKind.TERMINAL]


def test_sglang_truncated_and_final_event_without_done() -> None:
    r, _ = run("sglang_generate", fixture_events("sglang-generate-truncated.sse"))
    assert r.text == " Paris is the capital" and not r.terminal
    # model.Result: the final meta_info.finish_reason is itself a terminal marker
    r, _ = run("sglang_generate", fixture_events("sglang-generate-text.sse")[:-1])
    assert r.terminal


def test_sglang_incremental_streaming_output() -> None:
    r, kinds = run("sglang_generate", fixture_events("sglang-generate-incremental.sse"))
    assert r.text == " Paris is the capital of France."
    assert r.finish_reason == "length"
    assert kinds.count(EventKind.CONTENT) == 7


def test_sglang_incremental_delta_that_repeats_the_text_so_far() -> None:
    texts = ["ab", "c", "abc"]  # the third delta starts with the text so far: still a delta
    r = parse_events("sglang_generate", [("message", json.dumps({"text": t})) for t in texts])
    assert r.text == "abcabc"


def test_sglang_two_outputs() -> None:
    r, _ = run("sglang_generate", fixture_events("sglang-generate-n2.sse"))
    assert [(c.index, c.text, c.finish_reason) for c in r.choices] == [
        (0, "Red and blue", "stop"),
        (1, "Green!", "length"),
    ]
    assert r.usage == Usage(12, 5, 17, None, 0)


def test_sglang_error_and_abort() -> None:
    r, kinds = run("sglang_generate", fixture_events("sglang-generate-error.sse"))
    assert kinds == [EventKind.CONTENT, EventKind.ERROR, EventKind.TERMINAL]
    assert r.text == " The"
    assert r.errors[0].message.startswith("The input (4097 tokens) is longer")

    r, kinds = run("sglang_generate", fixture_events("sglang-generate-abort.sse"))
    assert kinds == [EventKind.CONTENT, EventKind.ERROR, EventKind.TERMINAL]
    assert r.text == " Once upon" and r.finish_reason == "abort"
    assert r.errors == (StreamError("abort", "Abort before prefill", "503"),)


def test_sglang_non_streamed_bodies() -> None:
    r = parse_body("sglang_generate", body("sglang-generate-body.json"))
    assert r.terminal and r.text == " Paris is the capital of France." and r.finish_reason == "stop"
    assert r.usage == Usage(9, 7, 16, None, 0)

    r = parse_body("sglang_generate", body("sglang-generate-batch-body.json"))
    assert [(c.index, c.text, c.finish_reason) for c in r.choices] == [
        (0, " 4", "stop"),
        (1, " blue", "length"),
    ]
    assert r.terminal

    r = parse_body("sglang_generate", b'{"error": {"message": "bad sampling params"}}')
    assert not r.terminal and r.errors == (StreamError(None, "bad sampling params"),)


# --------------------------------------------------------------------------------------------
# behaviour shared by the dialects
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_invalid_json_is_malformed_never_an_exception(dialect: str) -> None:
    acc = accumulator(dialect)
    assert acc.feed("message", "{not json") is EventKind.MALFORMED
    assert acc.feed("message", '{"choices": 5, "type": 7, "text": 1}') is EventKind.MALFORMED
    r = acc.result()
    assert r.malformed == 2 and len(r.malformed_details) == 2
    assert "invalid JSON" in r.malformed_details[0]

    r = parse_body(dialect, b"<html>502 Bad Gateway</html>")
    assert (r.malformed, r.terminal) == (1, False)
    assert parse_body(dialect, b"\xff\xfe").malformed == 1


def test_malformed_details_are_capped_but_the_count_is_exact() -> None:
    r = parse_events("openai_chat", [("message", "junk")] * 50)
    assert r.malformed == 50 and len(r.malformed_details) == 5


def test_events_after_the_terminal_marker_are_still_parsed() -> None:
    events = fixture_events("openai-chat-text.sse")
    usage_chunk = events[-2]
    done = events[-1]
    r, kinds = run("openai_chat", [*events[:-2], done, usage_chunk])
    assert r.terminal and r.usage is not None and r.usage.total_tokens == 21
    assert kinds[-1] is EventKind.META and r.malformed == 0


def test_result_is_callable_mid_stream() -> None:
    acc = accumulator("openai_chat")
    events = fixture_events("openai-chat-tool-calls.sse")
    for t, d in events[:4]:
        acc.feed(t, d)
    partial = acc.result()
    assert (
        partial.tool_calls[0].arguments == '{"location": "Par'
        and not partial.tool_calls[0].arguments_valid
    )
    for t, d in events[4:]:
        acc.feed(t, d)
    assert acc.result().tool_calls[0].arguments_valid


def test_usage_keeps_the_last_non_null_value() -> None:
    chunks = [
        {
            "choices": [{"index": 0, "delta": {"content": "a"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        },
        {
            "choices": [{"index": 0, "delta": {"content": "b"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None},
    ]
    r = parse_events("openai_chat", [("message", json.dumps(c)) for c in chunks])
    assert r.usage == Usage(3, 2, 5, None, None)


# --------------------------------------------------------------------------------------------
# the real wire captures
# --------------------------------------------------------------------------------------------


def test_wire_openai_chat_parallel_tool_calls() -> None:
    r, kinds = run("openai_chat", wire_events("openai-chat-parallel-tool-calls.sse"))
    assert r.terminal and r.malformed == 0 and r.text == ""
    assert (
        r.model == "gpt-4o-2024-08-06" and r.response_id == "chatcmpl-ABfwAwrNePHUgBBezonVC6MX3zd63"
    )
    weather, stock = r.tool_calls
    assert (weather.id, weather.name) == ("call_JMW1whyEaYG438VE1OIflxA2", "GetWeatherArgs")
    assert weather.arguments == '{"city": "Edinburgh", "country": "GB", "units": "c"}'
    assert (stock.id, stock.name) == ("call_DNYTawLBoN8fj3KN6qU9N1Ou", "get_stock_price")
    assert stock.arguments == '{"ticker": "AAPL", "exchange": "NASDAQ"}'
    assert r.finish_reason == "tool_calls"
    assert r.usage == Usage(149, 60, 209, 0, None)
    assert kinds[0] is EventKind.META and kinds[-3:] == [
        EventKind.META,
        EventKind.META,
        EventKind.TERMINAL,
    ]


def test_wire_openai_chat_n3_interleaved_choices() -> None:
    r, _ = run("openai_chat", wire_events("openai-chat-n3-interleaved-choices.sse"))
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [json.loads(c.text)["temperature"] for c in r.choices] == [65, 61, 59]
    assert r.choices[0].text == '{"city":"San Francisco","temperature":65,"units":"f"}'
    assert all(c.finish_reason == "stop" for c in r.choices)
    assert r.usage == Usage(79, 42, 121, 0, None)
    assert r.terminal and r.content_events == 42


def test_wire_openai_completions_legacy_usage() -> None:
    r, _ = run("openai_completions", wire_events("openai-completions-legacy-usage.sse"))
    assert r.text == 'The holiday is called "Gratitude Day" and it is a day dedicated to'
    assert r.finish_reason == "length" and r.terminal
    assert r.usage == Usage(14, 16, 30, None, None)
    assert r.model == "gpt-3.5-turbo-instruct:20230824-v2"


def test_wire_openai_responses_error_in_stream() -> None:
    r, kinds = run("openai_responses", wire_events("openai-responses-error-in-stream.sse"))
    assert kinds == [EventKind.META, EventKind.META, EventKind.ERROR, EventKind.TERMINAL]
    (err,) = r.errors
    assert (err.type, err.code) == ("insufficient_quota", "insufficient_quota")
    assert err.message.startswith("You exceeded your current quota")
    assert r.terminal and r.finish_reason == "failed" and r.text == ""
    assert r.model == "gpt-5-2025-08-07"
    assert r.response_id == "resp_0265b28bea036ff60068df845920648196938b4f36acdcee37"


def test_wire_anthropic_tool_use() -> None:
    r, _ = run("anthropic_messages", wire_events("anthropic-messages-tool-use.sse"))
    assert r.text == "I'll check the current weather in Paris for you."
    (call,) = r.tool_calls
    assert (call.index, call.id, call.name) == (0, "toolu_01NRLabsLyVHZPKxbKvkfSMn", "get_weather")
    assert call.arguments == '{"location": "Paris"}'
    assert r.finish_reason == "tool_use" and r.terminal
    assert r.usage == Usage(377, 65, 442, None, 0)
    assert r.model == "claude-sonnet-4-20250514"


def test_wire_anthropic_thinking_signature_with_padding() -> None:
    r, kinds = run("anthropic_messages", wire_events("anthropic-messages-thinking-signature.sse"))
    assert r.malformed == 0 and r.terminal and kinds[-1] is EventKind.TERMINAL
    assert r.reasoning.startswith('The user has given me a first prompt that says "First prompt"')
    assert r.reasoning.endswith('So I should reply with exactly "Hello"')
    assert r.text == "Hello" and r.finish_reason == "end_turn"
    assert r.usage == Usage(44, 46, 90, None, 0)
    # ten non-empty thinking deltas and one text delta; the empty one and the signature are META
    assert r.content_events == 11


def test_wire_anthropic_error_fragment() -> None:
    r, kinds = run("anthropic_messages", wire_events("anthropic-error-mid-stream-fragment.sse"))
    assert kinds == [EventKind.CONTENT, EventKind.CONTENT, EventKind.ERROR]
    assert r.text == "d with a replacement character ("
    assert r.errors == (StreamError("api_error", "Internal server error"),)
    assert not r.terminal and r.malformed == 0


def test_wire_vllm_chat_tool_call() -> None:
    r, _ = run("openai_chat", wire_events("vllm-chat-tool-call.sse"))
    (call,) = r.tool_calls
    assert (call.id, call.name) == ("chatcmpl-tool-ca99dda515524c6abe47d1ea22813507", "run_command")
    assert call.arguments == '{"command": "ls"}' and call.parsed == {"command": "ls"}
    assert r.finish_reason == "tool_calls" and r.terminal
    assert r.usage is None and r.model == "" and r.text == ""


def test_wire_vllm_completions_usage_null() -> None:
    r, _ = run("openai_completions", wire_events("vllm-completions-usage-null.sse"))
    assert r.text == " city in the state of California,"
    assert r.finish_reason == "length" and r.usage is None and r.terminal
    assert r.model == "Qwen/Qwen3-4B"


def test_wire_workers_ai_reasoning_then_tool_call() -> None:
    r, _ = run("openai_chat", wire_events("workers-ai-vllm-chat-reasoning-tool-call.sse"))
    assert r.reasoning.startswith(
        "\nOkay, the user wants a reminder to go to the library tomorrow at 2pm."
    )
    assert r.reasoning.endswith("Alright, that should do it.\n")
    assert r.text == "\n\n"
    (call,) = r.tool_calls
    assert (call.id, call.name) == ("chatcmpl-tool-a7348842dffa4c4795f7f8ae2cc1b328", "add_todo")
    assert call.parsed == {"task": "go to the library", "time": "tomorrow at 2pm"}
    assert r.finish_reason == "tool_calls" and r.terminal
    assert r.usage == Usage(192, 127, 319, None, None)  # the last of the cumulative usages
    assert r.content_events == 88 + 1 + 18
    assert r.model == "@cf/qwen/qwen3-30b-a3b-fp8"


def test_wire_sglang_chat_reasoning_usage() -> None:
    r, _ = run("openai_chat", wire_events("sglang-chat-reasoning-usage.sse"))
    assert (
        r.reasoning == 'We need to respond to user: "Reply with exactly: OK". '
        "Need final exactly OK. Ensure no extra.\n"
    )
    assert r.text == "\n\nOK"
    assert r.finish_reason == "stop" and r.terminal
    assert r.usage == Usage(57, 28, 85, 25, None)


def test_every_wire_capture_parses_cleanly() -> None:
    by_prefix = {
        "openai-chat": "openai_chat",
        "vllm-chat": "openai_chat",
        "workers-ai": "openai_chat",
        "sglang-chat": "openai_chat",
        "openai-completions": "openai_completions",
        "vllm-completions": "openai_completions",
        "openai-responses": "openai_responses",
        "anthropic": "anthropic_messages",
    }
    files = sorted(WIRE.glob("*.sse"))
    assert len(files) >= 11
    for path in files:
        dialect = next(d for p, d in by_prefix.items() if path.name.startswith(p))
        r, _ = run(dialect, wire_events(path.name))
        assert r.malformed == 0, (path.name, r.malformed_details)
        assert r.terminal != ("fragment" in path.name), path.name


# --------------------------------------------------------------------------------------------
# detect() and is_streaming_request()
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/v1/chat/completions", "openai_chat"),
        ("/openai/v1/chat/completions?api-version=2024-10-21", "openai_chat"),
        ("/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", "openai_chat"),
        ("/api/v1/chat/completions/", "openai_chat"),
        ("/v1/completions", "openai_completions"),
        ("/v1/responses", "openai_responses"),
        ("/api/openai/v1/responses?x=1", "openai_responses"),
        ("/v1/messages", "anthropic_messages"),
        ("/anthropic/v1/messages?beta=true", "anthropic_messages"),
        ("/generate", "sglang_generate"),
        ("http://10.0.0.5:30000/generate", "sglang_generate"),
        ("/v1/models", None),
        ("/v1/embeddings", None),
        ("/health", None),
        ("/v1/messages/count_tokens", None),
        ("/v1/responses/resp_123", None),
        ("/v1/threads/thread_abc/messages", None),
        ("/", None),
    ],
)
def test_detect_from_path(path: str, expected: str | None) -> None:
    assert detect(path) == expected


def test_detect_path_wins_over_body_and_headers() -> None:
    assert (
        detect("/v1/chat/completions", {"prompt": "x"}, {"anthropic-version": "2023-06-01"})
        == "openai_chat"
    )


def test_detect_from_body_when_the_path_says_nothing() -> None:
    path = "/client/v4/accounts/abc/ai/run/@cf/qwen/qwen3-30b-a3b-fp8"
    assert (
        detect(path, {"messages": [{"role": "user", "content": "hi"}], "stream": True})
        == "openai_chat"
    )
    assert (
        detect(path, {"messages": []}, {"Anthropic-Version": "2023-06-01"}) == "anthropic_messages"
    )
    assert (
        detect("/model/claude/invoke", {"anthropic_version": "bedrock-2023-05-31", "messages": []})
        == "anthropic_messages"
    )
    assert (
        detect("/proxy", {"messages": [], "system": "be brief", "max_tokens": 10})
        == "anthropic_messages"
    )
    assert detect("/proxy", {"model": "gpt-4.1", "input": "hi"}) == "openai_responses"
    assert detect("/proxy", {"model": "m", "prompt": "once"}) == "openai_completions"
    assert (
        detect("/proxy", {"text": "once", "sampling_params": {"max_new_tokens": 8}})
        == "sglang_generate"
    )
    assert detect("/proxy", {"input_ids": [1, 2, 3]}) == "sglang_generate"
    assert detect("/proxy", b'{"messages": []}') == "openai_chat"  # raw bytes are parsed too


def test_detect_not_llm() -> None:
    assert detect("/proxy") is None
    assert detect("/proxy", {"hello": "world"}) is None
    assert detect("/proxy", [1, 2]) is None
    assert detect("/proxy", b"not json") is None
    assert detect("/v1/embeddings", {"input": "text"}) is None
    assert (
        detect("/v1/messages/count_tokens", {"messages": []}, {"anthropic-version": "2023-06-01"})
        is None
    )
    assert (
        detect("/api/generate", {"model": "llama3", "prompt": "hi"}) is None
    )  # Ollama, not SGLang


def test_is_streaming_request() -> None:
    assert is_streaming_request({"stream": True, "messages": []})
    assert is_streaming_request({"text": "x", "stream": True})
    assert is_streaming_request(b'{"stream": true}')
    assert not is_streaming_request({"stream": False})
    assert not is_streaming_request({"messages": []})
    assert not is_streaming_request({"stream": "yes"})
    assert not is_streaming_request(None)
    assert not is_streaming_request("not json")


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "index",
                    "content",
                    "type",
                    "text",
                    "usage",
                    "error",
                    "meta_info",
                    "tool_calls",
                    "function",
                    "arguments",
                    "name",
                    "item",
                    "item_id",
                    "delta",
                    "message",
                    "content_block",
                    "partial_json",
                    "finish_reason",
                    "response",
                    "output",
                    "id",
                ]
            )
            | st.text(max_size=4),
            inner,
            max_size=5,
        )
    ),
    max_leaves=20,
)
_event_types = st.sampled_from(
    [
        "message",
        "error",
        "ping",
        "message_stop",
        "content_block_delta",
        "response.completed",
        "response.output_text.delta",
    ]
) | st.text(max_size=10)
_datas = st.text(max_size=60) | _json_values.map(json.dumps) | st.just("[DONE]")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dialect=st.sampled_from(DIALECTS), events=st.lists(st.tuples(_event_types, _datas), max_size=12)
)
def test_feeding_anything_never_raises(dialect: str, events: list[tuple[str, str]]) -> None:
    acc = accumulator(dialect)
    for event_type, data in events:
        assert isinstance(acc.feed(event_type, data), EventKind)
        acc.result()  # the Result must be buildable at every point
    r = acc.result()
    assert r.malformed <= len(events)
    parse_body(dialect, "".join(d for _, d in events[:1]))


def _not_json(text: str) -> bool:
    if text.strip() == "[DONE]":
        return False
    try:
        json.loads(text)
    except ValueError:
        return True
    return False


_junk = st.text(max_size=40).filter(_not_json) | st.sampled_from(
    ["[1, 2]", '"text"', "42", "null", "{", "data: x"]
)

_VALID_STREAMS = [
    ("openai_chat", "openai-chat-tool-calls.sse", FIXTURES),
    ("openai_chat", "workers-ai-vllm-chat-reasoning-tool-call.sse", WIRE),
    ("openai_completions", "openai-completions-text.sse", FIXTURES),
    ("openai_responses", "openai-responses-reasoning.sse", FIXTURES),
    ("anthropic_messages", "anthropic-thinking.sse", FIXTURES),
    ("anthropic_messages", "anthropic-tool-use.sse", FIXTURES),
    ("sglang_generate", "sglang-generate-n2.sse", FIXTURES),
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(_VALID_STREAMS), data=st.data())
def test_junk_events_are_counted_and_do_not_change_the_result(
    case: tuple[str, str, Path], data: st.DataObject
) -> None:
    dialect, name, folder = case
    events = sse_events((folder / name).read_text(encoding="utf-8"))
    clean = parse_events(dialect, events)
    junk = data.draw(
        st.lists(st.tuples(st.integers(0, len(events)), _event_types, _junk), max_size=8)
    )
    mixed = list(events)
    for position, event_type, text in sorted(junk, key=lambda j: -j[0]):
        mixed.insert(position, (event_type, text))
    dirty = parse_events(dialect, mixed)
    assert dirty.malformed == len(junk)
    assert dirty.choices == clean.choices
    assert (dirty.usage, dirty.terminal, dirty.errors) == (
        clean.usage,
        clean.terminal,
        clean.errors,
    )
    assert dirty.content_events == clean.content_events


_BODIES = {
    "openai_chat": "openai-chat-body.json",
    "openai_completions": "openai-completions-body.json",
    "openai_responses": "openai-responses-body.json",
    "anthropic_messages": "anthropic-body.json",
    "sglang_generate": "sglang-generate-batch-body.json",
}


def _mutate(value: object, draw: st.DrawFn) -> object:
    """The JSON value with one randomly chosen node replaced by an arbitrary JSON value."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutate(value[key], draw)}
    if isinstance(value, list) and value and draw(st.booleans()):
        i = draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate(value[i], draw), *value[i + 1 :]]
    return draw(_json_values)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(_VALID_STREAMS), data=st.data())
def test_valid_events_with_a_mutated_field_never_raise(
    case: tuple[str, str, Path], data: st.DataObject
) -> None:
    dialect, name, folder = case
    events = sse_events((folder / name).read_text(encoding="utf-8"))
    acc = accumulator(dialect)
    for event_type, text in events:
        if text != "[DONE]" and data.draw(st.integers(0, 3)) == 0:
            text = json.dumps(_mutate(json.loads(text), data.draw))
        assert isinstance(acc.feed(event_type, text), EventKind)
    acc.result()
    obj = json.loads(body(_BODIES[dialect]))
    parse_body(dialect, json.dumps(_mutate(obj, data.draw)))


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8,
)


def _loads_or_error(loads, text: str) -> object:
    try:
        return ("value", loads(text))
    except json.JSONDecodeError:
        return ("error",)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        _JSON_VALUES.map(json.dumps),
        st.tuples(_JSON_VALUES.map(json.dumps), st.sampled_from(["", " ", "\n", " x", "}", ",1"])).map("".join),
        st.text(alphabet=' {}[]":,0123456789truefalsn\\\t\n', max_size=16),
    )
)
def test_event_json_decoding_agrees_with_json_loads(text: str) -> None:
    # The dialects decode every streamed event with a faster path than json.loads; it must
    # accept and refuse exactly the same data, or a stream's outcome would change.
    from proxycheck.core.protocol.dialects.base import _loads

    assert _loads_or_error(_loads, text) == _loads_or_error(json.loads, text)
