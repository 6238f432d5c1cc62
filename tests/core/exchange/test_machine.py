"""The exchange state machine (proxycheck.core.exchange.machine): events with their times in, waits
and the outcome out, with no server and no clock.

Responses are real wire samples (tests/fixtures/wire/) for the OpenAI chat and Anthropic messages
dialects, cut, delayed or held as a broken hop would. Every outcome the machine can reach is here,
and each rule is tried with a case built to fool it: a close 0.9 s vs 1.1 s after [DONE], a finish
reason without its terminator, a 2xx carrying an error event, a reset before any byte vs after
content. Times start far from zero (the machine takes any monotonic clock).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from proxycheck.core.exchange.machine import (
    BodyData,
    Connected,
    ConnectStarted,
    ErrorKind,
    ExchangeMachine,
    ProtocolMisuse,
    RequestSent,
    ResponseHeaders,
    StreamClosed,
    TransportError,
    Wait,
    Watchdog,
    WatchdogExpired,
)
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import CLOSE_GRACE, ERROR_BODY_READ, Ending, Outcome, classify_recorded
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.protocol.analysis import analyze_stream

WIRE = Path(__file__).parents[2] / "fixtures" / "wire"
WATCHDOGS = Watchdogs(connect=5.0, headers=10.0, stall=2.0, total=60.0)
T0 = 5000.0  # the driver's clock at the send
SSE = [("content-type", "text/event-stream")]
CHAT, MESSAGES = "openai_chat", "anthropic_messages"


def wire_events(name: str) -> list[bytes]:
    """A wire sample as its SSE events, each with its blank line."""
    body = (WIRE / name).read_bytes()
    return [part + b"\n\n" for part in body.split(b"\n\n") if part.strip()]


CHAT_EVENTS = wire_events("openai-chat-parallel-tool-calls.sse")  # ends with its finish chunk, then [DONE]
MESSAGES_EVENTS = wire_events("anthropic-messages-tool-use.sse")  # ends with message_delta (stop_reason), message_stop
SAMPLES = {CHAT: CHAT_EVENTS, MESSAGES: MESSAGES_EVENTS}
TERMINATOR = {CHAT: "[DONE]", MESSAGES: "message_stop"}


class Exchange:
    """Drives a machine as a client stack would: every event at an explicit time."""

    def __init__(self, dialect: str | None = CHAT, *, streamed: bool = True, watchdogs: Watchdogs = WATCHDOGS,
                 body: bytes = b'{"model": "m"}') -> None:  # fmt: skip
        self.machine = ExchangeMachine(dialect=dialect, streamed=streamed, watchdogs=watchdogs, request_body=body)
        self.t = T0
        self.wait: Wait | None = self.machine.handle(RequestSent(self.t))

    def feed(self, event_type: type, dt: float, *args: object) -> Wait | None:
        self.t += dt
        self.wait = self.machine.handle(event_type(self.t, *args))
        return self.wait

    def connect(self, *, made: bool = True) -> "Exchange":
        self.feed(ConnectStarted, 0.001)
        if made:
            self.feed(Connected, 0.002)
        return self

    def headers(self, status: int = 200, headers: list[tuple[str, str]] = SSE, dt: float = 0.1) -> "Exchange":
        self.feed(ResponseHeaders, dt, status, headers, "HTTP/1.1")
        return self

    def data(self, chunks: list[bytes], gap: float = 0.01) -> "Exchange":
        for chunk in chunks:
            self.feed(BodyData, gap, chunk)
        return self

    def close(self, dt: float = 0.001) -> Ending:
        self.feed(StreamClosed, dt)
        return self.ending

    def error(self, kind: ErrorKind, text: str = "ReadError: peer closed", dt: float = 0.001) -> Ending:
        self.feed(TransportError, dt, kind, text)
        return self.ending

    def expire(self) -> Ending:
        """The watchdog the machine waits on fires, exactly when it said."""
        assert self.wait is not None
        self.t = self.wait.at
        self.wait = self.machine.handle(WatchdogExpired(self.t, self.wait.watchdog))
        return self.ending

    @property
    def ending(self) -> Ending:
        assert self.machine.ending is not None, "the exchange has not ended"
        return self.machine.ending

    def observation(self) -> Observation:
        return self.machine.observation(clock_origin=T0 - 10.0, reused=False, idle=None, connection=1)


def streamed(dialect: str, events: list[bytes] | None = None, **kw: object) -> Exchange:
    x = Exchange(dialect, **kw)  # type: ignore[arg-type]
    return x.connect().headers().data(SAMPLES[dialect] if events is None else events)


def chat_chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    doc = {"id": "c1", "object": "chat.completion.chunk", "choices": [choice]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


both = pytest.mark.parametrize("dialect", [CHAT, MESSAGES])


# -- ok ---------------------------------------------------------------------------------------------


@both
def test_a_whole_stream_read_to_its_end_is_ok(dialect: str) -> None:
    x = streamed(dialect)
    assert x.close() == Ending(Outcome.OK, "", "")
    obs = x.observation()
    assert obs.outcome is Outcome.OK and obs.status == 200 and obs.streamed
    assert obs.t_start == 10.0 and obs.connect == 0.003 and obs.headers == pytest.approx(0.103)
    assert obs.events[-1].kind == "terminal" and len(obs.events) == len(SAMPLES[dialect])
    assert obs.response_bytes == sum(len(c) for c in SAMPLES[dialect])
    assert obs.response_headers == (("content-type", "text/event-stream"),)
    assert obs.result is not None and obs.result.terminal and obs.result.tool_calls
    assert obs.first_event is not None and obs.first_event > obs.headers
    assert x.machine.ended_cleanly and x.machine.result is not None


def test_chunk_boundaries_do_not_matter() -> None:
    # A hop re-chunks: the same bytes in 7-byte pieces, events split across chunks.
    body = b"".join(CHAT_EVENTS)
    x = Exchange().connect().headers().data([body[i:i + 7] for i in range(0, len(body), 7)], gap=0.0001)
    assert x.close().outcome is Outcome.OK
    whole = streamed(CHAT)
    whole.close()
    assert x.observation().content_events == whole.observation().content_events


def test_a_non_streamed_answer_is_read_whole() -> None:
    doc = {"choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}]}
    raw = json.dumps(doc).encode()
    x = Exchange(streamed=False).connect().headers(headers=[("content-type", "application/json")])
    waits = [x.feed(BodyData, 1.5, raw[:10]), x.feed(BodyData, 0.4, raw[10:])]
    # Bytes of a body read whole are not content: the wait stays where the headers set it.
    assert waits[0] == waits[1] == Wait(Watchdog.FIRST_EVENT, x.machine.headers_at + WATCHDOGS.stall)
    assert x.close() == Ending(Outcome.OK)
    obs = x.observation()
    assert obs.events == () and obs.ttft == obs.e2e == obs.end and obs.result is not None


def test_a_body_that_is_not_an_llm_response_is_ok() -> None:
    x = Exchange(None).connect().headers().data([b"data: {}\n\n"])
    assert x.close() == Ending(Outcome.OK, "not an LLM response")


# -- http_error -------------------------------------------------------------------------------------


def test_an_error_status_is_an_http_error_quoting_its_body() -> None:
    x = Exchange().connect().headers(413, [("content-type", "text/plain")]).data([b"payload\n  too ", b"large"])
    assert x.close() == Ending(Outcome.HTTP_ERROR, "HTTP 413: payload too large")
    assert x.observation().events == () and x.observation().result is None and x.machine.result is None


def test_the_machine_stops_reading_an_error_body_once_it_can_quote_it() -> None:
    x = Exchange().connect().headers(502)
    assert x.feed(BodyData, 0.01, b"x" * (ERROR_BODY_READ - 1)) is not None
    assert x.feed(BodyData, 0.01, b"y" * 10) is None  # enough: it ended the exchange itself
    assert x.ending.outcome is Outcome.HTTP_ERROR and len(x.ending.detail) == len("HTTP 502: ") + 200
    assert not x.machine.ended_cleanly  # not read to its end: the connection is not reused
    assert x.observation().response_bytes == ERROR_BODY_READ + 9


@pytest.mark.parametrize("kind", [ErrorKind.RESET, ErrorKind.READ_TIMEOUT, ErrorKind.DECODE])
def test_a_break_in_an_error_body_only_shortens_the_quote(kind: ErrorKind) -> None:
    x = Exchange().connect().headers(503).data([b"overloaded"])
    assert x.error(kind) == Ending(Outcome.HTTP_ERROR, "HTTP 503: overloaded", "")


def test_a_watchdog_on_an_error_status_is_still_the_status() -> None:
    x = Exchange().connect().headers(500)
    assert x.expire().outcome is Outcome.HTTP_ERROR


# -- connect_error and stall_before_headers -----------------------------------------------------------


def test_the_headers_watchdog_while_still_connecting_is_a_connect_error() -> None:
    x = Exchange().connect(made=False)
    assert x.wait == Wait(Watchdog.HEADERS, T0 + WATCHDOGS.headers)
    assert x.expire() == Ending(Outcome.CONNECT_ERROR, "no connection within 10 s")
    assert x.observation().connect is None and x.observation().status is None


def test_a_refused_connection_is_a_connect_error() -> None:
    x = Exchange().connect(made=False)
    text = "ConnectError: [Errno 111] Connection refused"
    assert x.error(ErrorKind.CONNECT, text) == Ending(Outcome.CONNECT_ERROR, text, text)


def test_the_transports_connect_timeout_names_the_connect_watchdog() -> None:
    x = Exchange().connect(made=False)
    assert x.error(ErrorKind.CONNECT_TIMEOUT, "ConnectTimeout").detail == "no connection within 5 s"


def test_connected_but_no_headers_is_a_stall_before_headers() -> None:
    x = Exchange().connect()
    assert x.expire() == Ending(Outcome.STALL_BEFORE_HEADERS, "no response headers within 10 s")
    assert x.observation().end == WATCHDOGS.headers and x.observation().connect == 0.003


def test_a_pooled_connection_without_headers_is_a_stall_before_headers_too() -> None:
    x = Exchange()  # no connection events: the request went on a pooled connection
    assert x.expire().outcome is Outcome.STALL_BEFORE_HEADERS


def test_a_transport_read_timeout_before_headers_is_a_stall() -> None:
    x = Exchange().connect()
    assert x.error(ErrorKind.READ_TIMEOUT, "SocketTimeoutError").detail == "no response headers (SocketTimeoutError)"


# -- reset --------------------------------------------------------------------------------------------


def test_a_reset_before_any_byte_is_a_reset_before_headers() -> None:
    x = Exchange().connect()
    got = x.error(ErrorKind.RESET, "RemoteProtocolError: Server disconnected")
    assert got == Ending(Outcome.RESET, "closed before response headers: RemoteProtocolError: Server disconnected",
                         "RemoteProtocolError: Server disconnected")  # fmt: skip


def test_a_reset_after_the_headers_before_any_byte_is_a_reset_mid_stream() -> None:
    x = Exchange().connect().headers()
    detail = x.error(ErrorKind.RESET, "ReadError").detail
    assert detail == "connection closed mid-stream after 0 event(s), 0 with content, 0 B: ReadError"


@both
def test_a_reset_after_content_keeps_what_arrived(dialect: str) -> None:
    x = streamed(dialect, SAMPLES[dialect][:5])
    got = x.error(ErrorKind.RESET, "ReadError")
    assert got.outcome is Outcome.RESET and got.detail.startswith("connection closed mid-stream after 5 event(s)")
    assert x.observation().content_events >= 1 and x.observation().result is not None


# -- the end of the answer, then a close ------------------------------------------------------------


@both
def test_a_close_just_within_the_grace_after_the_terminator_is_ok(dialect: str) -> None:
    x = streamed(dialect)
    got = x.error(ErrorKind.RESET, "RemoteProtocolError: peer closed", dt=CLOSE_GRACE * 0.9)
    assert got.outcome is Outcome.OK
    assert got.detail == f"the connection was closed 900 ms after {TERMINATOR[dialect]}, before the end of the body"
    assert got.error  # the close is kept, as a fact


@both
def test_a_close_just_past_the_grace_after_the_terminator_is_held_open(dialect: str) -> None:
    x = streamed(dialect)
    got = x.error(ErrorKind.RESET, dt=CLOSE_GRACE * 1.1)
    assert got.outcome is Outcome.HELD_OPEN and f"held open after its end: {TERMINATOR[dialect]} came at" in got.detail


@both
def test_a_body_held_open_after_its_terminator_is_held_open_when_the_watchdog_fires(dialect: str) -> None:
    x = streamed(dialect)
    assert x.wait is not None and x.wait.watchdog is Watchdog.IDLE
    got = x.expire()
    assert got.outcome is Outcome.HELD_OPEN and "the body had not ended 2.0 s later" in got.detail


@both
def test_a_finish_reason_without_its_terminator_then_silence_is_held_open(dialect: str) -> None:
    x = streamed(dialect, SAMPLES[dialect][:-1])  # everything but [DONE] / message_stop
    got = x.expire()
    assert got.outcome is Outcome.HELD_OPEN
    assert "held open after its finish reason" in got.detail
    assert f"without its terminator {TERMINATOR[dialect]}" in got.detail


@both
def test_a_finish_reason_without_its_terminator_then_a_close_by_the_peer_is_a_reset(dialect: str) -> None:
    # A client reading to the terminator (the SDKs) gets an error here: the stream was cut.
    x = streamed(dialect, SAMPLES[dialect][:-1])
    assert x.error(ErrorKind.RESET, dt=0.003).outcome is Outcome.RESET


def test_a_finish_reason_without_its_terminator_then_the_client_leaving_is_ok() -> None:
    x = streamed(CHAT, CHAT_EVENTS[:-1])
    got = x.error(ErrorKind.CLIENT_LEFT, "client left", dt=0.003)
    assert got.outcome is Outcome.OK and "before [DONE]" in got.detail


@both
def test_a_finish_reason_without_its_terminator_then_a_clean_end_is_truncated(dialect: str) -> None:
    x = streamed(dialect, SAMPLES[dialect][:-1])
    got = x.close()
    assert got.outcome is Outcome.TRUNCATED and got.detail.startswith("ended without a terminal marker")


# -- stalls -------------------------------------------------------------------------------------------


@both
def test_headers_then_nothing_but_bookkeeping_is_a_stall_before_the_first_event(dialect: str) -> None:
    first = SAMPLES[dialect][:1]  # the role chunk / message_start: no content
    x = streamed(dialect, first)
    assert x.machine.headers_at is not None
    assert x.wait == Wait(Watchdog.FIRST_EVENT, x.machine.headers_at + WATCHDOGS.stall)  # counted from the headers
    got = x.expire()
    assert got.outcome is Outcome.STALL_BEFORE_FIRST_EVENT
    assert got.detail.startswith("headers came, then no content for 2.0 s (1 event(s), ")


@both
def test_content_then_silence_is_a_stall_mid_stream(dialect: str) -> None:
    x = streamed(dialect, SAMPLES[dialect][:5])
    got = x.expire()
    assert got.outcome is Outcome.STALL_MID_STREAM and got.detail.startswith("no content for 2.0 s after event 5 (")
    assert x.observation().e2e is None


def test_keep_alive_comments_do_not_move_the_stall_watchdog() -> None:
    x = streamed(CHAT, CHAT_EVENTS[:4])
    armed = x.wait
    assert armed is not None and armed.watchdog is Watchdog.IDLE
    for _ in range(3):
        assert x.feed(BodyData, 0.5, b": keep-alive\n\n") == armed  # bytes, not progress
    got = x.expire()
    assert got.outcome is Outcome.STALL_MID_STREAM and "3 comment(s)" in got.detail


def test_each_content_event_moves_the_stall_watchdog() -> None:
    x = streamed(CHAT, CHAT_EVENTS[:2])
    before = x.wait
    x.data([chat_chunk("more")], gap=1.5)
    assert before is not None and x.wait == Wait(Watchdog.IDLE, x.t + WATCHDOGS.stall) and x.wait.at > before.at


def test_the_total_watchdog_takes_over_when_it_is_sooner() -> None:
    x = Exchange(watchdogs=Watchdogs(connect=5.0, headers=10.0, stall=30.0, total=1.0)).connect()
    assert x.wait == Wait(Watchdog.TOTAL, T0 + 1.0)
    x.headers().data(CHAT_EVENTS[:5])
    assert x.wait == Wait(Watchdog.TOTAL, T0 + 1.0)
    got = x.expire()
    assert got.outcome is Outcome.STALL_MID_STREAM and got.detail.endswith("; the total timeout of 1 s ended it")
    assert got.detail.startswith(f"no content for {1.0 - 0.103 - 0.05:.1f} s")  # measured, not the stall limit


def test_the_total_watchdog_before_headers_says_so() -> None:
    x = Exchange(watchdogs=Watchdogs(connect=5.0, headers=10.0, stall=30.0, total=1.0)).connect()
    assert x.expire().detail == "no response headers within the total timeout of 1 s"


def test_a_transport_read_timeout_mid_stream_is_a_stall_with_its_error() -> None:
    x = streamed(CHAT, CHAT_EVENTS[:5])
    got = x.error(ErrorKind.READ_TIMEOUT, "SocketTimeoutError", dt=3.0)
    assert got.outcome is Outcome.STALL_MID_STREAM and got.error == "SocketTimeoutError"
    assert got.detail.startswith("no content for 3.0 s after event 5")


# -- what the body held ---------------------------------------------------------------------------------


def test_a_2xx_with_an_error_event_is_a_stream_error() -> None:
    x = streamed(MESSAGES, wire_events("anthropic-error-mid-stream-fragment.sse"))
    assert x.close() == Ending(Outcome.STREAM_ERROR, "api_error: Internal server error")


def test_a_2xx_with_an_error_event_is_never_made_ok_by_a_close_after_its_end() -> None:
    # openai_responses: `error` then `response.failed` (terminal), then a close right after it.
    x = Exchange("openai_responses").connect().headers().data(wire_events("openai-responses-error-in-stream.sse"))
    assert x.error(ErrorKind.RESET, dt=0.002).outcome is Outcome.RESET
    y = Exchange("openai_responses").connect().headers().data(wire_events("openai-responses-error-in-stream.sse"))
    assert y.close().outcome is Outcome.STREAM_ERROR


def test_a_2xx_that_is_not_an_event_stream_is_malformed() -> None:
    x = Exchange().connect().headers(headers=[("content-type", "application/json")]).data([b'{"choices": []}'])
    assert x.close() == Ending(Outcome.MALFORMED_STREAM, "expected text/event-stream, got application/json (15 B)")
    y = Exchange().connect().headers(headers=[]).data([b"<html>"])
    assert "no content-type" in y.close().detail


def test_unreadable_events_are_malformed() -> None:
    x = Exchange().connect().headers().data([b"data: {not json\n\n", b"data: ][\n\n"])
    got = x.close()
    assert got.outcome is Outcome.MALFORMED_STREAM and got.detail.startswith("2 bad event(s)")


def test_a_body_whose_coding_cannot_be_undone_is_malformed() -> None:
    x = Exchange().connect().headers(200, SSE + [("content-encoding", "gzip")])
    assert x.error(ErrorKind.DECODE, "DecodingError: bad gzip").detail == "undecodable body: DecodingError: bad gzip"
    assert x.ending.outcome is Outcome.MALFORMED_STREAM


def test_an_event_cut_by_the_end_of_the_stream_is_truncated() -> None:
    x = streamed(CHAT, CHAT_EVENTS[:3] + [CHAT_EVENTS[3][:20]])
    got = x.close()
    assert got.outcome is Outcome.TRUNCATED and x.observation().events[-1].kind == "malformed"


# -- request_mutated --------------------------------------------------------------------------------------


def test_the_engines_report_of_another_request_is_request_mutated() -> None:
    a, b = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
    sent = json.dumps({"model": "m", "messages": [a, b]}).encode()
    got = json.dumps({"model": "m", "messages": [b]}).encode()
    report = [("x-proxycheck-request-sha256", hashlib.sha256(got).hexdigest()),
              ("x-proxycheck-request-bytes", str(len(got)))]
    x = Exchange(body=sent).connect().headers(headers=SSE + report).data(CHAT_EVENTS)
    ending = x.close()
    assert ending.outcome is Outcome.REQUEST_MUTATED and "bytes with another digest" in ending.detail


def test_the_engines_report_of_the_same_request_changes_nothing() -> None:
    sent = b'{"model": "m"}'
    report = [("X-Proxycheck-Request-Sha256", hashlib.sha256(sent).hexdigest())]
    x = Exchange(body=sent).connect().headers(headers=SSE + report).data(CHAT_EVENTS)
    assert x.close() == Ending(Outcome.OK)


def test_request_mutated_keeps_what_else_happened() -> None:
    report = [("llm_provider-x-proxycheck-request-sha256", "0" * 64)]  # passed on by a gateway
    x = Exchange().connect().headers(headers=SSE + report).data(CHAT_EVENTS[:4])
    got = x.expire()
    assert got.outcome is Outcome.REQUEST_MUTATED and "(then stall_mid_stream: no content for 2.0 s" in got.detail


# -- the same rules for a recording ------------------------------------------------------------------------


@pytest.mark.parametrize("after, error, outcome", [
    (0.002, "Client disconnected.", Outcome.OK),
    (CLOSE_GRACE * 1.1, "Server disconnected.", Outcome.HELD_OPEN),
    (None, None, Outcome.OK),
])  # fmt: skip
def test_a_recording_and_the_machine_judge_the_same_bytes_alike(after: float | None, error: str | None,
                                                                 outcome: Outcome) -> None:  # fmt: skip
    chunks = [(0.01 * (i + 1), ev) for i, ev in enumerate(CHAT_EVENTS)]
    end = chunks[-1][0] + (after or 0.001)
    analysis = analyze_stream(CHAT, chunks, None if error else end)
    recorded = classify_recorded(finished=True, error=error, interrupted=False, status=200, analysis=analysis,
                                 ended_at=end)
    x = Exchange().headers(dt=0.0)
    for t, ev in chunks:
        x.feed(BodyData, T0 + t - x.t, ev)
    live = x.close(end - chunks[-1][0]) if error is None else x.error(
        ErrorKind.CLIENT_LEFT if "Client" in error else ErrorKind.RESET, error, dt=end - chunks[-1][0])
    assert recorded.outcome is live.outcome is outcome


def test_a_recorded_error_after_an_error_status_is_the_error_not_the_status() -> None:
    # The one place the two observers differ (see proxycheck.core.exchange.outcomes).
    got = classify_recorded(finished=True, error="Server disconnected.", interrupted=False, status=502, analysis=None)
    assert got.outcome is Outcome.RESET
    x = Exchange().connect().headers(502)
    assert x.error(ErrorKind.RESET, "Server disconnected.").outcome is Outcome.HTTP_ERROR


# -- misuse -------------------------------------------------------------------------------------------------


def test_events_out_of_order_are_the_drivers_bug() -> None:
    x = Exchange()
    with pytest.raises(ProtocolMisuse):
        x.feed(BodyData, 0.1, b"data: x\n\n")  # before the headers
    x.connect().headers()
    with pytest.raises(ProtocolMisuse):
        x.headers()
    x.close()
    with pytest.raises(ProtocolMisuse):
        x.feed(StreamClosed, 0.1)  # after the end
    assert x.wait is None
    fresh = ExchangeMachine(dialect=CHAT)
    with pytest.raises(ProtocolMisuse):
        fresh.handle(WatchdogExpired(1.0, Watchdog.HEADERS))
    with pytest.raises(ProtocolMisuse):
        fresh.observation(clock_origin=None, reused=None, idle=None, connection=None)


def test_the_running_analysis_grows_with_the_stream() -> None:
    x = streamed(CHAT, CHAT_EVENTS[:3])
    assert x.machine.analysis().events == 3
    x.data(CHAT_EVENTS[3:6])
    assert x.machine.analysis().events == 6 and not x.machine.ended
