"""One response, read as the client saw it: SSE framing, the dialect's result, and when content came.

`StreamTracker` is incremental (chunks and their arrival times in; whether they moved the
response forward out, and a log of the events they completed): the replayer feeds it live, and `analyze_recorded` feeds it a recording's chunks. It
frames SSE on the reassembled byte stream (proxies re-chunk), so chunk boundaries never matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.result import Event, EventKind, Result
from proxycheck.core.protocol.sse import SSEComment, SSEEvent, SSEParser

_CONTENT, _TERMINAL, _ERROR = EventKind.CONTENT, EventKind.TERMINAL, EventKind.ERROR


@dataclass(frozen=True, slots=True)
class ResponseAnalysis:
    """What a response held and when (times as given to the tracker)."""

    dialect: str | None
    result: Result | None
    streamed: bool
    bytes: int = 0
    events: int = 0
    comments: int = 0
    content_events: int = 0
    first_byte: float | None = None
    first_event: float | None = None
    first_content: float | None = None
    last_content: float | None = None
    incomplete_tail: bool = False
    content_times: tuple[float, ...] = ()
    # When the answer was known to be complete: the dialect's terminal marker, and the first
    # finish reason (or the marker, whichever came first). What follows them decides whether an
    # early close is a client done reading or a stream held open (`proxycheck.core.exchange.outcomes`).
    terminal_at: float | None = None
    finish_at: float | None = None


class StreamTracker:
    """Feeds SSE chunks to the parser and the dialect, keeping the timing of content events and,
    when asked (`log`), every event's time, size and kind.

    `feed` and `close` say whether the chunk moved the response forward: a content, terminal or
    error event (without a dialect nothing is known to be content, so any event does). Comments,
    pings and other bookkeeping do not: that is what a stall watchdog must see. This is the
    replayer's per-event hot path, hence one loop with no per-event allocation beyond the log.
    """

    def __init__(self, dialect: str | None, *, log: bool = False) -> None:
        self.dialect = dialect
        self._parser = SSEParser()
        self._acc = dialects.accumulator(dialect) if dialect else None
        self._bytes = 0
        self._events = 0
        self._comments = 0
        self._first_byte: float | None = None
        self._first_event: float | None = None
        self._content_times: list[float] = []
        self._incomplete = False
        self._terminal_at: float | None = None
        self._finish_at: float | None = None
        self.log: list[Event] | None = [] if log else None

    def feed(self, chunk: bytes, time: float) -> bool:
        """Take a chunk that arrived at `time`; True if it completed an event that is progress."""
        if chunk and self._first_byte is None:
            self._first_byte = time
        self._bytes += len(chunk)
        return self._handle(self._parser.feed(chunk, time), time)

    def close(self, time: float) -> bool:
        """The stream ended at `time` (a last event without its blank line is reported incomplete)."""
        return self._handle(self._parser.close(time), time)

    def _handle(self, items: list[SSEEvent | SSEComment], time: float) -> bool:
        progress = False
        log = self.log
        acc = self._acc
        for item in items:
            if item.__class__ is SSEComment:
                self._comments += 1
                if log is not None:
                    log.append(Event(time, item.end - item.start, "comment"))
                continue
            if not item.complete:  # type: ignore[union-attr]
                self._incomplete = True
                # An event cut at EOF is evidence of truncation, not content to trust.
                kind = EventKind.MALFORMED
                progress |= acc is None
            else:
                kind, moved = self._complete(item.type, item.data, time)  # type: ignore[union-attr]
                progress |= moved
            if log is not None:
                log.append(Event(time, item.end - item.start, kind._value_))  # _value_: no enum property lookup
        return progress

    def feed_event(self, data: str, size: int, time: float) -> bool:
        """One whole event whose transport frames it (a WebSocket message: no SSE framing to
        undo), of `size` bytes, that arrived at `time`; True if it is progress. Its type is the
        one its JSON says (the dialects read it there)."""
        if self._first_byte is None:
            self._first_byte = time
        self._bytes += size
        kind, progress = self._complete("message", data, time)
        if self.log is not None:
            self.log.append(Event(time, size, kind._value_))
        return progress

    def _complete(self, event_type: str, data: str, time: float) -> tuple[EventKind, bool]:
        """A complete event: its kind, and whether it is progress."""
        self._events += 1
        if self._first_event is None:
            self._first_event = time
        acc = self._acc
        if acc is None:
            return EventKind.META, True
        kind = acc.feed(event_type, data)
        progress = False
        if kind is _CONTENT:
            self._content_times.append(time)
            progress = True
        elif kind is _TERMINAL or kind is _ERROR:
            progress = True
            if kind is _TERMINAL and self._terminal_at is None:
                self._terminal_at = time
        if self._finish_at is None and acc.finish_seen:
            self._finish_at = time
        return kind, progress

    @property
    def answer_ended(self) -> bool:
        """The answer is over: its terminal marker, or its finish reason, came."""
        return self._terminal_at is not None or self._finish_at is not None

    def analysis(self) -> ResponseAnalysis:
        times = self._content_times
        return ResponseAnalysis(
            dialect=self.dialect,
            result=self._acc.result() if self._acc else None,
            streamed=True,
            bytes=self._bytes,
            events=self._events,
            comments=self._comments,
            content_events=len(times),
            first_byte=self._first_byte,
            first_event=self._first_event,
            first_content=times[0] if times else None,
            last_content=times[-1] if times else None,
            incomplete_tail=self._incomplete,
            content_times=tuple(times),
            terminal_at=self._terminal_at,
            finish_at=self._finish_at,
        )


def analyze_stream(dialect: str | None, chunks: Iterable[tuple[float, bytes]], end: float | None) -> ResponseAnalysis:
    """Analyze a streamed response from its timed chunks; `end` is when the stream ended (None if
    it never did, in which case a trailing partial event is not reported)."""
    tracker = StreamTracker(dialect)
    last = 0.0
    for t, chunk in chunks:
        tracker.feed(chunk, t)
        last = t
    if end is not None:
        tracker.close(max(end, last))
    return tracker.analysis()


def analyze_body(dialect: str | None, body: bytes, time: float | None) -> ResponseAnalysis:
    """Analyze a non-streamed response body that arrived (complete) at `time`."""
    result = dialects.parse_body(dialect, body) if dialect else None
    content = 1 if result is not None and _has_content(result) else 0
    return ResponseAnalysis(
        dialect=dialect,
        result=result,
        streamed=False,
        bytes=len(body),
        events=0,
        content_events=content,
        first_byte=time if body else None,
        first_content=time if content else None,
        last_content=time if content else None,
        content_times=(time,) if content and time is not None else (),
        terminal_at=time if result is not None and result.terminal else None,
        finish_at=time if result is not None and result.terminal else None,
    )


def _has_content(result: Result) -> bool:
    return any(c.text or c.reasoning or c.tool_calls for c in result.choices)
