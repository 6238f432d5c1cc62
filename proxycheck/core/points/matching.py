"""The same exchange at two points, found without touching the traffic.

Two recorders see the same request at nearly the same moment on clocks that may be seconds
apart. An exchange is matched by its key (`proxycheck.core.points.seen.request_key`: what the
model sees) and method, then, among exchanges of the same key (a client's retries, identical
first turns of parallel sessions), by order and time:

* **The clocks' offset** is estimated from the exchanges themselves: from every key seen exactly
  once at each point (an *anchor*), the midpoint estimate of NTP
  ((inner request - outer request) + (inner response - outer response)) / 2, which cancels a
  hop's latency when it costs as much on the way in as on the way out; the median over the
  anchors is the offset, their median absolute deviation its spread. Without anchors the k-th
  exchange of a key at one point stands for the k-th at the other; without any shared key the
  wall clocks are taken as they are (`Offset.source` says which).
* **A match** is an exchange of the same key whose request, on the outer point's clock, arrived
  while the other was alive: from its request (less a slack for the clocks) to its end (or the
  end of that point's recording while it was in flight), plus the slack. In order: the k-th
  such exchange pairs with the k-th.
* **Identical requests in flight together** (parallel agents' identical first turns): a hop's
  jitter may swap their order, so within each cluster of them (requests within two slacks of one
  another, at most `UNTANGLE_MAX`) the pairing is the one under which the most response heads
  agree (the bytes one point got are a prefix of what the other got: the same answer), then
  the one whose exchanges ended closest together (a hop passes an end on at once), then the
  one closest in arrival.
* **Resent by a hop**: further exchanges of the same key at the inner point inside a matched
  exchange's lifetime are a hop's retries of it (`PairMatch.resent`), not other exchanges.

Pure: `Seen` values in, indexes out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import permutations
from statistics import median
from typing import Sequence

from proxycheck.core.points.seen import Seen

MIN_SLACK = 0.25  # seconds: a clock's uncertainty never counts for less than this
SPREAD_SLACK = 4.0  # the slack is at least this many spreads of the offset's estimates
END_GAP_MAX = 5.0  # seconds: the most one pairing's end gap counts for when untangling
UNTANGLE_MAX = 6  # identical requests re-paired by their answers at most this many at once (6! pairings)


@dataclass(frozen=True, slots=True)
class PointLog:
    """What one point recorded.

    `started_at` is its clock's zero (wall clock, epoch seconds); `covered` the stretches of its
    own clock in which it was recording ([start, end], the last one open-ended while a recording
    may still grow: end None); `position` where the chain file places it (None: unknown).
    """

    name: str
    started_at: float
    seen: tuple[Seen, ...]
    covered: tuple[tuple[float, float | None], ...] = ()
    position: int | None = None
    directory: str = ""
    host: str | None = None

    def recording_at(self, t: float) -> bool:
        """Whether the point was recording at `t` (its own clock)."""
        return any(start <= t and (end is None or t <= end) for start, end in self.covered)

    @property
    def recorded_until(self) -> float | None:
        """The end of its last stretch (None: it may still be recording)."""
        return self.covered[-1][1] if self.covered else None


@dataclass(frozen=True, slots=True)
class Offset:
    """The other point's clock minus this one's for the same moment (seconds of wall clock)."""

    seconds: float
    spread: float = 0.0
    anchors: int = 0
    source: str = "exchanges"  # "exchanges", "order" (no anchor), "wall clocks" (nothing shared)

    @property
    def slack(self) -> float:
        return max(MIN_SLACK, SPREAD_SLACK * self.spread)

    def to_json(self) -> dict[str, object]:
        return {"seconds": round(self.seconds, 6), "spread": round(self.spread, 6), "anchors": self.anchors,
                "source": self.source}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PairMatch:
    """Exchanges of `outer` matched at `inner` (indexes into their `seen`)."""

    outer: str
    inner: str
    offset: Offset
    pairs: dict[int, int] = field(default_factory=dict)  # outer index -> inner index
    resent: dict[int, tuple[int, ...]] = field(default_factory=dict)  # outer index -> more inner indexes
    inner_only: tuple[int, ...] = ()

    @property
    def matched(self) -> int:
        return len(self.pairs)


def _key(s: Seen) -> tuple[str, str]:
    return (s.method, s.key.view)


def _by_key(seen: Sequence[Seen]) -> dict[tuple[str, str], list[int]]:
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, s in enumerate(seen):
        groups[_key(s)].append(i)
    for indexes in groups.values():
        indexes.sort(key=lambda i: seen[i].t_request)
    return groups


def _estimate(a: PointLog, sa: Seen, b: PointLog, sb: Seen) -> float:
    """One exchange's estimate of b's wall clock minus a's."""
    req = (b.started_at + sb.t_request) - (a.started_at + sa.t_request)
    if sa.t_response is not None and sb.t_response is not None:
        resp = (b.started_at + sb.t_response) - (a.started_at + sa.t_response)
        return (req + resp) / 2
    return req


