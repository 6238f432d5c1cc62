"""What a diagnosis replays first, and how long it waits between turns (docs/design.md, "Focus").

A verdict is decided by the sessions that failed in the recording, up to their first failure,
and by enough clean traffic for the noise floor. The rest of a recording of hours mostly waits:
on tool runs, on a person's approvals, on sessions that never fail. This module plans, without
any network, what `check` (and `minimize`) replay to decide sooner:

- `focus`: the failing sessions up to and including their first failed turn (its retries too),
  the sessions that had an exchange in flight with that turn while it still progressed (a hop's
  queue or connection limit needs them; only those turns of theirs, from the first in flight with
  it), and a small sample of clean sessions spread over the recording (as many turns as the
  failing ones reach) for the noise floor. None when the recording shows no failure: then only
  the whole recording can say it is healthy.
- `lay_out`: the focus placed in time: each session in flight with a failure lined up with it as
  recorded, whatever was shortened before it; the clean sample after them, at most as many at
  once as the recording ever had alive.
- `failure_context`: the turns whose recorded think time a replay keeps whatever the cap. A
  failure after an idle gap may need it (a hop dropping idle connections, a NAT forgetting a
  flow): its think time is kept, and so is the one of the turn before it. When other sessions
  had an exchange in flight with the failure, every think time of the failing session and of
  those sessions up to it is kept, so that they still overlap as they did.
- `cap_think_times`: think times longer than the cap shortened to it, except the kept ones.
  Retry backoffs are not think times and stay as recorded.
- `plan_passes`: the passes a check makes, each tried when the one before did not decide: the
  focus with every think time capped (it stands only if the recorded failures fail again at their
  own turns), the focus with the failures' idle kept, the whole recording.
- `compact_starts`: the stretches in which no session to replay is alive, longer than a gap,
  cut to that gap (a session is alive from its start to the end of its last turn, think times
  included), so sessions that overlapped still overlap and the replay does not wait for nothing.

A turn is named by its exchange number (`xid`), unique in a recording.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Collection, Iterable, Sequence

from proxycheck.core.replay.plan import PlannedSession, PlannedTurn, think_delay

AUTO_MAX_THINK = 1.0  # check's own cap (seconds) where the recording shows no failure after idle
CLEAN_SAMPLE = 3  # clean sessions replayed after the failing ones, for the noise floor
START_GAP = 1.0  # the longest stretch with no session alive a compacted replay keeps (seconds)


@dataclass(frozen=True, slots=True)
class ThinkCut:
    """What capping did to one repetition's think times: `shortened` turns lost `saved` seconds;
    `kept` turns longer than the cap kept theirs (a failure's context), the longest `longest_kept`."""

    cap: float | None
    shortened: int = 0
    saved: float = 0.0
    kept: int = 0
    longest_kept: float = 0.0
    protected: bool = True  # the failures' context was kept (False: every think time capped)

    def text(self) -> str:
        """"think times over 1 s shortened to 1 s (12 turns, 340 s less); 2 kept for the failures
        after idle (up to 45.0 s)", or "think times as recorded"."""
        if self.cap is None:
            return "think times as recorded"
        said = f"think times over {_s(self.cap)} shortened to {_s(self.cap)}"
        said += f" ({self.shortened} turn(s), {self.saved:.0f} s less)" if self.shortened else " (none was longer)"
        if self.kept:
            said += f"; {self.kept} kept for the failures after idle (up to {self.longest_kept:.1f} s)"
        elif not self.protected:
            said += ", the failures' too"
        return said

    def to_json(self) -> dict[str, Any]:
        return {"max_think": self.cap, "shortened": self.shortened, "saved": round(self.saved, 3),
                "kept": self.kept, "longest_kept": round(self.longest_kept, 3), "failures_kept": self.protected}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Focus:
    """The part of a recording replayed first (see `focus`): `sessions` to replay (cut), the
    ids of the `failing` ones, of their `companions` (in flight with a failure) and of the clean
    `sample`; `of_sessions` and `of_turns` say how much the whole recording has."""

    sessions: tuple[PlannedSession, ...]
    failing: tuple[str, ...]
    companions: tuple[str, ...]
    sample: tuple[str, ...]
    of_sessions: int
    of_turns: int
    anchors: tuple[tuple[str, str, int], ...] = ()  # (companion, failing session, the failed turn's xid)
    overlap: int = 1  # the most sessions the recording had alive at once

    @property
    def turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)

    @property
    def whole(self) -> bool:
        """The focus is the whole recording (nothing to leave out)."""
        return len(self.sessions) == self.of_sessions and self.turns == self.of_turns


