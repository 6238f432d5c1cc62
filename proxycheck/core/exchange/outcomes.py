"""The outcome taxonomy (docs/design.md, "Outcomes") and every rule that decides an exchange's outcome.

Every observed exchange gets exactly one outcome, decided by `decide` from the facts of how it
ended (`ExchangeFacts`): what came back (status, content type, the analysis of the body), how it
stopped (`Completed`, a watchdog `TimedOut`, a transport error `Broken`, `Unfinished`), and when.
Two observers gather those facts and share these rules:

- the client itself (`Viewpoint.CLIENT`): the replayer, bench, prober and agent, through the
  exchange state machine (`proxycheck.core.exchange.machine`), which knows its own watchdogs and
  what kind of error its transport raised, and reads the start of an error body to quote it;
- the recorder (`Viewpoint.RECORDER`), a proxy between another client and the server, which sees
  a recorded exchange's error only as text (`classify_recorded` tells its kind by its words) and
  may have stopped while an exchange was still in flight (the evidence of a wedge).

An exchange is judged by what the client received, and one rule (`after_answer`) decides every
stream that ended abnormally after its answer had come, whoever observed it:

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

Where the two observers differ (kept as the two have always reported it):

- an error after an error status (a 502 whose body was cut): the client's outcome is the status
  (`http_error`: it reads only the start of an error body, to quote it, and a break there only
  shortens the quote); the recorder's is the error (`reset`, or a stall for a timeout).
- details: the client describes what it saw in its own words ("connection closed mid-stream after
  ..."); the recorder quotes the recorder's error text, then what had arrived.

**Patience** (`_patient`): a replay waits a silence out to the client's patience
(`proxycheck.core.exchange.watchdogs.Watchdogs`). A 2xx exchange that completed after a silence
longer than its watchdog (`Waited`) is `slow`, the silence, the watchdog it passed and the patience
quoted: the real client would have sat through it, so it is no stall. One the patience cut is the
stall, its detail naming the patience and what it comes from (`TimedOut.source`).

`buffered` and `slow` between routes are not decided here: they compare an exchange with the same
exchange on the reference route (`proxycheck.core.diagnose.differ`). `request_mutated` is decided here, from the
engine's report of the request it received (response headers the reference engine sends).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence, Union

from proxycheck.core.protocol.analysis import ResponseAnalysis
from proxycheck.core.protocol.requestparts import BYTES_HEADER, CANONICAL_HEADER, PARTS_HEADER, SHA_HEADER
from proxycheck.core.protocol.requestparts import judge as judge_request


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
    # Recordings only: the recorder could no longer write while the exchange ran (a full disk).
    # Neither a failure nor a success: the recording does not know how it ended.
    NOT_RECORDED = "not_recorded"

    def __str__(self) -> str:
        return self.value

    @property
    def is_failure(self) -> bool:
        return self not in (Outcome.OK, Outcome.BUFFERED, Outcome.SLOW, Outcome.NOT_RECORDED)

    @property
    def is_degradation(self) -> bool:
        return self in (Outcome.BUFFERED, Outcome.SLOW)

    @property
    def answered(self) -> bool:
        """A complete answer: `ok`, or `slow` after a silence the client's patience waited out."""
        return self in (Outcome.OK, Outcome.SLOW)


@dataclass(frozen=True, slots=True)
class Classified:
    outcome: Outcome
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Ending:
    """How one exchange ended, judged: its outcome, the detail that explains it, and the text of
    the transport error that ended it ("" when none did)."""

    outcome: Outcome
    detail: str = ""
    error: str = ""


#: Seconds after the end of the answer within which a close is a client done reading. The SDKs
#: close within milliseconds; a client that waited longer was waiting for the end of the body.
CLOSE_GRACE = 1.0

#: Bytes of an error (non-2xx) body the client reads, to quote its start in the detail, and the
#: characters of it quoted.
ERROR_BODY_READ = 4096
ERROR_BODY_QUOTE = 200

_TERMINATORS = {
    "openai_chat": "[DONE]",
    "openai_completions": "[DONE]",
    "anthropic_messages": "message_stop",
    "openai_responses": "response.completed",
}
_TIMEOUT_WORDS = ("timeout", "timed out")
_CONNECT_WORDS = ("connect", "refused", "resolve", "name or service", "unreachable", "tls", "certificate")
CLIENT_LEFT_WORDS = "client disconnected"  # mitmproxy's words when the client hung up


