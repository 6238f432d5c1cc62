"""The outcome taxonomy (DESIGN.md, "Outcomes"), and how a recorded exchange is classified.

Every observed exchange gets exactly one outcome. The replayer adds the watchdog outcomes (stalls)
it measures itself; a recording already shows what the client saw: completed, cut, reset, or still
in flight when the recorder stopped (the evidence of a wedge).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from proxycheck.core.analysis import ResponseAnalysis


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


_TIMEOUT_WORDS = ("timeout", "timed out")
_CONNECT_WORDS = ("connect", "refused", "resolve", "name or service", "unreachable", "tls", "certificate")


def classify_recorded(
    *,
    finished: bool,
    error: str | None,
    interrupted: bool,
    status: int | None,
    analysis: ResponseAnalysis | None,
) -> Classified:
    """The outcome of one recorded exchange.

    `analysis` is the parse of whatever response bytes were recorded (None before headers).
    """
    got_headers = status is not None
    content = analysis.content_events if analysis else 0
    progress = _progress(analysis)
    if not finished:
        why = "the recorder stopped while it was in flight" if interrupted else "never completed"
        return Classified(Outcome.IN_FLIGHT, f"{why}; {progress}" if got_headers else f"{why}; no response headers")
    if error is not None:
        low = error.lower()
        if any(w in low for w in _TIMEOUT_WORDS):
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


def _progress(analysis: ResponseAnalysis | None) -> str:
    if analysis is None:
        return "no response bytes"
    return f"{analysis.events} event(s), {analysis.content_events} with content, {analysis.bytes} bytes"
