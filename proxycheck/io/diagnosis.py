"""Driving a diagnosis: replaying a recording over a chain's ladder as the localizer
(`proxycheck.core.diagnose.localize`) asks, route by route and repetition by repetition, until it
decides. `check` runs one into a run directory (`CheckRun`: Ctrl-C keeps what was observed as a
loadable run, and `interrupted_verdict` says what it shows so far); `minimize` finds the route to
minimize over the same way (`locate_route`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Sequence

from proxycheck.core.diagnose.localize import MAX_REPEAT, Decided, Localizer, RecordedFailure
from proxycheck.core.diagnose.runverdict import RunPlan, run_verdict
from proxycheck.core.diagnose.verdict import ENGINE, PROXY, SERVER, Judged, Verdict
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.minimize.ddmin import Budget
from proxycheck.core.recording.sessions import attempt_text
from proxycheck.core.replay.chain import Chain, Route
from proxycheck.core.replay.plan import PlannedSession
from proxycheck.io.minimizer import minimize_options
from proxycheck.io.replayer import ReplayListener, ReplayOptions, replay
from proxycheck.io.runstore import RunWriter, options_doc

Sink = Callable[[Observation], None]
RECORDED_SHOWN = 3  # recorded failures named in the differences


@dataclass(frozen=True)
class CheckSettings:
    """How the localizer judges: `check`'s --strategy, --repeat, --max-repeat and --fail-on."""

    strategy: str = "ladder"
    repeat: int = 1
    max_repeat: int = MAX_REPEAT
    fail_on: frozenset[Outcome] = frozenset()


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
    directory `out`. `run` raises Interrupted on Ctrl-C, the run closed as interrupted and every
    observation kept; `interrupted_verdict` is then the run's `incomplete` verdict."""

    recording: str
    chain: Chain
    routes: dict[str, Route]
    sessions: list[PlannedSession]
    options: ReplayOptions
    settings: CheckSettings
    out: str
    written: list[Observation] = field(default_factory=list)  # in the order the run holds them

    def localizer(self) -> Localizer:
        s = self.settings
        return make_localizer(self.sessions, self.routes, self.options, strategy=s.strategy, repeat=s.repeat,
                              max_repeat=s.max_repeat, fail_on=s.fail_on, run=self.out)  # fmt: skip

    def run(self, progress: ReplayListener | None = None) -> Checked:
        s = self.settings
        settings = {
            "command": "check", "strategy": s.strategy, "repeat": s.repeat, "max_repeat": s.max_repeat,
            "fail_on": sorted(o.value for o in s.fail_on), "concurrency": self.options.concurrency,
            "pace": self.options.pace, "mode": self.options.mode, "client": self.options.client,
            "on_fail": self.options.on_fail, "greedy": self.options.greedy,
        }  # fmt: skip
        localizer = self.localizer()
        writer = RunWriter(self.out, chain=self.chain.to_doc(), routes=list(self.routes),
                           options=options_doc(self.recording, settings, self.options.watchdogs,
                                               turns=turns_per_session(self.sessions)),
                           sessions=[x.name.to_json() for x in self.sessions])  # fmt: skip

        def keep(obs: Observation) -> None:
            writer.add(obs)
            self.written.append(obs)

        with writer:
            verdict = asyncio.run(drive(localizer, self.sessions, self.routes, self.options, writer.run_id, keep,
                                        progress))  # fmt: skip
        judged = {name: localizer.judged(name) for name in self.routes if localizer.replayed(name)}
        verdict = replace(verdict, sessions=tuple(x.name for x in self.sessions))
        return Checked(verdict, judged, writer.run_id, writer.count, self.out)

    def interrupted_verdict(self) -> tuple[Verdict, dict[str, list[Judged]]]:
        """After Ctrl-C: the `incomplete` verdict of what the run holds, the same `diff` of the run
        gives (the routes missing, what the finished ones show so far)."""
        localizer = self.localizer()
        plan = RunPlan(routes=tuple(self.routes), status="interrupted", driven=True,
                       turns=turns_per_session(self.sessions),
                       stop_session=self.options.on_fail == "stop-session")  # fmt: skip
        verdict = replace(run_verdict(localizer, self.written, plan), sessions=tuple(x.name for x in self.sessions))
        judged = {name: localizer.judged(name) for name in self.routes if localizer.replayed(name)}
        return verdict, judged


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
    )  # fmt: skip


async def drive(localizer: Localizer, sessions: Sequence[PlannedSession], routes: Mapping[str, Route],
                options: ReplayOptions, run_id: str, sink: Sink, progress: ReplayListener | None = None) -> Verdict:  # fmt: skip
    """Replay what the localizer asks until it decides; every observation also goes to `sink`.
    Returns the verdict."""
    next_repetition: Counter[str] = Counter()
    while True:
        step = localizer.next()
        if isinstance(step, Decided):
            return step.verdict
        first = next_repetition[step.route] + 1
        got: list[Observation] = []
        step_options = replace(options, repeat=step.repetitions, first_repetition=first)
        await replay(list(sessions), [routes[step.route]], step_options, run_id, _tee(sink, got), progress)
        next_repetition[step.route] += step.repetitions
        localizer.add(got)


def _tee(sink: Sink, got: list[Observation]) -> Sink:
    """A replay sink: to `sink` (the run directory), and kept for the localizer."""

    def both(obs: Observation) -> None:
        sink(obs)
        got.append(obs)

    return both


async def locate_route(sessions: list[PlannedSession], chain: Chain, watchdogs: Watchdogs, budget: Budget,
                       progress: Callable[[str], None],
                       greedy: bool = False) -> tuple[str | None, dict[str, object]]:  # fmt: skip
    """The route to minimize over, found as `check` finds the culprit (replays the ladder at the
    pace minimize replays at): via the culprit hop, or direct for the engine; None when no route
    fails. The replays count against the budget."""
    options = minimize_options(watchdogs, chain, greedy=greedy)
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
