"""Driving a diagnosis: replaying a recording over a chain's ladder as the localizer
(`proxycheck.core.diagnose.localize`) asks, route by route and repetition by repetition, until it
decides. `check` runs one into a run directory (`CheckRun`: Ctrl-C keeps what was observed as a
loadable run, and `interrupted_verdict` says what it shows so far); `minimize` finds the route to
minimize over the same way (`locate_route`)."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping, Sequence

from proxycheck.core.diagnose.localize import (
    DIRECT,
    MAX_REPEAT,
    Decided,
    Localizer,
    RecordedFailure,
)
from proxycheck.core.diagnose.runverdict import RunPlan, run_verdict
from proxycheck.core.diagnose.waits import waits_of
from proxycheck.core.diagnose.verdict import (
    ENGINE,
    HEALTHY,
    NOT_REPRODUCED,
    PROXY,
    SERVER,
    Judged,
    ReplayedPass,
    Scope,
    Verdict,
)
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.minimize.ddmin import Budget
from proxycheck.core.points.trace import Trace, placed_by_points
from proxycheck.core.recording.sessions import attempt_text
from proxycheck.core.replay.chain import Chain, Route
from proxycheck.core.replay.focus import PassPlan, plan_passes
from proxycheck.core.replay.patience import still_busy
from proxycheck.core.replay.plan import Pace, PlannedSession
from proxycheck.io.minimizer import minimize_options
from proxycheck.io.outputs import make_dirs
from proxycheck.io.replayer import ReplayListener, ReplayOptions, replay
from proxycheck.io.runstore import OBSERVATIONS_FILE, RUN_FILE, RunWriter, options_doc

Sink = Callable[[Observation], None]
RECORDED_SHOWN = 3  # recorded failures named in the differences


@dataclass(frozen=True)
class CheckSettings:
    """How the localizer judges (`check`'s --strategy, --repeat, --max-repeat and --fail-on), and
    what it replays: `full` the whole recording at its recorded think times (--full), else the
    focus first (`proxycheck.core.replay.focus`); `max_think` every think time capped (--max-think);
    `routes_at_once` the ladder's routes replayed concurrently (--parallel-routes)."""

    strategy: str = "ladder"
    repeat: int = 1
    max_repeat: int = MAX_REPEAT
    fail_on: frozenset[Outcome] = frozenset()
    full: bool = False
    max_think: float | None = None
    routes_at_once: bool = False


@dataclass(frozen=True)
class Checked:
    """A check that ran to its verdict, and the run directory that keeps its evidence."""

    verdict: Verdict
    judged: dict[str, list[Judged]]
    run_id: str
    observations: int
    out: str


@dataclass
class CheckRun:
    """One check of `sessions` over the ladder `routes` (name -> route, inward first) into the run
    directory `out`, pass after pass (`plan_passes`) until one decides. The run directory holds
    the pass being replayed, and at the end the deciding one (so `diff RUN` judges what the
    verdict was made of); an earlier pass moves to `out/passes/N-NAME/`, a run of its own, and so
    does a replay confirming routes replayed at once. `run` raises Interrupted on Ctrl-C, the run
    closed as interrupted and every observation kept; `interrupted_verdict` is then the run's
    `incomplete` verdict."""

    recording: str
    chain: Chain
    routes: dict[str, Route]
    sessions: list[PlannedSession]
    options: ReplayOptions
    settings: CheckSettings
    out: str
    written: list[Observation] = field(default_factory=list)  # the current pass's, in the order the run holds them
    replaying: list[PlannedSession] = field(default_factory=list)  # the current pass's sessions
    done: list[ReplayedPass] = field(default_factory=list)
    plan_now: PassPlan | None = None  # the pass being replayed
    points: Trace | None = None  # `--with`: the recording traced with others of the same traffic (core/points)

    def localizer(self, sessions: Sequence[PlannedSession] | None = None) -> Localizer:
        s = self.settings
        return make_localizer(sessions if sessions is not None else self.replaying or self.sessions, self.routes,
                              self.options, strategy=s.strategy, repeat=s.repeat, max_repeat=s.max_repeat,
                              fail_on=s.fail_on, run=self.out)  # fmt: skip

    def run(self, progress: ReplayListener | None = None) -> Checked:
        passes = plan_passes(self.sessions, full=self.settings.full, max_think=self.settings.max_think)
        recorded = {(t.session, t.turn) for s in self.sessions for t in s.turns if t.recorded.outcome.is_failure}
        for index, plan in enumerate(passes, 1):
            last = index == len(passes)
            verdict, localizer, run_id, count = self._pass(plan, index, progress)
            decided = verdict.verdict in (PROXY, SERVER)
            if decided and self.done[-1].routes_at_once:
                verdict, localizer, run_id, count = self._confirm_alone(plan, index, verdict, localizer, run_id,
                                                                        count, progress)  # fmt: skip
                decided = verdict.verdict in (PROXY, SERVER)
            stands = decided and (not plan.needs_recorded_turns or bool(recorded & _failed_turns(localizer, verdict)))
            if stands or last:
                return self._checked(plan, verdict, localizer, run_id, count)
            why = ("the recorded failures did not fail again at their own turns" if decided else
                   f"it did not decide ({verdict.verdict})")  # fmt: skip
            self.done[-1] = replace(self.done[-1], summary=f"{self.done[-1].summary}; next pass: {why}")
            self._move_aside(index, plan.name)
        raise AssertionError("plan_passes returns at least one pass")

    def _pass(self, plan: PassPlan, index: int, progress: ReplayListener | None,
              routes_at_once: bool | None = None) -> tuple[Verdict, Localizer, str, int]:  # fmt: skip
        """Replay one pass into the run directory until its localizer decides."""
        at_once = self.settings.routes_at_once if routes_at_once is None else routes_at_once
        self.replaying = plan.sessions
        self.plan_now = plan
        self.written = []
        localizer = self.localizer(plan.sessions)
        writer = self._writer(plan, self.out, at_once)

        def keep(obs: Observation) -> None:
            writer.add(obs)
            self.written.append(obs)

        started = time.monotonic()
        with writer:
            verdict = asyncio.run(drive(localizer, plan.sessions, self.routes, self.options, writer.run_id, keep,
                                        progress, routes_at_once=at_once))  # fmt: skip
        turns = sum(len(s.turns) for s in plan.sessions)
        if verdict is None:  # the routes at once did not decide: one at a time, nothing mixed
            said = ("the routes replayed at once did not decide (more repetitions were needed), so the pass is "
                    "replayed with the routes one at a time")  # fmt: skip
            self.done.append(ReplayedPass(f"{plan.name} at once", len(plan.sessions), turns, plan.think.text(),
                                          "undecided", said, time.monotonic() - started, ".", True))  # fmt: skip
            self._move_aside(index, f"{plan.name} at once")
            return self._pass(replace(plan, name=f"{plan.name}, routes one at a time"), index, progress,
                              routes_at_once=False)  # fmt: skip
        self.done.append(ReplayedPass(plan.name, len(plan.sessions), turns, plan.think.text(), verdict.verdict,
                                      verdict.summary, time.monotonic() - started, ".", at_once))  # fmt: skip
        return verdict, localizer, writer.run_id, writer.count

    def _confirm_alone(self, plan: PassPlan, index: int, verdict: Verdict, localizer: Localizer, run_id: str,
                       count: int, progress: ReplayListener | None) -> tuple[Verdict, Localizer, str, int]:  # fmt: skip
        """Routes replayed at once add load on the engine, and on a hop that every route through
        it passes: a queue or connection limit may fail for that alone, and wrongly name the
        route's hop. The failing route is replayed again by itself: failing in the same turns,
        the verdict stands; clean, or failing elsewhere (the load had a part in what was seen),
        the pass is replayed again with the routes one at a time, and that verdict is the pass's."""
        name = str(verdict.statistics.get("failing_route") or DIRECT)
        folder = Path(self.out) / PASSES / f"{index}-alone-{_slug(name)}"
        got: list[Observation] = []
        writer = self._writer(plan, str(folder), False, routes=[name])
        started = time.monotonic()
        with writer:
            asyncio.run(replay(plan.sessions, [self.routes[name]], self.options, writer.run_id,
                               _tee(writer.add, got), progress))  # fmt: skip
        alone = localizer.failed_turns_in(got)
        together = localizer.failed_turns(name)
        confirmed = bool(alone) and alone == together
        if confirmed:
            said = (f"{name} replayed by itself fails in the same {len(alone)} turn(s): the load of the routes "
                    "replayed at once did not cause it")  # fmt: skip
        elif alone:
            said = (f"{name} replayed by itself fails in {len(alone)} turn(s), at once in {len(together)}: the load "
                    "of the routes replayed at once had a part in it, so the pass is replayed with the routes one "
                    "at a time")  # fmt: skip
        else:
            said = (f"{name} replayed by itself is clean ({len(got)} exchanges): the load of the routes replayed at "
                    "once caused its failures, so the pass is replayed with the routes one at a time")  # fmt: skip
        self.done.append(ReplayedPass(f"{plan.name}: {name} alone", len(plan.sessions),
                                      sum(len(s.turns) for s in plan.sessions), plan.think.text(),
                                      verdict.verdict if confirmed else "not-confirmed", said,
                                      time.monotonic() - started, str(folder.relative_to(self.out))))  # fmt: skip
        if confirmed:
            return verdict, localizer, run_id, count
        self._move_aside(index, f"{plan.name} at once")
        return self._pass(replace(plan, name=f"{plan.name}, routes one at a time"), index, progress,
                          routes_at_once=False)  # fmt: skip

    def _writer(self, plan: PassPlan, directory: str, at_once: bool, routes: Sequence[str] | None = None) -> RunWriter:
        s = self.settings
        settings = {
            "command": "check", "strategy": s.strategy, "repeat": s.repeat, "max_repeat": s.max_repeat,
            "fail_on": sorted(o.value for o in s.fail_on), "concurrency": self.options.concurrency,
            "pace": self.options.pace, "mode": self.options.mode, "client": self.options.client,
            "on_fail": self.options.on_fail, "greedy": self.options.greedy,
            "full": s.full, "max_think": s.max_think, "parallel_routes": at_once,
        }  # fmt: skip
        return RunWriter(directory, chain=self.chain.to_doc(), routes=list(routes or self.routes),
                         options=options_doc(self.recording, settings, self.options.watchdogs,
                                             turns=turns_per_session(plan.sessions),
                                             scope={"pass": plan.name, "think": plan.think.to_json()}),
                         sessions=[x.name.to_json() for x in plan.sessions])  # fmt: skip

    def _move_aside(self, index: int, name: str) -> None:
        """The pass the run directory holds moves to `passes/N-NAME/` (the next one takes its place)."""
        folder = Path(self.out) / PASSES / f"{index}-{_slug(name)}"
        make_dirs(folder)
        for file in (RUN_FILE, OBSERVATIONS_FILE):
            os.replace(Path(self.out) / file, folder / file)
        moved = str(folder.relative_to(self.out))
        for i, done in enumerate(self.done):
            if done.run == ".":
                self.done[i] = replace(done, run=moved)

    def _checked(self, plan: PassPlan, verdict: Verdict, localizer: Localizer, run_id: str, count: int) -> Checked:
        judged = {name: localizer.judged(name) for name in self.routes if localizer.replayed(name)}
        verdict = replace(verdict, sessions=tuple(x.name for x in plan.sessions), scope=self.scope(plan, verdict))
        if plan.think.shortened and verdict.differences:
            verdict = replace(verdict, differences=(*verdict.differences[:1], plan.think.text(), *verdict.differences[1:]))
        if self.points is not None:
            verdict = placed_by_points(verdict, self.points)
        verdict = replace(verdict, waits=waits_of(self.options.watchdogs, self.written, verdict.session_label))
        return Checked(verdict, judged, run_id, count, self.out)

    def scope(self, plan: PassPlan, verdict: Verdict) -> Scope:
        """What the check replayed for its verdict (the pass `plan`), and the passes before it."""
        turns = sum(len(s.turns) for s in plan.sessions)
        of_turns = sum(len(s.turns) for s in self.sessions)
        said = []
        if plan.whole:
            said.append(f"replayed the whole recording ({len(plan.sessions)} sessions, {turns} turns)"
                        + (f": {plan.why}" if plan.why else ""))  # fmt: skip
        else:
            said.append(f"replayed {plan.why}; --full replays everything")
        cut = plan.think
        if cut.cap is None or cut.shortened or cut.kept:  # nothing to say of a cap nothing was longer than
            said.append(cut.text() + ("" if cut.cap is None or self.settings.full else
                                      "; --max-think S sets the cap, --full keeps them all"))  # fmt: skip
        for p in self.done:
            if p.run != ".":  # the deciding pass is what the lines above say
                said.append(f"pass {p.name}: {p.verdict} in {p.seconds:.1f} s ({p.summary}); its run: {p.run}")
        if any(p.routes_at_once for p in self.done):
            said.append("routes replayed at once (--parallel-routes): a verdict naming a route is confirmed by "
                        "replaying that route by itself")  # fmt: skip
            if verdict.verdict in (HEALTHY, NOT_REPRODUCED) and self.done[-1].routes_at_once:
                said.append("with the routes at once the engine carried their load together, which could hide a "
                            "fault that shows only under a lighter load: check without --parallel-routes is the "
                            "reference for this verdict")  # fmt: skip
        return Scope(replayed="whole" if plan.whole else "focus", why=plan.why, sessions=len(plan.sessions),
                     of_sessions=len(self.sessions), turns=turns, of_turns=of_turns, think=plan.think.to_json(),
                     passes=tuple(self.done), said=tuple(said))  # fmt: skip

    def interrupted_verdict(self) -> tuple[Verdict, dict[str, list[Judged]]]:
        """After Ctrl-C: the `incomplete` verdict of what the run holds (the pass being replayed),
        the same `diff` of the run gives (the routes missing, what the finished ones show so far)."""
        sessions = self.replaying or self.sessions
        localizer = self.localizer(sessions)
        plan = RunPlan(routes=tuple(self.routes), status="interrupted", driven=True,
                       turns=turns_per_session(sessions),
                       stop_session=self.options.on_fail == "stop-session")  # fmt: skip
        verdict = replace(run_verdict(localizer, self.written, plan), sessions=tuple(x.name for x in sessions))
        if self.plan_now is not None:  # what was being replayed when the run stopped
            verdict = replace(verdict, scope=self.scope(self.plan_now, verdict))
        verdict = replace(verdict, waits=waits_of(self.options.watchdogs, self.written, verdict.session_label))
        judged = {name: localizer.judged(name) for name in self.routes if localizer.replayed(name)}
        return verdict, judged


PASSES = "passes"  # the folder of a run directory that keeps a check's earlier passes


def _slug(name: str) -> str:
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def _failed_turns(localizer: Localizer, verdict: Verdict) -> set[tuple[str, int]]:
    """The (session, turn) failing on the route the verdict blames: the culprit's, or direct."""
    route = str(verdict.statistics.get("failing_route") or "direct")
    return localizer.failed_turns(route) if localizer.replayed(route) else set()


def turns_per_session(sessions: Sequence[PlannedSession]) -> dict[str, int]:
    """The exchanges of one repetition, by session: what tells a whole repetition of a route from
    one the run stopped in (kept in run.json for `diff`)."""
    turns: dict[str, int] = {}
    for s in sessions:
        for t in s.turns:  # observations name a turn's session
            turns[t.session] = turns.get(t.session, 0) + 1
    return turns


def make_localizer(sessions: Sequence[PlannedSession], routes: Mapping[str, Route], options: ReplayOptions, *,
                   strategy: str = "ladder", repeat: int = 1, max_repeat: int = MAX_REPEAT,
                   fail_on: frozenset[Outcome] = frozenset(), run: str = "") -> Localizer:  # fmt: skip
    """The localizer for a recording over the chain's ladder `routes` (name -> route, inward first)."""
    recorded = [
        RecordedFailure(t.session, t.turn, t.recorded.outcome.value, t.recorded.detail)
        for s in sessions for t in s.turns if t.recorded.outcome.is_failure
    ]  # fmt: skip
    return Localizer(
        list(routes), {name: r.hops for name, r in routes.items()}, strategy=strategy, repeat=repeat,
        max_repeat=max_repeat, fail_on=fail_on, recorded_failures=recorded,
        differences=differences(sessions, options, recorded), run=run, greedy=options.greedy,
        socks_hops=[r.hops[0] for r in routes.values() if r.socks and r.hops],  # a SOCKS route enters at its proxy
    )  # fmt: skip


async def drive(localizer: Localizer, sessions: Sequence[PlannedSession], routes: Mapping[str, Route],
                options: ReplayOptions, run_id: str, sink: Sink, progress: ReplayListener | None = None, *,
                routes_at_once: bool = False) -> Verdict | None:  # fmt: skip
    """Replay what the localizer asks until it decides; every observation also goes to `sink`.
    Returns the verdict. `routes_at_once`: two repetitions (or --repeat) of every route of the
    ladder are replayed concurrently (each a replay of its own), and the verdict is what they
    decide, or None when they do not."""
    next_repetition: Counter[str] = Counter()
    took = _recorded_durations(sessions)  # how long each exchange took where it was answered

    async def one(route: str, repetitions: int) -> list[Observation]:
        got: list[Observation] = []
        for _ in range(repetitions):  # the engine settles between repetitions too
            next_repetition[route] += 1
            mine: list[Observation] = []
            step_options = replace(options, repeat=1, first_repetition=next_repetition[route])
            origin = time.monotonic()
            await replay(list(sessions), [routes[route]], step_options, run_id, _tee(sink, mine), progress)
            await _settle(mine, origin, took)
            got += mine
        return got

    if routes_at_once:
        # Each repetition its own replay, all started together: two of every route at least, so
        # that the deterministic rule (the same exchanges failing in two repetitions, none in two
        # of the route inward) can decide on them alone. A failure of one replay ends the others
        # (TaskGroup); its error goes on as it would.
        wanted = [(name, 1) for name in routes for _ in range(max(2, localizer.repeat))]
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(one(name, n)) for name, n in wanted]
        for task in tasks:
            localizer.add(task.result())
        step = localizer.next()
        # More repetitions would judge a route replayed under the load of the others beside ones
        # replayed alone: that evidence is not mixed; the caller replays the pass one route at a time.
        return step.verdict if isinstance(step, Decided) else None
    while True:
        step = localizer.next()
        if isinstance(step, Decided):
            return step.verdict
        localizer.add(await one(step.route, step.repetitions))