class Viewpoint(enum.Enum):
    """Who observed the exchange (see the module docstring for where that changes the rules)."""

    CLIENT = "client"
    RECORDER = "recorder"


class ErrorKind(str, enum.Enum):
    """What a transport error was, as the transport names it."""

    CONNECT = "connect"  # no connection could be made (refused, unresolvable, TLS)
    CONNECT_TIMEOUT = "connect_timeout"  # the transport's own connect timeout
    READ_TIMEOUT = "read_timeout"  # a transport's (or a recorded client's) own read timeout
    DECODE = "decode"  # the body's content coding could not be undone
    RESET = "reset"  # the connection was closed or reset by the other side
    CLIENT_LEFT = "client_left"  # the client closed the connection itself (a recorder sees this)


class Watchdog(str, enum.Enum):
    """The client's watchdogs (`proxycheck.core.exchange.watchdogs.Watchdogs`), by the phase each bounds."""

    HEADERS = "headers"  # from the send to the response headers
    FIRST_EVENT = "first_event"  # the stall watchdog, from the headers to the first content
    IDLE = "idle"  # the stall watchdog, between content events
    TOTAL = "total"  # the whole exchange


@dataclass(frozen=True, slots=True)
class Completed:
    """The response was read to its end."""


@dataclass(frozen=True, slots=True)
class TimedOut:
    """A watchdog of the client cut the exchange; `limit` is that watchdog's seconds, `source`
    what it stood for when it was the client's patience ("" for a plain watchdog)."""

    watchdog: Watchdog
    limit: float
    source: str = ""


@dataclass(frozen=True, slots=True)
class Waited:
    """The longest silence of an exchange that went past its watchdog and that the client's
    patience waited out: `seconds`, the `watchdog` it passed (its `limit`), the `patience` and
    what that comes from (`source`)."""

    seconds: float
    watchdog: Watchdog
    limit: float
    patience: float
    source: str = ""

    @property
    def where(self) -> str:
        return {Watchdog.HEADERS: "before the response headers", Watchdog.FIRST_EVENT: "before the first event"}.get(
            self.watchdog, "between events")


@dataclass(frozen=True, slots=True)
class Broken:
    """A transport error ended the exchange."""

    kind: ErrorKind
    text: str


@dataclass(frozen=True, slots=True)
class Unfinished:
    """Still in flight when the observer stopped (a recording); `interrupted` if the recorder was
    stopped, rather than the exchange never completing."""

    interrupted: bool


HowItEnded = Union[Completed, TimedOut, Broken, Unfinished]


@dataclass(frozen=True, slots=True)
class ExchangeFacts:
    """Everything the outcome rules read about one exchange.

    `analysis` is the parse of the response body received (None before headers; the client parses
    only a 2xx body); `error_body` the start of a non-2xx body (the client's, to quote);
    `content_type` None when not known (a recording's classification is not given its headers).
    Times are seconds on the analysis' clock: `ended_at` when the exchange ended, `quiet` how long
    it had gone without progress then. `connecting`: no connection yet when it ended.
    `response_headers` and `request_body`, when given, let the engine's report of the request it
    received be checked against what was sent (`request_mutated`)."""

    ending: HowItEnded
    viewpoint: Viewpoint = Viewpoint.CLIENT
    status: int | None = None
    content_type: str | None = None
    streamed: bool = True
    analysis: ResponseAnalysis | None = None
    error_body: bytes = b""
    ended_at: float | None = None
    quiet: float = 0.0
    connecting: bool = False
    connect_limit: float | None = None
    response_headers: Sequence[tuple[str, str]] | None = None
    request_body: bytes | None = None
    waited: Waited | None = None  # a silence past its watchdog the patience waited out


def terminator(dialect: str | None) -> str:
    """The name of a dialect's end-of-stream marker, for findings."""
    return _TERMINATORS.get(dialect or "", "terminal marker")


def decide(facts: ExchangeFacts) -> Ending:
    """The outcome of one exchange from its facts: every outcome rule, for both observers."""
    ending = facts.ending
    if isinstance(ending, Unfinished):
        judged = _unfinished(facts, ending)
    elif facts.status is None:
        judged = _before_headers(facts, ending)
    elif not 200 <= facts.status < 300:
        judged = _error_status(facts, ending)
    elif isinstance(ending, Completed):
        judged = _completed(facts)
    elif isinstance(ending, TimedOut):
        judged = _timed_out(facts, ending)
    else:
        judged = _broken(facts, ending)
    return _judge_request(facts, _patient(facts, judged))


