"""A retried turn in the replay plan: every attempt is planned and sent as recorded, after its
recorded backoff (the retries a hop saw are part of what it saw), with the turn's number; chained
mode rebuilds each attempt's own body."""

from __future__ import annotations

import json
from pathlib import Path

from test_replayplan import CLEAN, Rec, chat, reply

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.replay.plan import ChainedSession, think_delay

RETRY = "x-stainless-retry-count"


def retried(tmp_path: Path) -> list:  # type: ignore[type-arg]
    """Turn 1 ok; turn 2 answered 504 twice, ok on its third attempt; turn 3 ok."""
    r = Rec(tmp_path / "rec")
    history2 = chat("a", "r", "b")
    r.add(0.0, chat("a"), client="c1")
    r.add(1.0, history2, client="c1", headers=[(RETRY, "0")], status=504, events=(b"gateway timeout",))
    r.add(2.0, history2, client="c1", headers=[(RETRY, "1")], status=504, events=(b"gateway timeout",))
    r.add(4.0, history2, client="c1", headers=[(RETRY, "2")])
    r.add(6.0, chat("a", "r", "b", "r", "c"), client="c1")
    return r.plan()


def test_every_attempt_is_planned_with_its_turn_and_its_backoff(tmp_path: Path) -> None:
    (session,) = retried(tmp_path)
    assert [(t.turn, t.attempt, t.attempts) for t in session.turns] == [(1, 1, 1), (2, 1, 3), (2, 2, 3), (2, 3, 3), (3, 1, 1)]
    assert [t.recorded.outcome for t in session.turns] == [Outcome.OK, Outcome.HTTP_ERROR, Outcome.HTTP_ERROR,
                                                          Outcome.OK, Outcome.OK]  # fmt: skip
    # Each 504 ended at +0.16 s; the OK answers at +0.26 s.
    assert [t.think_time for t in session.turns] == [None, 0.74, None, None, 1.74]
    assert [t.backoff for t in session.turns] == [None, None, 0.84, 1.84, None]
    assert [think_delay(t, "recorded") for t in session.turns] == [0.0, 0.74, 0.84, 1.84, 1.74]
    assert [think_delay(t, 0.5) for t in session.turns][2:4] == [0.42, 0.92]
    assert [t.body for t in session.turns[1:4]] == [chat("a", "r", "b")] * 3  # as recorded, each of them
    assert session.name.attempts == tuple((t.xid, t.attempt, 3) for t in session.turns[1:4])


def conversation(*messages: tuple[str, str]) -> bytes:
    return json.dumps({"model": "m", "stream": True, "messages": [{"role": r, "content": c} for r, c in messages]}).encode()


def test_chained_mode_rebuilds_each_attempts_own_body(tmp_path: Path) -> None:
    r = Rec(tmp_path / "rec")
    u1, a1, u2 = ("user", "a"), ("assistant", "r"), ("user", "b")
    big = conversation(u1, a1, ("user", "huge tool output " * 50), u2)
    trimmed = conversation(u1, a1, u2)  # the harness dropped the large message after a 413
    r.add(0.0, conversation(u1), client="c1", events=CLEAN)
    r.add(1.0, big, client="c1", status=413, events=(b"too large",))
    r.add(2.0, trimmed, client="c1")
    r.add(3.0, conversation(u1, a1, u2, ("assistant", "r2"), ("user", "c")), client="c1")
    (session,) = r.plan()
    assert [(t.turn, t.attempt) for t in session.turns] == [(1, 1), (2, 1), (2, 2), (3, 1)]
    chained = ChainedSession(session)
    chained.record_reply(session.turns[0], reply("replayed one"))
    first, second = session.turns[1], session.turns[2]
    assert len(json.loads(chained.body_for(first))["messages"]) == 4
    assert len(json.loads(chained.body_for(second))["messages"]) == 3
    for body in (chained.body_for(first), chained.body_for(second)):
        assert json.loads(body)["messages"][1]["content"] == "replayed one"
    chained.record_reply(first, None)  # the 413
    chained.record_reply(second, reply("replayed two"))
    assert json.loads(chained.body_for(session.turns[3]))["messages"][3]["content"] == "replayed two"
