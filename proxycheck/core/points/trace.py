"""Where each exchange was last seen progressing, over every point, and the trace's verdict.

`trace(points, positions)` orders the points from the client inward, follows every exchange of
the outermost point inward (`Track`), says for each pair of neighbouring points how many
exchanges diverged between them and how (`PairStats`), and decides:

* **Order.** The chain file's placement when it places every point; else the timing: a point
  further out sees every exchange take longer (a request reaches it first and its answer last),
  whatever its clock, so the points are ordered by their median request-to-response time against
  the first one given, when each step is at least `ORDER_MIN` apart; else the order given.
* **Where a failure was lost.** A failed exchange is followed inward from the outermost point
  that saw it. At the next point inward it either did not arrive (while that point was recording,
  and every exchange that point's outer neighbour completed arrived there too: otherwise a missing
  exchange says nothing), or arrived and completed there (the answer was lost between the two
  points: `lost`), or ended there because the hop in front of that point hung up on it while
  no client hung up outside (the hop gave up on it, a read timeout say, and cut both sides:
  `lost`), or failed there too (follow it further in). Failing at the innermost point,
  it failed inside it (`inside`). Anything that leaves the question open (a point not recording
  then, a point that could not record it to the end, an exchange still in flight within `FRESH`
  of its recording's end) makes it `unknown`, never a guess.
* **The verdict** (the words and exit statuses of `check`): no failed exchange: `healthy` (what
  diverged without failing, buffering or added latency, is reported); failures lost between two
  points: `proxy` for that segment, naming its hops when the chain file places both points;
  failures inside the innermost point: `server` when the chain file places it in front of the
  engine, otherwise `inconclusive` (the server, or a hop inside that point). Failures found in
  several places: the place with the most exchanges decides and the others are listed; failures
  of which no place is known: `inconclusive`; a point that could not record some of the
  exchanges it needed: said beside the verdict.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Any, Callable, Sequence

from proxycheck.core.diagnose.differ import BUFFER_MIN_BURST, BUFFER_MIN_EVENTS, BUFFER_RATIO, BURST_WINDOW
from proxycheck.core.diagnose.verdict import ENGINE, HEALTHY, INCONCLUSIVE, NOT_REPRODUCED, PROXY, SERVER, SeenWhileRecording, Verdict
from proxycheck.core.exchange.outcomes import CLIENT_LEFT_WORDS, Outcome
from proxycheck.core.points.matching import Offset, PairMatch, PointLog, match
from proxycheck.core.points.seen import SOCKET_END, Seen

SCHEMA = "proxycheck.trace/1"
ORDER_MIN = 0.0005  # seconds of median duration between two points for the timing to order them
FRESH = 2.0  # an exchange in flight this close to its recording's end may simply not be over yet
QUIET = 1.0  # seconds of silence before an exchange ended that make its end a stall, not a cut
ADDED_LATENCY = 1.0  # seconds of time to first content a segment adds before it counts as diverging

LOST, INSIDE, UNKNOWN, FINE = "lost", "inside", "unknown", "fine"
HopsBetween = Callable[[int, int], tuple[str, ...]]  # the hops between two positions of the chain
_STALLS = (Outcome.STALL_BEFORE_HEADERS, Outcome.STALL_BEFORE_FIRST_EVENT, Outcome.STALL_MID_STREAM, Outcome.IN_FLIGHT)
_CUTS = (Outcome.RESET, Outcome.TRUNCATED, Outcome.MALFORMED_STREAM, Outcome.CONNECT_ERROR, Outcome.STREAM_ERROR)


@dataclass(frozen=True, slots=True)
class Locus:
    """Where one exchange's failure happened: `lost` between points `outer` and `inner` (indexes
    into the trace's ordered points), `inside` the point `outer` (the innermost that saw it),
    `unknown` (`why` says what is missing), or `fine` (it did not fail)."""

    kind: str
    outer: int | None = None
    inner: int | None = None
    why: str = ""


@dataclass(frozen=True, slots=True)
class Track:
    """One exchange followed inward: what each point (in order) saw of it, None where it was not
    seen; `resent` what a point saw of it besides (a hop sending it again)."""

    seen: tuple[Seen | None, ...]
    resent: tuple[tuple[Seen, ...], ...]
    covered: tuple[bool, ...]
    locus: Locus
    line: str = ""

    @property
    def outermost(self) -> int:
        return next(i for i, s in enumerate(self.seen) if s is not None)

    @property
    def name(self) -> Seen:
        return self.seen[self.outermost]  # type: ignore[return-value]


@dataclass
class PairStats:
    """What diverged between two neighbouring points (`outer` is the client's side)."""

    outer: str
    inner: str
    offset: Offset
    both: int = 0  # exchanges seen at both
    outer_only: int = 0  # seen outside, not inside, while the inner point recorded
    inner_only: int = 0  # seen inside, not outside (other clients, a hop's own requests)
    resent: int = 0  # sent again by a hop between them
    diverged: Counter[str] = field(default_factory=Counter)  # how: lost, cut, stalled, held_open, status, ...
    added_ttft: list[float] = field(default_factory=list)  # outer TTFT - inner TTFT, per exchange
    reserialized: int = 0  # the same JSON, other bytes
    changed: int = 0  # the same model view, other JSON (members the model never sees, a model alias)

    @property
    def credible_absence(self) -> bool:
        """Whether an exchange missing at the inner point means it never got there: every exchange
        the outer point completed and the inner one could have seen, it did see."""
        return self.diverged["unmatched_complete"] == 0

    def to_json(self) -> dict[str, Any]:
        diverged = {k: v for k, v in sorted(self.diverged.items()) if k != "unmatched_complete" and v}
        return {
            "outer": self.outer, "inner": self.inner, "offset": self.offset.to_json(), "both": self.both,
            "outer_only": self.outer_only, "inner_only": self.inner_only, "resent": self.resent,
            "diverged": diverged, "diverged_total": sum(diverged.values()),
            "unmatched_complete": self.diverged["unmatched_complete"],
            "added_ttft_median": round(median(self.added_ttft), 6) if self.added_ttft else None,
            "reserialized": self.reserialized, "changed": self.changed,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Segment:
    outer: str | None  # None: inside the innermost point (`inner` names it)
    inner: str
    hops: tuple[str, ...] | None  # None: the chain file does not place both points

    def to_json(self) -> dict[str, Any]:
        return {"outer": self.outer, "inner": self.inner, "hops": list(self.hops) if self.hops is not None else None}

    def text(self) -> str:
        hops = f" (hops {', '.join(self.hops)})" if self.hops else ""
        if self.outer is None:
            return f"inside {self.inner}{hops}"
        return f"between {self.inner} and {self.outer}{hops}"


@dataclass(frozen=True, slots=True)
class Trace:
    points: tuple[PointLog, ...]  # from the client inward
    order: str  # "chain", "timing" or "as given"
    offsets: tuple[Offset, ...]  # each point's clock against the outermost's
    pairs: tuple[PairStats, ...]
    tracks: tuple[Track, ...]
    verdict: str
    culprit: str | None
    summary: str
    segment: Segment | None = None
    places: tuple[tuple[Segment, int], ...] = ()  # every place failures happened, with their count
    notes: tuple[str, ...] = ()

    @property
    def failed(self) -> list[Track]:
        return [t for t in self.tracks if t.locus.kind != FINE]

    @property
    def fails(self) -> bool:
        return self.verdict != HEALTHY

    def to_json(self) -> dict[str, Any]:
        names = [p.name for p in self.points]
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "culprit": self.culprit,
            "summary": self.summary,
            "segment": self.segment.to_json() if self.segment else None,
            "places": [{**s.to_json(), "exchanges": n} for s, n in self.places],
            "order": self.order,
            "points": [
                {"name": p.name, "directory": p.directory, "host": p.host, "position": p.position,
                 "started_at": p.started_at, "offset": o.to_json(), "exchanges": len(p.seen)}
                for p, o in zip(self.points, self.offsets)
            ],  # fmt: skip
            "pairs": [s.to_json() for s in self.pairs],
            "exchanges": [_track_json(t, names) for t in self.tracks],
            "notes": list(self.notes),
        }


def _seen_json(s: Seen, resent: Sequence[Seen]) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "exchange": s.xid, "session": s.label, "turn": s.turn, "method": s.method, "path": s.path,
        "t_request": round(s.t_request, 6), "t_response": _r(s.t_response), "t_ended": _r(s.t_ended),
        "last_progress": round(s.last_progress, 6), "status": s.status, "streamed": s.streamed, "events": s.events,
        "content_events": s.content_events, "bytes": s.bytes, "terminal": s.terminal, "complete": s.complete,
        "outcome": s.outcome.value, "detail": s.detail, "ttft": _r(s.ttft),
        "request": {"view": s.key.view, "canonical": s.key.canonical, "sha256": s.key.raw}, **s.part_json(),
    }  # fmt: skip
    if resent:
        doc["resent"] = [{"exchange": r.xid, "outcome": r.outcome.value, "complete": r.complete} for r in resent]
    return doc