def _patient(facts: ExchangeFacts, judged: Ending) -> Ending:
    """A complete answer after a silence past its watchdog: `slow`, never a stall (the client's
    patience waited it out); the silence, the watchdog and the patience quoted."""
    w = facts.waited
    if w is None or judged.outcome is not Outcome.OK or facts.viewpoint is not Viewpoint.CLIENT:
        return judged
    said = (f"silent {w.seconds:.1f} s {w.where}, past the {w.limit:g} s watchdog and within the client's "
            f"patience ({w.patience:g} s" + (f": {w.source}" if w.source else "") + "): a slow answer, not a stall")
    return Ending(Outcome.SLOW, f"{said}; {judged.detail}" if judged.detail else said, judged.error)


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
            left = f"the client closed the connection {_ms(waited)} after the finish reason ({reason}), before {end}"
            return Classified(Outcome.OK, left)
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
    """The outcome of one recorded exchange: its facts through `decide`.

    `analysis` is the parse of whatever response bytes were recorded (None before headers);
    `ended_at` is when the exchange ended (its error's time when it has one), on the clock of the
    analysis' times.
    """
    ending: HowItEnded
    if not finished:
        ending = Unfinished(interrupted)
    elif error is not None:
        ending = Broken(recorded_error_kind(error, got_headers=status is not None), error)
    else:
        ending = Completed()
    facts = ExchangeFacts(ending, Viewpoint.RECORDER, status=status, analysis=analysis, ended_at=ended_at)
    judged = decide(facts)
    return Classified(judged.outcome, judged.detail)


def recorded_error_kind(error: str, *, got_headers: bool) -> ErrorKind:
    """The kind of a recorded error, told by its words. A timeout first (whoever timed out was
    still waiting); "connect" words only before headers ("Client disconnected." holds one)."""
    low = error.lower()
    if any(w in low for w in _TIMEOUT_WORDS):
        return ErrorKind.READ_TIMEOUT
    if not got_headers and any(w in low for w in _CONNECT_WORDS):
        return ErrorKind.CONNECT
    if CLIENT_LEFT_WORDS in low:
        return ErrorKind.CLIENT_LEFT
    return ErrorKind.RESET


# ------------------------------------------------------------------------------------------------
# The rules, by how far the exchange got


def _unfinished(facts: ExchangeFacts, ending: Unfinished) -> Ending:
    analysis = facts.analysis
    why = "the recorder stopped while it was in flight" if ending.interrupted else "never completed"
    if analysis is not None and analysis.terminal_at is not None:
        why += f", held open after {terminator(analysis.dialect)} at {analysis.terminal_at:.2f} s"
    if facts.status is None:
        return Ending(Outcome.IN_FLIGHT, f"{why}; no response headers")
    return Ending(Outcome.IN_FLIGHT, f"{why}; {_progress(analysis)}")


def _before_headers(facts: ExchangeFacts, ending: HowItEnded) -> Ending:
    if isinstance(ending, Completed):
        return Ending(Outcome.RESET, "ended without a response")
    if isinstance(ending, TimedOut):
        # The headers watchdog counts from the send, so it can fire while still connecting.
        within = _within(ending)
        if facts.connecting:
            return Ending(Outcome.CONNECT_ERROR, f"no connection within {within}")
        return Ending(Outcome.STALL_BEFORE_HEADERS, f"no response headers within {within}")
    assert isinstance(ending, Broken)
    text, client = ending.text, facts.viewpoint is Viewpoint.CLIENT
    if ending.kind is ErrorKind.CONNECT:
        return Ending(Outcome.CONNECT_ERROR, text, text)
    if ending.kind is ErrorKind.CONNECT_TIMEOUT:
        limit = f"{facts.connect_limit:g} s" if facts.connect_limit is not None else "the connect timeout"
        return Ending(Outcome.CONNECT_ERROR, f"no connection within {limit}", text)
    if ending.kind is ErrorKind.READ_TIMEOUT:
        return Ending(Outcome.STALL_BEFORE_HEADERS, f"no response headers ({text})" if client else text, text)
    return Ending(Outcome.RESET, f"closed before response headers: {text}" if client else text, text)


