"""Terminal rendering with rich: `proxycheck watch`'s live view and its finding lines.

`watch_view` is what the watch shows about once a second (transient, on stderr, like `proxycheck
record`'s live line): a header (points, stall time, time watched, findings so far), the points
(each recording's point, its clock against the others', or what it is waiting for), and the
exchanges in flight with what each point has of them and the age of its last event there, the
ones behind or stalled marked. `finding_text` is the line that stays for each finding. Nothing
here prints or reads a file: the command puts them on screen.
"""

from __future__ import annotations

import datetime as _dt
from typing import Protocol, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from proxycheck.core.points.watching import RECOVERED, STALLED, Finding, Lag, Snapshot, Watched, in_flight, progress_text

MAX_ROWS = 20  # exchanges listed; the rest are counted


class Followed(Protocol):
    """What the view shows of one REC_DIR being followed."""

    directory: str
    name: str
    state: str

    @property
    def following(self) -> bool: ...

    @property
    def exchanges(self) -> int: ...

    @property
    def in_flight(self) -> int: ...


def finding_text(f: Finding) -> Text:
    """`HH:MM:SS stuck     s3 turn 7: ...`, coloured by what it is."""
    text = Text()
    text.append(_dt.datetime.fromtimestamp(f.wall).strftime("%H:%M:%S") + " ", style="dim")
    style = "green" if f.event == RECOVERED else ("yellow" if f.event == STALLED else "bold red")
    text.append(f"{f.event:<9} ", style=style)
    text.append(f.line)
    return text


def _clock(snap: Snapshot, i: int) -> str:
    if i == snap.clock:
        return "the watcher's"
    off = snap.offsets[i].seconds - snap.offsets[snap.clock].seconds
    o = snap.offsets[i if i != snap.outermost else snap.clock]
    how = f"{o.anchors} anchors" if o.anchors else o.source
    return f"{off:+.3f} s ({how})"


def watch_view(snap: Snapshot | None, recordings: Sequence[Followed], active: Sequence[Lag], raised: int,
               recovered: int, elapsed: float, stall: float) -> RenderableType:  # fmt: skip
    head = Text()
    head.append("watching ", style="bold")
    head.append(f"{len(recordings)} recording(s)  stall {stall:g} s  {int(elapsed) // 60}m{int(elapsed) % 60:02d}s  findings ")
    head.append(str(raised), style="bold red" if active else "bold")
    head.append(f" ({len(active)} open, {recovered} recovered)", style="dim")
    parts: list[RenderableType] = [head, _points_table(snap, recordings)]
    if snap is not None and snap.points:
        parts.append(_exchanges_table(snap, active))
    return Group(*parts)


def _points_table(snap: Snapshot | None, recordings: Sequence[Followed]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in ("point", "recording", "exchanges", "in flight", "clock"):
        table.add_column(column, justify="right" if column in ("exchanges", "in flight") else "left")
    by_dir = {p.directory: i for i, p in enumerate(snap.points)} if snap is not None else {}
    for r in recordings:
        if not r.following:
            table.add_row(Text(r.name, style="dim"), r.directory, "", "",
                          Text(f"waiting: {r.state} (the recorder has not started)", style="yellow"))  # fmt: skip
            continue
        i = by_dir.get(r.directory)
        name = snap.points[i].name if snap is not None and i is not None else r.name
        clock = _clock(snap, i) if snap is not None and i is not None else ""
        table.add_row(name, r.directory, str(r.exchanges), Text(str(r.in_flight), style="yellow" if r.in_flight else "dim"), clock)
    return table


def _marks(snap: Snapshot, active: Sequence[Lag]) -> dict[tuple[int, str], str]:
    """(exchange index, point) -> how the point is marked there: "behind" or "stalled"."""
    index = {id(w): k for k, w in enumerate(snap.exchanges)}
    marks: dict[tuple[int, str], str] = {}
    for lag in active:
        w = None
        if lag.ahead is not None and lag.ahead_seen is not None:
            w = snap.watched_of(lag.ahead, lag.ahead_seen.ident)
        if w is None and lag.behind_seen is not None:
            w = snap.watched_of(lag.behind, lag.behind_seen.ident)
        if w is not None:
            marks[(index[id(w)], lag.behind)] = "stalled" if lag.kind == STALLED else "behind"
    return marks


def _cell(w: Watched, i: int, mark: str | None) -> Text:
    s = w.seen[i]
    if s is None:
        return Text("never saw it" if w.covered[i] else "not recording", style="red" if mark else "dim")
    age = w.ages[i]
    words = progress_text(s) + (f", {age:.0f} s ago" if age is not None and in_flight(s) else "")
    style = "bold red" if mark == "behind" else "yellow" if mark == "stalled" else ("" if in_flight(s) else "dim")
    return Text(words + (f"  {mark.upper()}" if mark else ""), style=style)


def _exchanges_table(snap: Snapshot, active: Sequence[Lag]) -> RenderableType:
    marks = _marks(snap, active)
    rows = [k for k, w in enumerate(snap.exchanges) if w.live or any((k, p.name) in marks for p in snap.points)]
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("in flight")
    for p in snap.points:
        table.add_column(p.name)
    if not rows:
        return Text("no exchange in flight", style="dim")
    # The marked ones first (what the findings are about), then the newest.
    rows.sort(key=lambda k: (not any((k, p.name) in marks for p in snap.points), -snap.exchanges[k].start))
    for k in rows[:MAX_ROWS]:
        w = snap.exchanges[k]
        table.add_row(w.title, *(_cell(w, i, marks.get((k, p.name))) for i, p in enumerate(snap.points)))
    if len(rows) > MAX_ROWS:
        return Group(table, Text(f"... and {len(rows) - MAX_ROWS} more in flight", style="dim"))
    return table