def _track_json(t: Track, names: list[str]) -> dict[str, Any]:
    name = t.name
    locus: dict[str, Any] = {"kind": t.locus.kind}
    if t.locus.outer is not None:
        locus["outer" if t.locus.kind == LOST else "point"] = names[t.locus.outer]
    if t.locus.inner is not None:
        locus["inner"] = names[t.locus.inner]
    if t.locus.why:
        locus["why"] = t.locus.why
    return {
        "session": name.label, "turn": name.turn, **name.part_json(), "first_seen_at": names[t.outermost], "locus": locus,
        "line": t.line,
        "points": {names[i]: _seen_json(s, t.resent[i]) for i, s in enumerate(t.seen) if s is not None},
        "not_recording": [names[i] for i, (s, c) in enumerate(zip(t.seen, t.covered)) if s is None and not c],
    }  # fmt: skip


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


# --------------------------------------------------------------------------------------------
# Order


def _duration(s: Seen) -> float | None:
    end = s.t_response if s.t_response is not None else s.t_ended
    return None if end is None else end - s.t_request


def order_points(points: Sequence[PointLog]) -> tuple[list[PointLog], str]:
    """The points from the client inward, and what decided it (see the module docstring)."""
    if len(points) > 1 and all(p.position is not None for p in points):
        return sorted(points, key=lambda p: p.position), "chain"  # type: ignore[arg-type, return-value]
    reference = points[0]
    relative = [0.0]
    for other in points[1:]:
        m = match(reference, other)
        diffs = [d for oi, ii in m.pairs.items()
                 if (d := _difference(reference.seen[oi], other.seen[ii])) is not None]  # fmt: skip
        if not diffs:
            return list(points), "as given"
        relative.append(median(diffs))
    ranked = sorted(range(len(points)), key=lambda i: -relative[i])
    steps = [relative[a] - relative[b] for a, b in zip(ranked, ranked[1:])]
    if all(step >= ORDER_MIN for step in steps):
        return [points[i] for i in ranked], "timing"
    return list(points), "as given"