def turn_wait(turn: PlannedTurn) -> float:
    """A turn's recorded think time (0 for none, and for a retry, which waits its backoff)."""
    if turn.attempt > 1 or turn.think_time is None:
        return 0.0
    return max(0.0, turn.think_time)


# ------------------------------------------------------------------------------------------------
# In flight together


def _interval(turn: PlannedTurn) -> tuple[float, float] | None:
    """When the turn's exchange was in flight and still moving in the recording (None: the plan
    has no times): from its request to its last progress. A client that gave up waited in
    silence after that (`client_waited`): what arrived then cannot have caused the wedge. One
    that never ended (a wedge the recorder saw in flight) is in flight to the recording's end."""
    if turn.recorded_at is None:
        return None
    duration = turn.recorded.duration
    if duration is None:
        return turn.recorded_at, math.inf
    return turn.recorded_at, turn.recorded_at + max(0.0, duration - (turn.recorded.client_waited or 0.0))


def in_flight_with(sessions: Sequence[PlannedSession], session: PlannedSession,
                   turn: PlannedTurn) -> list[tuple[PlannedSession, int, int]]:  # fmt: skip
    """The other sessions that had an exchange in flight with `turn` (up to its last progress),
    each with the index of its first turn in flight with it and of its last turn recorded before
    that end: the stretch a replay needs of it to overlap the same way."""
    span = _interval(turn)
    if span is None:
        return []
    begin, end = span
    found = []
    for other in sessions:
        if other is session or other.id == session.id:
            continue
        first: int | None = None
        upto = -1
        for i, t in enumerate(other.turns):
            iv = _interval(t)
            if iv is None or iv[0] > end:
                break  # turns are in recorded order
            upto = i
            if first is None and iv[1] >= begin:
                first = i
        if first is not None:
            found.append((other, first, upto))
    return found


def _first_failure(session: PlannedSession) -> int | None:
    return next((i for i, t in enumerate(session.turns) if t.recorded.outcome.is_failure), None)


def _through_attempts(session: PlannedSession, index: int) -> int:
    """The index of the last attempt of the turn at `index` (a retried turn is one turn)."""
    number = session.turns[index].turn
    while index + 1 < len(session.turns) and session.turns[index + 1].turn == number:
        index += 1
    return index


# ------------------------------------------------------------------------------------------------
# Think times


def turn_key(turn: PlannedTurn) -> tuple[int, int]:
    """A planned turn told apart from every other: its exchange and its number (every turn of a
    WebSocket session shares the socket's exchange)."""
    return (turn.xid, turn.turn)


def failure_context(sessions: Sequence[PlannedSession], cap: float) -> frozenset[tuple[int, int]]:
    """The turns (`turn_key`s) whose think time a replay keeps over `cap`: each failed turn after an idle
    gap longer than the cap and the turn before it; with other sessions in flight at the failure,
    every turn up to it of its session and of those sessions (see the module docstring)."""
    keep: set[tuple[int, int]] = set()
    for session in sessions:
        for i, turn in enumerate(session.turns):
            if not turn.recorded.outcome.is_failure:
                continue
            for j in (i, i - 1):
                if j >= 0 and turn_wait(session.turns[j]) > cap:
                    keep.add(turn_key(session.turns[j]))
            companions = in_flight_with(sessions, session, turn)
            if companions:
                keep.update(turn_key(t) for t in session.turns[: i + 1])
                for other, _, upto in companions:
                    keep.update(turn_key(t) for t in other.turns[: upto + 1])
    return frozenset(keep)


