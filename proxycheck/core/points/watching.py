"""Recordings still being written, watched: a stream that has gone further at one point than at
another for longer than the stall time, and an exchange that makes no progress.

A *snapshot* (`snapshot(points, wall_now, stall)`) is the points as their journals stand now. The
exchanges are matched across them as the trace matches them (`proxycheck.core.points.matching`,
from the outermost point inward, the order `proxycheck.core.points.trace.order_points` gives),
and at each point the exchange stands at its latest attempt (a hop's retry is what that point
passes on now).

* **Now on each point's clock.** The watcher's wall clock is taken as the clock of the point
  recorded on its own machine (`local`; else of the first point), and every other point's as that
  one's plus the offset estimated between them: now at point p is `wall_now + offset(p) -
  started_at(p)`, and never earlier than the last time p's journal holds (a clock ahead of ours
  cannot make an age negative).
* **How far an exchange got at a point** is compared in what a transparent hop passes on
  unchanged: the response headers, the stream's events (data events; comments and pings are no
  events), and its end. `lead(a, b)` is what `a` has that `b` lacks and since when, on a's clock:
  the headers (since a got them), events past b's count (since a's event number count(b)+1 came;
  where only content events have times, the content event of that number, which came no earlier:
  an age is never overstated), the end (since a ended), or the request itself (b never saw it).
* **Stuck** (`STUCK`): `a` has had a lead over `b` for at least the stall time while the exchange
  is in flight at b and b is recording. A point slower by less than the stall time never leads
  that long; an exchange that ended at b is over there, whatever a did. *Never seen* is a lead
  too, but only from the outermost point inward (an exchange seen only further in is a hop's own
  request or retry, or another client's), only while it is in flight at the outer point, only
  when the inner point was recording when the request came and still is, and only when the inner
  point sees the outer one's traffic: at least one exchange matched, and none that the outer point
  completed while the inner one recorded missing there (else it takes another path).
* **Stalled** (`STALLED`): an exchange in flight at a point that made no progress there for the
  stall time (no content event, or before a stream, no headers or bytes: keep-alive comments are
  not progress, as for the stall watchdog), while no other point has anything it lacks (then the
  stuck rule speaks). With one point this is the only finding; with several, a wedge inside the
  innermost point stalls every point at once.
* **Findings** (`Findings.update`): each condition is raised once per exchange and pair of points
  (`Lag.key`), and recovered once: a stuck exchange when the behind point has what the ahead one
  had when it was raised, or ended, or stopped recording (or, never seen, when it arrives or ends
  at the outer point); a stalled one when it progresses or ends. A finding once recovered is not
  raised again.

Pure: `PointLog`s and times in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from proxycheck.core.points.matching import Offset, PairMatch, PointLog, match
from proxycheck.core.points.seen import Seen
from proxycheck.core.points.trace import order_points

STUCK, STALLED, RECOVERED = "stuck", "stalled", "recovered"
# What the ahead point has that the behind one lacks.
LEAD_REQUEST, LEAD_HEADERS, LEAD_EVENTS, LEAD_END = "request", "headers", "events", "end"
KEEP = 60.0  # seconds an exchange over at every point stays in the snapshot (at least twice the stall time)
# How a finding recovered.
CAUGHT_UP, ARRIVED, PROGRESSING, ENDED, NOT_RECORDING, GONE = (
    "caught up", "arrived", "progressing", "ended", "stopped recording", "gone")  # fmt: skip


# --------------------------------------------------------------------------------------------
# One exchange at one point


def in_flight(s: Seen) -> bool:
    """Still running as far as its recording knows (not ended, not cut by the recorder's stop, not
    a recording that lost its end)."""
    return s.t_ended is None and not s.interrupted and s.known


def recording_now(p: PointLog) -> bool:
    return p.recorded_until is None


def last_event(s: Seen) -> float:
    """When `s` last moved forward at its point: a stream by its last content event (comments and
    pings are not progress), before its first one by its headers; a stream no dialect reads (events
    but no content events) and a body that is not a stream by its last byte; nothing: the request."""
    start = s.t_response if s.t_response is not None else s.t_request
    if s.streamed and s.content_times:
        return max(s.content_times[-1], start)
    if s.streamed and s.status is not None and s.events == 0:
        return start
    return s.last_progress


@dataclass(frozen=True, slots=True)
class Lead:
    kind: str  # LEAD_*
    since: float  # on the ahead point's clock


def lead(a: Seen, b: Seen | None) -> Lead | None:
    """What `a` has that `b` lacks, and since when (see the module docstring); None: nothing."""
    if b is None:
        return Lead(LEAD_REQUEST, a.t_request)
    found = []
    if a.status is not None and b.status is None:
        found.append(Lead(LEAD_HEADERS, a.t_response if a.t_response is not None else a.last_progress))
    if a.streamed and b.streamed and a.events > b.events:
        n = b.events  # a's event number n+1 came no later than its content event number n+1
        found.append(Lead(LEAD_EVENTS, a.content_times[n] if len(a.content_times) > n else a.last_progress))
    if a.t_ended is not None and b.t_ended is None and not b.interrupted:
        found.append(Lead(LEAD_END, a.t_ended))
    return min(found, key=lambda x: x.since) if found else None


def position_text(s: Seen | None) -> str:
    """Where an exchange stands at a point: "at event 40", "with no response", ..."""
    if s is None:
        return "never saw it"
    if s.status is None:
        return "with no response"
    if s.streamed:
        return f"at event {s.events}" if s.events else "at the response headers"
    return f"at {s.bytes} bytes"


def progress_text(s: Seen | None) -> str:
    """How far it got at a point, ended or not: "done, 812 events", "ended (reset), 40 events", "at event 40"."""
    if s is None:
        return "never saw it"
    if s.t_ended is None:
        return ("interrupted " if s.interrupted else "") + position_text(s)
    what = s.progress_text()
    return f"done, {what}" if s.complete else f"ended ({s.outcome.value}), {what}"


def progress_json(s: Seen | None, now: float | None) -> dict[str, Any]:
    if s is None:
        return {"seen": False, "text": "never saw it"}
    return {
        "seen": True, "exchange": s.xid, "text": progress_text(s), "status": s.status, "events": s.events,
        "content_events": s.content_events, "bytes": s.bytes, "ended": s.t_ended is not None, "complete": s.complete,
        "outcome": s.outcome.value, "last_event_age": None if now is None else round(max(0.0, now - last_event(s)), 3),
        **s.part_json(),
    }  # fmt: skip


# --------------------------------------------------------------------------------------------
# A snapshot


@dataclass(frozen=True, slots=True)
class Watched:
    """One exchange across the points (in the order given), as it stands now: its latest attempt
    at each point (None: not seen there), whether each point was recording when it was requested,
    and the age of its last event at each point (seconds on that point's clock)."""

    label: str
    turn: int
    seen: tuple[Seen | None, ...]
    covered: tuple[bool, ...]
    ages: tuple[float | None, ...]
    start: float  # its request on the watcher's clock (wall seconds), to order the exchanges
    title: str  # how a line names it (`Seen.name`: "s1 turn 2", "s1 WebSocket turn 3")

    @property
    def live(self) -> bool:
        return any(s is not None and in_flight(s) for s in self.seen)


@dataclass(frozen=True, slots=True)
class Lag:
    """A condition found in one snapshot: `ahead` led `behind` (STUCK; `ahead` None: STALLED at
    `behind`) for `age` seconds, since `since` (on the ahead point's clock, the behind one's for
    STALLED)."""

    kind: str
    label: str
    turn: int
    title: str  # how a line names it (`Seen.name`)
    ahead: str | None
    behind: str
    ahead_seen: Seen | None
    behind_seen: Seen | None
    lead: str | None
    since: float
    age: float
    behind_age: float | None = None  # how long the behind point has made no progress

    @property
    def key(self) -> tuple[Any, ...]:
        """Once per exchange and pair: the ahead point's exchange and the behind point (STALLED: the
        behind point's exchange); never seen and stuck are two conditions of one pair."""
        if self.kind == STALLED:
            assert self.behind_seen is not None
            return (STALLED, self.behind, self.behind_seen.ident)
        assert self.ahead_seen is not None
        return (STUCK, self.ahead, self.ahead_seen.ident, self.behind, self.behind_seen is None)


@dataclass(frozen=True)
class Snapshot:
    points: tuple[PointLog, ...]  # as given
    stall: float
    offsets: tuple[Offset, ...]  # each point's clock minus the outermost point's
    now: tuple[float, ...]  # now on each point's clock
    clock: int  # the point whose clock is the watcher's
    order: str  # how the outermost point was chosen: "chain", "timing", "as given"
    outermost: int
    exchanges: tuple[Watched, ...]
    lags: tuple[Lag, ...]
    _by_ident: tuple[dict[tuple[int, int], Seen], ...] = field(default=(), repr=False)
    _track_of: dict[tuple[int, tuple[int, int]], int] = field(default_factory=dict, repr=False)

    def index(self, name: str) -> int | None:
        return next((i for i, p in enumerate(self.points) if p.name == name), None)

    def seen_at(self, name: str, ident: tuple[int, int]) -> Seen | None:
        """What point `name` saw of exchange `ident` (`Seen.ident`) as it stands now."""
        i = self.index(name)
        return None if i is None else self._by_ident[i].get(ident)

    def watched_of(self, name: str, ident: tuple[int, int]) -> Watched | None:
        """The exchange, across the points, that point `name`'s exchange `ident` is part of."""
        i = self.index(name)
        k = None if i is None else self._track_of.get((i, ident))
        return None if k is None else self.exchanges[k]


def _ended(s: Seen) -> float:
    return s.t_ended if s.t_ended is not None else s.last_progress


def _latest(primary: Seen, resent: Sequence[Seen]) -> Seen:
    return max((primary, *resent), key=lambda s: (s.t_request, s.ident))


def _last_time(p: PointLog) -> float:
    """The latest time p's journal holds."""
    latest = 0.0
    for s in p.seen:
        latest = max(latest, s.last_progress, s.t_ended if s.t_ended is not None else 0.0)
    for _, end in p.covered:
        if end is not None:
            latest = max(latest, end)
    return latest


def _credible(m: PairMatch, outer: PointLog, inner: PointLog, shift: float) -> bool:
    """Whether a request missing at `inner` means it never got there: `inner` sees `outer`'s traffic
    (an exchange matched, and none that outer completed while inner recorded is missing there).
    `shift`: inner's clock minus outer's, in their own times."""
    if not m.pairs:
        return False
    for oi, s in enumerate(outer.seen):
        if oi not in m.pairs and s.complete and inner.recording_at(s.t_request + shift):
            return False
    return True


def snapshot(points: Sequence[PointLog], wall_now: float, stall: float, local: Sequence[bool] | None = None,
             previous: Snapshot | None = None) -> Snapshot:  # fmt: skip
    """The points as they stand at `wall_now` (the watcher's wall clock), and the conditions that
    have lasted `stall` seconds; `local[i]`: point i was recorded on the watcher's machine.
    `previous`: the snapshot before, whose outermost point stands once the timing has told it (the
    order of the points does not change while they record; ordering them costs a match)."""
    points = tuple(points)
    if not points:
        return Snapshot((), stall, (), (), 0, "as given", 0, (), ())
    by_name = {p.name: i for i, p in enumerate(points)}
    if previous is not None and previous.order in ("chain", "timing") and [p.name for p in previous.points] == list(by_name):
        ref, order = previous.outermost, previous.order
    else:
        ordered, order = order_points(points) if len(points) > 1 else (list(points), "as given")
        ref = by_name[ordered[0].name]
    outer = points[ref]
    matches: dict[int, PairMatch] = {j: match(outer, p) for j, p in enumerate(points) if j != ref}
    offsets = tuple(matches[j].offset if j != ref else Offset(0.0, 0.0, 0, "reference") for j in range(len(points)))
    clock = next((i for i, mine in enumerate(local or ()) if mine), 0)
    now = tuple(max(wall_now + offsets[j].seconds - offsets[clock].seconds - p.started_at, _last_time(p))
                for j, p in enumerate(points))  # fmt: skip
    # inner clock time = outer clock time + shift(j)
    shift = [outer.started_at + offsets[j].seconds - points[j].started_at for j in range(len(points))]

    raw: list[list[Seen | None]] = []
    claimed: list[set[int]] = [set() for _ in points]
    for oi, s in enumerate(outer.seen):
        row: list[Seen | None] = [None] * len(points)
        row[ref] = s
        claimed[ref].add(oi)
        for j, m in matches.items():
            ii = m.pairs.get(oi)
            more = m.resent.get(oi, ())
            if ii is not None:
                row[j] = _latest(points[j].seen[ii], [points[j].seen[k] for k in more])
                claimed[j].add(ii)
            claimed[j].update(more)
        raw.append(row)
    for j, p in enumerate(points):
        for ii, s in enumerate(p.seen):
            if ii not in claimed[j]:
                row = [None] * len(points)
                row[j] = s
                raw.append(row)

    credible = {j: _credible(m, outer, points[j], shift[j]) for j, m in matches.items()}
    exchanges: list[Watched] = []
    lags: list[Lag] = []
    keep = max(KEEP, 2 * stall)
    for row in raw:
        if all(s is None or (not in_flight(s) and now[j] - _ended(s) > keep) for j, s in enumerate(row)):
            continue  # long over everywhere: nothing can be behind in it, nor recover
        first = next(i for i, s in enumerate(row) if s is not None)
        name = row[ref] if row[ref] is not None else row[first]
        assert name is not None
        origin = row[first]
        assert origin is not None
        t_outer = origin.t_request - shift[first]  # on the outermost point's clock
        covered = tuple(s is not None or p.recording_at(t_outer + shift[j]) for j, (s, p) in enumerate(zip(row, points)))
        ages = tuple(None if s is None else max(0.0, now[j] - last_event(s)) for j, s in enumerate(row))
        start = outer.started_at + t_outer + offsets[clock].seconds
        exchanges.append(Watched(name.label, name.turn, tuple(row), covered, ages, start, name.name))
        lags += _lags(row, covered, points, now, stall, name, ref, credible)
    order_of = sorted(range(len(exchanges)), key=lambda k: exchanges[k].start)
    exchanges = [exchanges[k] for k in order_of]
    by_ident = tuple({s.ident: s for s in p.seen} for p in points)
    track_of: dict[tuple[int, tuple[int, int]], int] = {}
    for k, w in enumerate(exchanges):
        for i, s in enumerate(w.seen):
            if s is not None:
                track_of[(i, s.ident)] = k
    # A point's earlier attempts belong to the exchange their latest attempt stands for.
    for j, m in matches.items():
        for oi, more in m.resent.items():
            k = track_of.get((ref, outer.seen[oi].ident))
            ii = m.pairs.get(oi)
            for idx in (*more, *(() if ii is None else (ii,))):
                if k is not None:
                    track_of.setdefault((j, points[j].seen[idx].ident), k)
    return Snapshot(points, stall, offsets, now, clock, order, ref, tuple(exchanges), tuple(lags), by_ident, track_of)


def _lags(row: Sequence[Seen | None], covered: Sequence[bool], points: Sequence[PointLog], now: Sequence[float],
          stall: float, name: Seen, ref: int, credible: dict[int, bool]) -> list[Lag]:  # fmt: skip
    out: list[Lag] = []
    for j, b in enumerate(row):
        if b is not None and not (in_flight(b) and recording_now(points[j])):
            continue  # over at j (or no longer watched there): nothing can be stuck there
        if b is None and not (recording_now(points[j]) and covered[j]):
            continue
        behind_age = None if b is None else now[j] - last_event(b)
        led = False
        for i, a in enumerate(row):
            if i == j or a is None or not a.known:
                continue
            if b is None and not (i == ref and credible.get(j) and in_flight(a) and recording_now(points[i])):
                continue
            got = lead(a, b)
            if got is None:
                continue
            led = True
            age = now[i] - got.since
            if age >= stall:
                out.append(Lag(STUCK, name.label, name.turn, name.name, points[i].name, points[j].name, a, b, got.kind,
                               got.since, age, behind_age))  # fmt: skip
        if b is not None and not led and behind_age is not None and behind_age >= stall:
            out.append(Lag(STALLED, name.label, name.turn, name.name, None, points[j].name, None, b, None, last_event(b),
                           behind_age, behind_age))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------
# Findings


@dataclass(frozen=True, slots=True)
class Finding:
    """One line of `proxycheck watch`'s output: a condition raised (`event` STUCK or STALLED) or
    recovered (`event` RECOVERED, `kind` what it was, `how` why it is over)."""

    event: str
    kind: str
    wall: float
    label: str
    turn: int
    ahead: str | None
    behind: str
    ahead_progress: dict[str, Any] | None
    behind_progress: dict[str, Any]
    age: float
    line: str
    how: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "event": self.event, "wall": round(self.wall, 3), "session": self.label, "turn": self.turn,
            "ahead": self.ahead, "behind": self.behind, "ahead_progress": self.ahead_progress,
            "behind_progress": self.behind_progress, "age": round(self.age, 3), "line": self.line,
        }  # fmt: skip
        if self.event == RECOVERED:
            doc["finding"] = self.kind
            doc["how"] = self.how
        return doc