def _difference(reference: Seen, other: Seen) -> float | None:
    a, b = _duration(reference), _duration(other)
    return None if a is None or b is None else b - a


# --------------------------------------------------------------------------------------------
# Tracks


def _to_clock(t: float, src: PointLog, dst: PointLog, src_offset: Offset, dst_offset: Offset) -> float:
    """A time on `src`'s clock on `dst`'s (offsets against the same reference point)."""
    wall = src.started_at + t + (dst_offset.seconds - src_offset.seconds)
    return wall - dst.started_at


def _best(primary: Seen, resent: Sequence[Seen]) -> Seen:
    """What a point saw of an exchange at its furthest: of a hop's attempts, the one that went
    furthest (a retry that completed is what that point passed on)."""
    return max((primary, *resent), key=lambda s: (s.complete, s.stage, s.content_events, s.bytes))


def _fresh(s: Seen, point: PointLog) -> bool:
    """In flight when its recording ended, or ending up to FRESH before: it may just not be over."""
    end = point.recorded_until
    return s.t_ended is None and (end is None or end - s.last_progress < FRESH)


def _locate(track_seen: Sequence[Seen | None], resent: Sequence[Sequence[Seen]], covered: Sequence[bool],
            pairs: Sequence[PairStats], points: Sequence[PointLog]) -> Locus:  # fmt: skip
    """Where a track's failure happened (see the module docstring)."""
    first = next(i for i, s in enumerate(track_seen) if s is not None)
    here = track_seen[first]
    assert here is not None
    if not here.known:
        return Locus(UNKNOWN, first, why=f"{points[first].name} could not record it to the end")
    if not here.failed:
        return Locus(FINE)
    if _fresh(here, points[first]):
        return Locus(UNKNOWN, first, why=f"still in flight at {points[first].name} when its recording ended")
    i = first
    while i + 1 < len(track_seen):
        inner, point = track_seen[i + 1], points[i + 1]
        if inner is None:
            if not covered[i + 1]:
                return Locus(UNKNOWN, i, why=f"{point.name} was not recording then")
            if not pairs[i].credible_absence:
                return Locus(UNKNOWN, i, why=f"not found at {point.name}, which misses exchanges "
                                            f"{points[i].name} completed too (another path or API?)")  # fmt: skip
            return Locus(LOST, i, i + 1)
        best = _best(inner, resent[i + 1])
        if not best.known:
            return Locus(UNKNOWN, i, why=f"{point.name} could not record it to the end")
        if best.complete:
            return Locus(LOST, i, i + 1)
        if best.failed and _left_by_its_client(best) and not _left_by_its_client(track_seen[i]):  # type: ignore[arg-type]
            return Locus(LOST, i, i + 1)  # a hop between gave up on it and cut the outer side
        if not best.failed:
            return Locus(UNKNOWN, i, why=f"{point.name} saw it neither fail nor complete")
        i += 1
    return Locus(INSIDE, i)


