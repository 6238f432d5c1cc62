"""The rules of `proxycheck watch` (`proxycheck.core.points.watching`), values in, findings out: a
stream gone further at one point than at another for the stall time, an exchange with no progress,
and what must not fool them: a point simply slower, an exchange over at both points, clocks apart,
a point not recording yet, keep-alive comments, a recorder that stopped, a hop's retry."""

from __future__ import annotations

import json

import pytest

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.points.matching import PointLog
from proxycheck.core.points.seen import Seen, request_key
from proxycheck.core.points.watching import (
    ARRIVED,
    CAUGHT_UP,
    ENDED,
    PROGRESSING,
    RECOVERED,
    STALLED,
    STUCK,
    Findings,
    last_event,
    lead,
    snapshot,
)

pytestmark = pytest.mark.timeout(30)

START = 1_700_000_000.0
STALL = 10.0


def seen(xid: int, t_request: float, *, body: str = "a", events: int = 0, t_response: float | None = None,
         every: float = 0.05, ended: float | None = None, complete: bool = False, status: int | None = 200,
         label: str = "s1", turn: int = 1, last_byte: float | None = None, interrupted: bool = False,
         outcome: Outcome | None = None) -> Seen:  # fmt: skip
    """An exchange at one point: `events` content events `every` seconds apart from its headers
    (`t_response`, default 0.1 s after the request); `ended` its end (complete: with [DONE])."""
    if status is None:
        t_response = None
    elif t_response is None:
        t_response = t_request + 0.1
    times = tuple(t_response + every * (k + 1) for k in range(events)) if t_response is not None else ()
    if last_byte is None and times:
        last_byte = times[-1]
    if outcome is None:
        outcome = Outcome.OK if complete else (Outcome.IN_FLIGHT if ended is None else Outcome.STALL_MID_STREAM)
    total = events + (1 if complete else 0)  # [DONE] is an event that is not content
    return Seen(
        xid=xid, label=label, turn=turn, method="POST", path="/v1/chat/completions",
        key=request_key(json.dumps({"model": "m", "messages": [{"role": "user", "content": body}], "stream": True}).encode()),
        t_request=t_request, t_response=t_response, t_ended=ended, status=status, streamed=True, events=total,
        content_events=events, bytes=40 * total, first_content=times[0] if times else None, last_byte=last_byte,
        terminal=complete, finish=complete, outcome=outcome, detail="", content_times=times, interrupted=interrupted,
    )  # fmt: skip


def point(name: str, *seen_: Seen, started_at: float = START, covered: tuple = ((0.0, None),)) -> PointLog:
    return PointLog(name, started_at, tuple(seen_), covered)


def client_and_engine(client: Seen, engine: Seen, **engine_kw) -> list[PointLog]:
    return [point("client-side", client), point("engine-side", engine, **engine_kw)]


def findings_of(points: list[PointLog], at: float, local: list[bool] | None = None) -> list:
    return Findings().update(snapshot(points, START + at, STALL, local), START + at)


# --------------------------------------------------------------------------------------------
# Stuck


def test_engine_side_done_and_client_side_stuck_is_one_finding_naming_both() -> None:
    # The engine-side point got 60 events and the end at 3.1 s; a hop held the client side at 40.
    engine = seen(1, 0.01, events=60, t_response=0.09, ended=3.1, complete=True)
    client = seen(1, 0.0, events=40, t_response=0.1)
    found = findings_of(client_and_engine(client, engine), at=0.1 + 40 * 0.05 + 0.5 + 12)
    assert [f.event for f in found] == [STUCK]
    f = found[0]
    assert (f.ahead, f.behind, f.label, f.turn) == ("engine-side", "client-side", "s1", 1)
    # Ahead since its event 41 came (2.14 s), not since its end: the lead began when it passed the client.
    assert f.age == pytest.approx(0.1 + 40 * 0.05 + 0.5 + 12 - (0.09 + 41 * 0.05), abs=0.01)
    assert f.line == "s1 turn 1: engine-side done 11 s ago, client-side stuck at event 40 (behind for 12 s)"
    doc = f.to_json()
    assert set(doc) >= {"event", "wall", "session", "turn", "ahead", "behind", "ahead_progress", "behind_progress", "age", "line"}
    assert doc["behind_progress"]["events"] == 40 and doc["ahead_progress"]["complete"] is True
    json.dumps(doc)


