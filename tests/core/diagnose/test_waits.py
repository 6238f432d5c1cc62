"""Which wait decided (proxycheck.core.diagnose.waits): the watchdogs, the client's patience and
what a replay observed in, the verdict's `waits` out (its rendering: tests/report/test_waits_view.py).

Cases that could fool it: a silence past a watchdog on an exchange that then failed (not "went
on"), stalls cut at a stated watchdog (not at the patience), a run kept without watchdogs, and
watchdogs without any patience (a load run)."""

from __future__ import annotations

from proxycheck.core.diagnose.waits import waits_of
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs, watchdogs_from_json

PATIENT = Watchdogs(headers=30.0, stall=10.0).with_patience(600.0, 600.0, "the client's own read timeout (600 s)")


def obs(outcome: Outcome, *, route: str = "direct", turn: int = 2, waited: float | None = None,
        session: str = "abc") -> Observation:  # fmt: skip
    return Observation(route=route, repetition=1, session=session, turn=turn, t_start=0.0, end=20.0, outcome=outcome,
                       waited=waited)  # fmt: skip


def test_silences_waited_out_are_listed_longest_first_and_only_when_the_answer_came() -> None:
    seen = [obs(Outcome.SLOW, waited=12.5), obs(Outcome.SLOW, route="via:squid", waited=17.7, session="def"),
            obs(Outcome.RESET, route="via:squid", waited=11.0), obs(Outcome.OK)]  # fmt: skip
    w = waits_of(PATIENT, seen, {"abc": "s1", "def": "s2"}.get)
    assert [(s.route, s.seconds) for s in w.waited_out] == [("via:squid", 17.7), ("direct", 12.5)]
    assert w.said[0].startswith("a silence fails at the client's patience, 600 s (the client's own read timeout")
    assert "via:squid s2 turn 2 (17.7 s); direct s1 turn 2 (12.5 s)" in w.said[1]
    assert w.stalls == 0 and len(w.said) == 2


def test_stalls_say_whether_the_patience_or_a_stated_watchdog_cut_them() -> None:
    stalls = [obs(Outcome.STALL_MID_STREAM), obs(Outcome.STALL_BEFORE_HEADERS, turn=3)]
    patient = waits_of(PATIENT, stalls)
    assert (patient.stalls, patient.stalls_at_patience) == (2, 2)
    assert "every stall counted (2) was waited out to the client's patience" in patient.said
    stated = waits_of(PATIENT.with_overrides(stall=1.0), stalls)  # --stall-timeout 1: the mid-stream stall
    assert (stated.stalls, stated.stalls_at_patience) == (2, 1)
    assert "1 of 2 stall(s) counted were waited out to the client's patience" in stated.said[-1]
    none = waits_of(PATIENT.without_patience(), stalls)
    assert none.stalls_at_patience == 0 and "no client patience beyond them" in none.said[0]
    assert "cut at a watchdog, not at the client's patience" in none.said[-1]


def test_watchdogs_round_trip_through_a_run_file_and_damage_gives_none() -> None:
    assert watchdogs_from_json(PATIENT.to_json()) == PATIENT
    assert watchdogs_from_json(Watchdogs().to_json()) == Watchdogs()
    for bad in (None, [], {"connect": 1}, {"connect": "x", "headers": 1, "stall": 1, "total": 1},
                {"connect": 1, "headers": 1, "stall": 1, "total": 1, "patience_stall": -5}):  # fmt: skip
        assert watchdogs_from_json(bad) is None
