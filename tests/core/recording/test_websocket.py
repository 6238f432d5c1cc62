"""A WebSocket session in a recording (proxycheck.core.recording.websocket): its records, how it
ended, and its turns. Messages in, turns out; cases built to fool the split: parallel streams on
one socket, an error about a message that started no turn, a turn the socket ended before its
terminal event, a client message that is not a `response.create`, a binary message."""

from __future__ import annotations

import json

import pytest

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.bodies import split_body
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.summary import analyze
from proxycheck.core.recording.websocket import (
    WsClose,
    WsMessage,
    as_sse,
    close_record,
    decode_close,
    decode_message,
    is_upgrade,
    message_record,
    turns,
)


def client(t: float, **doc: object) -> WsMessage:
    return WsMessage(t, True, json.dumps({"type": "response.create", **doc}).encode())


def server(t: float, kind: str, **doc: object) -> WsMessage:
    return WsMessage(t, False, json.dumps({"type": kind, **doc}).encode())


def answer(t: float, text: str = "hi", **doc: object) -> list[WsMessage]:
    return [server(t, "response.created", **doc), server(t + 0.1, "response.output_text.delta", delta=text, **doc),
            server(t + 0.2, "response.completed", **doc)]  # fmt: skip


def test_records_round_trip_text_and_binary_and_refuse_damage() -> None:
    text = WsMessage(1.5, True, '{"type":"response.create","input":"é"}'.encode())
    rec = message_record(7, 1.5, True, text.data, True)
    assert rec == {"k": "ws", "x": 7, "t": 1.5, "c": True, "v": '{"type":"response.create","input":"é"}'}
    assert decode_message(rec, 1.5) == text
    binary = message_record(7, 2.0, False, b"\xff\x00", False)
    assert "b64" in binary and decode_message(binary, 2.0) == WsMessage(2.0, False, b"\xff\x00", False)
    for bad in ({"c": 1, "v": "x"}, {"c": True, "v": 3}, {"c": True}, {"c": False, "b64": "***"}):
        with pytest.raises(ValueError):
            decode_message(bad, 0.0)
    closed = close_record(7, 3.0, "client", 1000, "bye")
    assert decode_close(closed, 3.0) == WsClose(3.0, "client", 1000, "bye")
    for bad in ({"by": "hop", "code": 1000}, {"by": None, "code": "x"}, {"by": None, "code": 1006, "reason": 1}):
        with pytest.raises(ValueError):
            decode_close(bad, 0.0)


def test_how_a_socket_ended_is_said() -> None:
    assert WsClose(1.0, "server", 1011, "overloaded").describe() == "closed by the server (1011: overloaded)"
    assert WsClose(1.0, "client", 1000).clean
    cut = WsClose(1.0, None, 1006)
    assert not cut.clean and cut.describe() == "cut without a close frame (1006)"
    assert not WsClose(1.0, "server", 1006).clean  # wsproto reports a cut as 1006 from the side that dropped


def test_a_socket_splits_into_its_turns_in_order() -> None:
    messages = [client(0.0, input="one"), *answer(0.5), client(5.0, input="two", previous_response_id="r1"),
                *answer(5.4, "again")]  # fmt: skip
    found = turns(messages)
    assert [(t.index, t.t_request, t.terminal, len(t.answer)) for t in found] == [
        (1, 0.0, "response.completed", 3), (2, 5.0, "response.completed", 3)]  # fmt: skip
    assert found[1].t_end == pytest.approx(5.6) and json.loads(found[1].body)["previous_response_id"] == "r1"


def test_a_turn_the_socket_ended_first_has_no_terminal_event() -> None:
    (turn,) = turns([client(0.0), server(0.5, "response.created"), server(0.6, "response.output_text.delta")])
    assert turn.terminal is None and turn.t_end is None and len(turn.answer) == 2