def test_held_open_after_every_event_is_stuck_on_the_end() -> None:
    # Every event passed, the end did not (a hop holding the stream open): the lead is the end.
    engine = seen(1, 0.01, events=30, t_response=0.09, ended=2.0, complete=True)
    client = seen(1, 0.0, events=31, t_response=0.1)  # the [DONE] event too, but no end
    (f,) = findings_of(client_and_engine(client, engine), at=2.0 + 12)
    assert f.event == STUCK and f.age == pytest.approx(12, abs=0.01)
    assert f.line == "s1 turn 1: engine-side done 12 s ago, client-side stuck at event 31"


def test_a_point_simply_slower_by_less_than_the_stall_time_is_no_finding() -> None:
    # The client side gets every event 3 s after the engine side: always behind, never for 10 s.
    for at in (1.0, 5.0, 20.0, 31.0):
        engine_events = max(0, min(600, int((at - 0.1) / 0.05)))
        client_events = max(0, min(600, int((at - 3.1) / 0.05)))
        engine = seen(1, 0.01, events=engine_events, t_response=0.09, ended=30.2 if at > 30.2 else None,
                      complete=at > 30.2)  # fmt: skip
        client = seen(1, 0.0, events=client_events, t_response=0.1)
        client = Seen(**{**_fields(client), "content_times": tuple(t + 3.0 for t in client.content_times)})
        assert findings_of(client_and_engine(client, engine), at=at) == [], at


def _fields(s: Seen) -> dict:
    return {name: getattr(s, name) for name in Seen.__slots__}  # type: ignore[attr-defined]


def test_an_exchange_finished_at_both_points_is_no_finding_however_long_ago() -> None:
    engine = seen(1, 0.01, events=60, t_response=0.09, ended=3.1, complete=True)
    client = seen(1, 0.0, events=60, t_response=0.1, ended=3.2, complete=True)
    assert findings_of(client_and_engine(client, engine), at=500) == []
    # Also when it ended worse at the client side (a hop cut it): over there, nothing is stuck.
    cut = seen(1, 0.0, events=40, t_response=0.1, ended=3.0, outcome=Outcome.RESET)
    assert findings_of(client_and_engine(cut, engine), at=500) == []


def test_clocks_offset_between_points_do_not_make_ages() -> None:
    # The engine side's machine runs 30 s ahead, and the watcher runs there: its wall clock is that one.
    engine = seen(1, 0.01, events=600, t_response=0.09, every=0.05)
    client = seen(1, 0.0, events=590, t_response=0.1, every=0.05)
    points = client_and_engine(client, engine, started_at=START + 30)
    at = 0.1 + 600 * 0.05 + 0.2
    assert findings_of(points, at=at + 30, local=[False, True]) == []
    # Taken as they are the clocks would say the client side had been silent for 30 s.
    snap = snapshot(points, START + at + 30, STALL, [False, True])
    assert snap.offsets[1].seconds == pytest.approx(30, abs=0.02)
    assert snap.exchanges[0].ages[0] == pytest.approx(0.2 + 10 * 0.05, abs=0.05)
    # A real lead is measured right, on the engine side's own clock.
    done = seen(1, 0.01, events=60, t_response=0.09, ended=3.1, complete=True)
    stuck = seen(1, 0.0, events=60, t_response=0.1)
    (f,) = findings_of(client_and_engine(stuck, done, started_at=START + 30), at=3.1 + 12 + 30, local=[False, True])
    assert f.event == STUCK and f.age == pytest.approx(12, abs=0.05)


def test_a_clock_ahead_of_the_watchers_makes_no_negative_age() -> None:
    # Neither point on this machine: the first one's clock is taken as ours, and it runs 5 s ahead.
    engine = seen(1, 0.01, events=60, t_response=0.09, ended=3.1, complete=True)
    client = seen(1, 0.0, events=60, t_response=0.1, ended=3.2, complete=True)
    snap = snapshot(client_and_engine(client, engine), START + 3.2 - 5, STALL)
    assert all(age is None or age >= 0 for w in snap.exchanges for age in w.ages)


# --------------------------------------------------------------------------------------------
# Never seen, and points not recording


def test_a_request_the_engine_side_never_saw_is_stuck_when_that_point_sees_the_traffic() -> None:
    earlier_c = seen(1, 0.0, body="first", events=5, ended=1.0, complete=True)
    earlier_e = seen(1, 0.01, body="first", events=5, t_response=0.09, ended=0.99, complete=True)
    waiting = seen(2, 2.0, body="second", status=None, turn=2)
    points = [point("client-side", earlier_c, waiting), point("engine-side", earlier_e)]
    found = findings_of(points, at=2.0 + 12)
    stuck = [f for f in found if f.event == STUCK]
    assert len(stuck) == 1
    assert stuck[0].line == "s1 turn 2: client-side saw the request 12 s ago, engine-side never saw it"
    assert stuck[0].behind_progress == {"seen": False, "text": "never saw it"}
    # The client side itself made no progress either: that is said too.
    assert [f.line for f in found if f.event == STALLED] == ["s1 turn 2: client-side: no progress for 12 s, with no response"]


