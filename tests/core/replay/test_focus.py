"""The focus of a check and its think times (proxycheck.core.replay.focus): sessions in, the
sessions to replay out, no network. Each rule is also fed what could fool it."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import pytest

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.replay.focus import (
    cap_think_times,
    compact_starts,
    failure_context,
    focus,
    in_flight_with,
    plan_passes,
)
from proxycheck.core.replay.plan import PlannedSession, PlannedTurn, RecordedOutcome

Turn = tuple[float, float, Outcome]  # think time before it, recorded duration, outcome
OK, STALL, RESET = Outcome.OK, Outcome.STALL_MID_STREAM, Outcome.RESET

_xids = iter(range(1, 1_000_000))


def session(sid: str, start: float, turns: Sequence[Turn], attempts: dict[int, int] | None = None) -> PlannedSession:
    """A planned session whose turns were recorded one after another from `start`; `attempts`
    maps a turn index to how many attempts of it the list holds from there (retries)."""
    planned = []
    at = start
    number = 0
    retry_left = 0
    for i, (think, duration, outcome) in enumerate(turns):
        retry = retry_left > 0
        if retry:
            retry_left -= 1
        else:
            number += 1
            retry_left = (attempts or {}).get(i, 1) - 1
        if i:
            at += think
        planned.append(PlannedTurn(
            session=sid, turn=number, xid=next(_xids), method="POST", url="http://e/v1/chat/completions",
            dialect="openai_chat", streamed=True, http_version="HTTP/1.1", headers=(), body=b"{}",
            think_time=None if i == 0 or retry else think, new_connection=i == 0, client_id=None,
            recorded=RecordedOutcome(outcome, duration=duration), attempt=2 if retry else 1,
            attempts=2 if retry or (attempts or {}).get(i, 1) > 1 else 1, backoff=think if retry else None,
            recorded_at=at,
        ))  # fmt: skip
        at += duration or 0.0
    return PlannedSession(sid, "continuity", "openai_chat", start, tuple(planned), label=sid)


def thinks(s: PlannedSession) -> list[float | None]:
    return [t.think_time for t in s.turns]


# -- focus ---------------------------------------------------------------------------------------


def test_a_recording_without_failures_has_no_focus() -> None:
    assert focus([session("a", 0, [(0, 1, OK), (30, 1, OK)])]) is None


def test_the_failing_session_is_cut_after_its_first_failure_and_clean_ones_are_sampled() -> None:
    clean = [session(f"c{i}", 100.0 * i, [(0, 1, OK)] + [(20, 1, OK)] * 9) for i in range(10)]
    failing = session("f", 360, [(0, 1, OK), (30, 1, OK), (40, 30, STALL), (10, 1, OK), (10, 1, STALL)])
    chosen = focus([*clean[:4], failing, *clean[4:]])
    assert chosen is not None
    by_id = {s.id: s for s in chosen.sessions}
    assert chosen.failing == ("f",)
    assert [t.turn for t in by_id["f"].turns] == [1, 2, 3]  # up to and including the first failure
    # The clean sessions with an exchange in flight during f's failed turn (432-462 s): c3 (at 447)
    # and c4 (at 442), each from that exchange, a session's first turn now, to its turns recorded
    # before the failed one ended.
    assert set(chosen.companions) == {"c3", "c4"}
    c3, c4 = by_id["c3"], by_id["c4"]
    assert [len(c3.turns), len(c4.turns)] == [1, 1] and (c3.start, c4.start) == (447, 442)
    assert c3.turns[0].think_time is None and c3.turns[0].new_connection
    # A sample spread over the clean ones, as deep as the failing session reaches.
    assert len(chosen.sample) == 3 and chosen.sample[0] == "c0" and chosen.sample[-1] == "c9"
    assert all(len(by_id[sid].turns) == 3 for sid in chosen.sample)
    assert chosen.of_sessions == 11 and chosen.of_turns == 105
    assert chosen.turns < chosen.of_turns


def test_a_retried_failure_keeps_its_retries() -> None:
    s = session("f", 0, [(0, 1, OK), (5, 1, RESET), (0.5, 1, OK), (5, 1, OK)], attempts={1: 2})
    chosen = focus([s])
    assert chosen is not None
    assert [(t.turn, t.attempt) for t in chosen.sessions[0].turns] == [(1, 1), (2, 1), (2, 2)]


def test_a_session_in_flight_with_a_failure_is_kept_up_to_it_and_one_that_ended_before_is_not() -> None:
    failing = session("f", 100, [(0, 1, OK), (5, 10, STALL)])  # turn 2 in flight 106-116
    before = session("b", 0, [(0, 1, OK), (5, 1, OK)])  # over at 7
    during = session("d", 110, [(0, 1, OK), (3, 1, OK), (30, 1, OK)])  # in flight 110-111; turn 3 at 145
    (d, first, upto), = in_flight_with([failing, before, during], failing, failing.turns[1])
    assert d.id == "d" and (first, upto) == (0, 1)  # its turns recorded before the failure ended: 110 and 114
    chosen = focus([failing, before, during], sample=0)
    assert chosen is not None and chosen.companions == ("d",)
    assert [len(s.turns) for s in chosen.sessions] == [2, 2]


def test_a_wedge_in_flight_to_the_recordings_end_overlaps_everything_after_it() -> None:
    failing = session("f", 0, [(0, 1, OK), (1, None, Outcome.IN_FLIGHT)])  # type: ignore[list-item]
    later = session("l", 500, [(0, 1, OK)])
    assert [s.id for s, _, _ in in_flight_with([failing, later], failing, failing.turns[1])] == ["l"]


def test_what_arrives_while_the_client_waits_in_silence_is_not_in_flight_with_the_wedge() -> None:
    # The stream stopped 2 s in; its client waited 28 s more before it gave up (432-434 s of progress).
    failing = session("f", 360, [(0, 1, OK), (30, 1, OK), (40, 30, STALL)])
    wedge = failing.turns[2]
    waited = replace(wedge, recorded=replace(wedge.recorded, client_waited=28.0))
    failing = replace(failing, turns=(*failing.turns[:2], waited))
    during_progress = session("p", 433, [(0, 1, OK)])
    during_silence = session("q", 440, [(0, 1, OK)])
    assert [s.id for s, _, _ in in_flight_with([failing, during_progress, during_silence], failing, waited)] == ["p"]


def test_a_companion_is_lined_up_with_the_failed_turn_and_the_sample_comes_after() -> None:
    failing = session("f", 100, [(0, 1, OK), (30, 1, OK), (40, 10, STALL)])  # turn 3 at 172-182
    other = session("o", 10, [(0, 1, OK)] + [(20, 1, OK)] * 8)  # its turn at 178 is in flight with it
    clean = [session(f"c{i}", 300 + 50 * i, [(0, 1, OK), (20, 1, OK), (20, 1, OK), (20, 1, OK)]) for i in range(3)]
    quick = plan_passes([other, failing, *clean])[0]
    by_id = {s.id: s for s in quick.sessions}
    f, o = by_id["f"], by_id["o"]
    # f's turn 3 is now sent 1 + 1 + 1 + 1 = 4 s after f starts; o's turn was recorded 6 s later.
    assert o.start - f.start == pytest.approx(4 + 6) and [t.recorded_at for t in o.turns] == [178]
    ends = max(s.start + sum((t.think_time or 0) + (t.recorded.duration or 0) for t in s.turns) for s in (f, o))
    samples = sorted((by_id[c] for c in ("c0", "c1", "c2")), key=lambda s: s.start)
    # After the failure's sessions; the recording never had more than two alive at once.
    assert samples[0].start > ends and samples[0].start == samples[1].start and samples[2].start > samples[1].start + 3


def test_every_session_failing_is_a_focus_on_the_whole_recording() -> None:
    chosen = focus([session("a", 0, [(0, 1, STALL)]), session("b", 5, [(0, 1, RESET)])])
    assert chosen is not None and chosen.whole


# -- think times ---------------------------------------------------------------------------------


def test_think_times_over_the_cap_are_shortened_and_backoffs_are_not() -> None:
    s = session("a", 0, [(0, 1, OK), (30, 1, RESET), (20, 1, OK), (0.4, 1, OK)], attempts={1: 2})
    out, cut = cap_think_times([s], 1.0)
    assert thinks(out[0]) == [None, 1.0, None, 0.4]  # turn 2's retry waits its backoff
    assert out[0].turns[2].backoff == 20  # a retry's backoff is the client's, not a person's
    assert cut.shortened == 1 and cut.saved == pytest.approx(29.0)
    assert "shortened to 1 s (1 turn(s), 29 s less)" in cut.text()


def test_no_cap_leaves_everything() -> None:
    s = session("a", 0, [(0, 1, OK), (30, 1, OK)])
    out, cut = cap_think_times([s], None)
    assert thinks(out[0]) == [None, 30] and cut.text() == "think times as recorded"


def test_a_failure_after_idle_keeps_its_idle_and_the_turn_before_keeps_its_own() -> None:
    s = session("a", 0, [(0, 1, OK), (40, 1, OK), (50, 1, OK), (60, 2, STALL)])
    keep = failure_context([s], 1.0)
    out, cut = cap_think_times([s], 1.0, keep)
    assert thinks(out[0]) == [None, 1.0, 50, 60]
    assert cut.kept == 2 and cut.longest_kept == 60 and cut.shortened == 1
    assert "2 kept for the failures after idle (up to 60.0 s)" in cut.text()


def test_a_socket_keeps_the_idle_of_its_failing_turn_only() -> None:
    # Every turn of a WebSocket session shares the socket's exchange: told apart by their number,
    # the long think before turn 2 is shortened, the idle before the failure kept.
    s = session("a", 0, [(0, 1, OK), (40, 1, OK), (50, 1, OK), (60, 2, STALL)])
    s = replace(s, turns=tuple(replace(t, xid=7) for t in s.turns), transport="websocket")
    out, cut = cap_think_times([s], 1.0, failure_context([s], 1.0))
    assert thinks(out[0]) == [None, 1.0, 50, 60] and cut.kept == 2 and cut.shortened == 1


def test_a_failure_without_idle_keeps_nothing() -> None:
    s = session("a", 0, [(0, 1, OK), (40, 1, OK), (0.5, 1, OK), (0.2, 2, STALL)])
    assert failure_context([s], 1.0) == frozenset()


def test_sessions_in_flight_with_a_failure_keep_their_timing_up_to_it() -> None:
    failing = session("f", 0, [(0, 1, OK), (30, 1, OK), (0.5, 5, STALL)])  # turn 3 at 31.5-36.5
    other = session("o", 2, [(0, 1, OK), (29, 10, OK), (60, 1, OK)])  # turn 2 at 32-42, turn 3 at 102
    keep = failure_context([failing, other], 1.0)
    out, _ = cap_think_times([failing, other], 1.0, keep)
    assert thinks(out[0]) == [None, 30, 0.5]  # kept: the two still overlap as they did
    assert thinks(out[1]) == [None, 29, 1.0]  # after the failure: shortened


def test_a_cap_given_by_the_user_caps_the_failures_too() -> None:
    s = session("a", 0, [(0, 1, OK), (40, 1, STALL)])
    out, cut = cap_think_times([s], 2.0, protected=False)
    assert thinks(out[0]) == [None, 2.0] and "the failures' too" in cut.text()


# -- starts --------------------------------------------------------------------------------------


def test_stretches_with_no_session_alive_are_cut_and_overlaps_kept() -> None:
    a = session("a", 0, [(0, 2, OK), (1, 2, OK)])  # alive 0-5
    b = session("b", 3, [(0, 4, OK)])  # overlaps a: alive 3-7
    c = session("c", 300, [(0, 1, OK)])  # 293 s after anything
    d = session("d", 300.5, [(0, 1, OK)])
    out = {s.id: s.start for s in compact_starts([c, a, d, b], gap=1.0)}
    assert out == {"a": 0, "b": 3, "c": 8, "d": 8.5}


def test_starts_count_the_capped_think_times() -> None:
    a = session("a", 0, [(0, 1, OK), (100, 1, OK)])
    b = session("b", 150, [(0, 1, OK)])
    capped, _ = cap_think_times([a, b], 1.0)
    out = compact_starts(capped, gap=1.0)
    assert [s.start for s in out] == [0, 4.0]  # a now ends at 3 s


# -- the passes of a check -----------------------------------------------------------------------


def test_a_failure_after_idle_gets_a_quick_pass_then_one_with_its_idle_then_the_whole() -> None:
    failing = session("f", 0, [(0, 1, OK), (20, 1, OK), (30, 2, STALL)])
    clean = [session(f"c{i}", 100.0 + 100 * i, [(0, 1, OK), (40, 1, OK)]) for i in range(5)]
    quick, kept, whole = plan_passes([failing, *clean])
    assert [p.name for p in (quick, kept, whole)] == ["focus", "focus, idle kept", "whole recording"]
    assert quick.needs_recorded_turns and not kept.needs_recorded_turns and whole.whole
    assert thinks(quick.sessions[0]) == [None, 1.0, 1.0]
    assert thinks(kept.sessions[0]) == [None, 20, 30]  # the failure's idle, and the turn's before
    assert len(quick.sessions) == 4  # f and 3 clean ones
    assert "the 1 failing session up to its first failed turn (f turn 3)" in quick.why
    assert "4 of 6 sessions" in quick.why
    # The whole recording: every clean think time shortened, the failure's kept; starts compacted.
    assert [thinks(s) for s in whole.sessions[1:]] == [[None, 1.0]] * 5
    assert [s.start for s in whole.sessions] == [0, 55.0, 59.0, 63.0, 67.0, 71.0]  # 1 s between


def test_a_failure_without_idle_gets_one_focus_pass() -> None:
    failing = session("f", 0, [(0, 1, OK), (0.5, 1, STALL)])
    clean = session("c", 10, [(0, 1, OK), (40, 1, OK), (40, 1, OK)])
    passes = plan_passes([failing, clean])
    assert [p.name for p in passes] == ["focus", "whole recording"] and not passes[0].needs_recorded_turns


def test_without_failures_only_the_whole_recording_can_say_healthy() -> None:
    (only,) = plan_passes([session("a", 0, [(0, 1, OK), (30, 1, OK)])])
    assert only.whole and "shows no failure" in only.why and thinks(only.sessions[0]) == [None, 1.0]


def test_full_replays_everything_as_recorded_unless_a_cap_is_given() -> None:
    failing = session("f", 0, [(0, 1, OK), (20, 1, STALL)])
    clean = session("c", 300, [(0, 1, OK), (40, 1, OK)])
    (full,) = plan_passes([failing, clean], full=True)
    assert [thinks(s) for s in full.sessions] == [[None, 20], [None, 40]] and full.sessions[1].start == 300
    (capped,) = plan_passes([failing, clean], full=True, max_think=5)
    assert [thinks(s) for s in capped.sessions] == [[None, 5], [None, 5]]


def test_a_cap_given_caps_the_failures_idle_too_so_the_focus_is_one_pass() -> None:
    failing = session("f", 0, [(0, 1, OK), (20, 1, STALL)])
    clean = session("c", 300, [(0, 1, OK), (40, 1, OK), (40, 1, OK)])
    first, whole = plan_passes([failing, clean], max_think=3)
    assert first.name == "focus" and thinks(first.sessions[0]) == [None, 3]
    assert not first.needs_recorded_turns and thinks(whole.sessions[0]) == [None, 3]


def test_a_focus_starts_at_once_however_late_its_sessions_were_recorded() -> None:
    failing = session("f", 360, [(0, 1, OK), (30, 1, OK), (40, 2, STALL)])
    clean = [session(f"c{i}", 400 + 100 * i, [(0, 1, OK), (30, 1, OK), (30, 1, OK), (30, 1, OK)]) for i in range(4)]
    for plan in plan_passes([failing, *clean]):
        assert min(s.start for s in plan.sessions) == 0, plan.name


def test_a_socket_in_flight_with_a_failure_is_replayed_from_its_first_turn() -> None:
    # The companion's turns 1-2 ended before the failure; an HTTP session starts at its turn in
    # flight with it (3), a WebSocket session at its first: its turns continue the socket's memory.
    failing = session("f", 100, [(0, 1, OK), (5, 10, STALL)])  # turn 2 in flight 106-116
    http = session("h", 90, [(0, 1, OK), (5, 1, OK), (10, 5, OK)])  # turn 3 at 107
    socket = replace(session("w", 90, [(0, 1, OK), (5, 1, OK), (10, 5, OK)]), transport="websocket")
    for companion, first in ((http, 3), (socket, 1)):
        chosen = focus([failing, companion], sample=0)
        assert chosen is not None and chosen.companions == (companion.id,)
        kept = next(s for s in chosen.sessions if s.id == companion.id)
        assert kept.turns[0].turn == first, (companion.transport, [t.turn for t in kept.turns])
