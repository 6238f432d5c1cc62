"""The verdict a stored run supports, and `incomplete` when it does not hold enough for one.

`proxycheck diff RUN` (and `check` after Ctrl-C) judge a run from its observations alone. A run
whose replay stopped early (Ctrl-C, a crash, `kill -9`, a route cut short) must not give a
verdict from what happened to be observed: a check interrupted after `direct` would read
`healthy`. This module owns that rule, sans-IO (observations and the run's plan in, a `Verdict`
out):

- A run is made of repetitions: the exchanges of one route in one repetition. A repetition is
  whole when every session of the plan has all its turns in it (or, with `--on-fail
  stop-session`, stops at a failed one). A run that does not record its plan counts a repetition
  whole once the run went on to another (routes and repetitions are replayed one after another),
  or finished. Only whole repetitions are evidence; the part of one that was being replayed when
  the run stopped is not a route replayed.
- A run `check` made (`driven`) is fed to a fresh localizer with the check's own settings, step
  by step as `check` fed it. A step the run does not hold whole means `incomplete`, naming that
  route (cut short, or not replayed) and the ladder's routes never replayed. A verdict the
  localizer reaches is the run's, whatever the routes it never needed (`server` after `direct`
  failed needs no other route).
- Any other run (`replay`) was to hold every route of its plan `repeat` times; it is judged as it
  is when it does, `incomplete` otherwise.
- A run not marked finished (interrupted, failed, or still "running" because it was killed) is
  `incomplete` in either case.

What the whole repetitions show goes into the incomplete verdict as "so far"
(`Localizer.incomplete`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Mapping, Sequence

from proxycheck.core.diagnose.localize import Decided, Localizer
from proxycheck.core.diagnose.verdict import CUT_SHORT, NOT_REPLAYED, MissingRoute, Verdict
from proxycheck.core.exchange.observation import Observation

FINISHED = "completed"  # the status a run's writer gives a run that ran to its end

Group = tuple[str, int]  # route, repetition


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run was meant to hold, as its run.json says."""

    routes: tuple[str, ...]  # the routes it was to replay (a check's: its whole ladder)
    status: str  # FINISHED when it ran to its end; "interrupted", "failed", "running" (killed) ...
    driven: bool = False  # `check` made it: the localizer chose its steps
    repeat: int = 1  # repetitions of each route, for a run the localizer did not drive
    turns: Mapping[str, int] | None = None  # session -> turns in one repetition, when the run says
    stop_session: bool = False  # --on-fail stop-session: a session may end at its first failure

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    @property
    def exchanges(self) -> int | None:
        """Exchanges in one whole repetition, when the plan says (the most: stop-session may end
        sessions sooner)."""
        return sum(self.turns.values()) if self.turns is not None else None


@dataclass(frozen=True, slots=True)
class Holdings:
    """A run's observations by repetition (in the order they were written), and which are whole."""

    groups: dict[Group, list[Observation]]
    whole: frozenset[Group]

    def missing(self, route: str, repetition: int, plan: RunPlan) -> MissingRoute:
        cut = self.groups.get((route, repetition), [])
        return MissingRoute(route, CUT_SHORT if cut else NOT_REPLAYED, repetition, len(cut), plan.exchanges)


def holdings(observations: Sequence[Observation], plan: RunPlan) -> Holdings:
    groups: dict[Group, list[Observation]] = {}
    for obs in observations:
        groups.setdefault((obs.route, obs.repetition), []).append(obs)
    last = (observations[-1].route, observations[-1].repetition) if observations else None
    if plan.turns is not None:
        whole = {g for g, obs in groups.items() if _all_turns(obs, plan)}
    else:
        # Repetitions are replayed one after another: any but the last written one was finished.
        whole = {g for g in groups if plan.finished or g != last}
    return Holdings(groups, frozenset(whole))


def _all_turns(observations: Sequence[Observation], plan: RunPlan) -> bool:
    assert plan.turns is not None
    count = Counter(o.session for o in observations)
    last = {o.session: o for o in observations}  # each session's turns go in order
    for session, turns in plan.turns.items():
        if count[session] >= turns:
            continue
        stopped = plan.stop_session and count[session] > 0 and last[session].outcome.is_failure
        if not stopped:
            return False
    return True


def run_verdict(localizer: Localizer, observations: Sequence[Observation], plan: RunPlan) -> Verdict:
    """The verdict of a stored run. `localizer` is fresh, made with the settings the run was made
    with (a check's strategy, repeat, max_repeat, fail_on), over a ladder that holds the plan's
    routes; it is left holding the whole repetitions, for the reports that judge exchanges."""
    held = holdings(observations, plan)
    if plan.driven:
        return _driven(localizer, held, plan)
    return _planned(localizer, held, plan)


def _driven(localizer: Localizer, held: Holdings, plan: RunPlan) -> Verdict:
    """Feed the whole repetitions as `check` did, step by step, until the localizer decides or
    asks for one the run does not hold."""
    used: set[Group] = set()
    done: Counter[str] = Counter()
    while True:
        step = localizer.next()
        if isinstance(step, Decided):
            break
        wanted = [(step.route, done[step.route] + i) for i in range(1, step.repetitions + 1)]
        have = [g for g in wanted if g in held.whole]
        localizer.add(o for g in have for o in held.groups[g])
        used.update(have)
        if len(have) < len(wanted):
            lacking = next(g for g in wanted if g not in held.whole)
            needed = held.missing(*lacking, plan)
            # The ladder's routes with no whole repetition are still to come too.
            rest = [held.missing(r, 1, plan) for r in localizer.ladder
                    if r != step.route and not any(g[0] == r for g in held.whole)]  # fmt: skip
            _add_rest(localizer, held, used)
            return localizer.incomplete([needed, *rest], plan.status)
        done[step.route] += step.repetitions
    if not plan.finished:
        _add_rest(localizer, held, used)
        return localizer.incomplete([], plan.status)
    if held.whole - used:
        # The run holds more than the check asked for (made otherwise): judge all of it.
        _add_rest(localizer, held, used)
        final = localizer.next(final=True)
        assert isinstance(final, Decided)
        return final.verdict
    return step.verdict


def _planned(localizer: Localizer, held: Holdings, plan: RunPlan) -> Verdict:
    """Every route of the plan, `repeat` whole repetitions each; judged as the run is when so."""
    missing = []
    for route in [r for r in localizer.ladder if r in plan.routes]:
        lacking = next((rep for rep in range(1, plan.repeat + 1) if (route, rep) not in held.whole), None)
        if lacking is not None:
            missing.append(held.missing(route, lacking, plan))
    _add_rest(localizer, held, set())
    if missing or not plan.finished:
        return localizer.incomplete(missing, plan.status)
    final = localizer.next(final=True)
    assert isinstance(final, Decided)
    return final.verdict


def _add_rest(localizer: Localizer, held: Holdings, used: set[Group]) -> None:
    """The whole repetitions not fed yet: finished evidence, in the order they were written."""
    rest = [g for g in held.groups if g in held.whole and g not in used]
    localizer.add(o for g in rest for o in held.groups[g])
    used.update(rest)