def test_a_point_not_recording_yet_is_no_lead_over_it() -> None:
    earlier_c = seen(1, 0.0, body="first", events=5, ended=1.0, complete=True)
    waiting = seen(2, 2.0, body="second", status=None, turn=2)
    # The engine-side recorder started at 5 s, after the request: it could not have seen it.
    points = [point("client-side", earlier_c, waiting), point("engine-side", covered=((5.0, None),))]
    assert [f.event for f in findings_of(points, at=2.0 + 30)] == [STALLED]
    # Nor is a point that sees other traffic (an exchange the client side completed is missing there).
    points = [point("client-side", earlier_c, waiting), point("engine-side", seen(7, 0.5, body="other", events=3, ended=0.9, complete=True))]
    assert [f.event for f in findings_of(points, at=2.0 + 30)] == [STALLED]


def test_an_exchange_seen_only_further_in_is_nobodys_lag() -> None:
    # A hop's own request (or another client's) in flight at the engine side only, still streaming.
    earlier_c = seen(1, 0.0, body="first", events=5, ended=1.0, complete=True)
    earlier_e = seen(1, 0.01, body="first", events=5, t_response=0.09, ended=0.99, complete=True)
    own = seen(2, 2.0, body="hop's own", events=400, every=0.05)
    points = [point("client-side", earlier_c), point("engine-side", earlier_e, own)]
    assert findings_of(points, at=2.1 + 400 * 0.05 + 0.1) == []


def test_a_behind_point_that_stopped_recording_is_not_stuck() -> None:
    engine = seen(1, 0.01, events=60, t_response=0.09, ended=3.1, complete=True)
    client = seen(1, 0.0, events=40, t_response=0.1, interrupted=True)
    points = [point("client-side", client, covered=((0.0, 2.5),)), point("engine-side", engine)]
    assert findings_of(points, at=60) == []


# --------------------------------------------------------------------------------------------
# Stalled


def test_one_point_an_exchange_without_progress_is_stalled() -> None:
    s = seen(12, 0.0, events=40, label="s3", turn=7)
    found = findings_of([point("client-side", s)], at=last_event(s) + 12)
    assert [f.line for f in found] == ["s3 turn 7: client-side: no progress for 12 s, at event 40"]
    assert found[0].ahead is None and found[0].ahead_progress is None and found[0].event == STALLED
    # Slower than the stall time between events, but still moving: nothing.
    assert findings_of([point("client-side", s)], at=last_event(s) + 9) == []


def test_keep_alive_comments_are_no_progress() -> None:
    # Bytes kept coming (comments) until a moment ago; the last content event is 20 s old.
    s = seen(1, 0.0, events=40, last_byte=21.0)
    assert last_event(s) == pytest.approx(0.1 + 40 * 0.05)
    (f,) = findings_of([point("client-side", s)], at=22.0)
    assert f.event == STALLED and f.age == pytest.approx(22.0 - last_event(s))


def test_a_wedge_inside_the_innermost_point_stalls_both_and_nothing_is_stuck() -> None:
    engine = seen(1, 0.01, events=40, t_response=0.09)
    client = seen(1, 0.0, events=40, t_response=0.1)
    found = findings_of(client_and_engine(client, engine), at=30)
    assert sorted((f.event, f.behind) for f in found) == [(STALLED, "client-side"), (STALLED, "engine-side")]


# --------------------------------------------------------------------------------------------
# Raised once, recovered once