# What a route may give up on while the engine goes on working: proxycheck's own cut at a stall, a
# hop that hung up (a read timeout shorter than a real prefill), or a hop's error answer (its 504
# comes while the engine is still prefilling). A connection never made sent nothing.
ABANDONED = frozenset({Outcome.STALL_BEFORE_HEADERS, Outcome.STALL_BEFORE_FIRST_EVENT, Outcome.STALL_MID_STREAM,
                       Outcome.RESET, Outcome.TRUNCATED, Outcome.HTTP_ERROR})  # fmt: skip


def _recorded_durations(sessions: Sequence[PlannedSession]) -> dict[tuple[str, int, int | None], float]:
    return {(t.session, t.turn, t.xid): t.recorded.duration for s in sessions for t in s.turns
            if t.recorded.outcome.answered and t.recorded.duration is not None}  # fmt: skip


async def _settle(got: Sequence[Observation], origin: float, took: dict[tuple[str, int, int | None], float]) -> None:
    """Before the next replay, let the engine finish what this one gave up on (`still_busy`):
    a replay queued behind abandoned work would fail for the cut, not for itself."""
    for obs in got:  # what this replay answered tells how long the rest takes
        if obs.outcome.answered and obs.end is not None:
            took[(obs.session, obs.turn, obs.xid)] = obs.end
    now = time.monotonic()
    busy = still_busy(
        (obs.session, now - (origin + obs.t_start), took.get((obs.session, obs.turn, obs.xid)))
        for obs in got if obs.outcome in ABANDONED
    )  # fmt: skip
    if busy > 0:
        await asyncio.sleep(busy)