def _left_by_its_client(s: Seen) -> bool:
    """Whether the exchange ended because the client side of that point hung up: at an inner
    point, the hop in front of it gave up on the exchange (its read timeout, say). When the point
    outside saw no client of its own leave, that hop cut the exchange: it failed between them,
    whatever the inner point would have got had it waited."""
    return s.client_ended or (s.error is not None and CLIENT_LEFT_WORDS in s.error.lower())


def _line(track: Track, points: Sequence[PointLog]) -> str:
    """One line: the exchange at each point, inward, and where it was lost."""
    name = track.name
    parts = []
    for i, s in enumerate(track.seen):
        p = points[i].name
        if s is None:
            parts.append(f"{p} never saw it" if track.covered[i] else f"{p} not recording")
            continue
        s = _best(s, track.resent[i])
        if s.kind == SOCKET_END:
            parts.append(f"{p} {s.progress_text()} ({s.outcome.value})")
        elif s.complete:
            parts.append(f"{p} complete {s.last_progress - s.t_request:.1f} s after the request ({s.progress_text()})")
        else:
            quiet = (s.t_ended if s.t_ended is not None else points[i].recorded_until)
            silence = f", then nothing for {quiet - s.last_progress:.0f} s" if quiet is not None and quiet - s.last_progress >= 1 else ""
            parts.append(f"{p} {s.progress_text()}{silence} ({s.outcome.value})")
    where = _locus_text(track.locus, points)
    return f"{name.name}: " + "; ".join(parts) + (f": {where}" if where else "")


def _locus_text(locus: Locus, points: Sequence[PointLog], hops: tuple[str, ...] | None = None) -> str:
    if locus.kind == LOST:
        return f"lost between {points[locus.inner].name} and {points[locus.outer].name}"  # type: ignore[index]
    if locus.kind == INSIDE:
        return f"failed inside {points[locus.outer].name}, the innermost point that saw it"  # type: ignore[index]
    if locus.kind == UNKNOWN:
        return f"where is unknown: {locus.why}"
    return ""


def _burst(times: Sequence[float]) -> float | None:
    """Mean content events per arrival burst (as `differ.burstiness`), None below two events."""
    if len(times) < 2:
        return None
    bursts, prev = 0, None
    for t in times:
        if prev is None or t - prev > BURST_WINDOW:
            bursts += 1
        prev = t
    return len(times) / bursts


def _silent_before_end(s: Seen) -> bool:
    """An exchange that went quiet before it ended (the client gave up on a silence, which the
    recorder sees as the client's close): a stall, however it was cut at the end."""
    return s.t_ended is not None and s.t_ended - s.last_progress >= QUIET