def test_errors_end_a_turn_and_messages_outside_a_turn_belong_to_none() -> None:
    messages = [WsMessage(0.0, True, b"not json"), server(0.1, "error", error={"code": "invalid_json"}),
                WsMessage(0.2, True, b'{"type":"session.update"}'), client(1.0, previous_response_id="gone"),
                server(1.1, "error", error={"code": "previous_response_not_found"}), client(2.0), *answer(2.1)]  # fmt: skip
    found = turns(messages)
    assert [(t.t_request, t.terminal, len(t.answer)) for t in found] == [(1.0, "error", 1), (2.0, "response.completed", 3)]


def test_parallel_streams_on_one_socket_are_kept_apart() -> None:
    messages = [client(0.0, stream_id="a"), client(0.1, stream_id="b"), server(0.2, "response.created", stream_id="b"),
                server(0.3, "response.created", stream_id="a"), server(0.4, "response.completed", stream_id="a"),
                server(0.5, "response.completed", stream_id="b")]  # fmt: skip
    a, b = turns(messages)
    assert (a.stream, [m.t for m in a.answer]) == ("a", [0.3, 0.4])
    assert (b.stream, [m.t for m in b.answer]) == ("b", [0.2, 0.5])


def test_an_answer_reads_as_the_sse_stream_that_carries_the_same_events() -> None:
    sse = as_sse(answer(1.0))
    assert sse[0][0] == 1.0 and sse[0][1].startswith(b'data: {"type": "response.created"')
    assert all(chunk.endswith(b"\n\n") for _, chunk in sse)
    assert as_sse([WsMessage(2.0, False, b"a\nb")]) == [(2.0, b"data: a\ndata: b\n\n")]


def test_an_upgrade_is_told_by_its_header() -> None:
    assert is_upgrade([("Connection", "Upgrade"), ("Upgrade", "WebSocket")])
    assert not is_upgrade([("Connection", "keep-alive")]) and not is_upgrade([("Upgrade", "h2c")])


def socket_exchange(messages: list[WsMessage], close: WsClose, error: str | None) -> RecordedExchange:
    """A recorded socket as the recorder journals it: the 101, its messages, how it ended."""
    ended = {"error": error, "t_error": close.t} if error is not None else {"t_end": close.t}
    upgrade = (("Upgrade", "websocket"),)
    return RecordedExchange(xid=1, t_request=0.0, method="GET", url="http://engine/v1/responses",
                            http_version="HTTP/1.1", request_headers=upgrade, body=split_body(b"").body,
                            t_response=0.01, status=101, response_headers=upgrade, ws=tuple(messages), ws_close=close,
                            **ended)  # type: ignore[arg-type]  # fmt: skip


TWO_TURNS = [client(1.0), *answer(1.1), client(2.0), *answer(2.1)]
CUT = 1006


def test_the_client_hanging_up_between_turns_is_no_reset() -> None:
    # Codex exits without a close frame: the recorder sees the client's connection close after
    # every turn was answered.
    left = analyze(socket_exchange(TWO_TURNS, WsClose(3.0, None, CUT), "client disconnected"))
    assert left.classified.outcome is Outcome.OK
    assert left.classified.detail == "WebSocket: 2 turn(s); the client hung up without a close frame (1006)"


def test_a_cut_of_the_servers_side_between_turns_stays_a_reset() -> None:
    # The same cut, but of the connection to the server: the next turn would have failed on it.
    cut = analyze(socket_exchange(TWO_TURNS, WsClose(3.0, None, CUT), "server disconnected"))
    assert cut.classified.outcome is Outcome.RESET and "between turns the socket was cut" in cut.classified.detail
    closed = analyze(socket_exchange(TWO_TURNS, WsClose(3.0, "server", 1011, "bye"), None))
    assert closed.classified.outcome is Outcome.RESET


def test_the_client_hanging_up_mid_turn_is_not_made_a_whole_answer() -> None:
    # Turn 2 had no terminal event when the client left: the rule for a client that leaves
    # between turns must not make it an answered turn.
    unanswered = [client(1.0), *answer(1.1), client(2.0), server(2.1, "response.created")]
    mid = analyze(socket_exchange(unanswered, WsClose(3.0, None, CUT), "client disconnected"))
    assert mid.classified.outcome is not Outcome.OK
    assert mid.classified.detail.startswith("WebSocket turn 2 of 2:"), mid.classified.detail