def cap_think_times(sessions: Iterable[PlannedSession], cap: float | None,
                    keep: Collection[tuple[int, int]] = frozenset(), *, protected: bool = True) -> tuple[list[PlannedSession], ThinkCut]:  # fmt: skip
    """`sessions` with every think time over `cap` shortened to it, except the turns in `keep`;
    and what that did. `cap` None: unchanged. `protected` only says, for the report, whether
    `keep` held the failures' context or the caller capped them too."""
    sessions = list(sessions)
    if cap is None:
        return sessions, ThinkCut(None)
    shortened = kept = 0
    saved = longest = 0.0
    out = []
    for session in sessions:
        turns = []
        for turn in session.turns:
            wait = turn_wait(turn)
            if wait > cap and turn_key(turn) in keep:
                kept += 1
                longest = max(longest, wait)
            elif wait > cap:
                shortened += 1
                saved += wait - cap
                turn = replace(turn, think_time=cap)
            turns.append(turn)
        out.append(replace(session, turns=tuple(turns)))
    return out, ThinkCut(cap, shortened, saved, kept, longest, protected)


def compact_starts(sessions: Iterable[PlannedSession], gap: float = START_GAP) -> list[PlannedSession]:
    """`sessions` (in start order) with every stretch in which none of them is alive cut to `gap`
    seconds, and the first starting at once; their order and every overlap stay as they were."""
    ordered = sorted(sessions, key=lambda s: (s.start, s.turns[0].xid if s.turns else 0))
    out = []
    removed = 0.0
    alive_until = -gap  # the first session starts at once: nothing is waited for before it
    for session in ordered:
        if session.start > alive_until + gap:
            removed += session.start - alive_until - gap
        start = round(max(0.0, session.start - removed), 6)
        out.append(session if start == session.start else replace(session, start=start))
        alive_until = max(alive_until, session.start + _length(session))
    return out


def _length(session: PlannedSession) -> float:
    """How long the session takes to replay at the recorded pace: its waits and recorded durations."""
    return sum(think_delay(t, "recorded") + (t.recorded.duration or 0.0) for t in session.turns)


# ------------------------------------------------------------------------------------------------
# Focus


def focus(sessions: Sequence[PlannedSession], sample: int = CLEAN_SAMPLE) -> Focus | None:
    """What to replay first (see the module docstring); None when no session failed."""
    keep_to: dict[str, int] = {}  # session id -> index of its last turn to replay
    keep_from: dict[str, int] = {}  # a companion's first turn to replay (in flight with the failure)
    anchors: dict[str, tuple[str, int]] = {}  # companion -> (failing session, the failed turn's xid)
    failing: list[str] = []
    companions: list[str] = []
    for session in sessions:
        first = _first_failure(session)
        if first is None:
            continue
        failing.append(session.id)
        keep_to[session.id] = _through_attempts(session, first)
    if not failing:
        return None
    by_id = {s.id: s for s in sessions}
    for sid in failing:
        session = by_id[sid]
        turn = session.turns[_first_failure(session) or 0]
        for other, start, upto in in_flight_with(sessions, session, turn):
            if other.transport == "websocket":
                start = 0  # a socket's turns continue its memory: replayed from its first turn
            if other.id in failing:
                keep_to[other.id] = max(keep_to[other.id], upto)
                continue
            if other.id not in anchors:
                companions.append(other.id)
                anchors[other.id] = (sid, turn.xid)
                keep_from[other.id] = start
            keep_from[other.id] = min(keep_from[other.id], start)
            keep_to[other.id] = max(keep_to.get(other.id, -1), upto)
    depth = max(keep_to[sid] + 1 for sid in failing)
    clean = [s for s in sessions if s.id not in keep_to]
    picked = _spread(clean, sample)
    for session in picked:
        keep_to[session.id] = min(len(session.turns), depth) - 1
    chosen = []
    for s in sessions:
        if s.id not in keep_to:
            continue
        start = keep_from.get(s.id, 0)
        turns = s.turns[start : keep_to[s.id] + 1]
        if start:  # a companion starts at its turn in flight with the failure, a session's first
            head = replace(turns[0], think_time=None, backoff=None, new_connection=True)
            s = replace(s, start=turns[0].recorded_at if turns[0].recorded_at is not None else s.start,
                        turns=(head, *turns[1:]))  # fmt: skip
            chosen.append(s)
        else:
            chosen.append(replace(s, turns=turns))
    return Focus(tuple(chosen), tuple(failing), tuple(companions), tuple(s.id for s in picked), len(sessions),
                 sum(len(s.turns) for s in sessions), tuple((c, *anchors[c]) for c in companions),
                 recorded_overlap(sessions))  # fmt: skip