def _compare(stats: PairStats, outer: Seen, inner: Seen, point: PointLog) -> None:
    """How an exchange seen at both points diverged between them (counted in `stats`)."""
    stats.both += 1
    if outer.key.raw != inner.key.raw:
        if outer.key.canonical is not None and outer.key.canonical == inner.key.canonical:
            stats.reserialized += 1
        else:
            stats.changed += 1
    if inner.failed and _left_by_its_client(inner) and outer.failed and not _left_by_its_client(outer):
        stats.diverged["cut"] += 1  # the hop between gave up on it (see _left_by_its_client)
        return
    if inner.complete and outer.failed and outer.known and not _fresh(outer, point):
        if outer.outcome is Outcome.HELD_OPEN:
            stats.diverged["held_open"] += 1
        elif outer.outcome in _STALLS or _silent_before_end(outer):
            stats.diverged["stalled"] += 1
        elif outer.outcome in _CUTS:
            stats.diverged["cut"] += 1
        elif outer.status is not None and outer.status != inner.status:
            stats.diverged["status"] += 1
        else:
            stats.diverged[outer.outcome.value] += 1
        return
    if outer.complete and inner.failed and inner.known:
        stats.diverged["recovered"] += 1
        return
    if outer.complete and inner.complete:
        if outer.ttft is not None and inner.ttft is not None:
            added = outer.ttft - inner.ttft
            stats.added_ttft.append(added)
            if added > ADDED_LATENCY:
                stats.diverged["latency"] += 1
        bo, bi = _burst(outer.content_times), _burst(inner.content_times)
        if (bo is not None and bi is not None and outer.content_events >= BUFFER_MIN_EVENTS
                and bo >= BUFFER_MIN_BURST and bo > BUFFER_RATIO * bi):  # fmt: skip
            stats.diverged["buffered"] += 1


def trace(points: Sequence[PointLog], engine_position: int | None = None,
          hops_between: HopsBetween | None = None) -> Trace:  # fmt: skip
    """The trace of these points (at least two; see the module docstring). `engine_position` is
    the chain's position in front of the engine (its hop count); `hops_between(outer, inner)`
    names the hops between two positions."""
    ordered, order = order_points(points)
    ref = ordered[0]
    matches: list[PairMatch | None] = [None] + [match(ref, p) for p in ordered[1:]]
    offsets = tuple([Offset(0.0, 0.0, 0, "reference")] + [m.offset for m in matches[1:]])  # type: ignore[union-attr]
    pairs = [PairStats(a.name, b.name, _pair_offset(offsets[i], offsets[i + 1]))
             for i, (a, b) in enumerate(zip(ordered, ordered[1:]))]  # fmt: skip
    raw: list[tuple[list[Seen | None], list[tuple[Seen, ...]]]] = []
    claimed: list[set[int]] = [set() for _ in ordered]
    for oi, s in enumerate(ref.seen):
        seen: list[Seen | None] = [s]
        resent: list[tuple[Seen, ...]] = [()]
        claimed[0].add(oi)
        for j in range(1, len(ordered)):
            m = matches[j]
            assert m is not None
            ii = m.pairs.get(oi)
            seen.append(ordered[j].seen[ii] if ii is not None else None)
            more = m.resent.get(oi, ())
            resent.append(tuple(ordered[j].seen[k] for k in more))
            if ii is not None:
                claimed[j].add(ii)
            claimed[j].update(more)
        raw.append((seen, resent))
    # Exchanges no outer point saw (other clients, a hop's own requests) start their own track.
    for j in range(1, len(ordered)):
        for ii, s in enumerate(ordered[j].seen):
            if ii not in claimed[j]:
                seen = [None] * len(ordered)
                seen[j] = s
                raw.append((seen, [()] * len(ordered)))
    covered_of = [[_covered(ordered, offsets, seen, j) for j in range(len(ordered))] for seen, _ in raw]
    for (seen, resent), covered in zip(raw, covered_of):
        _count(pairs, ordered, seen, resent, covered)
    tracks = []
    for (seen, resent), covered in zip(raw, covered_of):
        track = Track(tuple(seen), tuple(resent), tuple(covered), _locate(seen, resent, covered, pairs, ordered))
        tracks.append(replace(track, line=_line(track, ordered)))
    tracks.sort(key=lambda t: (ref.started_at + _start_wall(t, ordered, offsets)))
    return _decide(ordered, order, offsets, pairs, tracks, engine_position, hops_between)


