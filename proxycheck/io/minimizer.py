"""`proxycheck minimize`: the smallest part of a recording that still breaks a route.

Drives the sans-IO search core (`proxycheck.core.minimize.ddmin`) with real replays: each candidate is an
ordinary recording built in memory from the chosen exchanges (`subset_recording`: what
`write_subset` would write), planned like any recording (`proxycheck.io.recordings`) and replayed
over the culprit route at the pace asked for (recorded by default), its think times capped at
`max_think` when one is given (`cap_sessions`: the failing turns' own too, and the stretches with no
session alive). A candidate
"fails" when one of its exchanges fails on the route the way the whole recording did (the same
outcome, e.g. `stall_mid_stream`; any failure with `any_failure`) in one of its tries (`Trials`,
from how often the whole recording failed) and the direct route stays clean on it. A failure of
another kind is another bug, and chasing it would hand the maintainers the wrong reproducer.

The steps, each kept only while the failure persists:

1. baseline: the whole recording twice over the route (k of 2 failing sets the tries and the
   outcomes to match) and once direct (a failure there is the engine's, not a hop's). With the
   direct route itself as the route (an engine failure), there is no clean reference to check;
2. ddmin over sessions, then over the turns of the sessions kept (exact-mode bodies carry their
   history, so any subset of turns stays replayable); a WebSocket session is one exchange there,
   kept or dropped whole, then cut to its first turns (`socket_prefixes`: its turns are its
   memory, so never a middle one; `proxycheck.core.minimize.sockets`);
3. concurrency: with more than one session left, they are replayed one at a time; the failure
   going away says it needs them at once (the summary gives how many were in flight);
4. the first failing turn's history: all its droppable messages dropped at once, else ddmin over
   them (`message_units`: a tool call goes with its results, the last message stays);
5. the first failing turn's body size (`shrink_to`, bisected down from the recorded size when a
   body cut to ~512 B passes) and its think time (bisected when ~0 s passes, down from the think
   time as replayed: the cap, when it shortened it; not at all at pace fast, which waits none);
   on a socket, the history and size steps leave its messages as recorded, the think time is the
   wait before the failing turn, and an idle end's wait is kept (it is when the chain ended it);
6. the last failing candidate is written to `out`, with `minimized.json`: the trigger summary.

Everything is bounded by a `Budget` (replays and/or seconds); when it runs out the best failing
candidate so far is written, marked incomplete. When the best failing candidate is the whole
input (no session or turn left out, no body cut, no think time shortened by the search), nothing is
written: the result says so (`removed` False) and why (`reason`: the budget spent on the baseline,
every candidate losing the failure), so the caller can say that instead of claiming a reproducer,
and `out` stays as it was for the next try.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from proxycheck.core.errors import BadInput, NotReproduced
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.minimize.ddmin import Bisect, Budget, Candidate, DDMin, Trials
from proxycheck.core.minimize.shrink import drop_units, message_units, shrink_to
from proxycheck.core.recording.sessions import attempt_text
from proxycheck.core.replay.focus import ThinkCut, cap_think_times, compact_starts
from proxycheck.core.replay.plan import Pace, derive_watchdogs, pace_factor, start_delay, think_delay
from proxycheck.io.outputs import make_dirs, write_file
from proxycheck.io.recordings import LoadedRecording, open_recording
from proxycheck.io.subset import subset_recording, write_subset

SUMMARY_FILE = "minimized.json"
SCHEMA = "proxycheck.minimized/1"
SMALL_BODY = 512  # a body cut to about this size: does the failure depend on the size at all?
BASELINE_RUNS = 2
SIZE_REL_TOL = 0.05
THINK_MIN = 0.1  # think times shorter than this are not bisected
THINK_ABS_TOL = 0.05
HINT_MAX_THINK = 5.0  # the cap a "nothing removed" suggests, for think times longer than it (keeps a 5 s keep-alive's idle)
HINT_WAITS = 1.0  # seconds of waiting in a replay above which a "nothing removed" suggests --pace fast


@dataclass(frozen=True)
class _State:
    """A candidate recording: the original exchanges `xids`, with bodies replaced and shifts; a
    WebSocket session (one exchange) cut to its first turns (`sockets`: xid -> turns kept) and
    the waits before its turns moved (`socket_shifts`: xid -> turn -> seconds), as
    `proxycheck.core.minimize.sockets.cut_socket` says."""

    xids: tuple[int, ...]
    bodies: dict[int, bytes] = field(default_factory=dict)
    shifts: dict[int, float] = field(default_factory=dict)
    sockets: dict[int, int] = field(default_factory=dict)
    socket_shifts: dict[int, dict[int, float]] = field(default_factory=dict)


@dataclass
class _Found:
    """A candidate seen failing: its state, plan and the failing try's observations (a
    candidate keeps the original's exchange numbers)."""

    state: _State
    plan: list[Any]
    observations: list[Any]
    matches: Callable[[Any], bool]  # an observation failing the way that counts

    def first_failure(self) -> Any:
        failing = [o for o in self.observations if self.matches(o)]
        return min(failing, key=lambda o: (o.t_start, o.session, o.turn))

    def in_flight(self, obs: Any) -> int:
        """Exchanges of the failing try in flight while `obs` was, itself included. (Not "when it
        started": which of two requests sent in the same millisecond reaches a hop first is
        the network's choice, so the failing one may have left the client first.)"""
        end = obs.t_start + (obs.end or 0.0)
        return sum(1 for o in self.observations
                   if o.t_start <= end and (o.end is None or o.t_start + o.end >= obs.t_start))  # fmt: skip

    def planned_turn(self, obs: Any) -> Any:
        """The planned turn `obs` observed: by its exchange and its turn number, as every turn
        of a socket shares the socket's exchange."""
        return next(t for s in self.plan for t in s.turns if (t.xid, t.turn) == (obs.xid, obs.turn))


