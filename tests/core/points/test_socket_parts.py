"""A WebSocket session as the points see it (`proxycheck.core.points.recorded`), values in and out,
and the trace's rules on its parts: each turn keyed by its `response.create` (a re-serialization
does not change it, another `previous_response_id` does), a turn ended by the socket says which
side ended it, the socket's end while idle is over when its client ended it and a `reset` when
the server side did, an upgrade is keyed as one (a plain GET is not taken for it), an open socket
with no turn is no exchange in flight. Then what tries to fool the trace: a turn the engine side
saw its own engine cut is not the hop's; a socket the hop cut, seen ended by its client inside,
is the hop's."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.points.matching import PointLog
from proxycheck.core.points.recorded import UPGRADE_KEY, renamed, seen_of_recorded
from proxycheck.core.points.seen import EXCHANGE, SOCKET_END, SOCKET_TURN, UPGRADE, Seen
from proxycheck.core.points.trace import FINE, INSIDE, LOST, trace
from proxycheck.core.recording.bodies import split_body
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.summary import analyze
from proxycheck.core.recording.websocket import WsClose, WsMessage

URL = "http://engine/v1/responses"
UPGRADE_HEADERS = (("upgrade", "websocket"), ("connection", "Upgrade"))
EMPTY = split_body(b"").body


def create(k: int, previous: str | None = None, *, indent: int | None = None, reorder: bool = False) -> bytes:
    doc: dict[str, Any] = {"type": "response.create", "model": "m", "input": f"step {k}", "max_output_tokens": 8}
    if previous:
        doc["previous_response_id"] = previous
    if reorder:
        doc = dict(reversed(list(doc.items())))
    return json.dumps(doc, indent=indent).encode()


def answer(t: float, rid: str, events: int = 3, terminal: bool = True) -> list[WsMessage]:
    out = [WsMessage(t + 0.01 * i, False, json.dumps({"type": "response.output_text.delta", "delta": "a"}).encode())
           for i in range(events)]  # fmt: skip
    if terminal:
        done = {"type": "response.completed", "response": {"id": rid, "status": "completed", "output": []}}
        out.append(WsMessage(t + 0.01 * events, False, json.dumps(done).encode()))
    return out


def socket(messages: list[WsMessage], *, close: WsClose | None = None, error: str | None = None, xid: int = 1,
           status: int = 101, t0: float = 0.0) -> RecordedExchange:  # fmt: skip
    end = close.t if close is not None else None
    return RecordedExchange(
        xid=xid, t_request=t0, method="GET", url=URL, http_version="HTTP/1.1", request_headers=UPGRADE_HEADERS,
        body=EMPTY, t_response=t0 + 0.01, status=status, response_headers=UPGRADE_HEADERS if status == 101 else (),
        streamed=False, t_end=end if close is not None and close.clean else None,
        error=error, t_error=end if error is not None else None, ws=tuple(messages), ws_close=close,
    )  # fmt: skip


def parts(x: RecordedExchange) -> tuple[Seen, ...]:
    return seen_of_recorded(x, "s1", 1, analyze(x))


def two_turns(**kw: Any) -> RecordedExchange:
    messages = [WsMessage(0.1, True, create(1)), *answer(0.2, "r1"), WsMessage(1.0, True, create(2, "r1")),
                *answer(1.1, "r2")]  # fmt: skip
    return socket(messages, **kw)


# --------------------------------------------------------------------------------------------
# Parts of one socket


def test_each_turn_is_a_part_keyed_by_its_create_and_timed_by_its_messages() -> None:
    one, two = parts(two_turns())
    assert (one.kind, one.part, one.turn, two.part, two.turn) == (SOCKET_TURN, 1, 1, 2, 2)
    assert one.ident == (1, 1) and two.ident == (1, 2) and one.xid == two.xid
    assert (one.t_request, one.t_response, one.t_ended) == (0.1, 0.2, 0.23)
    assert one.complete and one.terminal and one.events == 4 and one.content_events == 3
    assert one.name == "s1 WebSocket turn 1" and one.part_json() == {"websocket": "turn", "socket_turn": 1}
    # An open socket after its last turn: no end part, nothing in flight.
    assert all(s.t_ended is not None for s in (one, two))


def test_a_create_re_serialized_keeps_its_key_another_previous_response_id_does_not() -> None:
    base = seen_of_recorded(socket([WsMessage(0.1, True, create(2, "r1")), *answer(0.2, "r2")]), "s1", 1,
                            analyze(socket([WsMessage(0.1, True, create(2, "r1")), *answer(0.2, "r2")])))[0]  # fmt: skip
    spaced = socket([WsMessage(0.1, True, create(2, "r1", indent=2, reorder=True)), *answer(0.2, "r2")])
    other = socket([WsMessage(0.1, True, create(2, "r9")), *answer(0.2, "r2")])
    (s,) = [p for p in parts(spaced) if p.kind == SOCKET_TURN]
    assert s.key.view == base.key.view and s.key.raw != base.key.raw and s.key.canonical == base.key.canonical
    (o,) = [p for p in parts(other) if p.kind == SOCKET_TURN]
    assert o.key.view != base.key.view  # the same new input continuing another response: another turn


def test_a_turn_the_socket_ended_says_which_side_ended_it() -> None:
    messages = [WsMessage(0.1, True, create(1)), *answer(0.2, "r1", terminal=False)]
    by_server = parts(socket(messages, close=WsClose(0.5, None, 1006), error="server disconnected"))
    by_client = parts(socket(messages, close=WsClose(0.5, "client", 1000)))
    cut_client = parts(socket(messages, close=WsClose(0.5, None, 1006), error="client disconnected"))
    for found in (by_server, by_client, cut_client):
        (turn,) = found  # the turn carries the end: no end part
        assert turn.failed and turn.t_ended == 0.5 and not turn.complete
    assert not by_server[0].client_ended and "server disconnected" in (by_server[0].error or "")
    assert by_client[0].client_ended and cut_client[0].client_ended
    assert "then the socket closed by the client (1000)" in by_client[0].progress_text()


def test_the_end_while_idle_is_over_when_the_client_ended_it_and_a_reset_when_the_server_side_did() -> None:
    cases = {
        "client close frame": (WsClose(2.0, "client", 1000), None, Outcome.OK),
        "client cut": (WsClose(2.0, None, 1006), "client disconnected", Outcome.OK),
        "server close frame": (WsClose(2.0, "server", 1001), None, Outcome.RESET),
        "server cut": (WsClose(2.0, None, 1006), "server disconnected", Outcome.RESET),
    }
    for case, (close, error, outcome) in cases.items():
        *turns, end = parts(two_turns(close=close, error=error))
        assert len(turns) == 2 and end.kind == SOCKET_END, case
        assert (end.part, end.turn, end.outcome, end.complete) == (3, 3, outcome, outcome is Outcome.OK), case
        assert end.t_request == turns[-1].t_ended and end.t_ended == 2.0 and end.client_ended == (outcome is Outcome.OK)
        assert end.name == "s1 WebSocket end after turn 2" and end.progress_text().startswith("socket "), case
        assert end.key.view == "websocket-end:" + turns[-1].key.view


def test_an_upgrade_is_keyed_as_one_and_a_plain_get_is_not() -> None:
    refused = RecordedExchange(xid=3, t_request=0.0, method="GET", url=URL, http_version="HTTP/1.1",
                               request_headers=UPGRADE_HEADERS, body=EMPTY, t_response=0.01, status=405, streamed=False,
                               t_end=0.02)  # fmt: skip
    (r,) = parts(refused)
    assert (r.kind, r.key, r.status, r.outcome) == (UPGRADE, UPGRADE_KEY, 405, Outcome.HTTP_ERROR)
    plain = RecordedExchange(xid=2, t_request=0.0, method="GET", url=URL, http_version="HTTP/1.1", request_headers=(),
                             body=EMPTY, t_response=0.01, status=405, streamed=False, t_end=0.02)  # fmt: skip
    (p,) = parts(plain)
    assert p.kind == EXCHANGE and p.key != UPGRADE_KEY  # another request: a hop that dropped the upgrade sent it
    # Agreed to, no turn yet: done at its 101, not an exchange in flight while its client thinks.
    (idle,) = parts(socket([]))
    assert idle.kind == UPGRADE and idle.complete and idle.t_ended == 0.01
    # ... and ended by the server with no turn: the end after the upgrade.
    _, end = parts(socket([], close=WsClose(3.0, "server", 1011)))
    assert end.kind == SOCKET_END and end.failed and end.name == "s1 WebSocket end after the upgrade"


def test_a_grouping_renames_a_socket_turn_but_keeps_its_number() -> None:
    one, _ = parts(two_turns())
    assert (renamed(one, "s7", 4).label, renamed(one, "s7", 4).turn) == ("s7", 1)
    (up,) = parts(socket([]))
    assert renamed(up, "s7", 4).turn == 4


# --------------------------------------------------------------------------------------------
# The trace on parts


def points_of(outer: RecordedExchange, inner: RecordedExchange) -> list[PointLog]:
    return [PointLog("client-side", 1000.0, parts(outer), ((0.0, 100.0),)),
            PointLog("engine-side", 1000.0, parts(inner), ((0.0, 100.0),))]  # fmt: skip


def third_turn(close: WsClose, error: str | None, *, terminal: bool, shift: float = 0.0) -> RecordedExchange:
    messages = [WsMessage(0.1 + shift, True, create(1)), *answer(0.2 + shift, "r1"),
                WsMessage(1.0 + shift, True, create(2, "r1")), *answer(1.1 + shift, "r2", terminal=terminal)]  # fmt: skip
    return socket(messages, close=close, error=error, t0=shift)


def test_a_turn_cut_outside_and_ended_by_its_client_inside_was_lost_between_the_points() -> None:
    outer = third_turn(WsClose(1.2, None, 1006), "server disconnected", terminal=False)
    inner = third_turn(WsClose(1.19, "client", 1000), None, terminal=False, shift=-0.001)
    result = trace(points_of(outer, inner))
    (lost,) = [t for t in result.tracks if t.locus.kind == LOST]
    assert lost.name.name == "s1 WebSocket turn 2" and result.verdict == "proxy", result.summary
    assert [t.locus.kind for t in result.tracks if t is not lost] == [FINE]


def test_a_turn_the_engine_cut_inside_is_not_the_hops() -> None:
    # Both points saw the socket cut by the server side mid-answer: the engine (or a hop inside
    # the inner point) cut it, never the hop between.
    outer = third_turn(WsClose(1.2, None, 1006), "server disconnected", terminal=False)
    inner = third_turn(WsClose(1.19, None, 1006), "server disconnected", terminal=False, shift=-0.001)
    result = trace(points_of(outer, inner))
    (failed,) = result.failed
    assert failed.locus.kind == INSIDE and result.verdict == "inconclusive", result.summary


def test_an_idle_socket_cut_outside_and_ended_by_its_client_inside_was_lost_at_its_end() -> None:
    outer = two_turns(close=WsClose(5.0, None, 1006), error="server disconnected")
    inner = two_turns(close=WsClose(4.99, "client", 1000))
    result = trace(points_of(outer, inner))
    (lost,) = [t for t in result.tracks if t.locus.kind == LOST]
    assert lost.name.kind == SOCKET_END and lost.name.turn == 3, lost.line
    assert "client-side socket cut without a close frame (1006): server disconnected" in lost.line
    # The engine closing its own idle socket is the server's, not the hop's.
    inner = two_turns(close=WsClose(4.99, "server", 1001))
    outer = two_turns(close=WsClose(5.0, "server", 1001))
    (failed,) = trace(points_of(outer, inner)).failed
    assert failed.locus.kind == INSIDE


def test_a_socket_the_recording_may_not_hold_to_the_end_is_no_failure() -> None:
    messages = [WsMessage(0.1, True, create(1)), *answer(0.2, "r1", terminal=False)]
    cut = socket(messages, close=WsClose(0.5, None, 1006), error="server disconnected")
    (turn,) = parts(replace(cut, lost_line="journal.jsonl:7: not JSON"))
    assert turn.outcome is Outcome.NOT_RECORDED and not turn.known and not turn.failed
    *_, end = parts(replace(two_turns(close=WsClose(5.0, "server", 1001)), lost_line="journal.jsonl:9: not JSON"))
    assert end.kind == SOCKET_END and end.outcome is Outcome.NOT_RECORDED