def _pair_offset(a: Offset, b: Offset) -> Offset:
    """The offset between two points from their offsets against the outermost (the reference's
    own offset has no anchors: the pair's are the other's)."""
    anchors = min(a.anchors, b.anchors) if a.anchors else b.anchors
    return Offset(b.seconds - a.seconds, max(a.spread, b.spread), anchors, b.source)


def _start_wall(track: Track, points: Sequence[PointLog], offsets: Sequence[Offset]) -> float:
    i = track.outermost
    s = track.seen[i]
    assert s is not None
    return points[i].started_at + s.t_request - offsets[i].seconds - points[0].started_at


def _covered(points: Sequence[PointLog], offsets: Sequence[Offset], seen: Sequence[Seen | None], j: int) -> bool:
    """Whether point j was recording while the exchange ran (at the request's time, as the outer
    point that saw it saw it)."""
    if seen[j] is not None:
        return True
    i = next((k for k, s in enumerate(seen) if s is not None), None)
    if i is None:
        return False
    s = seen[i]
    assert s is not None
    t = _to_clock(s.t_request, points[i], points[j], offsets[i], offsets[j])
    return points[j].recording_at(t)


def _count(pairs: list[PairStats], points: Sequence[PointLog], seen: Sequence[Seen | None],
           resent: Sequence[Sequence[Seen]], covered: Sequence[bool]) -> None:  # fmt: skip
    for i, stats in enumerate(pairs):
        outer, inner = seen[i], seen[i + 1]
        if resent[i + 1]:
            stats.resent += 1
        if outer is not None and inner is not None:
            _compare(stats, outer, _best(inner, resent[i + 1]), points[i])
        elif outer is not None and covered[i + 1]:
            stats.outer_only += 1
            if outer.complete:
                stats.diverged["unmatched_complete"] += 1
            elif outer.failed and outer.known:
                stats.diverged["lost"] += 1
        elif inner is not None and outer is None and all(s is None for s in seen[: i + 1]):
            stats.inner_only += 1


