"""The localizer: which route to replay next, and when the evidence names a culprit.

A sans-IO state machine (docs/design.md, "Localization"). `Localizer.next()` says what to do: replay
a route for more repetitions (`Replay`), or stop (`Decided`, with the `Verdict`). The caller
replays and hands the observations back with `add`, then asks again. It never touches the
network, so every decision is tested with observations in, steps out.

The ladder is `direct, via:hops[n-1], ..., via:hops[0]`: each route passes one hop more than the
one before it. `direct` goes first, at least twice: its repetitions are the noise floor the
differ (`proxycheck.core.diagnose.differ`) judges every other route against, and if `direct` fails the
verdict is `server`. Then, with the `ladder` strategy, routes go outward one by one; with
`bisect`, the outermost route first and then halves of the ladder (fewer replays for long chains,
assuming a route fails when any hop it passes does). The first route that fails, next to the
clean one inward, names its entry hop as the candidate. The candidate is confirmed by

- a deterministic difference: the same exchanges fail in each of two or more repetitions of the
  failing route, and none fails in two or more of the clean one; or
- Fisher's exact test on failure counts (failing route vs the clean one), p < alpha (0.01);
- or, for a route that fails only by a sampling engine's content rate (`proxycheck.core.diagnose.differ`)
  next to a hop's route, a one-sided Fisher's exact test on the exchanges each differs from
  direct in (`content_rate`): the route inward passed its own test against direct and so shows
  no failures, yet may differ as often, holding the change itself.

The verdict's `statistics` name the rule that decided (`decided_by`, and `rule` in words with
that rule's figures only: a p-value never stands beside the deterministic rule as if it had
decided), or say why neither did. Its findings list each failing or degraded exchange (the first
MAX_FINDINGS); its advice (`proxycheck.core.diagnose.advice`) is given once per hop and kind of finding,
over all of them.

Until then both routes are replayed again, the one with fewer repetitions first, up to
`max_repeat` repetitions each; then the verdict is `inconclusive`, never a guess. Should the
clean route start failing on a repetition, the candidate moves inward with it. When no route
fails, the verdict is `healthy`, or `not-reproduced` when the recording itself shows failures.
Degradations (`buffered`, `slow`) are reported, and count as failures only when `fail_on` says.

When the observations stop before the localizer decided (a run interrupted, killed or cut
short; see `proxycheck.core.diagnose.runverdict`), `incomplete` names the routes missing and says what
the finished ones show "so far", never as a verdict.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping, Sequence

from proxycheck.core.diagnose.advice import Advice
from proxycheck.core.diagnose.advice import group as group_advice
from proxycheck.core.diagnose.advice import key_of as advice_key
from proxycheck.core.diagnose.differ import content_rate, judge, noise_floor
from proxycheck.core.diagnose.verdict import (
    CUT_SHORT,
    ENGINE,
    HEALTHY,
    INCOMPLETE,
    INCONCLUSIVE,
    NOT_REPLAYED,
    NOT_REPRODUCED,
    PROXY,
    SERVER,
    Evidence,
    Finding,
    Judged,
    MissingRoute,
    NoiseFloor,
    RouteReport,
    SoFar,
    Verdict,
    suggestions,
)
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.websocket import NOT_SENT, idle_when_ended
from proxycheck.core.stats import fisher_exact, fisher_greater, median

DIRECT = "direct"
ALPHA = 0.01
MAX_REPEAT = 10  # repetitions of each of two routes before a difference that stays unclear is inconclusive
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
        max_repeat: int = MAX_REPEAT,
        fail_on: Iterable[Outcome] = (),
        alpha: float = ALPHA,
        recorded_failures: Sequence[RecordedFailure] = (),
        differences: Sequence[str] = (),
        run: str = "",
        greedy: bool = False,
        socks_hops: Iterable[str] = (),
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
        self.greedy = greedy  # the replays asked for greedy decoding (`--greedy`): for the suggestions
        self.socks_hops = frozenset(socks_hops)  # hops that are SOCKS5 proxies: their cuts get advice of their own

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
                # Every route of the ladder is judged against the one floor: a sampling engine's
                # content test shares its alpha among them (the differ's Bonferroni).
                route.judged = judge(route.observations, self._routes[DIRECT].observations, self.floor,
                                     routes=len(self.ladder) - 1)  # fmt: skip
        return route.judged

    def failed_turns(self, name: str) -> set[tuple[str, int]]:
        """(session, turn) of every exchange that fails on a route (none for a route not replayed)."""
        return {(j.obs.session, j.obs.turn) for j in self.judged(name) if self._failed(j)}

    def failed_turns_in(self, observations: Sequence[Observation]) -> set[tuple[str, int]]:
        """(session, turn) of each of `observations` (one route's, replayed apart from this
        localizer's runs: a confirmation) that fails, judged as this localizer judges: against its
        noise floor, or, for the direct route, by their own outcomes."""
        observations = list(observations)
        if all(o.route == DIRECT for o in observations):
            return {(o.session, o.turn) for o in observations if o.outcome.is_failure or o.outcome in self.fail_on}
        judged = judge(observations, self._routes[DIRECT].observations, self.floor, routes=len(self.ladder) - 1)
        return {(j.obs.session, j.obs.turn) for j in judged if self._failed(j)}

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

    def _by_content_rate(self, bad: _Route, good: _Route) -> bool:
        """`bad` fails only by a sampling engine's content rate, next to a hop's route: its
        candidate is confirmed on content rates against `good` (`_content_test`), since a route
        that passed its rate test against direct shows no failures at all, yet may differ as
        often (the hop changing the conversation may be inside it)."""
        if good.name == DIRECT or not self.floor.sampling:
            return False  # against direct, the differ's rate test was the test
        failed = [j for j in self.judged(bad.name) if self._failed(j)]
        return bool(failed) and all(j.outcome is Outcome.CONTENT_MISMATCH for j in failed)

    def _content_test(self, bad: _Route, good: _Route) -> dict[str, object]:
        """`bad`'s content differs from direct more often than `good`'s: one-sided Fisher on the
        exchanges each differs in (counted whatever each route's own test against direct said)."""
        k_bad, n_bad = content_rate(self.judged(bad.name))
        k_good, n_good = content_rate(self.judged(good.name))
        p = fisher_greater(k_bad, n_bad - k_bad, k_good, n_good - k_good)
        decided = p < self.alpha and k_bad / max(n_bad, 1) > k_good / max(n_good, 1)
        seen = (f"content differs from direct on {k_bad}/{n_bad} exchanges of {bad.name} and {k_good}/{n_good} of "
                f"{good.name}, one-sided Fisher's exact test p={p:.2g}")  # fmt: skip
        rule = (f"the content rates decided: {seen} < {self.alpha:g}" if decided else
                f"the content rates did not decide: {seen}, not under {self.alpha:g} ({good.name} may hold the "
                "change too)")  # fmt: skip
        return {
            "decided": decided,
            "method": "content_rate",
            "decided_by": "content_rate" if decided else None,
            "rule": rule,
            **self._counts(p, bad, (k_bad, n_bad), good, (k_good, n_good)),
        }

    def _test(self, bad: _Route, good: _Route) -> dict[str, object]:
        """Is `bad` told apart from `good`? Deterministic difference first, then Fisher."""
        if self._by_content_rate(bad, good):
            return self._content_test(bad, good)
        k_bad, n_bad = self._failures(bad), len(self.judged(bad.name))
        k_good, n_good = self._failures(good), len(self.judged(good.name))
        p = fisher_exact(k_bad, n_bad - k_bad, k_good, n_good - k_good)
        sets = self._failing_sets(bad)
        deterministic = (
            len(sets) >= 2 and bool(sets[0]) and all(s == sets[0] for s in sets)
            and good.repetitions >= 2 and k_good == 0
        )  # fmt: skip
        fisher = p < self.alpha and k_bad / max(n_bad, 1) > k_good / max(n_good, 1)
        method = "deterministic" if deterministic else "fisher_exact"
        decided_by = "deterministic" if deterministic else "fisher_exact" if fisher else None
        return {
            "decided": deterministic or fisher,
            "method": method,
            "decided_by": decided_by,  # the rule that told the routes apart; None: neither did
            "rule": self._rule(bad, good, sets, decided_by, p, k_good),
            **self._counts(p, bad, (k_bad, n_bad), good, (k_good, n_good)),
        }

    def _counts(self, p: float, bad: _Route, failing: tuple[int, int], good: _Route, clean: tuple[int, int]) -> dict[str, object]:
        """The figures of a test between two routes, as the statistics document holds them."""
        return {
            "p_value": p,
            "alpha": self.alpha,
            "failing_route": bad.name,
            "failing": list(failing),
            "failing_repetitions": bad.repetitions,
            "clean_route": good.name,
            "clean": list(clean),
            "clean_repetitions": good.repetitions,
        }

    def _rule(self, bad: _Route, good: _Route, sets: Sequence[frozenset[Key]], decided_by: str | None, p: float,
              k_good: int) -> str:  # fmt: skip
        """Which rule decided, in words, with only the figures of that rule: a p-value is shown
        as deciding only when Fisher's test did."""
        if decided_by == "deterministic":
            return (f"the deterministic rule decided: the same {len(sets[0])} exchange(s) failed in each of the "
                    f"{bad.repetitions} repetitions of {bad.name} and none in the {good.repetitions} of "
                    f"{good.name}")  # fmt: skip
        if decided_by == "fisher_exact":
            return f"Fisher's exact test decided: p={p:.2g} < {self.alpha:g}"
        # Neither: say why each rule did not hold.
        if p < self.alpha:
            fisher = f"Fisher's exact test p={p:.2g}, but {bad.name} fails no more often than {good.name}"
        else:
            fisher = f"Fisher's exact test p={p:.2g}, not under {self.alpha:g}"
        why = []
        if len(sets) < 2:
            why.append(f"{bad.name} was replayed once")
        elif not sets[0] or any(s != sets[0] for s in sets):
            why.append(f"the failing exchanges differ between the repetitions of {bad.name}")
        if good.repetitions < 2:
            why.append(f"{good.name} was replayed once")
        if k_good:
            why.append(f"{good.name} failed {k_good} too")
        return f"neither rule decided: {fisher}; the deterministic rule does not hold ({', '.join(why)})"

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

    def _findings(self, culprit: str | None) -> tuple[tuple[Finding, ...], tuple[Advice, ...]]:
        """The findings (the first MAX_FINDINGS), and the advice: once per hop and kind of finding,
        over every failing or degraded exchange, listed or not."""
        entries: list[tuple[str | None, Judged]] = []
        context: dict[str, list[Judged]] = {}
        names: dict[str, str] = {}  # how a hop not found at fault is named: by its route
        for name in self.ladder:
            route = self._routes[name]
            if not route.observations:
                continue
            context[name] = self.judged(name)
            # A route through the culprit fails because of it: its advice is about the culprit.
            # None: the direct route, where nothing but the engine is in the way. Else the
            # route's entry hop, named as the route when it passes more than that hop: no
            # culprit was found, so any of its hops may be the one.
            hop = culprit if culprit in route.hops else (route.hops[0] if route.hops else None)
            if hop is not None and hop != culprit and len(route.hops) > 1:
                names[hop] = f"{name} (its hops {' → '.join(route.hops)})"
            for j in sorted(self.judged(name), key=lambda j: (j.obs.repetition, j.obs.t_start)):
                if self._failed(j) or j.degraded:
                    entries.append((hop, j))
        advised = group_advice(entries, context, names, self.socks_hops)
        found = [
            Finding(
                route=j.obs.route, repetition=j.obs.repetition, session=j.obs.session, turn=j.obs.turn,
                outcome=j.outcome.value, detail=j.detail, xid=j.obs.xid,
                advice=advised[advice_key(hop, j, self.socks_hops)].text,
            )
            for hop, j in entries[:MAX_FINDINGS]
        ]  # fmt: skip
        return tuple(found), tuple(advised.values())

    def _first_failure(self, route: _Route) -> Judged | None:
        failed = [j for j in self.judged(route.name) if self._failed(j)]
        return min(failed, key=lambda j: (j.obs.repetition, j.obs.t_start), default=None)

    def _verdict(self, verdict: str, culprit: str | None, summary: str, **kw: object) -> Verdict:
        findings, advised = self._findings(culprit)
        return Verdict(
            verdict=verdict, culprit=culprit, summary=summary, routes=self._reports(), findings=findings,
            advice=advised,
            floor=self.floor, strategy=self.strategy, run=self.run, **kw,  # type: ignore[arg-type]
            suggestions=suggestions(self.floor, self.greedy, self._routes[DIRECT].repetitions),
        )  # fmt: skip

    def _server(self) -> Verdict:
        direct = self._routes[DIRECT]
        judged = self.judged(DIRECT)
        failed = [j for j in judged if self._failed(j)]
        outcome, first_turn, spread = _pattern(judged, failed)
        summary = (f"the engine {_phrase(outcome, failed)} on the direct route {spread} "
                   f"({len(failed)}/{len(judged)} exchanges over {direct.repetitions} repetitions)")  # fmt: skip
        first = self._first_failure(direct)
        stats = {"method": "direct", "decided_by": "direct", "rule": "the direct route fails",
                 "failing_route": DIRECT, "failing": [len(failed), len(judged)]}  # fmt: skip
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
        if stats.get("method") == "content_rate":  # a sampling engine: the counts are exchanges that differ
            summary = (f"the answers differ from direct's on {k_bad}/{n_bad} exchanges of {bad.name}, more than "
                       f"between direct's own repetitions, but on {k_good}/{n_good} of {good.name} too, after "
                       f"{bad.repetitions} and {good.repetitions} repetitions: not a clear difference between "
                       f"them (one-sided Fisher's exact test p={stats['p_value']:.3g}, needed < {self.alpha:g}); "
                       "replaying with --greedy compares answers exchange by exchange")  # fmt: skip
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

    def incomplete(self, missing: Sequence[MissingRoute], status: str) -> Verdict:
        """The verdict of observations that stop before this localizer decided: `missing` names
        the routes lacking, `status` what became of the run. Only whole repetitions may have been
        added: what they show is `so_far` (the verdict they alone would give, as `diff` would
        judge them), said as such and never as the verdict."""
        step = self.next(final=True)
        assert isinstance(step, Decided)  # final: it never asks for a replay
        partial = step.verdict
        seen = _so_far_text(partial)
        so_far = SoFar(partial.verdict, partial.culprit, seen) if partial.routes else None
        summary = f"{_stopped(status, bool(missing))}{_missing_text(missing)}; {seen}"
        # The routes, findings and evidence are what was seen; nothing that reads as a decision
        # (the deciding test, the turn failures start at, a culprit) is carried over.
        return replace(
            partial, verdict=INCOMPLETE, culprit=None, summary=summary, statistics={}, first_turn=None,
            differences=(), floor=partial.floor if self.replayed(DIRECT) else None, missing=tuple(missing),
            so_far=so_far, run_status=status,
        )  # fmt: skip


_STOPPED = {
    "interrupted": "the run was interrupted",
    "running": "the run never finished (it was killed, or is still replaying)",
    "failed": "the run stopped on an error",
    "limited": "the run was stopped by its request limit",
    "completed": "the run is marked finished but lacks observations",
}


def _stopped(status: str, missing: bool) -> str:
    said = _STOPPED.get(status) or (f"the run ended with status {status!r}" if status else "the run has no status")
    return f"{said}: " if missing else f"{said} before its end"


def _missing_text(missing: Sequence[MissingRoute]) -> str:
    """"via:c2 cut short (repetition 1: 2 of 6 exchanges), via:c1 and via:c0 not replayed"."""
    parts = []
    for m in missing:
        if m.state == CUT_SHORT:
            of = f" of {m.planned}" if m.planned is not None else ""
            parts.append(f"{m.route} cut short (repetition {m.repetition}: {m.observed}{of} exchanges)")
    # A route replayed, but not as often as the localizer needed, says which repetition it lacks.
    never = [m.route if (m.repetition or 1) == 1 else f"{m.route} (repetition {m.repetition})"
             for m in missing if m.state == NOT_REPLAYED]  # fmt: skip
    if never:
        names = never[0] if len(never) == 1 else ", ".join(never[:-1]) + " and " + never[-1]
        parts.append(f"{names} not replayed")
    return ", ".join(parts)


def _so_far_text(partial: Verdict) -> str:
    """What the finished routes show, worded as so far: the clean ones counted, else the summary
    of what they alone would conclude."""
    if not partial.routes:
        return "no route was replayed in full: nothing to go on yet"
    if partial.verdict in (HEALTHY, NOT_REPRODUCED):
        counts = ", ".join(f"{r.route} {r.exchanges}/{r.exchanges}" for r in partial.routes)
        return f"so far no finished route fails: {counts}"
    return f"so far {partial.summary}"


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
    "from turn 4 on" when every exchange from that turn on failed, else "first at turn 4".

    A turn that failed before the steady start (`_steady_start`) in only some repetitions does not
    move the start; it is said ("; also at turn 1 in 1 of 3 repetitions"). On a real engine a request
    a hop gave up on is still prefilled after the hop hung up, so the next repetition's early turns
    may wait behind it and meet the hop's timeout once: that is not where the wedge starts."""
    if not failed:
        return Outcome.OK, None, ""
    outcome = Counter(j.outcome for j in failed).most_common(1)[0][0]
    failed_ids = {id(j) for j in failed}

    def failing_from(turn: int) -> bool:
        return all(id(j) in failed_ids for j in judged if j.obs.turn >= turn)

    steady = _steady_start(failed)
    if failing_from(steady):
        earlier = [j for j in failed if j.obs.turn < steady]
        if not earlier:
            return outcome, steady, f"from turn {steady} on"
        turns = ", ".join(str(t) for t in sorted({j.obs.turn for j in earlier}))
        reps = len({j.obs.repetition for j in earlier})
        of = len({j.obs.repetition for j in judged})
        return outcome, steady, (f"from turn {steady} on; also at turn {turns} in {reps} of {of} "
                                 f"repetition{'s' if of != 1 else ''}")  # fmt: skip
    first_turn = min(j.obs.turn for j in failed)
    return outcome, first_turn, f"in some exchanges, first at turn {first_turn}"


def _steady_start(failed: Sequence[Judged]) -> int:
    """The earliest of the sessions' steady first failing turns: for each session, the earliest turn
    that is its first failing turn in at least half of the repetitions where it failed (else its
    earliest failing turn)."""
    firsts: dict[str, dict[int, int]] = {}  # session -> repetition -> its first failing turn
    for j in failed:
        reps = firsts.setdefault(j.obs.session, {})
        reps[j.obs.repetition] = min(reps.get(j.obs.repetition, j.obs.turn), j.obs.turn)
    starts = []
    for reps in firsts.values():
        counts = Counter(reps.values())
        starts.append(next((t for t in sorted(counts) if 2 * counts[t] >= len(reps)), min(counts)))
    return min(starts)


def _phrase(outcome: Outcome, failed: Sequence[Judged]) -> str:
    mine = [j for j in failed if j.outcome is outcome]
    if mine and all(j.obs.transport == "websocket" for j in mine):
        said = _socket_phrase(outcome, mine)
        if said:
            return said
    if outcome is Outcome.HTTP_ERROR:
        statuses = Counter(j.obs.status for j in failed if j.outcome is outcome)
        return f"answers HTTP {statuses.most_common(1)[0][0]}"
    return _PHRASES.get(outcome, outcome.value.replace("_", " "))


def _socket_phrase(outcome: Outcome, failed: Sequence[Judged]) -> str | None:
    """What a route did to WebSocket turns, where the HTTP words would mislead: an end between
    turns is no cut mid-response, an upgrade no request the hop answered."""
    if outcome is Outcome.HTTP_ERROR:
        statuses = Counter(j.obs.status for j in failed)
        return f"refuses the WebSocket upgrade (HTTP {statuses.most_common(1)[0][0]})"
    if outcome is Outcome.STALL_BEFORE_HEADERS and all(j.obs.headers is None for j in failed):
        return "never answers the WebSocket upgrade"
    if outcome is Outcome.RESET:
        ends = [j for j in failed if not (j.detail or j.obs.detail).startswith(NOT_SENT)]
        idle = sum(1 for j in ends if idle_when_ended(j.detail or j.obs.detail) is not None)
        if ends and idle == len(ends):
            return "ends WebSockets while they sit idle between turns"
        if ends and idle == 0:
            return "cuts WebSockets mid-answer"
        if ends:
            return "ends WebSockets, mid-answer and between turns"
    return None


_PHRASES = {
    Outcome.STALL_MID_STREAM: "stalls mid-stream",
    Outcome.HELD_OPEN: "holds streams open after their end",
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