def _ago(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 1.5 else f"{seconds:.1f} s"


def _ahead_words(lag: Lag, now_ahead: float) -> str:
    """What the ahead point has: "engine-side done 12 s ago", "engine-side at event 68", ..."""
    a = lag.ahead_seen
    assert a is not None
    if lag.lead == LEAD_REQUEST:
        return f"{lag.ahead} saw the request {_ago(lag.age)} ago"
    if a.t_ended is not None:
        how = "done" if a.complete else f"ended ({a.outcome.value})"
        return f"{lag.ahead} {how} {_ago(max(0.0, now_ahead - a.t_ended))} ago"
    return f"{lag.ahead} {position_text(a)}"


def raised_line(lag: Lag, stall: float) -> str:
    """The finding's line: "s3 turn 7: engine-side done 12 s ago, client-side stuck at event 40";
    when the lead began before the ahead point's end (it passed the behind one earlier), for how
    long the behind point has been behind."""
    head = f"{lag.title}: "
    if lag.kind == STALLED:
        return head + f"{lag.behind}: no progress for {_ago(lag.age)}, {position_text(lag.behind_seen)}"
    b = lag.behind_seen
    if b is None:
        return head + f"{_ahead_words(lag, lag.since + lag.age)}, {lag.behind} never saw it"
    if lag.behind_age is not None and lag.behind_age >= stall:
        behind = f"{lag.behind} stuck {position_text(b)}"
    else:
        behind = f"{lag.behind} {position_text(b)}, last progress {_ago(max(0.0, lag.behind_age or 0.0))} ago"
    since = "" if lag.lead == LEAD_END else f" (behind for {_ago(lag.age)})"
    return head + f"{_ahead_words(lag, lag.since + lag.age)}, {behind}{since}"


class Findings:
    """What has been raised: `update(snapshot, wall)` says what the snapshot raises (each
    condition once) and which raised conditions it ends (see the module docstring)."""

    def __init__(self) -> None:
        self._active: dict[tuple[Any, ...], Lag] = {}
        self._done: set[tuple[Any, ...]] = set()
        self.raised = 0
        self.recovered = 0

    @property
    def active(self) -> list[Lag]:
        return list(self._active.values())

    def update(self, snap: Snapshot, wall: float) -> list[Finding]:
        out: list[Finding] = []
        for key, lag in list(self._active.items()):
            how, now_seen, age = _recovery(lag, snap)
            if how is None:
                continue
            del self._active[key]
            self._done.add(key)
            self.recovered += 1
            out.append(_recovered(lag, how, now_seen, age, snap, wall))
        for lag in snap.lags:
            key = lag.key
            if key in self._active or key in self._done:
                continue
            self._active[key] = lag
            self.raised += 1
            out.append(_raised(lag, snap, wall))
        return out


def _now_of(snap: Snapshot, name: str | None) -> float | None:
    i = None if name is None else snap.index(name)
    return None if i is None else snap.now[i]


def _raised(lag: Lag, snap: Snapshot, wall: float) -> Finding:
    ahead = None if lag.kind == STALLED else progress_json(lag.ahead_seen, _now_of(snap, lag.ahead))
    return Finding(lag.kind, lag.kind, wall, lag.label, lag.turn, lag.ahead, lag.behind, ahead,
                   progress_json(lag.behind_seen, _now_of(snap, lag.behind)), lag.age, raised_line(lag, snap.stall))  # fmt: skip


def _behind_now(lag: Lag, snap: Snapshot) -> Seen | None:
    """The behind point's attempt now: in the exchange the ahead point's one is part of, else by its number."""
    if lag.ahead_seen is not None and lag.ahead is not None:
        w = snap.watched_of(lag.ahead, lag.ahead_seen.ident)
        j = snap.index(lag.behind)
        if w is not None and j is not None and w.seen[j] is not None:
            return w.seen[j]
    if lag.behind_seen is not None:
        return snap.seen_at(lag.behind, lag.behind_seen.ident)
    return None


def _recovery(lag: Lag, snap: Snapshot) -> tuple[str | None, Seen | None, float]:
    """How a raised condition is over in this snapshot (None: it is not), the behind point's exchange
    now, and how long the condition lasted (seconds)."""
    j = snap.index(lag.behind)
    if j is None:
        return GONE, None, lag.age
    now_behind = snap.now[j]
    if lag.kind == STALLED:
        assert lag.behind_seen is not None
        s = snap.seen_at(lag.behind, lag.behind_seen.ident)
        if s is None:
            return GONE, None, lag.age
        moved = last_event(s)
        if moved > lag.since:
            return PROGRESSING, s, moved - lag.since
        if not in_flight(s):
            return ENDED, s, (s.t_ended if s.t_ended is not None else now_behind) - lag.since
        if not recording_now(snap.points[j]):
            return NOT_RECORDING, s, now_behind - lag.since
        return None, s, now_behind - lag.since
    assert lag.ahead is not None and lag.ahead_seen is not None
    now_ahead = _now_of(snap, lag.ahead)
    lasted = (now_ahead if now_ahead is not None else lag.since + lag.age) - lag.since
    b = _behind_now(lag, snap)
    if lag.behind_seen is None:  # never seen: until it arrives, or is over at the outer point
        a = snap.seen_at(lag.ahead, lag.ahead_seen.ident)
        if b is not None:
            return ARRIVED, b, lasted
        if a is None:
            return GONE, None, lasted
        if not in_flight(a):
            return ENDED, None, lasted
        if not recording_now(snap.points[j]):
            return NOT_RECORDING, None, lasted
        return None, None, lasted
    if b is None:
        return GONE, None, lasted
    if lead(lag.ahead_seen, b) is None:
        return CAUGHT_UP, b, lasted
    if not in_flight(b):
        return ENDED, b, lasted
    if not recording_now(snap.points[j]):
        return NOT_RECORDING, b, lasted
    return None, b, lasted


def _ended_words(s: Seen | None) -> str:
    if s is None:
        return "ended"
    return f"ended ({s.outcome.value}, {s.progress_text()})"


def _recovered(lag: Lag, how: str, now_seen: Seen | None, age: float, snap: Snapshot, wall: float) -> Finding:
    head = f"{lag.title}: "
    where = progress_text(now_seen)
    if lag.kind == STALLED:
        words = {PROGRESSING: f"progressing again after {_ago(age)} ({where})",
                 ENDED: f"{_ended_words(now_seen)} after {_ago(age)} without progress",
                 NOT_RECORDING: "stopped recording", GONE: "no longer in the recording"}[how]  # fmt: skip
        line = head + f"{lag.behind}: {words}"
    elif lag.behind_seen is None:
        words = {ARRIVED: f"{lag.behind} saw it after all, {_ago(age)} after {lag.ahead} ({where})",
                 ENDED: f"{lag.ahead} {_ended_words(snap.seen_at(lag.ahead, lag.ahead_seen.ident) if lag.ahead_seen else None)} "
                        f"after {_ago(age)}; {lag.behind} never saw it",
                 NOT_RECORDING: f"{lag.behind} stopped recording", GONE: f"no longer in {lag.ahead}'s recording"}[how]  # fmt: skip
        line = head + words
    else:
        words = {CAUGHT_UP: f"{lag.behind} caught up with {lag.ahead} after {_ago(age)} behind ({where})",
                 ENDED: f"{lag.behind} {_ended_words(now_seen)} after {_ago(age)} behind {lag.ahead}",
                 NOT_RECORDING: f"{lag.behind} stopped recording", GONE: f"no longer in {lag.behind}'s recording"}[how]  # fmt: skip
        line = head + words
    ahead = None if lag.kind == STALLED else progress_json(snap.seen_at(lag.ahead, lag.ahead_seen.ident) if lag.ahead and lag.ahead_seen else None,
                                                          _now_of(snap, lag.ahead))  # fmt: skip
    return Finding(RECOVERED, lag.kind, wall, lag.label, lag.turn, lag.ahead, lag.behind, ahead,
                   progress_json(now_seen, _now_of(snap, lag.behind)), age, line, how)  # fmt: skip
