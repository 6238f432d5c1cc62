"""The recorded client's patience (proxycheck.core.replay.patience): what the recording shows or
says of its client in, the patience a replay judges silence by out.

Each rule is tried with a case built to fool it: a person cancelling a stream is no patience, a
hop cutting a stream is no give-up (the client was still waiting), a harness that also sends its
SDK's longer timeout header, a header that is not a number, clients of different patience in one
recording, and a silence the recording shows the client sitting through that is longer than the
patience its user agent is known for.
"""

from __future__ import annotations

import pytest

from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.replay.patience import (
    ASSUMED,
    SETTLE_CAP,
    RecordedClient,
    client_patience,
    known_client,
    stated_timeout,
    still_busy,
)

OPENAI = "OpenAI/Python 1.109.1"
CLAUDE = "claude-cli/2.1.4 (external, cli)"
CODEX = "codex_cli_rs/0.171.0 (Debian 12; x86_64) xterm"


def test_a_client_that_says_nothing_is_assumed_patient_for_the_sdks_default_and_says_so() -> None:
    p = client_patience([RecordedClient(user_agent="python-httpx/0.28.1")])
    assert (p.headers, p.stall) == (ASSUMED, ASSUMED) == (600.0, 600.0)
    assert "assumed" in p.source and "--patience" in p.source
    assert client_patience([]).stall == ASSUMED


def test_the_sdks_say_their_read_timeout_and_harnesses_are_known_by_their_user_agent() -> None:
    stated = client_patience([RecordedClient(user_agent=OPENAI, stated=45.0)])
    assert stated.stall == 45.0 and "x-stainless-read-timeout" in stated.source
    assert client_patience([RecordedClient(user_agent=OPENAI)]).stall == 600.0
    claude = client_patience([RecordedClient(user_agent=CLAUDE, stated=600.0)])  # its SDK's header too
    assert claude.stall == 180.0 and "Claude Code" in claude.source  # the harness's own watchdog decides
    assert client_patience([RecordedClient(user_agent=CODEX)]).stall == 300.0
    assert known_client("Anthropic/JS 0.71.0") is not None and known_client("curl/8.1") is None


def test_the_longest_patience_of_several_clients_is_taken() -> None:
    p = client_patience([RecordedClient(user_agent=CLAUDE), RecordedClient(user_agent=CODEX)])
    assert p.stall == 300.0 and "Codex" in p.source


def test_a_client_giving_up_on_a_silence_is_its_patience_for_that_phase() -> None:
    gave_up = RecordedClient(user_agent=OPENAI, gave_up=40.0, longest_gap=0.1)
    p = client_patience([gave_up, RecordedClient(user_agent=OPENAI, longest_gap=0.1)])
    assert p.stall == 40.0 and "gave up" in p.source
    assert p.headers == 600.0 and "otherwise" in p.source  # no give-up before the headers: what the client says
    before = client_patience([RecordedClient(gave_up=12.0, gave_up_before_headers=True)])
    assert before.headers == 12.0 and before.stall == ASSUMED


def test_a_person_cancelling_is_no_patience() -> None:
    # Esc 0.3 s into a stream, and a wait shorter than five times a gap the recording shows.
    quick = client_patience([RecordedClient(user_agent=OPENAI, gave_up=0.3)])
    short = client_patience([RecordedClient(user_agent=OPENAI, gave_up=2.4), RecordedClient(longest_gap=0.5)])
    assert quick.stall == short.stall == 600.0 and "gave up" not in quick.source + short.source


def test_the_patience_is_well_past_every_silence_the_client_sat_through() -> None:
    # A hop cut a 200 s silence while a Claude Code client still waited: its patience was longer
    # than the 180 s its user agent is known for (CLAUDE_STREAM_IDLE_TIMEOUT_MS was raised).
    p = client_patience([RecordedClient(user_agent=CLAUDE, sat_through=200.0)])
    assert p.stall == 400.0 and p.headers == 400.0 and "sat through" in p.source
    # Within what it is known for: nothing changes.
    assert client_patience([RecordedClient(user_agent=CLAUDE, sat_through=60.0)]).stall == 180.0
    # A give-up shorter than a silence the client sat through elsewhere: the longer one decides.
    mixed = client_patience([RecordedClient(gave_up=10.0), RecordedClient(sat_through=11.6)])
    assert mixed.stall == pytest.approx(23.2)


def test_stated_timeouts_are_read_as_seconds_and_nonsense_is_ignored() -> None:
    assert stated_timeout([("X-Stainless-Read-Timeout", "600")]) == 600.0
    assert stated_timeout([("x-stainless-timeout", "45.5")]) == 45.5
    assert stated_timeout([("x-stainless-read-timeout", "NaN"), ("x-stainless-timeout", "30")]) == 30.0
    for bad in ("-1", "0", "inf", "soon", ""):
        assert stated_timeout([("x-stainless-read-timeout", bad)]) is None


def test_patience_applies_to_the_watchdogs_without_shortening_them() -> None:
    wd = client_patience([RecordedClient(user_agent=CODEX)]).apply(Watchdogs(headers=30.0, stall=10.0))
    assert (wd.headers, wd.stall, wd.headers_limit, wd.stall_limit) == (30.0, 10.0, 300.0, 300.0) and wd.patient
    tiny = Watchdogs(headers=30.0, stall=10.0).with_patience(5.0, 5.0, "x")
    assert tiny.stall_limit == 10.0 and not tiny.patient  # a watchdog is never cut shorter by a patience


def test_work_a_replay_abandoned_is_waited_for_only_as_long_as_it_takes_where_answered() -> None:
    # Given up after 10 s of a 17.7 s prefill, 2 s ago (sent 12 s ago): the engine is busy 5.7 s more.
    assert still_busy([("s1", 12.0, 17.7)]) == pytest.approx(5.7)
    assert still_busy([("s1", 19.0, 17.7)]) == 0.0  # done by now
    assert still_busy([("s1", 10.0, None)]) == 0.0  # never answered anywhere: a wedge, waiting clears nothing
    assert still_busy([("s1", 1.0, 10_000.0)]) == SETTLE_CAP
    assert still_busy([]) == 0.0


def test_a_sessions_abandoned_turns_queue_behind_each_other_while_sessions_side_by_side_do_not() -> None:
    # A hop hung up on turn 2 at 2 s (17 s of prefill direct) and turn 3 went at once (7.4 s direct):
    # the engine does turn 2, then turn 3; 4 s after turn 2 was sent it is busy 20.4 s more, not the
    # 13 s the longer of the two alone would say.
    assert still_busy([("s1", 4.0, 17.0), ("s1", 2.0, 7.4)]) == pytest.approx(20.4)
    # Two sessions cut at once are batched side by side: the busier one is the wait.
    assert still_busy([("s1", 4.0, 17.0), ("s2", 4.0, 7.4)]) == pytest.approx(13.0)
    # An exchange never answered anywhere adds nothing to its session's queue.
    assert still_busy([("s1", 4.0, 17.0), ("s1", 2.0, None)]) == pytest.approx(13.0)
