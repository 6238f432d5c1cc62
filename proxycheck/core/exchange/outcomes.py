"""The outcome taxonomy (docs/design.md, "Outcomes"), and how a recorded exchange is classified.

Every observed exchange gets exactly one outcome. The replayer adds the watchdog outcomes (stalls)
it measures itself; a recording already shows what the client saw: completed, cut, reset, or still
in flight when the recorder stopped (the evidence of a wedge).

An exchange is judged by what the client received, and one rule (`after_answer`) decides every
stream that ended abnormally after its answer had come, wherever outcomes are decided (the
recorder's view here, the replayer's and bench's in `proxycheck.io.observe`):

- the terminal marker (`[DONE]`, `message_stop`, `response.completed` ...) came, then the
  connection closed within `CLOSE_GRACE`: `ok`. The OpenAI SDK stops reading at `[DONE]` and
  closes 1-2 ms later, before the chunked body's end; that close is kept as a fact in the detail.
- the terminal marker came, and the body had still not ended when the client (or a watchdog)
  gave up, later than `CLOSE_GRACE`: `held_open`. A hop holding the connection after the end
  wedges every client that reads to the end of the body, and the next request on that
  kept-alive connection.
- a finish reason came without the terminator, then nothing until the client gave up:
  `held_open` too (the OpenAI SDK reads to `[DONE]` and hangs there).

                        ended abnormally (error, close, timeout) after ...
                  the terminal marker             a finish reason, no terminator
  within grace    ok (early close noted)          ok if the client left, else reset
  later / timeout held_open                       held_open
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from proxycheck.core.protocol.analysis import ResponseAnalysis


class Outcome(str, enum.Enum):
    OK = "ok"
    CONNECT_ERROR = "connect_error"
    HTTP_ERROR = "http_error"
    STALL_BEFORE_HEADERS = "stall_before_headers"
    STALL_BEFORE_FIRST_EVENT = "stall_before_first_event"
    STALL_MID_STREAM = "stall_mid_stream"
    RESET = "reset"
    TRUNCATED = "truncated"
    MALFORMED_STREAM = "malformed_stream"
    STREAM_ERROR = "stream_error"
    HELD_OPEN = "held_open"
    REQUEST_MUTATED = "request_mutated"
    CONTENT_MISMATCH = "content_mismatch"
    BUFFERED = "buffered"
    SLOW = "slow"
    IN_FLIGHT = "in_flight"

    def __str__(self) -> str:
        return self.value

    @property
    def is_failure(self) -> bool:
        return self not in (Outcome.OK, Outcome.BUFFERED, Outcome.SLOW)

    @property
    def is_degradation(self) -> bool:
        return self in (Outcome.BUFFERED, Outcome.SLOW)


@dataclass(frozen=True, slots=True)
class Classified:
    outcome: Outcome
    detail: str = ""


#: Seconds after the end of the answer within which a close is a client done reading. The SDKs
#: close within milliseconds; a client that waited longer was waiting for the end of the body.
CLOSE_GRACE = 1.0

_TERMINATORS = {
    "openai_chat": "[DONE]",
    "openai_completions": "[DONE]",
    "anthropic_messages": "message_stop",
    "openai_responses": "response.completed",
}
_TIMEOUT_WORDS = ("timeout", "timed out")
_CONNECT_WORDS = ("connect", "refused", "resolve", "name or service", "unreachable", "tls", "certificate")


def terminator(dialect: str | None) -> str:
    """The name of a dialect's end-of-stream marker, for findings."""
    return _TERMINATORS.get(dialect or "", "terminal marker")