def _tee(sink: Sink, got: list[Observation]) -> Sink:
    """A replay sink: to `sink` (the run directory), and kept for the localizer."""

    def both(obs: Observation) -> None:
        sink(obs)
        got.append(obs)

    return both


async def locate_route(sessions: list[PlannedSession], chain: Chain, watchdogs: Watchdogs, budget: Budget,
                       progress: Callable[[str], None],
                       greedy: bool = False, pace: Pace = "recorded") -> tuple[str | None, dict[str, object]]:  # fmt: skip
    """The route to minimize over, found as `check` finds the culprit (replays the ladder at the
    pace minimize replays at, `pace`): via the culprit hop, or direct for the engine; None when no route
    fails. The replays count against the budget."""
    options = minimize_options(watchdogs, chain, greedy=greedy, pace=pace)
    routes = {name: chain.route(name) for name in chain.ladder()}
    progress(f"no --route: looking for the failing route first, as check does ({len(routes)} routes)")
    localizer = make_localizer(sessions, routes, options)
    replays: set[tuple[str, int]] = set()  # one replay: a route's repetition

    def count(obs: Observation) -> None:
        replays.add((obs.route, obs.repetition))

    verdict = await drive(localizer, sessions, routes, options, "minimize-locate", count)
    budget.spend(len(replays))
    doc: dict[str, object] = {"verdict": verdict.verdict, "culprit": verdict.culprit, "says": verdict.summary,
                              "replays": len(replays)}  # fmt: skip
    progress(f"{verdict.verdict}: {verdict.summary} ({len(replays)} replays)")
    if verdict.verdict == PROXY and verdict.culprit:
        return f"via:{verdict.culprit}", doc
    if verdict.verdict == SERVER and verdict.culprit == ENGINE:
        return "direct", doc
    return None, doc