def _decide(points: Sequence[PointLog], order: str, offsets: tuple[Offset, ...], pairs: list[PairStats],
            tracks: list[Track], engine_position: int | None, hops_between: HopsBetween | None) -> Trace:  # fmt: skip
    notes = []
    if order == "as given":
        notes.append("the points are taken in the order given (outermost first): neither the chain file nor "
                     "the timing orders them")  # fmt: skip
    for stats in pairs:
        if not stats.credible_absence:
            notes.append(f"{stats.diverged['unmatched_complete']} exchange(s) {stats.outer} completed were not found "
                         f"at {stats.inner}: an exchange missing there is not taken as lost")  # fmt: skip
    places: Counter[tuple[str, int, int | None]] = Counter()
    unknown = 0
    for t in tracks:
        if t.locus.kind in (LOST, INSIDE):
            places[(t.locus.kind, t.locus.outer, t.locus.inner)] += 1  # type: ignore[index]
        elif t.locus.kind == UNKNOWN:
            unknown += 1
    segments = [(_segment(kind, o, i, points, engine_position, hops_between), n, kind, o)
                for (kind, o, i), n in places.items()]  # fmt: skip
    # The most exchanges first; among equals the outermost place (what the client saw first).
    segments.sort(key=lambda x: (-x[1], x[3]))
    listed = tuple((seg, n) for seg, n, _, _ in segments)
    if unknown:
        notes.append(f"{unknown} failed exchange(s) could not be placed: " + "; ".join(
            sorted({t.locus.why for t in tracks if t.locus.kind == UNKNOWN})))  # fmt: skip
    if not segments and not unknown:
        diverged = _degradations(pairs)
        summary = "no exchange failed at any point" + (f"; {diverged}" if diverged else "")
        return Trace(tuple(points), order, offsets, tuple(pairs), tuple(tracks), HEALTHY, None, summary,
                     places=listed, notes=tuple(notes))  # fmt: skip
    if not segments:
        summary = f"{unknown} exchange(s) failed, and the points cannot say where"
        return Trace(tuple(points), order, offsets, tuple(pairs), tuple(tracks), INCONCLUSIVE, None, summary,
                     places=listed, notes=tuple(notes))  # fmt: skip
    segment, count, kind, where = segments[0]
    failed = [t for t in tracks if (t.locus.kind, t.locus.outer) == (kind, where) and
              (kind == INSIDE or t.locus.inner == where + 1)]  # fmt: skip
    first = failed[0].name
    others = "" if len(segments) == 1 else "; also " + ", ".join(f"{n} {s.text()}" for s, n, _, _ in segments[1:])
    what = f"{count} exchange(s) (first {first.name})"
    if kind == LOST:
        culprit = segment.hops[0] if segment.hops and len(segment.hops) == 1 else None
        summary = f"{what} lost {segment.text()}{others}"
        verdict = PROXY
    elif engine_position is not None and points[where].position == engine_position:
        culprit, verdict = ENGINE, SERVER
        summary = f"{what} already failed at {segment.inner}, in front of the engine{others}"
    else:
        culprit, verdict = None, INCONCLUSIVE
        inside = ("the hops " + ", ".join(segment.hops) + " and the engine") if segment.hops else \
            "the server, or a hop inside that point (the chain file's `point` in [engine_options] says it stands in front of the engine)"  # fmt: skip
        summary = f"{what} already failed at {segment.inner}, the innermost point: inside it are {inside}{others}"
    return Trace(tuple(points), order, offsets, tuple(pairs), tuple(tracks), verdict, culprit, summary, segment,
                 listed, tuple(notes))  # fmt: skip


def _segment(kind: str, outer: int, inner: int | None, points: Sequence[PointLog], engine_position: int | None,
             hops_between: HopsBetween | None) -> Segment:  # fmt: skip
    if kind == INSIDE:
        p = points[outer]
        known = hops_between is not None and p.position is not None and engine_position is not None
        return Segment(None, p.name, hops_between(p.position, engine_position) if known else None)  # type: ignore[misc, arg-type]
    assert inner is not None
    a, b = points[outer], points[inner]
    hops = None
    if hops_between is not None and a.position is not None and b.position is not None:
        hops = hops_between(a.position, b.position)
    return Segment(a.name, b.name, hops)


def _degradations(pairs: Sequence[PairStats]) -> str:
    said = []
    for stats in pairs:
        kinds = {k: v for k, v in stats.diverged.items() if v and k != "unmatched_complete"}
        if kinds:
            said.append(f"between {stats.inner} and {stats.outer}: " + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())))
    return "; ".join(said)




# --------------------------------------------------------------------------------------------
# check --with


SEEN_WORDS = "seen while recording, not reproduced on replay"


def placed_by_points(verdict: Verdict, traced: Trace) -> Verdict:
    """A `not-reproduced` verdict of `check` when the points placed the recorded failures: `proxy`
    for the segment they were lost in (`server` when they already failed in front of the engine).
    Any other verdict, or a trace that places nothing, is returned as it is: what the replay
    decided stands, and points that cannot say where add no verdict."""
    if verdict.verdict != NOT_REPRODUCED or traced.verdict not in (PROXY, SERVER) or traced.segment is None:
        return verdict
    segment = traced.segment
    kind = LOST if segment.outer is not None else INSIDE
    names = [p.name for p in traced.points]
    placed = [t for t in traced.tracks if t.locus.kind == kind and names[t.locus.outer] == (segment.outer or segment.inner)]  # type: ignore[index]
    first = placed[0].name if placed else None
    seen = SeenWhileRecording(segment.outer, segment.inner, segment.hops, tuple(names), tuple(t.line for t in placed))
    return replace(verdict, verdict=traced.verdict, culprit=traced.culprit, summary=f"{SEEN_WORDS}: {traced.summary}",
                   first_turn=first.turn if first else None, seen_while_recording=seen)  # fmt: skip