@dataclass
class MinimizeResult:
    """What minimize found: `summary` is `minimized.json`'s content. `removed` False: the best
    failing candidate was the whole input, nothing was written to `out`, and `reason` says why."""

    out: str
    complete: bool
    summary: dict[str, Any]
    interrupted: bool = False
    removed: bool = True
    reason: str = ""

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
    watchdogs: Any = None,
    any_failure: bool = False,
    culprit: dict[str, Any] | None = None,
    greedy: bool = False,
    recording: LoadedRecording | None = None,
    pace: Pace = "recorded",
    max_think: float | None = None,
) -> MinimizeResult:
    """Minimize the recording at `recording_dir` against `route_name` of `chain` into `out`.
    `culprit`: how the route was found, when the command looked for it (kept in the summary);
    `watchdogs`: the replays' (default: derived from the recording); `greedy`: every replay with
    greedy sampling parameters (`--greedy`); `recording`: the recording already opened (by the
    command), so it is not loaded again; `pace` and `max_think`: how every replay waits (`--pace`,
    `--max-think`: see `cap_sessions`)."""
    m = _Minimizer(recording_dir, chain, route_name, budget, progress or (lambda _: None),
                   watchdogs=watchdogs, any_failure=any_failure, greedy=greedy, loaded=recording,
                   pace=pace, max_think=max_think)  # fmt: skip
    m.culprit = culprit
    return await m.run(out)


