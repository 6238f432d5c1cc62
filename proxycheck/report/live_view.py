"""Terminal rendering with rich: `proxycheck record`'s live line while it records.

`live_line` is the one line the recorder shows about once a second: exchanges, in flight, failed
and bytes from the journal's counts (`proxycheck.io.recordings.JournalTail`), and the session
count from a `SessionCount`. The count follows the journal incrementally
(`proxycheck.io.recordings.LiveSessions`: only the exchanges new records changed are analysed),
and is refreshed at most every SESSIONS_EVERY seconds, less often when it gets slow, so it may
lag a little behind the exchanges. Nothing here prints: the command puts the line on screen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rich.text import Text

from proxycheck.core.errors import ProxycheckError
from proxycheck.io.recordings import JournalTail, LiveSessions
from proxycheck.report.sessions_view import human_bytes

SESSIONS_EVERY = 2.0  # at least this many seconds between session counts
COUNT_SHARE = 20  # the count may take at most 1/COUNT_SHARE of the time (5%)


@dataclass
class SessionCount:
    """The number of sessions of the recording in `directory`: `add` hands it the journal's new
    records, `maybe_update` recounts when the journal has grown, at most every SESSIONS_EVERY
    seconds (rarer when counting gets slow: at most 5% of the time)."""

    directory: Path
    sessions: int | None = None
    live: LiveSessions | None = field(default=None, repr=False)
    _next: float = 0.0
    _seen: int = -1

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = LiveSessions(self.directory)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        assert self.live is not None
        self.live.add(records)

    def maybe_update(self, now: float, journal_size: int) -> None:
        assert self.live is not None
        if now < self._next or journal_size == self._seen:
            return
        started = time.monotonic()
        try:
            count = self.live.session_count()
            if count is not None:
                self.sessions, self._seen = count, journal_size
        except ProxycheckError:
            pass  # a half-written recording: try again later
        cost = time.monotonic() - started
        self._next = now + max(SESSIONS_EVERY, COUNT_SHARE * cost)


def live_line(tail: JournalTail, counter: SessionCount, address: str, elapsed: float) -> Text:
    """One line: `recording ADDR  sessions S  exchanges N (I in flight, F failed)  BYTES  TIME`."""
    text = Text()
    text.append("recording ", style="bold")
    text.append(f"{address}  sessions ")
    text.append("?" if counter.sessions is None else str(counter.sessions), style="bold")
    text.append("  exchanges ")
    text.append(str(tail.exchanges), style="bold")
    text.append(f" ({len(tail.inflight)} in flight", style="yellow" if tail.inflight else "dim")
    text.append(f", {tail.failed} failed)", style="red" if tail.failed else "dim")
    text.append(f"  {human_bytes(tail.response_bytes)}  {int(elapsed) // 60}m{int(elapsed) % 60:02d}s")
    return text