def _error_status(facts: ExchangeFacts, ending: HowItEnded) -> Ending:
    """A non-2xx status: the status is the outcome, except for an error the recorder saw."""
    if isinstance(ending, Broken) and facts.viewpoint is Viewpoint.RECORDER:
        return _cut(facts, ending)
    # The client reads only the start of an error body: a break there only shortens the quote.
    return Ending(Outcome.HTTP_ERROR, _http_detail(facts))


def _completed(facts: ExchangeFacts) -> Ending:
    """A 2xx response read to its end."""
    analysis = facts.analysis
    ctype = facts.content_type
    not_sse = ctype is not None and "event-stream" not in ctype  # None: the headers are not known
    if facts.streamed and not_sse and analysis is not None and analysis.events == 0:
        got = ctype or "no content-type"
        return Ending(Outcome.MALFORMED_STREAM, f"expected text/event-stream, got {got} ({_kb(analysis.bytes)})")
    if analysis is None or analysis.result is None:
        return Ending(Outcome.OK, "not an LLM response")
    result = analysis.result
    if result.errors:
        err = result.errors[0]
        return Ending(Outcome.STREAM_ERROR, f"{err.type or 'error'}: {err.message}")
    if result.malformed and not result.terminal:
        first = result.malformed_details[0] if result.malformed_details else "unreadable event"
        return Ending(Outcome.MALFORMED_STREAM, f"{result.malformed} bad event(s): {first}")
    if analysis.incomplete_tail or not result.terminal:
        return Ending(Outcome.TRUNCATED, f"ended without a terminal marker; {_progress(analysis)}")
    return Ending(Outcome.OK)


def _timed_out(facts: ExchangeFacts, ending: TimedOut) -> Ending:
    """A 2xx stream a watchdog cut: held open after its answer, or stalled. The stall watchdog
    fires exactly its limit after the last progress; the total one, whenever."""
    by_total = ending.watchdog is Watchdog.TOTAL
    quiet = f"{facts.quiet:.1f}" if by_total else _secs(ending.limit)
    judged = _stalled(facts, quiet, "")
    if by_total:
        return Ending(judged.outcome, f"{judged.detail}; {_within(ending)} ended it")
    return Ending(judged.outcome, judged.detail + _patience_said(ending))


def _broken(facts: ExchangeFacts, ending: Broken) -> Ending:
    """A 2xx response a transport error ended."""
    if ending.kind is ErrorKind.DECODE:
        return Ending(Outcome.MALFORMED_STREAM, f"undecodable body: {ending.text}", ending.text)
    return _cut(facts, ending)


def _cut(facts: ExchangeFacts, ending: Broken) -> Ending:
    """A response cut after its headers: judged by what was received (the answer's end = ok)."""
    timed_out = ending.kind is ErrorKind.READ_TIMEOUT
    if timed_out:
        return _stalled(facts, f"{facts.quiet:.1f}", ending.text)
    ok_status = facts.status is not None and 200 <= facts.status < 300
    if ok_status:
        left = ending.kind is ErrorKind.CLIENT_LEFT
        answered = after_answer(facts.analysis, ended_at=facts.ended_at, client_left=left, timed_out=False)
        if answered is not None:
            return Ending(answered.outcome, answered.detail, ending.text)
    if facts.viewpoint is Viewpoint.RECORDER:
        return Ending(Outcome.RESET, f"{ending.text}; {_progress(facts.analysis)}", ending.text)
    analysis = _or_empty(facts)
    progress = f"{analysis.events} event(s), {analysis.content_events} with content, {_kb(analysis.bytes)}"
    return Ending(Outcome.RESET, f"connection closed mid-stream after {progress}: {ending.text}", ending.text)


def _stalled(facts: ExchangeFacts, quiet: str, error: str) -> Ending:
    """A stream the client (or a watchdog) gave up waiting on: held open after its answer, or
    stalled before or after its first content. `error`: the transport's timeout, if it was one."""
    analysis = facts.analysis
    ok_status = facts.status is not None and 200 <= facts.status < 300
    if ok_status:
        held = after_answer(analysis, ended_at=facts.ended_at, client_left=False, timed_out=True)
        if held is not None:
            return Ending(held.outcome, held.detail, error)
    content = analysis.content_events if analysis is not None else 0
    kind = Outcome.STALL_MID_STREAM if content else Outcome.STALL_BEFORE_FIRST_EVENT
    if facts.viewpoint is Viewpoint.RECORDER:
        return Ending(kind, f"{error}; {_progress(analysis)}", error)
    a = _or_empty(facts)
    received = f"{_kb(a.bytes)} received" + (f", {a.comments} comment(s)" if a.comments else "")
    if content:
        return Ending(kind, f"no content for {quiet} s after event {a.events} ({received})", error)
    return Ending(kind, f"headers came, then no content for {quiet} s ({a.events} event(s), {received})", error)