class _Minimizer:
    def __init__(self, recording_dir: str, chain: Any, route_name: str, budget: Budget,
                 progress: Callable[[str], None], *, watchdogs: Any, any_failure: bool,
                 greedy: bool = False, loaded: LoadedRecording | None = None, pace: Pace = "recorded",
                 max_think: float | None = None) -> None:  # fmt: skip
        self.recording_dir = recording_dir
        self.route = chain.route(route_name)
        self.direct = chain.route("direct")
        self.loaded = loaded if loaded is not None else open_recording(recording_dir)
        self.recording = self.loaded.recording
        self.original = self.loaded.planned
        if watchdogs is None:
            watchdogs = derive_watchdogs(self.original)
        self.options = minimize_options(watchdogs, chain, greedy=greedy, pace=pace)
        self.max_think = max_think
        self.think_cut = ThinkCut(max_think)  # what the cap did to the whole input (set by the baseline)
        self.baseline: list[float] = []  # how long each baseline replay took (seconds)
        self.budget = budget
        self.say = progress
        # Over the direct route (an engine failure) there is no clean reference to check against.
        self.check_direct = route_name != "direct"
        self.any_failure = any_failure
        self.kinds: set[Outcome] = set()  # the outcomes the whole recording failed with
        self.culprit: dict[str, Any] | None = None
        self.run_id = f"minimize-{uuid.uuid4().hex[:12]}"
        self.started = self.now()
        self.interrupted = False
        self.trials: Trials | None = None
        self.tries: list[int] = []  # tries spent on each candidate
        self.best: _Found | None = None
        self.complete = True
        # A turn is its exchange and its number: a socket's turns share the socket's exchange (and
        # keep their numbers in a candidate, a prefix of them), an HTTP turn has its own (and is
        # numbered again in a candidate that left turns out).
        self.by_turn = {(t.xid, t.turn): (s.id, t) for s in self.original for t in s.turns}
        self.by_xid = {t.xid: (s.id, t) for s in self.original if s.transport != "websocket" for t in s.turns}
        self.all_xids = _xids(self.original)
        # Each socket's turns (its idle end, planned as a last turn, apart): what a prefix cuts.
        self.socket_turns = {s.turns[0].xid: [t for t in s.turns if not t.socket_end] for s in self.original
                             if s.transport == "websocket" and not s.turns[0].handshake}  # fmt: skip
        self.labels = {s.id: s.name.label for s in self.original}  # as `proxycheck sessions` names them

    # ------------------------------------------------------------------------------ plumbing

    def now(self) -> float:
        return time.monotonic()

    def exhausted(self) -> bool:
        return self.budget.exhausted(self.now())

    def matches(self, obs: Any) -> bool:
        """Whether an observation fails the way that counts (see the module docstring)."""
        return obs.outcome.is_failure and (self.any_failure or obs.outcome in self.kinds)

    async def replay(self, plan: Sequence[Any], route: Any, options: Any = None) -> list[Any]:
        from proxycheck.io.replayer import replay

        got: list[Any] = []
        await replay(plan, [route], options or self.options, self.run_id, got.append)
        self.budget.spend(1)
        return got

    def materialize(self, state: _State, *, capped: bool = True) -> list[Any]:
        """The candidate's plan, from the candidate recording built in memory (the original's
        exchange numbers, sessions named by the original's session headers): as replayed, think
        times capped at `max_think` (`capped` False: as the candidate recording holds them)."""
        candidate = subset_recording(self.recording, state.xids, bodies=state.bodies, shifts=state.shifts,
                                     sockets=state.sockets, socket_shifts=state.socket_shifts)  # fmt: skip
        loaded = LoadedRecording(candidate, self.loaded.session_headers, self.loaded.session_fields,
                                 where=self.recording_dir)  # fmt: skip
        return cap_sessions(loaded.planned, self.max_think)[0] if capped else loaded.planned

    def as_recorded(self, state: _State, turn: Any) -> Any:
        """The candidate's planned `turn` as its recording holds it (think time not capped)."""
        return next(t for s in self.materialize(state, capped=False) for t in s.turns
                    if (t.xid, t.turn) == (turn.xid, turn.turn))  # fmt: skip

    def original_turn(self, turn: Any) -> tuple[str, Any]:
        """The session and the original's planned turn of a candidate's `turn`: a socket's idle
        end follows its last kept turn in a candidate, and is the original's idle end."""
        if turn.socket_end:
            return next((s.id, t) for s in self.original for t in s.turns if t.xid == turn.xid and t.socket_end)
        return self.by_xid[turn.xid] if turn.xid in self.by_xid else self.by_turn[(turn.xid, turn.turn)]

    async def test(self, state: _State, what: str, options: Any = None, keep: bool = True) -> bool | None:
        """Whether the candidate fails on the route (and not direct); None when out of budget.
        `what` names the candidate in the progress line; `keep`: a failing candidate becomes the
        best one (not for a trial under other replay options)."""
        assert self.trials is not None
        plan = self.materialize(state)
        outcomes: list[bool] = []
        failing: list[Any] = []
        while (failed := self.trials.decide(outcomes)) is None:
            if self.exhausted():
                self.complete = False
                return None
            got = await self.replay(plan, self.route, options)
            outcomes.append(any(self.matches(o) for o in got))
            if outcomes[-1]:
                failing = got
        self.tries.append(len(outcomes))
        note = ""
        if failed and self.check_direct:
            if self.exhausted():
                self.complete = False
                return None
            direct = await self.replay(plan, self.direct, options)
            if any(o.outcome.is_failure for o in direct):
                note, failed = " over direct too: not kept", False
        if failed and keep:
            self.best = _Found(state, plan, failing, self.matches)
        sessions = len({s.id for s in plan})
        turns = sum(len(s.turns) for s in plan)
        tries = f"{len(outcomes)} tries" if len(outcomes) > 1 else "1 try"
        self.say(f"  candidate {len(self.tries)}: {what}, {sessions} session(s), {turns} turn(s): "
                 f"{'fails' if failed else 'passes'}{note} ({tries}); {self._spent()}")  # fmt: skip
        return failed

    def _spent(self) -> str:
        left = "" if self.budget.replays is None else f"/{self.budget.replays}"
        return f"{self.budget.spent}{left} replays, {self.now() - self.started:.0f} s"

    # ------------------------------------------------------------------------------ steps

    async def run(self, out: str) -> MinimizeResult:
        self.started = start = self.now()
        all_xids = self.all_xids
        plan = self.materialize(_State(all_xids))
        self.think_cut = cap_sessions(self.original, self.max_think)[1]
        if self.max_think is not None:
            self.say(f"replayed with {self.think_cut.text()}")
        k, failing = 0, []
        kinds: set[Outcome] = set()
        for _ in range(BASELINE_RUNS):
            began = self.now()
            got = await self.replay(plan, self.route)
            self.baseline.append(self.now() - began)
            failures = {o.outcome for o in got if o.outcome.is_failure}
            if failures:
                k, failing, kinds = k + 1, got, kinds | failures
        shown = ", ".join(sorted(o.value for o in kinds))
        self.say(f"baseline: {k}/{BASELINE_RUNS} replays over {self.route.name} failed" + (f" ({shown})" if k else ""))
        if k == 0:
            raise NotReproduced(f"{self.recording_dir}: the failure does not reproduce over {self.route.name} "
                                f"({BASELINE_RUNS} replays)")  # fmt: skip
        if self.check_direct:
            began = self.now()
            direct = await self.replay(plan, self.direct)
            self.baseline.append(self.now() - began)
            if any(o.outcome.is_failure for o in direct):
                raise BadInput(self.recording_dir, "the engine fails too (direct route): not a hop's failure; "
                                                   "minimize it with --route direct")  # fmt: skip
        self.kinds = kinds
        self.trials = Trials(k, BASELINE_RUNS)
        self.say(self.trials.summary())
        self.best = _Found(_State(all_xids), plan, failing, self.matches)

        steps: dict[str, Any] = dict.fromkeys(("socket_turns", "concurrency", "messages", "body_size", "think"))
        try:
            await self.ddmin(list(self.original), lambda ss: _State(_xids(ss)), "sessions")
            # The sessions kept are those of the last candidate seen failing (the search's best). A
            # socket is one exchange here, kept or dropped whole: its turns are cut next, as a prefix.
            await self.ddmin(list(self.best.state.xids), lambda xs: _State(tuple(xs)), "turns")
            steps["socket_turns"] = await self.socket_prefixes()
            steps["concurrency"] = await self.one_at_a_time()
            steps["messages"] = await self.drop_messages()
            steps["body_size"] = await self.bisect_body()
            steps["think"] = await self.bisect_think()
        except asyncio.CancelledError:
            # Ctrl-C: the smallest failing candidate so far is still worth having (`finish` says
            # whether there is one smaller than the input).
            self.complete, self.interrupted = False, True
        return self.finish(out, start, steps)

    async def ddmin(self, items: list[Any], make: Callable[[Sequence[Any]], _State | None],
                    what: str) -> tuple[Any, ...]:  # fmt: skip
        """ddmin over `items`; `make` turns a subset into a candidate (None: not a valid one)."""
        self.say(f"{what}: {len(items)} to minimize; {self._spent()}")
        search: DDMin[Any] = DDMin(items, budget=self.budget, keep=lambda sub: make(sub) is not None)
        while isinstance(step := search.next(now=self.now()), Candidate):
            state = make(step.items)
            assert state is not None  # `keep` rejected the invalid ones
            failed = await self.test(state, f"{len(step.items)} of {len(items)} {what}")
            if failed is not None:
                search.result(step.id, failed)
        if not step.complete:
            self.complete = False
        self.say(f"{what} {len(items)} -> {len(step.items)}; {self._spent()}")
        return step.items

    def trigger(self) -> tuple[Any, int, Any]:
        """The first failing observation of the best candidate, its original xid and planned turn
        (on a socket: the turn that failed, not the socket's first)."""
        assert self.best is not None
        obs = self.best.first_failure()
        return obs, obs.xid, self.best.planned_turn(obs)

    async def socket_prefixes(self) -> list[dict[str, Any]] | None:
        """Each socket kept cut to its first turns, up to its failure: the turns before a turn are
        its memory, so a prefix is all a socket can lose (`cut_socket`)."""
        assert self.best is not None
        sockets = [x for x in self.best.state.xids if x in self.socket_turns]
        if not sockets:
            return None
        found = []
        for xid in sockets:
            if self.exhausted():
                self.complete = False
                break
            found.append(await self.socket_prefix(xid))
        return found

    async def socket_prefix(self, xid: int) -> dict[str, Any]:
        """The fewest first turns of socket `xid` that keep the failure. A turn of it that fails
        needs the turns before it (its memory) and none after: its turns up to it are tried, and
        no fewer. An idle end failing (it follows the last turn kept), or a socket kept for what
        it does to another session: the number of turns bisected."""
        assert self.best is not None
        recorded = len(self.socket_turns[xid])
        session, _ = self.by_turn[(xid, 1)]
        label = self.labels[session]
        failing = [self.best.planned_turn(o) for o in self.best.observations if o.xid == xid and self.matches(o)]
        failed_at = min((t.turn for t in failing if not t.socket_end), default=None)

        def at(k: int) -> _State:
            state = self.best.state  # type: ignore[union-attr]
            return replace(state, sockets={**state.sockets, xid: k})

        kept = recorded
        if failed_at is not None:
            if failed_at < recorded:
                failed = await self.test(at(failed_at), f"socket {label}: its first {failed_at} of {recorded} turns")
                kept = failed_at if failed else recorded
        else:
            search = Bisect(0, recorded, integer=True, budget=self.budget)
            while (value := search.next(now=self.now())) is not None:
                failed = await self.test(at(int(value)), f"socket {label}: its first {int(value)} of {recorded} turns")
                if failed is None:
                    search.stop()
                    break
                search.result(value, failed)
            kept = int(search.value)
            self.complete &= search.reason == "converged"
        self.say(f"socket {self.labels[session]}: turns {recorded} -> {kept}; {self._spent()}")
        return {"session": session, "label": self.labels[session], "xid": xid, "before": recorded, "after": kept}

    async def one_at_a_time(self) -> dict[str, Any] | None:
        """With several sessions left: whether the failure needs them at once."""
        assert self.best is not None
        obs = self.best.first_failure()
        at_once = self.best.in_flight(obs)
        sessions = len({s.id for s in self.best.plan})
        if sessions < 2 or self.exhausted():
            return None
        serial = replace(self.options, concurrency=1)
        failed = await self.test(self.best.state, "one session at a time", serial, keep=False)
        if failed is None:
            return None
        verdict = "does not matter (fails one at a time too)" if failed else "the failure needs them at once"
        self.say(f"concurrency: {sessions} sessions, {at_once} exchange(s) in flight with the failing one: {verdict}")
        return {"depends": not failed, "sessions": sessions, "in_flight": at_once}

    async def drop_messages(self) -> dict[str, Any] | None:
        """The failing turn's history: every droppable message dropped, else ddmin over them."""
        assert self.best is not None
        _, xid, turn = self.trigger()
        state, body = self.best.state, turn.body
        if _on_socket(turn, "history: not cut", self.say):
            return None
        units = message_units(body)
        if not units or self.exhausted():
            return None

        def make(kept: Sequence[tuple[int, ...]]) -> _State | None:
            cut = drop_units(body, [u for u in units if u not in kept])
            return None if cut is None else replace(state, bodies={**state.bodies, xid: cut})

        bare = make(())
        failed = None if bare is None else await self.test(bare, "no droppable message")
        if failed is None and bare is not None:
            return None
        if failed:
            kept: tuple[tuple[int, ...], ...] = ()
        else:
            kept = await self.ddmin(units, make, "message groups")
        droppable, left = _messages(units), _messages(kept)
        self.say(f"history of the failing turn: {droppable} droppable message(s) -> {left}")
        return {"droppable": droppable, "kept": left}

    async def bisect_body(self) -> dict[str, Any] | None:
        assert self.best is not None
        _, xid, turn = self.trigger()
        state, body = self.best.state, turn.body
        if _on_socket(turn, "request body: not cut", self.say):
            return None
        small = _smallest(body)
        if small is None or len(small) >= len(body) or self.exhausted():
            return None
        failed = await self.test(replace(state, bodies={**state.bodies, xid: small}),
                                 f"request body cut to {len(small)} B")  # fmt: skip
        if failed is None:
            return None
        if failed:
            self.say(f"request body: fails at {len(small)} B too (size does not matter); {self._spent()}")
            return {"depends": False, "fails_at": len(small)}
        search = Bisect(len(small), len(body), rel_tol=SIZE_REL_TOL, integer=True, budget=self.budget)
        fails_from, passes_at = len(body), len(small)
        while (value := search.next(now=self.now())) is not None:
            cut = shrink_to(body, int(value))
            if cut is None:
                search.result(value, False)
                continue
            failed = await self.test(replace(state, bodies={**state.bodies, xid: cut}),
                                     f"request body cut to {len(cut)} B")  # fmt: skip
            if failed is None:
                search.stop()
                break
            search.result(value, failed)
            if failed:
                fails_from = len(cut)
            else:
                passes_at = max(passes_at, len(cut))
        self.complete &= search.reason == "converged"
        self.say(f"request body: fails from {fails_from} B, passes at {passes_at} B; {self._spent()}")
        return {"depends": True, "fails_from": fails_from, "passes_at": passes_at, "recorded": len(body)}

    async def bisect_think(self) -> dict[str, Any] | None:
        """The failing turn's think time: bisected down from the one replayed (the cap, when it
        shortened the recorded one), each candidate recording holding the value tried."""
        assert self.best is not None
        _, xid, turn = self.trigger()
        think = turn.backoff if turn.attempt > 1 else turn.think_time  # a retry waits its backoff
        if turn.socket_end:
            # Not a wait of the client's: when the chain ended the socket, which the replay watches
            # for (with a margin). Shortened, the recording would claim an earlier end than the
            # chain made, and the margin could still catch the chain's own.
            self.say("think time: not bisected (the failure is a socket's idle end: its wait is when the chain "
                     "ended it, kept as recorded)")  # fmt: skip
            return None
        if not think or think < THINK_MIN or self.exhausted():
            return None
        if pace_factor(self.options.pace) == 0:
            self.say("think time: not bisected (at pace fast no think time is waited)")
            return None
        state = self.best.state
        held = self.as_recorded(state, turn)
        recorded = held.backoff if held.attempt > 1 else held.think_time  # what the candidate recording holds
        on_socket = turn.xid in self.socket_turns
        moves = state.socket_shifts.get(xid, {})
        base = moves.get(turn.turn, 0.0) if on_socket else state.shifts.get(xid, 0.0)

        def at(seconds: float) -> _State:
            # A shift moves the request from where the recording holds it: from `recorded`, not the cap.
            shift = base + seconds - recorded
            if on_socket:  # the wait before this turn of the socket (or before its idle end), and no other
                return replace(state, socket_shifts={**state.socket_shifts, xid: {**moves, turn.turn: shift}})
            return replace(state, shifts={**state.shifts, xid: shift})

        failed = await self.test(at(0.0), "no think time")
        if failed is None:
            return None
        if failed:
            self.say(f"think time: fails with none too (think time does not matter); {self._spent()}")
            return {"depends": False, "recorded": recorded, "from": think}
        search = Bisect(0.0, think, rel_tol=0.05, abs_tol=THINK_ABS_TOL, budget=self.budget)
        while (value := search.next(now=self.now())) is not None:
            failed = await self.test(at(value), f"think time {value:.2f} s")
            if failed is None:
                search.stop()
                break
            search.result(value, failed)
        self.complete &= search.reason == "converged"
        self.say(f"think time: fails from {search.value:.2f} s, passes at {search.lo:.2f} s; {self._spent()}")
        return {"depends": True, "fails_from": search.value, "passes_at": search.lo, "recorded": recorded, "from": think}

    # ------------------------------------------------------------------------------ result

    def removed(self) -> bool:
        """Whether the best failing candidate is smaller than the input: a session or turn left
        out, a body cut or a think time shortened by the search (the cap is the replays', not the
        search's: it leaves the recording as it was)."""
        assert self.best is not None
        state = self.best.state
        cut = any(k < len(self.socket_turns[x]) for x, k in state.sockets.items())
        moved = any(v for m in state.socket_shifts.values() for v in m.values())
        return set(state.xids) != set(self.all_xids) or bool(state.bodies) or any(state.shifts.values()) or cut or moved

    def finish(self, out: str, start: float, steps: dict[str, dict[str, Any] | None]) -> MinimizeResult:
        assert self.best is not None and self.trials is not None
        best = self.best
        obs, xid, turn = self.trigger()
        session, original_turn = self.original_turn(turn)
        held = self.as_recorded(best.state, turn)  # the trigger as the result holds it: its think time not capped
        removed = self.removed()
        if self.interrupted:
            self.say("interrupted: keeping the smallest failing candidate so far" if removed
                     else "interrupted before anything was removed: nothing written")  # fmt: skip
        if removed:
            make_dirs(out)  # 0700, and so is each parent it creates
            write_subset(self.recording, best.state.xids, out, bodies=best.state.bodies, shifts=best.state.shifts,
                         source={"minimized_for": self.route.name}, sockets=best.state.sockets,
                         socket_shifts=best.state.socket_shifts)  # fmt: skip
        kept = [{"session": s, "label": self.labels[s], "turn": t.turn, "xid": t.xid}
                for s, t in (self.original_turn(p) for one in best.plan for p in one.turns)]  # fmt: skip
        summary: dict[str, Any] = {
            "schema": SCHEMA,
            "recording": str(self.recording_dir),
            "route": self.route.name,
            "culprit": self.culprit,
            "complete": self.complete,
            "interrupted": self.interrupted,
            "removed": removed,
            "matched": "any failure" if self.any_failure else sorted(o.value for o in self.kinds),
            "sessions": {"before": len(self.original), "after": len({k["session"] for k in kept})},
            "turns": {"before": len(self.by_turn), "after": len(kept)},
            "kept": kept,
            "trigger": {
                "session": session,
                "label": self.labels[session],
                "turn": original_turn.turn,
                "attempt": original_turn.attempt,
                "attempts": original_turn.attempts,
                "xid": xid,
                "request_bytes": len(turn.body),
                "recorded_request_bytes": len(original_turn.body),
                "think_time": held.think_time,
                "recorded_think_time": original_turn.think_time,
                "replayed_think_time": round(think_delay(turn, self.options.pace), 6),  # as waited: capped, paced
                "backoff": turn.backoff,  # a retry's wait before it, instead of a think time
                "outcome": obs.outcome.value,
                "detail": obs.detail,
                "status": obs.status,
                "events": len(obs.events),
                "content_events": sum(1 for e in obs.events if e.kind == "content"),
                "in_flight": best.in_flight(obs),
                "transport": "websocket" if turn.method == "WS" else "http",
                **self.socket_of(turn),
            },
            **steps,
            "trials": {
                "failed": self.trials.k, "runs": self.trials.n, "tries_per_candidate": self.trials.tries,
                "deterministic": self.trials.deterministic, "summary": self.trials.summary(),
            },  # fmt: skip
            "greedy": self.options.greedy,  # replayed with --greedy: the reproducer needs it too
            # How the replays waited (--pace, --max-think): the reproducer fails replayed so.
            "pace": self.options.pace,
            "max_think": self.max_think,
            "think_cut": {**self.think_cut.to_json(), "said": self.think_cut.text()},
            "candidates": len(self.tries),
            "tries": sum(self.tries),
            "replays": self.budget.spent,
            "seconds": round(self.now() - start, 3),
        }
        if not removed:
            reason = self.nothing_removed()
            summary["reason"] = reason
            return MinimizeResult(str(out), self.complete, summary, self.interrupted, removed=False, reason=reason)
        write_file(Path(out) / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")  # 0600, as the recording
        return MinimizeResult(str(out), self.complete, summary, self.interrupted)

    def socket_of(self, turn: Any) -> dict[str, Any]:
        """For a socket's turn: the socket's turns before and after, and whether the turn is its
        idle end (replayed as the wait after its last kept turn)."""
        if turn.xid not in self.socket_turns:
            return {}
        assert self.best is not None
        after = sum(1 for s in self.best.plan for t in s.turns if t.xid == turn.xid and not t.socket_end)
        return {"socket": {"turns": {"before": len(self.socket_turns[turn.xid]), "after": after},
                           "idle_end": turn.socket_end}}  # fmt: skip

    def nothing_removed(self) -> str:
        """Why the best failing candidate is the whole input, and what to try (one line's words)."""
        tried = len(self.tries)
        if self.interrupted:
            return f"interrupted after {tried} candidate(s), before any lost a part of the input and kept the failure"
        if self.complete:
            if not tried:
                return "there was nothing smaller to try"
            return f"every candidate lost the failure ({tried} tried): the whole input is needed for it"
        ran_out = self._budget_text()
        if tried:
            said = f"every candidate tried lost the failure ({tried}, before the budget ({ran_out}) ran out)"
        else:
            replays = len(self.baseline)
            each = sum(self.baseline) / replays if replays else 0.0
            spent = f"the baseline ({replays} replays of {_seconds(each)} each)"
            located = (self.culprit or {}).get("replays")
            if located:
                spent = f"locating the route ({located} replays) and {spent}"
            said = f"the budget ({ran_out}) was spent on {spent}"
        return f"{said}; try {_either(self._hints())}"

    def _budget_text(self) -> str:
        """The limit that ran out, as the flag that set it."""
        if self.budget.replays is not None and self.budget.spent >= self.budget.replays:
            return f"--budget {self.budget.replays} replays"
        return f"--time {self.budget.seconds:g} s" if self.budget.seconds is not None else "the budget"

    def _hints(self) -> list[str]:
        """What would let the search go further: not waiting what the replays wait, or a larger budget."""
        pace = self.options.pace
        plan = self.materialize(_State(self.all_xids))
        hints = []
        if pace != "fast":
            waits = max((start_delay(s, pace) + sum(think_delay(t, pace) for t in s.turns) for s in plan), default=0.0)
            longest = max((think_delay(t, "recorded") for s in plan for t in s.turns), default=0.0)
            if waits >= HINT_WAITS:
                hints.append("--pace fast")
            if longest > HINT_MAX_THINK and (self.max_think is None or self.max_think > HINT_MAX_THINK):
                hints.append(f"--max-think {HINT_MAX_THINK:g}")
        out_of_replays = self.budget.replays is not None and self.budget.spent >= self.budget.replays
        hints.append("a larger --budget" if out_of_replays else "a longer --time")
        return hints


def cap_sessions(sessions: Sequence[Any], max_think: float | None) -> tuple[list[Any], ThinkCut]:
    """`sessions` as minimize replays them under `--max-think`: every think time longer than it
    shortened to it, the failing turns' own too (a cap given is the user's call: minimize has no
    focus pass to fall back on), and every stretch with no session alive cut to it as well; what
    that did. `max_think` None: as recorded."""
    capped, cut = cap_think_times(sessions, max_think, protected=False)
    return (compact_starts(capped, max_think) if max_think is not None else capped), cut


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def _either(options: Sequence[str]) -> str:
    """"a", "a or b", "a, b or c"."""
    return options[0] if len(options) == 1 else f"{', '.join(options[:-1])} or {options[-1]}"


def _replayed_as(summary: dict[str, Any]) -> str | None:
    """"replayed at pace fast; think times over 0.2 s shortened to 0.2 s (...): replay it so (--pace fast
    --max-think 0.2)", or None when every replay waited as recorded."""
    pace, cap = summary.get("pace", "recorded"), summary.get("max_think")
    said = []
    if pace != "recorded":
        said.append(f"replayed at pace {pace}")
    if cap is not None:
        said.append((summary.get("think_cut") or {}).get("said") or f"think times over {cap:g} s shortened to {cap:g} s")
    if not said:
        return None
    flags = " ".join(([f"--pace {pace}"] if pace != "recorded" else []) + ([f"--max-think {cap:g}"] if cap is not None else []))
    return f"{'; '.join(said)}: it fails replayed so ({flags})"


def _xids(sessions: Sequence[Any]) -> tuple[int, ...]:
    """The exchanges of `sessions`, each once (every turn of a socket is on the socket's one)."""
    return tuple(dict.fromkeys(t.xid for s in sessions for t in s.turns))


def _on_socket(turn: Any, step: str, say: Callable[[str], None]) -> bool:
    """Whether the failing turn is a socket's (its message is the turn's new input; the history
    is in the socket's memory): the history and body steps leave it as recorded, and say so."""
    if turn.method != "WS":
        return False
    say(f"{step} (a WebSocket turn's message is kept as recorded)")
    return True


def _messages(units: Sequence[tuple[int, ...]]) -> int:
    return sum(len(u) for u in units)


def _smallest(body: bytes) -> bytes | None:
    """The body cut to about SMALL_BODY bytes, or as near above it as its other fields allow."""
    size = SMALL_BODY
    while size < len(body):
        cut = shrink_to(body, size)
        if cut is not None:
            return cut
        size = int(size * 1.25) + 1
    return None


def minimize_options(watchdogs: Any, chain: Any = None, *, greedy: bool = False, pace: Any = "recorded") -> Any:
    """How minimize replays: at `pace` (the recorded one by default), exact bodies (with greedy sampling parameters
    when `greedy`), every turn even after a failure (and, with the chain, stopping at a refused
    credential as every replay does)."""
    from proxycheck.io.replayer import ReplayOptions

    return ReplayOptions(watchdogs=watchdogs, pace=pace, mode="exact", on_fail="continue", chain=chain,
                         greedy=greedy)  # fmt: skip


def describe(summary: dict[str, Any]) -> list[str]:
    """The trigger summary, as lines for a terminal."""
    t = summary["trigger"]
    think = "none" if t["think_time"] is None else f"{t['think_time']:.2f} s"
    replayed = t.get("replayed_think_time")
    if t["think_time"] is not None and replayed is not None and abs(replayed - t["think_time"]) > 0.005:
        think += f" (waited {replayed:.2f} s)"  # capped by --max-think, scaled by --pace
    if t.get("backoff") is not None:
        think = f"none (a retry, after a backoff of {t['backoff']:.2f} s)"
    lines = [
        f"sessions {summary['sessions']['before']} -> {summary['sessions']['after']}, "
        f"turns {summary['turns']['before']} -> {summary['turns']['after']}"
        + ("" if summary["complete"] else
           " (interrupted: not minimal)" if summary.get("interrupted") else " (budget ran out: not minimal)"),
        f"trigger: {t.get('label', t['session'])} {attempt_text(t['turn'], t.get('attempt', 1), t.get('attempts', 1))}: "
        + (f"the socket's idle end, {think} after its last turn kept"
           if (t.get("socket") or {}).get("idle_end") else
           f"{t['request_bytes']} B request (recorded {t['recorded_request_bytes']} B), think time before it {think}"),
        f"outcome over {summary['route']}: {t['outcome']}" + (f" ({t['detail']})" if t["detail"] else "")
        + f" after {t['events']} event(s), {t['content_events']} with content",
    ]  # fmt: skip
    culprit = summary.get("culprit")
    if culprit:
        lines.insert(0, f"route {summary['route']}: {culprit['says']}")
    for one in summary.get("socket_turns") or ():
        lines.append(f"WebSocket session {one['label']}: turns {one['before']} -> {one['after']} (its first "
                     f"{one['after']} kept: a socket's turns are its memory)")  # fmt: skip
    waited = _replayed_as(summary)
    if waited:
        lines.append(waited)
    lines.append(f"in flight with it: {t['in_flight']} exchange(s), itself included")
    concurrency = summary.get("concurrency")
    if concurrency:
        needs = "needed at once (passes one at a time)" if concurrency["depends"] else "not needed at once"
        lines.append(f"concurrency: {concurrency['sessions']} sessions, {needs}")
    messages = summary.get("messages")
    if messages:
        lines.append(f"history: {messages['droppable']} droppable message(s) -> {messages['kept']} kept")
    size = summary.get("body_size")
    if size and size["depends"]:
        lines.append(f"request size: fails from {size['fails_from']} B, passes at {size['passes_at']} B")
    elif size:
        lines.append(f"request size: does not matter (fails at {size['fails_at']} B too)")
    think_doc = summary.get("think")
    if think_doc and think_doc["depends"]:
        capped = think_doc.get("from", think_doc["recorded"]) < think_doc["recorded"]
        lines.append(f"think time: fails from {think_doc['fails_from']:.2f} s, "
                     f"passes at {think_doc['passes_at']:.2f} s"
                     + (f" (bisected from the cap, {think_doc['from']:.2f} s; recorded {think_doc['recorded']:.2f} s)"
                        if capped else ""))  # fmt: skip
    elif think_doc:
        lines.append("think time: does not matter (fails with none)")
    tr = summary["trials"]
    lines.append(f"tries: {tr['summary']}; {summary['candidates']} candidate(s), {summary['tries']} tries, "
                 f"{summary['replays']} replays in {summary['seconds']:.1f} s")  # fmt: skip
    return lines
