"""`proxycheck minimize`: the smallest part of a recording that still breaks a route.

Drives the sans-IO search core (`proxycheck.core.ddmin`) with real replays: each candidate is an
ordinary recording written with `write_subset` into a temporary directory, planned like any
recording (`load_sessions`) and replayed over the culprit route at the recorded pace. A candidate
"fails" when any of its exchanges fails on the route (`Outcome.is_failure`) in one of its tries
(`Trials`, from how often the whole recording failed) and the direct route stays clean on it.

The steps, each kept only while the failure persists:

1. baseline: the whole recording twice over the route (k of 2 failing sets the tries) and once
   direct (a failure there is the engine's, not a hop's);
2. ddmin over sessions, then over the turns of the sessions kept (exact-mode bodies carry their
   history, so any subset of turns stays replayable);
3. for the first failing turn: its body size (`shrink_to`, bisected down from the recorded size
   when a body cut to ~512 B passes) and its think time (bisected when ~0 s passes);
4. the last failing candidate is written to `out`, with `minimized.json`: the trigger summary.

Everything is bounded by a `Budget` (replays and/or seconds); when it runs out the best failing
candidate so far is written, marked incomplete.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from proxycheck.core.ddmin import Bisect, Budget, Candidate, DDMin, Trials
from proxycheck.core.errors import BadInput
from proxycheck.core.shrink import shrink_to

SUMMARY_FILE = "minimized.json"
SCHEMA = "proxycheck.minimized/1"
SMALL_BODY = 512  # a body cut to about this size: does the failure depend on the size at all?
BASELINE_RUNS = 2
SIZE_REL_TOL = 0.05
THINK_MIN = 0.1  # think times shorter than this are not bisected
THINK_ABS_TOL = 0.05


class NotReproduced(Exception):
    """The whole recording never failed on the route: nothing to minimize."""


@dataclass(frozen=True)
class _State:
    """A candidate recording: the original exchanges `xids`, with bodies replaced and shifts."""

    xids: tuple[int, ...]
    bodies: dict[int, bytes] = field(default_factory=dict)
    shifts: dict[int, float] = field(default_factory=dict)


@dataclass
class _Found:
    """A candidate seen failing: its state, plan and the failing try's observations."""

    state: _State
    plan: list[Any]
    xmap: dict[int, int]  # the candidate recording's xid -> the original's
    observations: list[Any]

    def first_failure(self) -> Any:
        failing = [o for o in self.observations if o.outcome.is_failure]
        return min(failing, key=lambda o: (o.t_start, o.session, o.turn))

    def planned_turn(self, xid: int | None) -> Any:
        return next(t for s in self.plan for t in s.turns if t.xid == xid)


@dataclass
class MinimizeResult:
    out: str
    complete: bool
    summary: dict[str, Any]

    @property
    def trigger(self) -> dict[str, Any]:
        return self.summary["trigger"]


async def minimize(
    recording_dir: str,
    chain: Any,
    route_name: str,
    out: str,
    *,
    budget: Budget,
    progress: Callable[[str], None] | None = None,
    stall_timeout: float | None = None,
    header_timeout: float | None = None,
    check_direct: bool = True,
) -> MinimizeResult:
    """Minimize the recording at `recording_dir` against `route_name` of `chain` into `out`."""
    m = _Minimizer(recording_dir, chain, route_name, budget, progress or (lambda _: None),
                   stall_timeout=stall_timeout, header_timeout=header_timeout, check_direct=check_direct)  # fmt: skip
    try:
        return await m.run(out)
    finally:
        shutil.rmtree(m.tmp, ignore_errors=True)