def after_answer(
    analysis: ResponseAnalysis | None,
    *,
    ended_at: float | None,
    client_left: bool,
    timed_out: bool,
) -> Classified | None:
    """The outcome of a 2xx stream that ended abnormally (an error, a close, a timeout) at
    `ended_at` after its answer had come, or None when no answer had come (the caller's rules
    for cut streams and stalls apply). `client_left` is a close by the client itself;
    `timed_out` a client's (or watchdog's) timeout, which means it was still waiting."""
    if analysis is None or analysis.result is None or analysis.result.errors:
        return None
    end = terminator(analysis.dialect)
    if analysis.result.terminal and analysis.terminal_at is not None:
        waited = _waited(ended_at, analysis.terminal_at)
        if timed_out or (waited is not None and waited > CLOSE_GRACE):
            return Classified(
                Outcome.HELD_OPEN,
                f"held open after its end: {end} came at {analysis.terminal_at:.2f} s, "
                f"the body had not ended {_for(waited)} later",
            )
        who = "the client closed the connection" if client_left else "the connection was closed"
        return Classified(Outcome.OK, f"{who} {_ms(waited)} after {end}, before the end of the body")
    if analysis.finish_at is not None and not analysis.result.terminal:
        waited = _waited(ended_at, analysis.finish_at)
        reason = analysis.result.finish_reason or "finish"
        if timed_out or (waited is not None and waited > CLOSE_GRACE):
            return Classified(
                Outcome.HELD_OPEN,
                f"held open after its finish reason ({reason} at {analysis.finish_at:.2f} s) without "
                f"its terminator {end}: nothing more for {_for(waited)}",
            )
        if client_left:
            return Classified(Outcome.OK, f"the client closed the connection {_ms(waited)} after the finish reason ({reason}), before {end}")
    return None


def classify_recorded(
    *,
    finished: bool,
    error: str | None,
    interrupted: bool,
    status: int | None,
    analysis: ResponseAnalysis | None,
    ended_at: float | None = None,
) -> Classified:
    """The outcome of one recorded exchange.

    `analysis` is the parse of whatever response bytes were recorded (None before headers);
    `ended_at` is when the exchange ended (its error's time when it has one), on the clock of the
    analysis' times.
    """
    got_headers = status is not None
    content = analysis.content_events if analysis else 0
    progress = _progress(analysis)
    if not finished:
        why = "the recorder stopped while it was in flight" if interrupted else "never completed"
        if analysis is not None and analysis.terminal_at is not None:
            why += f", held open after {terminator(analysis.dialect)} at {analysis.terminal_at:.2f} s"
        return Classified(Outcome.IN_FLIGHT, f"{why}; {progress}" if got_headers else f"{why}; no response headers")
    if error is not None:
        low = error.lower()
        timed_out = any(w in low for w in _TIMEOUT_WORDS)
        if got_headers and 200 <= (status or 0) < 300:
            answered = after_answer(analysis, ended_at=ended_at, client_left="client disconnected" in low, timed_out=timed_out)
            if answered is not None:
                return answered
        if timed_out:
            if not got_headers:
                return Classified(Outcome.STALL_BEFORE_HEADERS, error)
            kind = Outcome.STALL_MID_STREAM if content else Outcome.STALL_BEFORE_FIRST_EVENT
            return Classified(kind, f"{error}; {progress}")
        if not got_headers and any(w in low for w in _CONNECT_WORDS):
            return Classified(Outcome.CONNECT_ERROR, error)
        return Classified(Outcome.RESET, f"{error}; {progress}" if got_headers else error)
    if status is None:
        return Classified(Outcome.RESET, "ended without a response")
    if not 200 <= status < 300:
        return Classified(Outcome.HTTP_ERROR, f"HTTP {status}")
    if analysis is None or analysis.result is None:
        return Classified(Outcome.OK, "not an LLM response")
    result = analysis.result
    if result.errors:
        err = result.errors[0]
        return Classified(Outcome.STREAM_ERROR, f"{err.type or 'error'}: {err.message}")
    if result.malformed and not result.terminal:
        first = result.malformed_details[0] if result.malformed_details else "unreadable event"
        return Classified(Outcome.MALFORMED_STREAM, f"{result.malformed} bad event(s): {first}")
    if analysis.incomplete_tail or not result.terminal:
        return Classified(Outcome.TRUNCATED, f"ended without a terminal marker; {progress}")
    return Classified(Outcome.OK, "")


def _waited(ended_at: float | None, since: float) -> float | None:
    return None if ended_at is None else max(ended_at - since, 0.0)


def _for(seconds: float | None) -> str:
    return "an unknown time" if seconds is None else f"{seconds:.1f} s"


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else "soon"


def _progress(analysis: ResponseAnalysis | None) -> str:
    if analysis is None:
        return "no response bytes"
    return f"{analysis.events} event(s), {analysis.content_events} with content, {analysis.bytes} bytes"