def differences(sessions: Sequence[PlannedSession], options: ReplayOptions,
                recorded: Sequence[RecordedFailure]) -> list[str]:  # fmt: skip
    """What differs between the recording and its replay, said when the recorded failures do not
    reproduce (a verdict of not-reproduced): those are the conditions worth replaying again."""
    if not recorded:
        return []
    # The recorded failures as `proxycheck sessions` names them: by label, retries as attempts.
    failed = [(s.name.label, t) for s in sessions for t in s.turns if t.recorded.outcome.is_failure]
    shown = "; ".join(f"{label} {attempt_text(t.turn, t.attempt, t.attempts)}: {t.recorded.outcome.value}"
                      + (f" ({t.recorded.detail})" if t.recorded.detail else "")
                      for label, t in failed[:RECORDED_SHOWN])  # fmt: skip
    more = f" and {len(recorded) - RECORDED_SHOWN} more" if len(recorded) > RECORDED_SHOWN else ""
    out = [f"recorded failures: {shown}{more}"]
    # A retried turn's think time is its first attempt's (later attempts wait their backoff).
    turns = {(t.session, t.turn): t for s in sessions for t in reversed(s.turns)}
    thinks = [turns[(f.session, f.turn)].think_time for f in recorded if (f.session, f.turn) in turns]
    thinks = [t for t in thinks if t]
    if options.pace != "recorded":
        listed = ", ".join(f"{t:.1f} s" for t in thinks[:3])
        before = f" (recorded before the failing turns: {listed})" if thinks else ""
        out.append(f"think times: replayed at pace {options.pace}, not as recorded{before}")
    elif thinks and max(thinks) >= 5:
        out.append(f"idle: the failing turns came after {max(thinks):.1f} s of think time; a hop's or the engine's "
                   "keep-alive timeout may have changed since")  # fmt: skip
    overlap = _recorded_overlap(sessions)
    if options.concurrency is not None and options.concurrency < overlap:
        out.append(f"concurrency: replayed at most {options.concurrency} sessions at once; "
                   f"the recording had {overlap} at once")  # fmt: skip
    agents = sorted({v for s in sessions for t in s.turns for k, v in t.headers if k.lower() == "user-agent"})
    if agents:
        out.append(f"client: replayed with {options.client}; recorded from {', '.join(agents[:2])}")
    out.append("conditions the replay cannot bring back: load on the engine at the time, a hop restarted or "
               "reconfigured since, network trouble")  # fmt: skip
    return out


def _recorded_overlap(sessions: Sequence[PlannedSession]) -> int:
    """The most sessions the recording had in progress at one time."""
    spans = []
    for s in sessions:
        end = s.start + sum((t.think_time or t.backoff or 0.0) + (t.recorded.duration or 0.0) for t in s.turns)
        spans += [(s.start, 1), (end, -1)]
    best = now = 0
    for _, step in sorted(spans):
        now += step
        best = max(best, now)
    return best