def estimate_offset(a: PointLog, b: PointLog) -> Offset:
    """b's clock minus a's, from the exchanges both saw (see the module docstring)."""
    ga, gb = _by_key(a.seen), _by_key(b.seen)
    shared = [k for k in ga if k in gb]
    anchors = [_estimate(a, a.seen[ga[k][0]], b, b.seen[gb[k][0]]) for k in shared if len(ga[k]) == 1 == len(gb[k])]
    source = "exchanges"
    if not anchors:
        source = "order"
        anchors = [_estimate(a, a.seen[i], b, b.seen[j]) for k in shared for i, j in zip(ga[k], gb[k])]
    if not anchors:
        return Offset(0.0, 0.0, 0, "wall clocks")
    middle = median(anchors)
    spread = median(abs(e - middle) for e in anchors)
    return Offset(middle, spread, len(anchors) if source == "exchanges" else 0, source)


def match(outer: PointLog, inner: PointLog, offset: Offset | None = None) -> PairMatch:
    """The exchanges of `outer` found at `inner` (see the module docstring)."""
    offset = offset or estimate_offset(outer, inner)
    shift = inner.started_at - outer.started_at - offset.seconds  # inner clock -> outer clock: t + shift
    slack = offset.slack
    go, gi = _by_key(outer.seen), _by_key(inner.seen)
    pairs: dict[int, int] = {}
    resent: dict[int, tuple[int, ...]] = {}
    used: set[int] = set()
    open_end = outer.recorded_until
    for key, outer_indexes in go.items():
        candidates = gi.get(key)
        if not candidates:
            continue
        start = 0
        windows = []
        for oi in outer_indexes:
            s = outer.seen[oi]
            end = s.t_ended if s.t_ended is not None else (open_end if open_end is not None else float("inf"))
            windows.append((oi, s.t_request - slack, max(end, s.last_progress) + slack))
        for oi, low, high in windows:
            for pos in range(start, len(candidates)):
                ii = candidates[pos]
                t = inner.seen[ii].t_request + shift
                if t < low:
                    continue  # before this exchange: an inner exchange no outer one explains
                if t > high:
                    break
                pairs[oi] = ii
                used.add(ii)
                start = pos + 1
                break
        _untangle(outer, inner, shift, slack, [oi for oi, _, _ in windows], pairs)
        # What is left of the key inside a matched exchange's lifetime was sent again by a hop.
        for oi, low, high in windows:
            if oi not in pairs:
                continue
            more = tuple(ii for ii in candidates if ii not in used and low <= inner.seen[ii].t_request + shift <= high)
            if more:
                resent[oi] = more
                used.update(more)
    inner_only = tuple(i for i in range(len(inner.seen)) if i not in used)
    return PairMatch(outer.name, inner.name, offset, pairs, resent, inner_only)


def _agree(a: Seen, b: Seen) -> bool:
    """Whether two points' response heads can be one answer: one is a prefix of the other, and
    there is something to compare."""
    n = min(len(a.head), len(b.head))
    return n > 0 and a.head[:n] == b.head[:n]


def _untangle(outer: PointLog, inner: PointLog, shift: float, slack: float, order: list[int],
              pairs: dict[int, int]) -> None:  # fmt: skip
    """Re-pair clusters of identical requests by their answers (see the module docstring)."""
    matched = [oi for oi in order if oi in pairs]
    clusters: list[list[int]] = []
    for oi in matched:
        if clusters and outer.seen[oi].t_request - outer.seen[clusters[-1][-1]].t_request <= 2 * slack:
            clusters[-1].append(oi)
        else:
            clusters.append([oi])
    for cluster in clusters:
        if not 2 <= len(cluster) <= UNTANGLE_MAX:
            continue
        targets = [pairs[oi] for oi in cluster]

        def score(assignment: tuple[int, ...]) -> tuple[int, float, float]:
            both = [(outer.seen[oi], inner.seen[ii]) for oi, ii in zip(cluster, assignment)]
            agreeing = sum(_agree(a, b) for a, b in both)
            ends = sum(_end_gap(a, b, shift) for a, b in both)
            apart = sum(abs(b.t_request + shift - a.t_request) for a, b in both)
            return agreeing, -ends, -apart

        best = max(permutations(targets), key=score)
        for oi, ii in zip(cluster, best):
            pairs[oi] = ii


def _end_gap(a: Seen, b: Seen, shift: float) -> float:
    """How far apart two exchanges ended (on a's clock), at most END_GAP_MAX: a hop passes an end
    on within milliseconds, while an exchange that failed outside may end long after its answer
    ended inside (any pairing pays that once)."""
    if a.t_ended is None or b.t_ended is None:
        return END_GAP_MAX
    return min(END_GAP_MAX, abs(b.t_ended + shift - a.t_ended))