def recorded_overlap(sessions: Sequence[PlannedSession]) -> int:
    """The most sessions the recording had alive at once (from a session's first request to the
    end of its last exchange); 1 for a plan without recorded times."""
    edges = []
    for s in sessions:
        first, last = s.turns[0], s.turns[-1]
        if first.recorded_at is None or last.recorded_at is None:
            return 1
        edges += [(first.recorded_at, 1), (last.recorded_at + (last.recorded.duration or 0.0), -1)]
    best = now = 0
    for _, step in sorted(edges, key=lambda e: (e[0], -e[1])):
        now += step
        best = max(best, now)
    return max(1, best)


def lay_out(sessions: Sequence[PlannedSession], chosen: Focus, gap: float) -> list[PlannedSession]:
    """The focus's sessions (think times as they will be replayed) placed in time: each companion
    lined up with the failed turn it was in flight with (its first kept turn as far before or
    after that turn as recorded), the stretches with nothing alive cut to `gap`, then the clean
    sample after everything else (its sessions are there for the noise floor, not as load beside
    a failure), together, or as many at once as the recording ever had alive."""
    by_id = {s.id: s for s in sessions}
    placed = dict(by_id)
    for companion, sid, xid in chosen.anchors:
        failing, other = by_id[sid], by_id[companion]
        at = _offset_of(failing, xid)
        failed_at = next((t.recorded_at for t in failing.turns if t.xid == xid), None)
        if at is None or failed_at is None or other.turns[0].recorded_at is None:
            continue
        placed[companion] = replace(other, start=max(0.0, failing.start + at - (failed_at - other.turns[0].recorded_at)))
    sample = set(chosen.sample)
    cluster = compact_starts([placed[s.id] for s in sessions if s.id not in sample], gap)
    end = max((s.start + _length(s) for s in cluster), default=-gap)
    out = list(cluster)
    ordered = sorted((placed[sid] for sid in sample), key=lambda s: s.start)
    at_once = max(1, chosen.overlap)  # no more together than the recording ever had
    for i in range(0, len(ordered), at_once):
        start = round(end + gap, 6)
        group = [replace(s, start=start) for s in ordered[i : i + at_once]]
        out.extend(group)
        end = max(start + _length(s) for s in group)
    return out


def _offset_of(session: PlannedSession, xid: int) -> float | None:
    """When the turn `xid` is sent, from the session's start, at the recorded pace of its waits."""
    at = 0.0
    for t in session.turns:
        at += think_delay(t, "recorded")
        if t.xid == xid:
            return at
        at += t.recorded.duration or 0.0
    return None


@dataclass(frozen=True)
class PassPlan:
    """One replay of a check's sessions over the ladder (see `plan_passes`): its `name`, the
    `sessions` it replays and what was done to their think times (`think`), and when its verdict
    stands: `needs_recorded_turns` only when a recorded failure reproduces at its own turn (a pass
    whose timing the recording does not back), else whenever it decides (proxy or server); the
    last pass's verdict stands whatever it is."""

    name: str
    why: str
    sessions: list[PlannedSession]
    think: ThinkCut
    whole: bool
    needs_recorded_turns: bool = False


