"""The localizer: which route to replay next, and when the evidence names a culprit.

A sans-IO state machine (DESIGN.md, "Localization"). `Localizer.next()` says what to do: replay
a route for more repetitions (`Replay`), or stop (`Decided`, with the `Verdict`). The caller
replays and hands the observations back with `add`, then asks again. It never touches the
network, so every decision is tested with observations in, steps out.

The ladder is `direct, via:hops[n-1], ..., via:hops[0]`: each route passes one hop more than the
one before it. `direct` goes first, at least twice: its repetitions are the noise floor the
differ (`proxycheck.core.differ`) judges every other route against, and if `direct` fails the
verdict is `server`. Then, with the `ladder` strategy, routes go outward one by one; with
`bisect`, the outermost route first and then halves of the ladder (fewer replays for long chains,
assuming a route fails when any hop it passes does). The first route that fails, next to the
clean one inward, names its entry hop as the candidate. The candidate is confirmed by

- a deterministic difference: the same exchanges fail in each of two or more repetitions of the
  failing route, and none fails in two or more of the clean one; or
- Fisher's exact test on failure counts (failing route vs the clean one), p < alpha (0.01).

Until then both routes are replayed again, the one with fewer repetitions first, up to
`max_repeat` repetitions each; then the verdict is `inconclusive`, never a guess. Should the
clean route start failing on a repetition, the candidate moves inward with it. When no route
fails, the verdict is `healthy`, or `not-reproduced` when the recording itself shows failures.
Degradations (`buffered`, `slow`) are reported, and count as failures only when `fail_on` says.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from proxycheck.core.differ import judge, noise_floor
from proxycheck.core.observation import Observation
from proxycheck.core.outcomes import Outcome
from proxycheck.core.stats import fisher_exact, median
from proxycheck.core.verdict import (
    ENGINE,
    ENGINE_ADVICE,
    HEALTHY,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    PROXY,
    SERVER,
    Evidence,
    Finding,
    Judged,
    NoiseFloor,
    RouteReport,
    Verdict,
    advice,
)

DIRECT = "direct"
ALPHA = 0.01
MAX_FINDINGS = 200  # findings listed in a verdict (counts per route are always complete)

Key = tuple[str, int, int | None]  # session, turn, xid: one exchange of the recording


@dataclass(frozen=True, slots=True)
class Replay:
    """Replay `route` for `repetitions` more repetitions, then `add` what was observed."""

    route: str
    repetitions: int


@dataclass(frozen=True, slots=True)
class Decided:
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class RecordedFailure:
    """A failure the recording itself shows (for `not-reproduced`)."""

    session: str
    turn: int
    outcome: str
    detail: str = ""


@dataclass
class _Route:
    name: str
    hops: tuple[str, ...]
    observations: list[Observation] = field(default_factory=list)
    judged: list[Judged] | None = None  # cached; reset when observations or the floor change

    @property
    def repetitions(self) -> int:
        return len({o.repetition for o in self.observations})


class Localizer:
    """See the module docstring. `ladder` lists the routes from `direct` outward; `hops` gives
    the hops each route passes (from its entry inward). `repeat` is the repetitions each route
    gets before it is judged (direct gets at least 2)."""

    def __init__(
        self,
        ladder: Sequence[str],
        hops: Mapping[str, tuple[str, ...]],
        *,
        strategy: str = "ladder",
        repeat: int = 1,
        max_repeat: int = 10,
        fail_on: Iterable[Outcome] = (),
        alpha: float = ALPHA,
        recorded_failures: Sequence[RecordedFailure] = (),
        differences: Sequence[str] = (),
        run: str = "",
    ) -> None:
        if not ladder or ladder[0] != DIRECT:
            raise ValueError("the ladder starts with the direct route")
        if strategy not in ("ladder", "bisect"):
            raise ValueError(f"unknown strategy {strategy!r}")
        self.ladder = list(ladder)
        self.strategy = strategy
        self.repeat = max(1, repeat)
        self.max_repeat = max(self.repeat, 2, max_repeat)
        self.fail_on = frozenset(fail_on)
        self.alpha = alpha
        self.recorded_failures = tuple(recorded_failures)
        self.differences = tuple(differences)
        self._routes = {name: _Route(name, tuple(hops.get(name, ()))) for name in self.ladder}
        self._floor: NoiseFloor | None = None
        self.run = run  # the run directory, named in the verdict

    # ---------------------------------------------------------------------------------- input

    def add(self, observations: Iterable[Observation]) -> None:
        """Observations of any routes of the ladder (others are ignored)."""
        for obs in observations:
            route = self._routes.get(obs.route)
            if route is None:
                continue
            route.observations.append(obs)
            route.judged = None
            if obs.route == DIRECT:
                self._floor = None
                for r in self._routes.values():
                    r.judged = None

    # ---------------------------------------------------------------------------------- steps

    def next(self, *, final: bool = False) -> Replay | Decided:
        """The next step. `final`: the observations are all there will be (`proxycheck diff` of
        an existing run): never asks for a replay; routes without observations are skipped, and a
        difference not yet confirmed is `inconclusive`."""
        direct = self._routes[DIRECT]
        need = max(2, self.repeat)
        if direct.repetitions < need and not final:
            return Replay(DIRECT, need - direct.repetitions)
        if self._failures(direct):
            return Decided(self._server())
        step = self._candidate(final)
        if isinstance(step, Replay):
            return step
        if step is None:
            return Decided(self._clean())
        failing, clean = step
        return self._confirm(failing, clean, final)

    def _candidate(self, final: bool) -> Replay | tuple[int, int] | None:
        """The first failing route (index) next to a clean one inward, a replay needed to find
        it, or None when every route is clean."""
        if self.strategy == "ladder" or final:
            clean = 0
            for i in range(1, len(self.ladder)):
                route = self._route(i)
                if route.repetitions < self.repeat and not final:
                    return Replay(route.name, self.repeat - route.repetitions)
                if not route.observations:
                    continue  # final: a route the run did not replay
                if self._failures(route):
                    return i, clean
                clean = i
            return None
        # Bisect: lo is known clean, hi known failing; probe the middle until they touch.
        lo, hi = 0, len(self.ladder) - 1
        if hi == 0:
            return None
        outer = self._route(hi)
        if outer.repetitions < self.repeat:
            return Replay(outer.name, self.repeat - outer.repetitions)
        if not self._failures(outer):
            return None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            route = self._route(mid)
            if route.repetitions < self.repeat:
                return Replay(route.name, self.repeat - route.repetitions)
            if self._failures(route):
                hi = mid
            else:
                lo = mid
        return hi, lo

    def _confirm(self, failing: int, clean: int, final: bool) -> Replay | Decided:
        bad, good = self._route(failing), self._route(clean)
        if not good.observations:
            # final, and the run has no direct route: nothing tells the hop from the engine.
            return Decided(self._inconclusive(bad, good, None))
        stats = self._test(bad, good)
        between = [h for h in bad.hops if h not in good.hops]
        if stats["decided"] and len(between) > 1:
            # final: the routes between were not replayed, so the difference spans several hops.
            return Decided(self._inconclusive(bad, good, stats, between))
        if stats["decided"]:
            return Decided(self._proxy(bad, good, stats))
        if final or (bad.repetitions >= self.max_repeat and good.repetitions >= self.max_repeat):
            return Decided(self._inconclusive(bad, good, stats))
        # More evidence: the route with fewer repetitions first (the failing one on a tie).
        if good.repetitions < bad.repetitions:
            return Replay(good.name, 1)
        return Replay(bad.name, 1) if bad.repetitions < self.max_repeat else Replay(good.name, 1)

    # ---------------------------------------------------------------------------------- judging

    def replayed(self, name: str) -> bool:
        return bool(self._routes[name].observations)

    @property
    def floor(self) -> NoiseFloor:
        if self._floor is None:
            self._floor = noise_floor(self._routes[DIRECT].observations, DIRECT)
        return self._floor

    def judged(self, name: str) -> list[Judged]:
        route = self._routes[name]
        if route.judged is None:
            if name == DIRECT:
                # The reference is not compared with itself: its own outcomes are what it is.
                route.judged = [Judged(o, o.outcome, o.detail, None) for o in route.observations]
            else:
                route.judged = judge(route.observations, self._routes[DIRECT].observations, self.floor)
        return route.judged

    def _failed(self, j: Judged) -> bool:
        return j.outcome.is_failure or j.outcome in self.fail_on

    def _failures(self, route: _Route) -> int:
        return sum(1 for j in self.judged(route.name) if self._failed(j))

    def _failing_sets(self, route: _Route) -> list[frozenset[Key]]:
        per_rep: dict[int, set[Key]] = {}
        for j in self.judged(route.name):
            keys = per_rep.setdefault(j.obs.repetition, set())
            if self._failed(j):
                keys.add(_key(j.obs))
        return [frozenset(k) for _, k in sorted(per_rep.items())]

    def _test(self, bad: _Route, good: _Route) -> dict[str, object]:
        """Is `bad` told apart from `good`? Deterministic difference first, then Fisher."""
        k_bad, n_bad = self._failures(bad), len(self.judged(bad.name))
        k_good, n_good = self._failures(good), len(self.judged(good.name))
        p = fisher_exact(k_bad, n_bad - k_bad, k_good, n_good - k_good)
        sets = self._failing_sets(bad)
        deterministic = (
            len(sets) >= 2 and bool(sets[0]) and all(s == sets[0] for s in sets)
            and good.repetitions >= 2 and k_good == 0
        )  # fmt: skip
        method = "deterministic" if deterministic else "fisher_exact"
        return {
            "decided": deterministic or (p < self.alpha and k_bad / max(n_bad, 1) > k_good / max(n_good, 1)),
            "method": method,
            "p_value": p,
            "alpha": self.alpha,
            "failing_route": bad.name,
            "failing": [k_bad, n_bad],
            "failing_repetitions": bad.repetitions,
            "clean_route": good.name,
            "clean": [k_good, n_good],
            "clean_repetitions": good.repetitions,
        }

    # ---------------------------------------------------------------------------------- verdicts

    def _route(self, index: int) -> _Route:
        return self._routes[self.ladder[index]]

    def _reports(self) -> tuple[RouteReport, ...]:
        reports: list[RouteReport] = []
        inner: dict[Key, list[float]] | None = None  # the next route inward's OK TTFTs by exchange
        for name in self.ladder:
            route = self._routes[name]
            if not route.observations:
                continue
            judged = self.judged(name)
            counts = Counter(j.outcome.value for j in judged)
            ttfts: dict[Key, list[float]] = {}
            for j in judged:
                if j.outcome is Outcome.OK and j.obs.ttft is not None:
                    ttfts.setdefault(_key(j.obs), []).append(j.obs.ttft)
            ttft = median([t for ts in ttfts.values() for t in ts])
            reports.append(RouteReport(
                route=name, hops=route.hops, repetitions=route.repetitions, exchanges=len(judged),
                outcomes=dict(sorted(counts.items())), failures=sum(1 for j in judged if self._failed(j)),
                ttft_p50=ttft, added_latency=_added(ttfts, inner),
            ))  # fmt: skip
            if ttfts:
                inner = ttfts
        return tuple(reports)

    def _findings(self, culprit: str | None) -> tuple[Finding, ...]:
        found: list[Finding] = []
        for name in self.ladder:
            route = self._routes[name]
            # A route through the culprit fails because of it: its advice is about the culprit.
            hop = culprit if culprit in route.hops else (route.hops[0] if route.hops else None)
            for j in sorted(self.judged(name), key=lambda j: (j.obs.repetition, j.obs.t_start)):
                if not (self._failed(j) or j.degraded):
                    continue
                found.append(Finding(
                    route=name, repetition=j.obs.repetition, session=j.obs.session, turn=j.obs.turn,
                    outcome=j.outcome.value, detail=j.detail,
                    advice=advice(j.outcome, j.obs, hop) if hop else ENGINE_ADVICE,
                ))  # fmt: skip
                if len(found) >= MAX_FINDINGS:
                    return tuple(found)
        return tuple(found)

    def _first_failure(self, route: _Route) -> Judged | None:
        failed = [j for j in self.judged(route.name) if self._failed(j)]
        return min(failed, key=lambda j: (j.obs.repetition, j.obs.t_start), default=None)

    def _verdict(self, verdict: str, culprit: str | None, summary: str, **kw: object) -> Verdict:
        return Verdict(
            verdict=verdict, culprit=culprit, summary=summary, routes=self._reports(), findings=self._findings(culprit),
            floor=self.floor, strategy=self.strategy, run=self.run, **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    def _server(self) -> Verdict:
        direct = self._routes[DIRECT]
        judged = self.judged(DIRECT)
        failed = [j for j in judged if self._failed(j)]
        outcome, first_turn, spread = _pattern(judged, failed)
        summary = (f"the engine {_phrase(outcome, failed)} on the direct route {spread} "
                   f"({len(failed)}/{len(judged)} exchanges over {direct.repetitions} repetitions)")  # fmt: skip
        first = self._first_failure(direct)
        stats = {"method": "direct", "failing_route": DIRECT, "failing": [len(failed), len(judged)]}
        return self._verdict(SERVER, ENGINE, summary, statistics=stats, first_turn=first_turn,
                             evidence=Evidence(first.obs, None) if first else None)  # fmt: skip

    def _proxy(self, bad: _Route, good: _Route, stats: dict[str, object]) -> Verdict:
        hop = bad.hops[0] if bad.hops else bad.name
        judged = self.judged(bad.name)
        failed = [j for j in judged if self._failed(j)]
        outcome, first_turn, spread = _pattern(judged, failed)
        clean = [r for r in self.ladder[: self.ladder.index(good.name) + 1] if self._routes[r].observations]
        clean_text = " and ".join(
            f"{name} clean in {len(self.judged(name))}/{len(self.judged(name))}" for name in clean
        )  # fmt: skip
        summary = (f"hop {hop} {_phrase(outcome, failed)} {spread} "
                   f"({len(failed)}/{len(judged)} exchanges on {bad.name}); {clean_text}")  # fmt: skip
        first = self._first_failure(bad)
        stats = {k: v for k, v in stats.items() if k != "decided"}
        return self._verdict(PROXY, hop, summary, statistics=stats, first_turn=first_turn,
                             evidence=Evidence(first.obs, first.reference) if first else None)  # fmt: skip

    def _inconclusive(
        self, bad: _Route, good: _Route, stats: dict[str, object] | None, between: Sequence[str] = ()
    ) -> Verdict:
        first = self._first_failure(bad)
        evidence = Evidence(first.obs, first.reference) if first else None
        if stats is not None and between:
            k_bad, n_bad = stats["failing"]  # type: ignore[misc]
            summary = (f"{bad.name} fails ({k_bad}/{n_bad} exchanges) where {good.name} is clean: one of the hops "
                       f"{', '.join(between)} breaks it; replay the routes between to tell which")  # fmt: skip
            stats = {k: v for k, v in stats.items() if k != "decided"}
            return self._verdict(INCONCLUSIVE, None, summary, statistics=stats, evidence=evidence)
        if stats is None:
            summary = (f"{bad.name} fails ({self._failures(bad)}/{len(self.judged(bad.name))} exchanges), "
                       "but the run has no direct route to tell a hop from the engine")  # fmt: skip
            return self._verdict(INCONCLUSIVE, None, summary, evidence=evidence)
        k_bad, n_bad = stats["failing"]  # type: ignore[misc]
        k_good, n_good = stats["clean"]  # type: ignore[misc]
        summary = (f"{bad.name} failed {k_bad}/{n_bad} and {good.name} {k_good}/{n_good} after "
                   f"{bad.repetitions} and {good.repetitions} repetitions: not a clear difference "
                   f"(Fisher's exact test p={stats['p_value']:.3g}, needed < {self.alpha:g})")  # fmt: skip
        stats = {k: v for k, v in stats.items() if k != "decided"}
        return self._verdict(INCONCLUSIVE, None, summary, statistics=stats, evidence=evidence)

    def _clean(self) -> Verdict:
        replayed = [name for name in self.ladder if self._routes[name].observations]
        counts = ", ".join(f"{name} {len(self.judged(name))}/{len(self.judged(name))}" for name in replayed)
        degraded = sorted({j.outcome.value for name in replayed for j in self.judged(name) if j.degraded})
        note = f"; degradations seen: {', '.join(degraded)}" if degraded else ""
        if self.recorded_failures:
            kinds = Counter(f.outcome for f in self.recorded_failures)
            shown = ", ".join(f"{n} {o}" for o, n in kinds.most_common())
            summary = (f"the recording shows {len(self.recorded_failures)} failed exchange(s) ({shown}); "
                       f"no route reproduces them (clean: {counts}){note}")  # fmt: skip
            return self._verdict(NOT_REPRODUCED, None, summary, differences=self.differences)
        return self._verdict(HEALTHY, None, f"every route clean: {counts}{note}")


def _key(obs: Observation) -> Key:
    return (obs.session, obs.turn, obs.xid)


def _added(route: dict[Key, list[float]], inner: dict[Key, list[float]] | None) -> float | None:
    """TTFT p50 of a route minus the next route inward's, over the exchanges OK on both: a
    route whose slow turns failed must not look faster than one where they succeeded."""
    if inner is None:
        return None
    both = route.keys() & inner.keys()
    mine = median([t for k in both for t in route[k]])
    theirs = median([t for k in both for t in inner[k]])
    return None if mine is None or theirs is None else mine - theirs


def _pattern(judged: Sequence[Judged], failed: Sequence[Judged]) -> tuple[Outcome, int | None, str]:
    """The most common failing outcome, the first failing turn, and how the failures spread:
    "from turn 4 on" when every exchange from that turn on failed, else "first at turn 4"."""
    if not failed:
        return Outcome.OK, None, ""
    outcome = Counter(j.outcome for j in failed).most_common(1)[0][0]
    first_turn = min(j.obs.turn for j in failed)
    failed_ids = {id(j) for j in failed}
    if all(id(j) in failed_ids for j in judged if j.obs.turn >= first_turn):
        return outcome, first_turn, f"from turn {first_turn} on"
    return outcome, first_turn, f"in some exchanges, first at turn {first_turn}"


def _phrase(outcome: Outcome, failed: Sequence[Judged]) -> str:
    if outcome is Outcome.HTTP_ERROR:
        statuses = Counter(j.obs.status for j in failed if j.outcome is outcome)
        return f"answers HTTP {statuses.most_common(1)[0][0]}"
    return _PHRASES.get(outcome, outcome.value.replace("_", " "))


_PHRASES = {
    Outcome.STALL_MID_STREAM: "stalls mid-stream",
    Outcome.STALL_BEFORE_FIRST_EVENT: "stalls before the first event",
    Outcome.STALL_BEFORE_HEADERS: "holds the response headers back",
    Outcome.RESET: "cuts connections mid-response",
    Outcome.TRUNCATED: "ends streams before their terminal event",
    Outcome.MALFORMED_STREAM: "corrupts the stream",
    Outcome.STREAM_ERROR: "sends errors inside streams",
    Outcome.CONNECT_ERROR: "cannot be connected to",
    Outcome.REQUEST_MUTATED: "changes request bodies",
    Outcome.CONTENT_MISMATCH: "changes the conversation",
    Outcome.BUFFERED: "buffers streams",
    Outcome.SLOW: "slows responses",
}
