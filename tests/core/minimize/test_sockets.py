"""`cut_socket`: a recorded socket cut to its first turns, its waits moved (messages in, messages out).

What must hold: a cut never keeps a later turn nor drops an earlier one; the socket's end follows
the last kept turn after the wait it followed the last recorded one (an idle end stays an idle
end of the same length; a client's close stays the client leaving); a shift changes the wait
before one turn and no other, and one keyed past the last kept turn moves the end alone."""

from __future__ import annotations

import json

import pytest

from proxycheck.core.minimize.sockets import count_turns, cut_socket
from proxycheck.core.recording.websocket import WsClose, WsMessage, turns


def create(t: float, n: int) -> WsMessage:
    return WsMessage(t, True, json.dumps({"type": "response.create", "input": f"step {n}"}).encode())


def event(t: float, kind: str) -> WsMessage:
    return WsMessage(t, False, json.dumps({"type": kind}).encode())


def socket(count: int, *, think: float = 2.0, answer: float = 0.5) -> list[WsMessage]:
    """`count` turns: each a create, a delta after 0.1 s, its completion after `answer` s; the
    next `think` s after."""
    out, t = [], 1.0
    for n in range(1, count + 1):
        out += [create(t, n), event(t + 0.1, "response.output_text.delta"), event(t + answer, "response.completed")]
        t += answer + think
    return out


def starts(messages: list[WsMessage]) -> list[float]:
    return [t.t_request for t in turns(messages)]


def test_a_cut_keeps_the_first_turns_and_the_idle_end_after_them_as_long_as_recorded() -> None:
    messages = socket(5)
    last_end = messages[-1].t
    close = WsClose(last_end + 7.0, "server", 1001, "idle")  # the chain ended it 7 s after the last turn
    cut = cut_socket(messages, close, keep=3)
    assert cut.turns == 3 and count_turns(cut.messages) == 3
    assert list(cut.messages) == messages[:9]  # turns 1..3 whole, as recorded (times too)
    assert cut.close is not None and cut.close.t == pytest.approx(messages[8].t + 7.0)
    assert (cut.close.by, cut.close.code, cut.close.reason) == ("server", 1001, "idle")
    assert cut.end_shift == pytest.approx(cut.close.t - close.t)


def test_a_clients_close_stays_the_clients_after_the_cut() -> None:
    messages = socket(4)
    close = WsClose(messages[-1].t + 0.01, "client", 1000)
    cut = cut_socket(messages, close, keep=2)
    assert cut.close is not None and cut.close.by == "client"
    assert cut.close.t == pytest.approx(messages[5].t + 0.01)


def test_keeping_every_turn_or_more_changes_nothing() -> None:
    messages = socket(3)
    close = WsClose(messages[-1].t + 1.0, "client", 1000)
    for keep in (None, 3, 9):
        cut = cut_socket(messages, close, keep=keep)
        assert (list(cut.messages), cut.close, cut.end_shift, cut.turns) == (messages, close, 0.0, 3)


def test_no_socket_loses_its_first_turn() -> None:
    with pytest.raises(ValueError):
        cut_socket(socket(2), None, keep=0)


def test_a_shift_changes_the_wait_before_its_turn_and_no_other() -> None:
    messages = socket(4, think=3.0)
    close = WsClose(messages[-1].t + 0.01, "client", 1000)
    cut = cut_socket(messages, close, shifts={3: -2.5})
    before, after = starts(messages), starts(list(cut.messages))
    assert after[:2] == before[:2]  # turns 1 and 2 where they were
    assert after[2] == pytest.approx(before[2] - 2.5) and after[3] == pytest.approx(before[3] - 2.5)
    # Every turn's answer moved with its request: only the wait before turn 3 changed.
    for was, now in zip(turns(messages), turns(list(cut.messages))):
        assert [m.t - was.t_request for m in was.answer] == pytest.approx([m.t - now.t_request for m in now.answer])
    assert cut.close is not None and cut.close.t == pytest.approx(close.t - 2.5)
    assert cut.end_shift == pytest.approx(-2.5)


def test_a_shift_past_the_last_kept_turn_moves_the_idle_end_alone() -> None:
    messages = socket(4)
    close = WsClose(messages[-1].t + 7.0, None, 1006)  # cut without a close frame while idle
    cut = cut_socket(messages, close, keep=2, shifts={3: -6.0})
    assert list(cut.messages) == messages[:6]
    assert cut.close is not None and cut.close.t == pytest.approx(messages[5].t + 1.0)  # 7 s of idle, less 6


def test_a_message_of_no_turn_after_the_kept_turns_goes_with_them() -> None:
    messages = socket(3)
    stray = event(messages[4].t + 0.5, "session.updated")  # between turn 2 and turn 3
    early = event(0.5, "session.created")  # before the first turn
    whole = [early, *messages[:6], stray, *messages[6:]]
    cut = cut_socket(whole, None, keep=1)
    assert list(cut.messages) == [early, *messages[:3]]
    assert stray not in cut_socket(whole, None, keep=2).messages  # it came after turn 2 ended
    kept = cut_socket(whole, None, shifts={2: 1.0})  # it moves with turn 2, which began before it
    assert [m.t for m in kept.messages if m.type == "session.updated"] == [pytest.approx(stray.t + 1.0)]
