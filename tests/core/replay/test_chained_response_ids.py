"""Chained mode and the Responses API: recorded response ids mapped to the live ones."""

from __future__ import annotations

import json
from typing import Any

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol.result import Choice, Result
from proxycheck.core.replay.plan import ChainedSession, PlannedSession, PlannedTurn, RecordedOutcome

URL = "http://gw/v1/responses"


def response(rid: str | None, *, terminal: bool = True) -> Result:
    return Result("openai_responses", (Choice(0, "text", finish_reason="completed"),), terminal=terminal, response_id=rid)


def turn(n: int, body: dict[str, Any] | bytes, recorded_id: str | None, attempt: int = 1) -> PlannedTurn:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return PlannedTurn(session="s1", turn=n, xid=10 * n + attempt, method="POST", url=URL, dialect="openai_responses",
                       streamed=True, http_version="HTTP/1.1", headers=(), body=data, think_time=None,
                       new_connection=n == 1, client_id=None,
                       recorded=RecordedOutcome(Outcome.OK, result=response(recorded_id)), attempt=attempt)  # fmt: skip


def session(*turns: PlannedTurn) -> PlannedSession:
    return PlannedSession("s1", "continuity", "openai_responses", 0.0, turns)


def test_a_later_turn_names_the_live_response_of_the_turn_it_continues() -> None:
    t1 = turn(1, {"model": "m", "input": "hi", "stream": True}, "resp_rec1")
    t2 = turn(2, b'{"model": "m", "previous_response_id": "resp_rec1", "input": [{"role": "user", "content": "more"}]}',
              "resp_rec2")
    t3 = turn(3, {"model": "m", "previous_response_id": "resp_rec2", "input": "again"}, "resp_rec3")
    chained = ChainedSession(session(t1, t2, t3))
    assert chained.chained(t2) and chained.chained(t3) and not chained.chained(t1)
    assert chained.body_for(t1) == t1.body
    chained.record_reply(t1, response("resp_live1"))
    # Only the id changes; the rest of the body is sent byte for byte as recorded.
    assert chained.body_for(t2) == t2.body.replace(b"resp_rec1", b"resp_live1")
    chained.record_reply(t2, response("resp_live2"))
    assert json.loads(chained.body_for(t3))["previous_response_id"] == "resp_live2"
    assert chained.previous_response_ids() == {"resp_rec1": "resp_live1", "resp_rec2": "resp_live2"}


def test_a_failed_live_turn_still_maps_its_id_and_a_turn_without_one_leaves_the_recorded_id() -> None:
    t1 = turn(1, {"input": "hi"}, "resp_rec1")
    t2 = turn(2, {"previous_response_id": "resp_rec1", "input": "x"}, "resp_rec2")
    t3 = turn(3, {"previous_response_id": "resp_rec2", "input": "y"}, None)
    chained = ChainedSession(session(t1, t2, t3))
    chained.record_reply(t1, response("resp_live1", terminal=False), failed=True)  # a hop cut the stream short
    assert json.loads(chained.body_for(t2))["previous_response_id"] == "resp_live1"
    chained.record_reply(t2, None, failed=True)  # no response at all
    assert chained.body_for(t3) == t3.body


def test_each_attempt_of_a_retried_turn_maps_its_own_recorded_id() -> None:
    t1 = turn(1, {"input": "hi"}, "resp_rec1")
    t2a = turn(2, {"previous_response_id": "resp_rec1", "input": "x"}, None, attempt=1)
    t2b = turn(2, {"previous_response_id": "resp_rec1", "input": "x"}, "resp_rec2", attempt=2)
    t3 = turn(3, {"previous_response_id": "resp_rec2", "input": "y"}, "resp_rec3")
    chained = ChainedSession(session(t1, t2a, t2b, t3))
    chained.record_reply(t1, response("L1"))
    assert json.loads(chained.body_for(t2a))["previous_response_id"] == "L1"
    assert json.loads(chained.body_for(t2b))["previous_response_id"] == "L1"
    chained.record_reply(t2a, response("L2a"))
    chained.record_reply(t2b, response("L2b"))
    assert json.loads(chained.body_for(t3))["previous_response_id"] == "L2b"


def test_an_id_written_with_escapes_is_still_mapped() -> None:
    t1 = turn(1, {"input": "hi"}, "resp/1")
    t2 = turn(2, b'{"previous_response_id":"resp\\/1","input":"x"}', None)
    chained = ChainedSession(session(t1, t2))
    chained.record_reply(t1, response("live"))
    assert json.loads(chained.body_for(t2)) == {"previous_response_id": "live", "input": "x"}