def _judge_request(facts: ExchangeFacts, judged: Ending) -> Ending:
    """request_mutated when the engine reports having received another request than was sent:
    one in which what the model sees differs (messages, system prompt, tools, sampling
    parameters, max tokens: `proxycheck.core.protocol.requestparts.judge`), with what changed in the
    detail. Other bytes of the same content (a gateway that re-serializes JSON, or adds
    `stream_options`) are no change; a changed model name alone (gateways map aliases) is a note
    added to the detail, not a failure. The reference engine reports what it received; other
    servers send no digest and are not judged; from an older reference engine, which sends only
    the raw digest, any other bytes count. request_mutated replaces what else happened after the
    headers, which is kept in the detail: the engine answered another request than the one
    sent, and that explains the rest."""
    headers, body = facts.response_headers, facts.request_body
    if headers is None or body is None:
        return judged
    seen = _engine_header(headers, SHA_HEADER)
    if seen is None:
        return judged
    verdict = judge_request(
        body, raw_sha256=seen, raw_bytes=_engine_header(headers, BYTES_HEADER),
        canonical=_engine_header(headers, CANONICAL_HEADER), parts=_engine_header(headers, PARTS_HEADER),
    )  # fmt: skip
    if not verdict.mutated:
        if verdict.note:
            noted = f"{judged.detail}; {verdict.note}" if judged.detail else verdict.note
            return Ending(judged.outcome, noted, judged.error)
        return judged
    detail = verdict.detail
    if judged.outcome is not Outcome.OK:
        then = judged.outcome.value
        detail += f" (then {then}: {judged.detail})" if judged.detail else f" (then {then})"
    return Ending(Outcome.REQUEST_MUTATED, detail, judged.error)


# Gateways that pass the upstream's response headers on under a prefix of their own (LiteLLM:
# `llm_provider-<name>`): the engine's report of what it received reaches the client that way.
_UPSTREAM_PREFIXES = ("llm_provider-",)


def _engine_header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    """One of the engine's headers, as sent or as a gateway passed it on."""
    value = header_value(headers, name)
    for prefix in _UPSTREAM_PREFIXES:
        if value is not None:
            break
        value = header_value(headers, prefix + name)
    return value


def header_value(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    """The first value of header `name` (lowercase), whatever the case it was sent in."""
    return next((v for k, v in headers if k.lower() == name), None)


# ------------------------------------------------------------------------------------------------
# Wording


def _http_detail(facts: ExchangeFacts) -> str:
    """`HTTP 413: <start of the body>`."""
    text = facts.error_body[:ERROR_BODY_READ].decode("utf-8", "replace")
    text = " ".join(text.split())[:ERROR_BODY_QUOTE]
    return f"HTTP {facts.status}: {text}" if text else f"HTTP {facts.status}"


def _within(ending: TimedOut) -> str:
    if ending.watchdog is Watchdog.TOTAL:
        return f"the total timeout of {ending.limit:g} s"
    return f"{ending.limit:g} s" + _patience_said(ending)


def _patience_said(ending: TimedOut) -> str:
    return f" (the client's patience: {ending.source})" if ending.source else ""


def _or_empty(facts: ExchangeFacts) -> ResponseAnalysis:
    return facts.analysis or ResponseAnalysis(dialect=None, result=None, streamed=facts.streamed)


def _waited(ended_at: float | None, since: float) -> float | None:
    return None if ended_at is None else max(ended_at - since, 0.0)


def _for(seconds: float | None) -> str:
    return "an unknown time" if seconds is None else f"{seconds:.1f} s"


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else "soon"


def _secs(s: float) -> str:
    return f"{s:.1f}" if round(s, 1) == s else f"{s:g}"


def _kb(n: int) -> str:
    return f"{n / 1000:.1f} KB" if n >= 1000 else f"{n} B"


def _progress(analysis: ResponseAnalysis | None) -> str:
    if analysis is None:
        return "no response bytes"
    return f"{analysis.events} event(s), {analysis.content_events} with content, {analysis.bytes} bytes"
