"""One exchange, as a sans-IO state machine: events in, what to wait for and the outcome out.

`ExchangeMachine` holds the live state of one request as its client observes it, and nothing
else: it reads no clock and touches no network. A driver (`proxycheck.io.observe`, one per client
stack) does the I/O and tells the machine what happened, each event with the time it happened on
one monotonic clock of the driver's choosing:

    RequestSent -> [ConnectStarted -> Connected] -> ResponseHeaders -> BodyData* -> StreamClosed

(`MessageData` for a body whose transport frames its events itself: a WebSocket turn's messages),

or, at any point, `WatchdogExpired` (which watchdog) or `TransportError` (what kind, as the
transport names it). After each event `handle` returns what to wait for next (`Wait`: which
watchdog fires, and when), or None once the exchange has ended; the machine may end it itself
(it has read enough of an error body to quote it). The watchdogs (`Watchdogs`, seconds):
`headers` from the send; `stall` from the headers to the first content (`Watchdog.FIRST_EVENT`)
and between content events (`Watchdog.IDLE`: keep-alive comments and pings are bytes, not
progress); `total` over the whole exchange, whichever is sooner. `connect` is the transport's.

With the client's patience (`Watchdogs.patience_*`), a silence is waited out to the patience
instead (`headers_limit`, `stall_limit`): the machine keeps the longest silence that went past
its watchdog (`waited`), and an exchange that then completes is a slow answer, not a stall
(`proxycheck.core.exchange.outcomes`, "patience"); one that reaches the patience is the stall,
its detail naming the patience and what it comes from.

While it runs, `analysis()` is what the response held so far (`proxycheck.core.protocol.analysis`);
once it ended, `ending` is the outcome, decided by `proxycheck.core.exchange.outcomes.decide` (the
rules a recorded exchange is judged by too), and `observation(...)` the `Observation` a run keeps,
given what only the driver knows about the connection.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Sequence, Union

from proxycheck.core.exchange.observation import Observation, ResultSummary, select_headers
from proxycheck.core.exchange.outcomes import (
    ERROR_BODY_READ,
    Broken,
    Completed,
    Ending,
    ErrorKind,
    ExchangeFacts,
    HowItEnded,
    TimedOut,
    Waited,
    Watchdog,
    decide,
    header_value,
)
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.protocol.analysis import ResponseAnalysis, StreamTracker, analyze_body
from proxycheck.core.protocol.result import Result

DEFAULT_WATCHDOGS = Watchdogs()

__all__ = [
    "DEFAULT_WATCHDOGS",
    "BodyData",
    "ConnectStarted",
    "Connected",
    "Ending",
    "ErrorKind",
    "ExchangeMachine",
    "MessageData",
    "ProtocolMisuse",
    "RequestSent",
    "ResponseHeaders",
    "StreamClosed",
    "TransportError",
    "Wait",
    "Watchdog",
    "WatchdogExpired",
]


# ------------------------------------------------------------------------------------------------
# Events in


@dataclass(frozen=True, slots=True)
class RequestSent:
    """The client began sending the request (the exchange's start; connecting is part of it)."""

    t: float


@dataclass(frozen=True, slots=True)
class ConnectStarted:
    """The request is opening a new connection (no event: it rides a pooled one)."""

    t: float


@dataclass(frozen=True, slots=True)
class Connected:
    """The new connection is up (TCP, and TLS if any)."""

    t: float


@dataclass(frozen=True, slots=True)
class ResponseHeaders:
    t: float
    status: int
    headers: Sequence[tuple[str, str]]
    http_version: str | None = None


@dataclass(frozen=True, slots=True)
class BodyData:
    """Bytes of the response body (content-decoded) that arrived at `t`."""

    t: float
    data: bytes


@dataclass(frozen=True, slots=True)
class MessageData:
    """One whole event of the response that its transport framed (a WebSocket message: text, of
    `size` bytes), that arrived at `t`: a stream's event without the SSE framing."""

    t: float
    data: str
    size: int


@dataclass(frozen=True, slots=True)
class WatchdogExpired:
    """The watchdog the last `Wait` named fired at `t`."""

    t: float
    watchdog: Watchdog


@dataclass(frozen=True, slots=True)
class TransportError:
    """The transport failed at `t`: `kind` as it names it, `text` its description."""

    t: float
    kind: ErrorKind
    text: str


@dataclass(frozen=True, slots=True)
class StreamClosed:
    """The response body ended (read to its end)."""

    t: float


Event = Union[
    RequestSent, ConnectStarted, Connected, ResponseHeaders, BodyData, MessageData, WatchdogExpired, TransportError,
    StreamClosed,
]


# ------------------------------------------------------------------------------------------------
# Out


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait for the next event until `at` (the events' clock); if none came, `watchdog` fired."""

    watchdog: Watchdog
    at: float


class ProtocolMisuse(RuntimeError):
    """An event the machine cannot take in its state (a bug in the driver, never the network's)."""


class _Phase(enum.Enum):
    NEW = "new"
    AWAITING_HEADERS = "awaiting headers"
    RECEIVING = "receiving"
    ENDED = "ended"


class ExchangeMachine:
    """The state of one exchange while it is observed (see the module docstring)."""

    def __init__(
        self,
        *,
        dialect: str | None,
        streamed: bool = True,
        watchdogs: Watchdogs = DEFAULT_WATCHDOGS,
        request_body: bytes = b"",
    ) -> None:
        self.dialect = dialect
        self.streamed = streamed
        self.watchdogs = watchdogs
        # Read on every event (`_next_wait`): found once.
        self._patient = watchdogs.patient
        self._stall = watchdogs.stall
        self._stall_patience = watchdogs.stall_limit
        self.request_body = request_body
        self._phase = _Phase.NEW
        self.start = 0.0
        self.connect_started: float | None = None
        self.connected: float | None = None
        self.headers_at: float | None = None
        self.status: int | None = None
        self.response_headers: tuple[tuple[str, str], ...] = ()
        self.http_version: str | None = None
        self.end: float | None = None
        self.ended_cleanly = False  # read to its end: the connection may be reused
        self._tracker = StreamTracker(dialect, log=True)
        self._reads = False  # `_reads_stream`, set with the status
        self._parts: list[bytes] = []  # the body, when it is read whole (non-streamed, or an error)
        self._part_bytes = 0
        self._last_progress = 0.0
        self._progressed = False  # content (progress) came after the headers
        self._wait: Wait | None = None
        self._ending: Ending | None = None
        self._analysis: ResponseAnalysis | None = None
        # The longest silence that went past its watchdog and ended within the patience:
        # (seconds, the watchdog it passed, that watchdog's seconds).
        self.waited: tuple[float, Watchdog, float] | None = None

    # -- events -----------------------------------------------------------------------------------

    def handle(self, event: Event) -> Wait | None:
        """Take one event; returns what to wait for next, or None once the exchange has ended."""
        if self._phase is _Phase.ENDED:
            raise ProtocolMisuse(f"{type(event).__name__} after the exchange ended")
        if isinstance(event, BodyData):  # first: the hot paths, one event per read or message
            self._expect(_Phase.RECEIVING, event)
            self._data(event)
        elif isinstance(event, MessageData):
            if self._phase is not _Phase.RECEIVING:
                self._expect(_Phase.RECEIVING, event)
            t = event.t
            if self._tracker.feed_event(event.data, event.size, round(t - self.start, 6)):  # `_offset`
                self._moved(t)
        elif isinstance(event, RequestSent):
            self._expect(_Phase.NEW, event)
            self.start = self._last_progress = event.t
            self._phase = _Phase.AWAITING_HEADERS
        elif isinstance(event, ConnectStarted):
            self._expect(_Phase.AWAITING_HEADERS, event)
            self.connect_started = event.t
        elif isinstance(event, Connected):
            self._expect(_Phase.AWAITING_HEADERS, event)
            self.connected = event.t
        elif isinstance(event, ResponseHeaders):
            self._expect(_Phase.AWAITING_HEADERS, event)
            self._headers(event)
        elif isinstance(event, StreamClosed):
            self._expect(_Phase.RECEIVING, event)
            if self._reads_stream:
                if self._tracker.close(self._offset(event.t)):
                    self._silence_ended(event.t, Watchdog.IDLE if self._progressed else Watchdog.FIRST_EVENT)
                    self._last_progress = event.t
            elif self.ok_status:  # a body read whole: its content came with its end
                self._silence_ended(event.t, Watchdog.FIRST_EVENT)
            self._finish(event.t, Completed(), cleanly=True)
        elif isinstance(event, WatchdogExpired):
            self._started(event)
            self._finish(event.t, TimedOut(event.watchdog, self._limit(event.watchdog), self._source(event.watchdog)))
        elif isinstance(event, TransportError):
            self._started(event)
            self._finish(event.t, Broken(event.kind, event.text))
        else:
            raise ProtocolMisuse(f"not an exchange event: {event!r}")
        self._wait = self._next_wait()
        return self._wait

    def _headers(self, event: ResponseHeaders) -> None:
        self._silence_ended(event.t, Watchdog.HEADERS)
        self.headers_at = self._last_progress = event.t
        self.status = event.status
        self._reads = self.streamed and self.ok_status
        self.response_headers = tuple(event.headers)
        self.http_version = event.http_version
        self._phase = _Phase.RECEIVING

    def _data(self, event: BodyData) -> None:
        if self._reads_stream:
            if self._tracker.feed(event.data, self._offset(event.t)):
                self._moved(event.t)
            return
        # Read whole: no content can arrive before the whole body, so the stall watchdog bounds
        # all of it (no progress to re-arm it).
        self._parts.append(event.data)
        self._part_bytes += len(event.data)
        if not self.ok_status and self._part_bytes >= ERROR_BODY_READ:
            # Enough of an error body to quote: the status is the outcome. Not read to its end,
            # so its connection is not reused.
            self._finish(event.t, Completed())

    def _moved(self, t: float) -> None:
        """Content progressed at `t` (a stream's event, or a message)."""
        if t - self._last_progress > self._stall:  # `_silence_ended`'s test, first: rarely true
            self._silence_ended(t, Watchdog.IDLE if self._progressed else Watchdog.FIRST_EVENT)
        self._last_progress = t
        self._progressed = True

    def _silence_ended(self, t: float, watchdog: Watchdog) -> None:
        """Progress came at `t`: keep the silence it ended if it went past its watchdog."""
        limit = self.watchdogs.headers if watchdog is Watchdog.HEADERS else self.watchdogs.stall
        silence = t - self._last_progress
        if silence > limit and (self.waited is None or silence > self.waited[0]):
            self.waited = (silence, watchdog, limit)

    def _expect(self, phase: _Phase, event: Event) -> None:
        if self._phase is not phase:
            raise ProtocolMisuse(f"{type(event).__name__} while {self._phase.value}")

    def _started(self, event: Event) -> None:
        if self._phase is _Phase.NEW:
            raise ProtocolMisuse(f"{type(event).__name__} before the request was sent")

    def _finish(self, t: float, how: HowItEnded, *, cleanly: bool = False) -> None:
        self.end = t
        self.ended_cleanly = cleanly
        self._phase = _Phase.ENDED
        self._ending = decide(self._facts(how))

    # -- out --------------------------------------------------------------------------------------

    @property
    def wait(self) -> Wait | None:
        """What the machine waits for (None: not started, or ended)."""
        return self._wait

    @property
    def ended(self) -> bool:
        return self._phase is _Phase.ENDED

    @property
    def answer_ended(self) -> bool:
        """The stream's answer is over: its terminal marker, or its finish reason, came (the body
        may still be open: a transport whose stream has no end of its own ends it there)."""
        return self._reads and self._tracker.answer_ended

    @property
    def ending(self) -> Ending | None:
        """The outcome, once the exchange ended."""
        return self._ending

    @property
    def ok_status(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def analysis(self) -> ResponseAnalysis:
        """What the response held so far; fixed once the exchange ended."""
        if self._analysis is not None:
            return self._analysis
        if self.streamed:
            analysis = self._tracker.analysis()
        else:
            # A non-streamed body's content all arrives at once, when the body is complete.
            t = self._offset(self.end) if self.ended_cleanly and self.end is not None else None
            analysis = analyze_body(self.dialect, b"".join(self._parts), t)
        if self.ended:
            self._analysis = analysis
        return analysis

    @property
    def result(self) -> Result | None:
        """The dialect's full result of a 2xx response (for a caller that continues the
        conversation with what the model said)."""
        return self.analysis().result if self.ok_status else None

    def observation(
        self,
        *,
        clock_origin: float | None,
        reused: bool | None,
        idle: float | None,
        connection: int | None,
    ) -> Observation:
        """The `Observation` of the ended exchange (run-level keys blank: see `Observation.with_keys`).
        `clock_origin` is the run's start on the events' clock (None: the exchange's own start);
        the connection facts are the driver's."""
        ending = self._ending
        if ending is None or self.end is None:
            raise ProtocolMisuse("the observation of an exchange that has not ended")
        a = self.analysis() if self.ok_status else None
        body = self.request_body
        return Observation(
            t_start=_r(self.start - (self.start if clock_origin is None else clock_origin)),
            connect=self._since_start(self.connected),
            headers=self._since_start(self.headers_at),
            first_event=_opt_r(a.first_event) if a else None,
            first_content=_opt_r(a.first_content) if a else None,
            end=self._since_start(self.end),
            events=tuple(self._tracker.log or ()),
            streamed=self.streamed,
            status=self.status,
            response_headers=select_headers(self.response_headers) if self.status is not None else (),
            request_bytes=len(body),
            request_sha256=hashlib.sha256(body).hexdigest(),
            response_bytes=a.bytes if a else self._part_bytes,
            result=ResultSummary.of(a.result) if a and a.result else None,
            reused=reused,
            idle=_opt_r(idle),
            http_version=self.http_version,
            connection=connection,
            outcome=ending.outcome,
            detail=ending.detail,
            error=ending.error,
            waited=_opt_r(self.waited[0]) if self.waited is not None else None,
        )

    # -- internals --------------------------------------------------------------------------------

    @property
    def _reads_stream(self) -> bool:
        """The body is framed as it comes (a 2xx stream) rather than read whole."""
        return self._reads

    def _facts(self, how: HowItEnded) -> ExchangeFacts:
        end = self.end if self.end is not None else self.start
        headers = self.response_headers if self.status is not None else None
        return ExchangeFacts(
            how,
            status=self.status,
            content_type=(header_value(headers, "content-type") or "") if headers is not None else None,
            streamed=self.streamed,
            analysis=self.analysis() if self.ok_status else None,
            error_body=b"".join(self._parts) if not self.ok_status else b"",
            ended_at=end - self.start,
            quiet=end - self._last_progress,
            connecting=self.connect_started is not None and self.connected is None,
            connect_limit=self.watchdogs.connect,
            response_headers=headers,
            request_body=self.request_body,
            waited=self._waited(),
        )

    def _waited(self) -> Waited | None:
        """The longest silence past a watchdog that the patience waited out, for the outcome."""
        if self.waited is None:
            return None
        silence, watchdog, limit = self.waited
        patience = self.watchdogs.headers_limit if watchdog is Watchdog.HEADERS else self.watchdogs.stall_limit
        return Waited(round(silence, 6), watchdog, limit, patience, self.watchdogs.patience_from)

    def _limit(self, watchdog: Watchdog) -> float:
        wd = self.watchdogs
        if watchdog is Watchdog.HEADERS:
            return wd.headers_limit
        if watchdog is Watchdog.TOTAL:
            return wd.total
        return self._stall_limit()

    def _stall_limit(self) -> float:
        """When a silence after the headers fails. Once the answer is over (its terminal marker or
        finish reason came), the wait is for the body's end, which a healthy hop and engine give
        at once: no client's patience is at stake, so the watchdog decides (`held_open`)."""
        if self._reads and self._tracker.answer_ended:
            return self._stall
        return self._stall_patience

    def _source(self, watchdog: Watchdog) -> str:
        """What a watchdog that fired stood for: the client's patience, or "" (a watchdog)."""
        wd = self.watchdogs
        if watchdog is Watchdog.HEADERS:
            return wd.patience_from if wd.headers_limit > wd.headers else ""
        if watchdog is Watchdog.TOTAL:
            return ""
        return wd.patience_from if self._stall_limit() > wd.stall else ""

    def _next_wait(self) -> Wait | None:
        phase = self._phase
        wd = self.watchdogs
        if phase is _Phase.RECEIVING:  # first: the hot path, after every read or message
            wait = Wait(Watchdog.IDLE if self._progressed else Watchdog.FIRST_EVENT,
                        self._last_progress + self._stall_limit())
        elif phase is _Phase.AWAITING_HEADERS:
            wait = Wait(Watchdog.HEADERS, self.start + wd.headers_limit)
        else:  # new, or ended
            return None
        total_at = self.start + wd.total if wd.total is not None else None
        if total_at is not None and self._patient and self._source(wait.watchdog):
            # A silence past its watchdog is waited out to the patience, whatever the total; a
            # stream that keeps progressing is still cut by it.
            short = wd.headers if wait.watchdog is Watchdog.HEADERS else wd.stall
            if total_at > self._last_progress + short:
                total_at = max(total_at, wait.at)
        if total_at is not None and total_at < wait.at:
            return Wait(Watchdog.TOTAL, total_at)
        return wait

    def _offset(self, t: float) -> float:
        return _r(t - self.start)

    def _since_start(self, t: float | None) -> float | None:
        return None if t is None else _r(t - self.start)


def _r(t: float) -> float:
    """Times are kept to the microsecond (what a run file stores)."""
    return round(t, 6)


def _opt_r(t: float | None) -> float | None:
    return None if t is None else _r(t)