def test_a_finding_is_raised_once_and_recovers_when_the_behind_point_catches_up() -> None:
    engine = seen(1, 0.01, events=60, t_response=0.09, ended=3.1, complete=True)
    held = seen(1, 0.0, events=40, t_response=0.1)

    def client_at(events: int, came: float, ended: float | None = None) -> Seen:
        """The client side: 40 events early, the rest at `came` (a hop letting them go)."""
        done = ended is not None and events == 60
        s = seen(1, 0.0, events=events, t_response=0.1, ended=ended, complete=done)
        return Seen(**{**_fields(s), "content_times": held.content_times + (came,) * (events - 40), "last_byte": max(came, 2.1)})

    findings = Findings()
    events = []
    steps = ((5, client_at(40, 0)), (14, client_at(40, 0)), (15, client_at(40, 0)), (16, client_at(41, 15.9)),
             (17, client_at(59, 16.9)), (18, client_at(60, 17.9, ended=17.95)))  # fmt: skip
    for at, client in steps:
        events += [(at, f.kind, f.event, f.how) for f in findings.update(snapshot(client_and_engine(client, engine), START + at, STALL), START + at)]
    # Raised at 14 s (stuck only: with a point ahead, the client side is behind it, not stalled); one
    # more event at 16 s is no catching up; all the engine side had, its end too, at 18 s is.
    assert [(at, e) for at, _, e, _ in events if e != RECOVERED] == [(14, STUCK)]
    assert [(at, kind, how) for at, kind, e, how in events if e == RECOVERED] == [(18, STUCK, CAUGHT_UP)]
    # Never raised again for that exchange and pair, even were it behind once more.
    again = findings.update(snapshot(client_and_engine(client_at(40, 0), engine), START + 100, STALL), START + 100)
    assert [f.kind for f in again] == []


def test_a_finding_recovers_when_the_behind_point_ends_it() -> None:
    engine = seen(1, 0.01, events=60, t_response=0.09, ended=3.1, complete=True)
    findings = Findings()
    raised = findings.update(snapshot(client_and_engine(seen(1, 0.0, events=40, t_response=0.1), engine), START + 20, STALL), START + 20)
    assert [f.event for f in raised] == [STUCK]
    cut = seen(1, 0.0, events=40, t_response=0.1, ended=21.0, outcome=Outcome.STALL_MID_STREAM)
    over = findings.update(snapshot(client_and_engine(cut, engine), START + 22, STALL), START + 22)
    assert [(f.event, f.kind, f.how) for f in over] == [(RECOVERED, STUCK, ENDED)]
    line = over[0].line
    assert line.startswith("s1 turn 1: client-side ended ") and "stall_mid_stream" in line


def test_a_request_never_seen_recovers_when_it_arrives() -> None:
    earlier_c = seen(1, 0.0, body="first", events=5, ended=1.0, complete=True)
    earlier_e = seen(1, 0.01, body="first", events=5, t_response=0.09, ended=0.99, complete=True)
    waiting = seen(2, 2.0, body="second", status=None, turn=2)
    findings = Findings()
    findings.update(snapshot([point("client-side", earlier_c, waiting), point("engine-side", earlier_e)], START + 14, STALL), START + 14)
    late = seen(2, 15.0, body="second", status=None, turn=2)
    out = findings.update(snapshot([point("client-side", earlier_c, waiting), point("engine-side", earlier_e, late)],
                                   START + 15.5, STALL), START + 15.5)  # fmt: skip
    assert [(f.kind, f.how) for f in out if f.ahead is not None] == [(STUCK, ARRIVED)]


def test_a_stalled_exchange_recovers_when_it_progresses() -> None:
    findings = Findings()
    findings.update(snapshot([point("p", seen(1, 0.0, events=4))], START + 20, STALL), START + 20)
    out = findings.update(snapshot([point("p", seen(1, 0.0, events=5, every=4.0))], START + 21, STALL), START + 21)
    assert [(f.event, f.kind, f.how) for f in out] == [(RECOVERED, STALLED, PROGRESSING)]


def test_a_hops_retry_at_the_inner_point_stands_for_the_exchange_there() -> None:
    # The hop's first try failed at the engine side after 3 events, its retry streams: the client side
    # is as far as the retry, so nothing is stuck, and the failed try leads nobody.
    first = seen(1, 0.01, events=3, t_response=0.09, ended=0.4, outcome=Outcome.RESET)
    retry = seen(2, 0.5, events=100, t_response=0.6)
    client = seen(1, 0.0, events=100, t_response=0.1)
    client = Seen(**{**_fields(client), "content_times": retry.content_times})
    points = [point("client-side", client), point("engine-side", first, retry)]
    snap = snapshot(points, START + 0.6 + 100 * 0.05 + 0.2, STALL)
    assert snap.exchanges[0].seen[1] is retry and len(snap.exchanges) == 1
    assert findings_of(points, at=0.6 + 100 * 0.05 + 0.2) == []


def test_lead_is_never_earlier_than_it_began() -> None:
    a = seen(1, 0.0, events=50, t_response=0.1)
    b = seen(1, 0.0, events=10, t_response=0.1)
    got = lead(a, b)
    assert got is not None and got.since == pytest.approx(a.content_times[10])
    assert lead(b, a) is None and lead(a, a) is None