def plan_passes(sessions: Sequence[PlannedSession], *, full: bool = False, max_think: float | None = None) -> list[PassPlan]:
    """The passes a check makes, in order, each tried only when the one before did not decide
    (docs/design.md, "Focus"):

    1. the focus with every think time capped: the quickest replay that can reproduce the
       recorded failures; its verdict stands only if they fail again at their own turns;
    2. the focus with the failures' idle kept (`failure_context`), when 1 shortened any of it;
    3. the whole recording, think times capped except the failures' context.

    A recording without failures has only 3 (only all of it can say the chain is healthy); with
    `full` there is one pass, the whole recording as recorded (capped only by `max_think`); a
    `max_think` given caps the failures' idle too, so 1 and 2 are one."""
    cap = max_think
    if full:
        capped, cut = cap_think_times(sessions, cap, protected=False)
        return [PassPlan("whole recording", "--full", compact_starts(capped, cap) if cap else capped, cut, True)]
    protect = cap is None
    cap = AUTO_MAX_THINK if cap is None else cap

    def capped(chosen: Sequence[PlannedSession], keep: frozenset[tuple[int, int]]) -> tuple[list[PlannedSession], ThinkCut]:
        out, cut = cap_think_times(chosen, cap, keep, protected=protect)
        return compact_starts(out, min(cap, START_GAP)), cut

    whole_keep = failure_context(sessions, cap) if protect else frozenset()
    whole = PassPlan("whole recording", "", *capped(sessions, whole_keep), True)
    chosen = focus(sessions)
    if chosen is None:
        return [replace(whole, why="the recording shows no failure: only all of it can say the chain is healthy")]
    widened = replace(whole, why="the focus did not decide")
    if chosen.whole:
        return [replace(whole, why="every session failed: the focus is the whole recording")]
    keep = failure_context(chosen.sessions, cap) if protect else frozenset()
    quick_sessions, quick_cut = cap_think_times(chosen.sessions, cap, protected=protect)
    kept_sessions, kept_cut = cap_think_times(chosen.sessions, cap, keep, protected=protect)
    quick_sessions = lay_out(quick_sessions, chosen, min(cap, START_GAP))
    kept_sessions = lay_out(kept_sessions, chosen, min(cap, START_GAP))
    why = _focus_why(chosen)
    passes = []
    if kept_cut.kept:
        passes.append(PassPlan("focus", why, quick_sessions, quick_cut, False, needs_recorded_turns=True))
        passes.append(PassPlan("focus, idle kept", why + "; the failures' idle kept", kept_sessions, kept_cut, False))
    else:
        passes.append(PassPlan("focus", why, kept_sessions, kept_cut, False))
    return [*passes, widened]


def _focus_why(chosen: Focus) -> str:
    """"the 1 failing session up to its first failed turn (s7 turn 3), 2 in flight with it and 3
    clean ones for the noise floor: 6 of 50 sessions, 14 of 950 turns"."""
    by_id = {s.id: s for s in chosen.sessions}
    firsts = []
    for sid in chosen.failing[:FOCUS_NAMED]:
        session = by_id[sid]
        turn = next(t for t in session.turns if t.recorded.outcome.is_failure)
        firsts.append(f"{session.label or sid} turn {turn.turn}")
    more = f" and {len(chosen.failing) - FOCUS_NAMED} more" if len(chosen.failing) > FOCUS_NAMED else ""
    n = len(chosen.failing)
    said = f"the {n} failing session{'s' if n != 1 else ''} up to {'their' if n != 1 else 'its'} first failed turn "
    said += f"({', '.join(firsts)}{more})"
    if chosen.companions:
        said += f", {len(chosen.companions)} in flight with {'them' if n != 1 else 'it'}"
    if chosen.sample:
        said += f" and {len(chosen.sample)} clean one{'s' if len(chosen.sample) != 1 else ''} for the noise floor"
    return (f"{said}: {len(chosen.sessions)} of {chosen.of_sessions} sessions, {chosen.turns} of "
            f"{chosen.of_turns} turns")  # fmt: skip


FOCUS_NAMED = 3  # failing sessions named in the words of the focus


def _spread(sessions: Sequence[PlannedSession], n: int) -> list[PlannedSession]:
    """`n` of `sessions` (in start order) spread evenly over them: the first, the last, and
    between (deterministic, so two checks of one recording replay the same)."""
    if n <= 0 or not sessions:
        return []
    if len(sessions) <= n:
        return list(sessions)
    if n == 1:
        return [sessions[0]]
    step = (len(sessions) - 1) / (n - 1)
    return [sessions[round(i * step)] for i in range(n)]


def _s(seconds: float) -> str:
    return f"{seconds:g} s"