class _Minimizer:
    def __init__(self, recording_dir: str, chain: Any, route_name: str, budget: Budget,
                 progress: Callable[[str], None], *, stall_timeout: float | None, header_timeout: float | None,
                 check_direct: bool) -> None:  # fmt: skip
        from proxycheck.commands.replay import load_sessions
        from proxycheck.core.replayplan import derive_watchdogs
        from proxycheck.io.replayer import ReplayOptions
        from proxycheck.io.storage import load

        if route_name == "direct":
            raise BadInput("--route", "give the failing route via:HOP (direct is the reference)")
        self.recording_dir = recording_dir
        self.route = chain.route(route_name)
        self.direct = chain.route("direct")
        self.recording = load(recording_dir)
        self.original = load_sessions(recording_dir)
        try:
            watchdogs = derive_watchdogs(self.original).with_overrides(headers=header_timeout, stall=stall_timeout)
        except ValueError as exc:
            raise BadInput("watchdogs", str(exc)) from None
        self.options = ReplayOptions(watchdogs=watchdogs, pace="recorded", mode="exact", on_fail="continue")
        self.budget = budget
        self.say = progress
        self.check_direct = check_direct
        self.run_id = f"minimize-{uuid.uuid4().hex[:12]}"
        self.tmp = tempfile.mkdtemp(prefix="proxycheck-minimize-")
        self.count = 0
        self.trials: Trials | None = None
        self.tries: list[int] = []  # tries spent on each candidate
        self.best: _Found | None = None
        self.complete = True
        self.by_xid = {t.xid: (s.id, t) for s in self.original for t in s.turns}

    # ------------------------------------------------------------------------------ plumbing

    def now(self) -> float:
        return time.monotonic()

    def exhausted(self) -> bool:
        return self.budget.exhausted(self.now())

    async def replay(self, plan: Sequence[Any], route: Any) -> list[Any]:
        from proxycheck.io.replayer import replay

        got: list[Any] = []
        await replay(plan, [route], self.options, self.run_id, got.append)
        self.budget.spend(1)
        return got

    def materialize(self, state: _State) -> tuple[list[Any], dict[int, int]]:
        from proxycheck.commands.replay import load_sessions
        from proxycheck.io.storage import load
        from proxycheck.io.subset import write_subset

        self.count += 1
        directory = Path(self.tmp) / f"c{self.count:04d}"
        write_subset(self.recording, state.xids, directory, bodies=state.bodies, shifts=state.shifts)
        keep = set(state.xids)
        chosen = [x.xid for x in self.recording.exchanges if x.xid in keep]
        xmap = dict(zip(sorted(x.xid for x in load(directory).exchanges), chosen))
        return load_sessions(str(directory)), xmap

    async def test(self, state: _State) -> bool | None:
        """Whether the candidate fails on the route (and not direct); None when out of budget."""
        assert self.trials is not None
        plan, xmap = self.materialize(state)
        outcomes: list[bool] = []
        failing: list[Any] = []
        while (failed := self.trials.decide(outcomes)) is None:
            if self.exhausted():
                self.complete = False
                return None
            got = await self.replay(plan, self.route)
            outcomes.append(any(o.outcome.is_failure for o in got))
            if outcomes[-1]:
                failing = got
        self.tries.append(len(outcomes))
        if failed and self.check_direct:
            if self.exhausted():
                self.complete = False
                return None
            direct = await self.replay(plan, self.direct)
            if any(o.outcome.is_failure for o in direct):
                self.say("a candidate fails direct too: not kept")
                failed = False
        if failed:
            self.best = _Found(state, plan, xmap, failing)
        return failed

    # ------------------------------------------------------------------------------ steps

    async def run(self, out: str) -> MinimizeResult:
        start = self.now()
        all_xids = tuple(t.xid for s in self.original for t in s.turns)
        plan, xmap = self.materialize(_State(all_xids))
        k, failing = 0, []
        for _ in range(BASELINE_RUNS):
            got = await self.replay(plan, self.route)
            if any(o.outcome.is_failure for o in got):
                k, failing = k + 1, got
        self.say(f"baseline: {k}/{BASELINE_RUNS} run(s) over {self.route.name} failed, {self.budget.spent} replays")
        if k == 0:
            raise NotReproduced(f"{self.recording_dir}: the failure does not reproduce over {self.route.name} "
                                f"({BASELINE_RUNS} replays)")  # fmt: skip
        direct = await self.replay(plan, self.direct)
        if any(o.outcome.is_failure for o in direct):
            raise BadInput(self.recording_dir, "the engine fails too (direct route): not a hop's failure")
        self.trials = Trials(k, BASELINE_RUNS)
        self.say(self.trials.summary())
        self.best = _Found(_State(all_xids), plan, xmap, failing)

        await self.ddmin(list(self.original), lambda ss: _State(tuple(t.xid for s in ss for t in s.turns)),
                                    "sessions")  # fmt: skip
        # The sessions kept are those of the last candidate seen failing (the search's best).
        await self.ddmin(list(self.best.state.xids), lambda xs: _State(tuple(xs)), "turns")
        size = await self.bisect_body()
        think = await self.bisect_think()
        return self.finish(out, start, size, think)

    async def ddmin(self, items: list[Any], make: Callable[[Sequence[Any]], _State], what: str) -> tuple[Any, ...]:
        search: DDMin[Any] = DDMin(items, budget=self.budget)
        while isinstance(step := search.next(now=self.now()), Candidate):
            failed = await self.test(make(step.items))
            if failed is not None:
                search.result(step.id, failed)
        if not step.complete:
            self.complete = False
        self.say(f"{what} {len(items)} -> {len(step.items)}, {self.budget.spent} replays")
        return step.items

    def trigger(self) -> tuple[Any, int, Any]:
        """The first failing observation of the best candidate, its original xid and planned turn."""
        assert self.best is not None
        obs = self.best.first_failure()
        return obs, self.best.xmap[obs.xid], self.best.planned_turn(obs.xid)

    async def bisect_body(self) -> dict[str, Any] | None:
        assert self.best is not None
        _, xid, turn = self.trigger()
        state, body = self.best.state, turn.body
        small = _smallest(body)
        if small is None or len(small) >= len(body) or self.exhausted():
            return None
        failed = await self.test(_State(state.xids, {**state.bodies, xid: small}, state.shifts))
        if failed is None:
            return None
        if failed:
            self.say(f"request body: fails at {len(small)} B too (size does not matter), {self.budget.spent} replays")
            return {"depends": False, "fails_at": len(small)}
        search = Bisect(len(small), len(body), rel_tol=SIZE_REL_TOL, integer=True, budget=self.budget)
        fails_from, passes_at = len(body), len(small)
        while (value := search.next(now=self.now())) is not None:
            cut = shrink_to(body, int(value))
            if cut is None:
                search.result(value, False)
                continue
            failed = await self.test(_State(state.xids, {**state.bodies, xid: cut}, state.shifts))
            if failed is None:
                search.stop()
                break
            search.result(value, failed)
            if failed:
                fails_from = len(cut)
            else:
                passes_at = max(passes_at, len(cut))
        self.complete &= search.reason == "converged"
        self.say(f"request body: fails from {fails_from} B, passes at {passes_at} B, {self.budget.spent} replays")
        return {"depends": True, "fails_from": fails_from, "passes_at": passes_at, "recorded": len(body)}

    async def bisect_think(self) -> dict[str, Any] | None:
        assert self.best is not None
        _, xid, turn = self.trigger()
        think = turn.think_time
        if not think or think < THINK_MIN or self.exhausted():
            return None
        state = self.best.state
        base = state.shifts.get(xid, 0.0)

        def at(seconds: float) -> _State:
            return _State(state.xids, state.bodies, {**state.shifts, xid: base + seconds - think})

        failed = await self.test(at(0.0))
        if failed is None:
            return None
        if failed:
            self.say(f"think time: fails with none too (think time does not matter), {self.budget.spent} replays")
            return {"depends": False, "recorded": think}
        search = Bisect(0.0, think, rel_tol=0.05, abs_tol=THINK_ABS_TOL, budget=self.budget)
        while (value := search.next(now=self.now())) is not None:
            failed = await self.test(at(value))
            if failed is None:
                search.stop()
                break
            search.result(value, failed)
        self.complete &= search.reason == "converged"
        self.say(f"think time: fails from {search.value:.2f} s, passes at {search.lo:.2f} s, "
                 f"{self.budget.spent} replays")  # fmt: skip
        return {"depends": True, "fails_from": search.value, "passes_at": search.lo, "recorded": think}

    # ------------------------------------------------------------------------------ result

    def finish(self, out: str, start: float, size: dict[str, Any] | None,
               think: dict[str, Any] | None) -> MinimizeResult:  # fmt: skip
        from proxycheck.io.subset import write_subset

        assert self.best is not None and self.trials is not None
        best = self.best
        obs, xid, turn = self.trigger()
        session, original_turn = self.by_xid[xid]
        write_subset(self.recording, best.state.xids, out, bodies=best.state.bodies, shifts=best.state.shifts,
                     source={"minimized_for": self.route.name})  # fmt: skip
        kept = [{"session": self.by_xid[x][0], "turn": self.by_xid[x][1].turn, "xid": x} for x in best.state.xids]
        summary: dict[str, Any] = {
            "schema": SCHEMA,
            "recording": str(self.recording_dir),
            "route": self.route.name,
            "complete": self.complete,
            "sessions": {"before": len(self.original), "after": len({k["session"] for k in kept})},
            "turns": {"before": len(self.by_xid), "after": len(kept)},
            "kept": kept,
            "trigger": {
                "session": session,
                "turn": original_turn.turn,
                "xid": xid,
                "request_bytes": len(turn.body),
                "recorded_request_bytes": len(original_turn.body),
                "think_time": turn.think_time,
                "recorded_think_time": original_turn.think_time,
                "outcome": obs.outcome.value,
                "detail": obs.detail,
                "status": obs.status,
                "events": len(obs.events),
                "content_events": sum(1 for e in obs.events if e.kind == "content"),
            },
            "body_size": size,
            "think": think,
            "trials": {
                "failed": self.trials.k, "runs": self.trials.n, "tries_per_candidate": self.trials.tries,
                "deterministic": self.trials.deterministic, "summary": self.trials.summary(),
            },  # fmt: skip
            "candidates": len(self.tries),
            "tries": sum(self.tries),
            "replays": self.budget.spent,
            "seconds": round(self.now() - start, 3),
        }
        (Path(out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return MinimizeResult(str(out), self.complete, summary)


def _smallest(body: bytes) -> bytes | None:
    """The body cut to about SMALL_BODY bytes, or as near above it as its other fields allow."""
    size = SMALL_BODY
    while size < len(body):
        cut = shrink_to(body, size)
        if cut is not None:
            return cut
        size = int(size * 1.25) + 1
    return None


def describe(summary: dict[str, Any]) -> list[str]:
    """The trigger summary, as lines for a terminal."""
    t = summary["trigger"]
    think = "none" if t["think_time"] is None else f"{t['think_time']:.2f} s"
    lines = [
        f"sessions {summary['sessions']['before']} -> {summary['sessions']['after']}, "
        f"turns {summary['turns']['before']} -> {summary['turns']['after']}"
        + ("" if summary["complete"] else " (budget ran out: not minimal)"),
        f"trigger: {t['session']} turn {t['turn']}: {t['request_bytes']} B request "
        f"(recorded {t['recorded_request_bytes']} B), think time before it {think}",
        f"outcome over {summary['route']}: {t['outcome']}" + (f" ({t['detail']})" if t["detail"] else "")
        + f" after {t['events']} event(s), {t['content_events']} with content",
    ]  # fmt: skip
    size = summary.get("body_size")
    if size and size["depends"]:
        lines.append(f"request size: fails from {size['fails_from']} B, passes at {size['passes_at']} B")
    elif size:
        lines.append(f"request size: does not matter (fails at {size['fails_at']} B too)")
    think_doc = summary.get("think")
    if think_doc and think_doc["depends"]:
        lines.append(f"think time: fails from {think_doc['fails_from']:.2f} s, "
                     f"passes at {think_doc['passes_at']:.2f} s")  # fmt: skip
    elif think_doc:
        lines.append("think time: does not matter (fails with none)")
    tr = summary["trials"]
    lines.append(f"tries: {tr['summary']}; {summary['candidates']} candidate(s), {summary['tries']} tries, "
                 f"{summary['replays']} replays in {summary['seconds']:.1f} s")  # fmt: skip
    return lines
