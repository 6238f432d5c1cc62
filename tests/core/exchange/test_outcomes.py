"""The outcome rule for streams that end abnormally after their answer (`after_answer`), through
the recorder's classification: timed SSE chunks in, an outcome out.

Each case tries to fool the rule: an early close by a client that had everything is `ok`; the
same close after a long wait for the body's end is `held_open`; a close before the answer stays
a failure of its own kind.
"""

from __future__ import annotations

import json

import pytest

from proxycheck.core.exchange.outcomes import CLOSE_GRACE, Outcome, after_answer, classify_recorded
from proxycheck.core.protocol.analysis import analyze_stream


def chat_chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    doc = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def chat_stream(*, finish: bool = True, done: bool = True, tokens: int = 5) -> list[tuple[float, bytes]]:
    """A chat stream as timed chunks: tokens every 10 ms, the finish chunk, [DONE]."""
    chunks = [(0.01 * (i + 1), chat_chunk(f"t{i} ")) for i in range(tokens)]
    t = 0.01 * tokens
    if finish:
        t += 0.01
        chunks.append((t, chat_chunk(finish="stop")))
    if done:
        t += 0.001
        chunks.append((t, b"data: [DONE]\n\n"))
    return chunks


def anthropic_stream(*, stop: bool = True) -> list[tuple[float, bytes]]:
    def ev(name: str, doc: dict) -> bytes:
        return f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode()

    out = [
        (0.01, ev("message_start", {"type": "message_start", "message": {"id": "m1", "model": "x", "usage": {"input_tokens": 3}}})),
        (0.02, ev("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        (0.03, ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}})),
        (0.04, ev("content_block_stop", {"type": "content_block_stop", "index": 0})),
        (0.05, ev("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}})),
    ]
    if stop:
        out.append((0.051, ev("message_stop", {"type": "message_stop"})))
    return out


def recorded(chunks, *, error: str | None, ended_at: float | None, dialect: str = "openai_chat", finished: bool = True):
    analysis = analyze_stream(dialect, chunks, None if error else ended_at)
    return classify_recorded(
        finished=finished, error=error, interrupted=False, status=200, analysis=analysis, ended_at=ended_at
    )


def last_t(chunks) -> float:
    return chunks[-1][0]


# -- the terminal marker came ---------------------------------------------------------------


def test_a_client_that_closes_right_after_done_got_everything() -> None:
    chunks = chat_stream()
    got = recorded(chunks, error="Client disconnected.", ended_at=last_t(chunks) + 0.002)
    assert got.outcome is Outcome.OK
    assert "client closed the connection 2 ms after [DONE]" in got.detail  # the fact is kept


def test_a_peer_close_right_after_done_is_ok_too() -> None:
    chunks = chat_stream()
    got = recorded(chunks, error="Server disconnected.", ended_at=last_t(chunks) + 0.01)
    assert got.outcome is Outcome.OK
    assert "connection was closed" in got.detail


def test_a_body_that_never_ended_after_done_is_held_open() -> None:
    chunks = chat_stream()
    got = recorded(chunks, error="Client disconnected.", ended_at=last_t(chunks) + 30.0)
    assert got.outcome is Outcome.HELD_OPEN
    assert "[DONE]" in got.detail and "30.0 s" in got.detail


def test_just_past_the_grace_is_held_open_and_just_within_is_ok() -> None:
    chunks = chat_stream()
    end = last_t(chunks)
    assert recorded(chunks, error="Client disconnected.", ended_at=end + CLOSE_GRACE * 0.9).outcome is Outcome.OK
    assert recorded(chunks, error="Client disconnected.", ended_at=end + CLOSE_GRACE * 1.1).outcome is Outcome.HELD_OPEN


def test_a_timeout_after_done_is_held_open_however_soon() -> None:
    chunks = chat_stream()
    got = recorded(chunks, error="Read timed out.", ended_at=last_t(chunks) + 0.1)
    assert got.outcome is Outcome.HELD_OPEN  # the client was still waiting for the end


def test_message_stop_is_the_anthropic_terminal() -> None:
    chunks = anthropic_stream()
    assert recorded(chunks, error="Client disconnected.", ended_at=0.052, dialect="anthropic_messages").outcome is Outcome.OK
    held = recorded(chunks, error="Client disconnected.", ended_at=9.0, dialect="anthropic_messages")
    assert held.outcome is Outcome.HELD_OPEN and "message_stop" in held.detail


# -- a finish reason without the terminator ------------------------------------------------


def test_a_finish_reason_then_silence_until_the_client_gives_up_is_held_open_without_its_terminator() -> None:
    chunks = chat_stream(done=False)
    got = recorded(chunks, error="Client disconnected.", ended_at=last_t(chunks) + 60.0)
    assert got.outcome is Outcome.HELD_OPEN
    assert "finish reason (stop" in got.detail and "without its terminator [DONE]" in got.detail


def test_anthropic_stop_reason_without_message_stop_held_is_held_open() -> None:
    chunks = anthropic_stream(stop=False)
    got = recorded(chunks, error="Client disconnected.", ended_at=20.0, dialect="anthropic_messages")
    assert got.outcome is Outcome.HELD_OPEN and "without its terminator message_stop" in got.detail


def test_a_client_leaving_right_after_the_finish_reason_had_its_answer() -> None:
    chunks = chat_stream(done=False)
    got = recorded(chunks, error="Client disconnected.", ended_at=last_t(chunks) + 0.003)
    assert got.outcome is Outcome.OK and "before [DONE]" in got.detail


def test_the_peer_cutting_right_after_the_finish_reason_is_still_a_reset() -> None:
    # A client reading to [DONE] (the OpenAI SDK) gets an error here: the stream was cut.
    chunks = chat_stream(done=False)
    got = recorded(chunks, error="Server disconnected.", ended_at=last_t(chunks) + 0.003)
    assert got.outcome is Outcome.RESET


# -- no answer yet: the rule does not apply --------------------------------------------------


@pytest.mark.parametrize("error", ["Client disconnected.", "Server disconnected."])
def test_a_close_before_the_answer_is_a_reset(error: str) -> None:
    chunks = chat_stream(finish=False, done=False)
    got = recorded(chunks, error=error, ended_at=last_t(chunks) + 0.001)
    assert got.outcome is Outcome.RESET


def test_a_timeout_before_the_answer_is_a_stall_mid_stream() -> None:
    chunks = chat_stream(finish=False, done=False)
    got = recorded(chunks, error="Read timed out.", ended_at=last_t(chunks) + 10)
    assert got.outcome is Outcome.STALL_MID_STREAM


def test_an_error_event_is_never_made_ok_by_a_close() -> None:
    chunks = chat_stream(done=False) + [(0.2, b'data: {"error": {"message": "overloaded"}}\n\n'), (0.21, b"data: [DONE]\n\n")]
    analysis = analyze_stream("openai_chat", chunks, None)
    assert after_answer(analysis, ended_at=0.211, client_left=True, timed_out=False) is None
    got = recorded(chunks, error="Client disconnected.", ended_at=0.211)
    assert got.outcome is not Outcome.OK


def test_an_http_error_stays_an_http_error() -> None:
    chunks = chat_stream()
    analysis = analyze_stream("openai_chat", chunks, None)
    got = classify_recorded(finished=True, error="Client disconnected.", interrupted=False, status=502, analysis=analysis, ended_at=1.0)
    assert got.outcome is not Outcome.OK


def test_a_clean_end_is_judged_as_before() -> None:
    chunks = chat_stream()
    assert recorded(chunks, error=None, ended_at=last_t(chunks) + 0.001).outcome is Outcome.OK
    cut = chat_stream(done=False)
    assert recorded(cut, error=None, ended_at=last_t(cut) + 0.001).outcome is Outcome.TRUNCATED


def test_in_flight_after_done_says_it_was_held_open() -> None:
    chunks = chat_stream()
    analysis = analyze_stream("openai_chat", chunks, None)
    got = classify_recorded(finished=False, error=None, interrupted=True, status=200, analysis=analysis)
    assert got.outcome is Outcome.IN_FLIGHT and "held open after [DONE]" in got.detail


def test_without_the_time_of_the_close_the_marker_decides() -> None:
    # An old recording without the error's time: the client had the terminal marker.
    chunks = chat_stream()
    assert recorded(chunks, error="Client disconnected.", ended_at=None).outcome is Outcome.OK


def test_held_open_is_a_failure() -> None:
    assert Outcome.HELD_OPEN.is_failure and not Outcome.HELD_OPEN.is_degradation
