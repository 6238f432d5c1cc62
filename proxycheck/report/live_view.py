"""Terminal rendering with rich: `proxycheck record`'s live line while it records.

`live_line` is the one line the recorder shows about once a second: exchanges, in flight, failed
and bytes from the journal's counts (`proxycheck.io.recordings.JournalTail` has them), and the
session count (`proxycheck.io.recordings.SessionCount`, refreshed incrementally and at most every
few seconds, so it may lag a little behind the exchanges). Nothing here prints or reads a file:
the command puts the line on screen.
"""

from __future__ import annotations

from typing import Protocol

from rich.text import Text

from proxycheck.report.sessions_view import human_bytes


class JournalCounts(Protocol):
    """What the live line shows of the journal so far."""

    exchanges: int
    inflight: set[int]
    failed: int
    response_bytes: int


def live_line(tail: JournalCounts, sessions: int | None, address: str, elapsed: float) -> Text:
    """One line: `recording ADDR  sessions S  exchanges N (I in flight, F failed)  BYTES  TIME`."""
    text = Text()
    text.append("recording ", style="bold")
    text.append(f"{address}  sessions ")
    text.append("?" if sessions is None else str(sessions), style="bold")
    text.append("  exchanges ")
    text.append(str(tail.exchanges), style="bold")
    text.append(f" ({len(tail.inflight)} in flight", style="yellow" if tail.inflight else "dim")
    text.append(f", {tail.failed} failed)", style="red" if tail.failed else "dim")
    text.append(f"  {human_bytes(tail.response_bytes)}  {int(elapsed) // 60}m{int(elapsed) % 60:02d}s")
    return text
