"""The client's patience in the exchange machine: a silence past a watchdog is waited out to the
patience; one that ends within it is a slow answer, one that reaches it the stall.

Each rule is tried with a case built to fool it: a silence just short of the patience and one
that reaches it, a hop's reset after a long silence (a failure, never "slow"), a stream that
keeps progressing past the total (still cut), a watchdog the user stated (its phase's limit),
and a machine without patience (unchanged). Events in, waits and outcomes out, no clock.
"""

from __future__ import annotations

import pytest

from proxycheck.core.exchange.machine import BodyData, ErrorKind, Wait, Watchdog
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from tests.core.exchange.test_machine import CHAT_EVENTS, Exchange, chat_chunk

SOURCE = "the SDK's default read timeout (600 s)"
PATIENT = Watchdogs(connect=5.0, headers=10.0, stall=2.0, total=60.0).with_patience(30.0, 20.0, SOURCE)


def test_a_silence_before_the_first_event_within_the_patience_is_a_slow_answer() -> None:
    # vLLM sends its headers at once and the first byte after the prefill: 17.7 s here.
    x = Exchange(watchdogs=PATIENT).connect().headers()
    assert x.wait == Wait(Watchdog.FIRST_EVENT, x.machine.headers_at + 20.0)  # the patience, not the 2 s watchdog
    x.data(CHAT_EVENTS[:1], gap=17.7).data(CHAT_EVENTS[1:])
    ending = x.close()
    assert ending.outcome is Outcome.SLOW and not ending.outcome.is_failure
    assert "silent 17.7 s before the first event" in ending.detail and "past the 2 s watchdog" in ending.detail
    assert "patience (20 s: the SDK's default read timeout (600 s))" in ending.detail
    obs = x.observation()
    assert obs.outcome is Outcome.SLOW and obs.result is not None and obs.result.terminal


def test_a_silence_mid_stream_and_one_before_the_headers_are_slow_answers_too() -> None:
    mid = Exchange(watchdogs=PATIENT).connect().headers().data(CHAT_EVENTS[:3]).data(CHAT_EVENTS[3:4], gap=10.5)
    mid.data(CHAT_EVENTS[4:])
    ending = mid.close()
    assert ending.outcome is Outcome.SLOW and "silent 10.5 s between events" in ending.detail
    before = Exchange(watchdogs=PATIENT).connect()
    before.headers(dt=25.0).data(CHAT_EVENTS)
    ending = before.close()
    assert ending.outcome is Outcome.SLOW and "before the response headers" in ending.detail
    assert "past the 10 s watchdog" in ending.detail


def test_the_longest_silence_past_a_watchdog_is_the_one_quoted() -> None:
    x = Exchange(watchdogs=PATIENT).connect().headers().data(CHAT_EVENTS[:2], gap=3.0)
    x.data(CHAT_EVENTS[2:3], gap=12.0).data(CHAT_EVENTS[3:4], gap=5.0).data(CHAT_EVENTS[4:])
    assert "silent 12.0 s" in x.close().detail


def test_a_silence_that_reaches_the_patience_is_the_stall_and_names_it() -> None:
    x = Exchange(watchdogs=PATIENT).connect().headers().data(CHAT_EVENTS[:3])
    assert x.wait is not None and x.wait.at == pytest.approx(x.t + 20.0)
    ending = x.expire()
    assert ending.outcome is Outcome.STALL_MID_STREAM
    assert "no content for 20.0 s" in ending.detail and f"the client's patience: {SOURCE}" in ending.detail
    headers = Exchange(watchdogs=PATIENT).connect()
    ending = headers.expire()
    assert ending.outcome is Outcome.STALL_BEFORE_HEADERS and "within 30 s (the client's patience" in ending.detail


def test_a_hop_cutting_a_long_silence_is_its_failure_not_a_slow_answer() -> None:
    # The hop's idle timeout (10.2 s) fires while the client still waits: a reset, as recorded.
    x = Exchange(watchdogs=PATIENT).connect().headers().data(CHAT_EVENTS[:5])
    ending = x.error(ErrorKind.RESET, "RemoteProtocolError: peer closed", dt=10.2)
    assert ending.outcome is Outcome.RESET


def test_the_total_watchdog_never_cuts_a_silence_short_of_the_patience_but_cuts_an_endless_stream() -> None:
    wd = Watchdogs(connect=5.0, headers=10.0, stall=2.0, total=30.0).with_patience(100.0, 100.0, SOURCE)
    x = Exchange(watchdogs=wd).connect().headers().data(CHAT_EVENTS[:3], gap=1.0)
    assert x.wait is not None and x.wait.watchdog is Watchdog.IDLE and x.wait.at == pytest.approx(x.t + 100.0)
    endless = Exchange(watchdogs=wd).connect().headers()
    for _ in range(40):  # a hop replaying a loop: progress every second, forever
        endless.feed(BodyData, 1.0, chat_chunk("x"))
    assert endless.wait is not None and endless.wait.watchdog is Watchdog.TOTAL
    assert endless.expire().outcome is Outcome.STALL_MID_STREAM and "total timeout" in endless.ending.detail


def test_a_stated_watchdog_is_its_phases_limit_and_without_patience_nothing_changes() -> None:
    stated = PATIENT.with_overrides(stall=2.0)
    x = Exchange(watchdogs=stated).connect().headers().data(CHAT_EVENTS[:3])
    assert x.wait is not None and x.wait.at == pytest.approx(x.t + 2.0)
    ending = x.expire()
    assert ending.outcome is Outcome.STALL_MID_STREAM and "patience" not in ending.detail
    assert stated.headers_limit == 30.0  # the other phase keeps the patience
    plain = Exchange(watchdogs=PATIENT.without_patience()).connect().headers().data(CHAT_EVENTS[:3])
    assert plain.expire().detail.startswith("no content for 2.0 s")


def test_without_a_silence_past_a_watchdog_a_patient_answer_is_ok() -> None:
    x = Exchange(watchdogs=PATIENT).connect().headers().data(CHAT_EVENTS, gap=0.3)
    assert x.close().outcome is Outcome.OK


def test_after_the_answer_a_silence_is_a_held_open_body_at_the_watchdog_not_the_patience() -> None:
    # [DONE] came, the body never ends: no client's patience is at stake (the SDKs stop at [DONE],
    # a client reading to the end hangs whatever it waits), so the watchdog decides at once.
    x = Exchange(watchdogs=PATIENT).connect().headers().data(CHAT_EVENTS)
    assert x.wait is not None and x.wait.at <= x.t + 2.0  # 2 s from the last progress, not 20
    ending = x.expire()
    assert ending.outcome is Outcome.HELD_OPEN and "patience" not in ending.detail
    # A finish reason without its terminator: the same.
    y = Exchange(watchdogs=PATIENT).connect().headers().data([chat_chunk("hi"), chat_chunk(finish="stop")])
    assert y.wait is not None and y.wait.at <= y.t + 2.0
    assert y.expire().outcome is Outcome.HELD_OPEN
