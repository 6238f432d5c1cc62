"""The fault hop's decisions on a socket's messages (`socketfaults`): which messages are turns and
events, when the hop closes the socket, and the messages that would fool the counts."""

from __future__ import annotations

import json

import pytest

from proxycheck.core.testbed.socketfaults import Act, SocketFaults, SocketRules, sendable_close_code


def create(**body: object) -> bytes:
    return json.dumps({"type": "response.create", "model": "m", "input": "go", **body}).encode()


def event(kind: str, **body: object) -> bytes:
    return json.dumps({"type": kind, **body}).encode()


ANSWER = [event("response.created"), event("response.output_text.delta", delta="a"),
          event("response.output_text.delta", delta="b"), event("response.completed")]  # fmt: skip


def run(faults: SocketFaults, *turns: list[bytes]) -> list[list[Act]]:
    """Each turn's create, then its answer: what the hop does with each message."""
    return [[faults.message(True, create())] + [faults.message(False, m) for m in answer] for answer in turns]


def test_with_no_rule_every_message_passes() -> None:
    faults = SocketFaults(SocketRules())
    acts = run(faults, ANSWER, ANSWER, ANSWER)
    assert all(a is Act.PASS for turn in acts for a in turn) and faults.closing is None
    assert (faults.turns, faults.ended) == (3, 3)


def test_the_socket_closes_on_the_terminal_event_of_the_kth_turn_then_drops_everything() -> None:
    faults = SocketFaults(SocketRules(close_after_turns=2))
    first, second = run(faults, ANSWER, ANSWER)
    assert set(first) == {Act.PASS} and second[:-1] == [Act.PASS] * 4 and second[-1] is Act.CLOSE
    assert faults.closing == "ws_close_after_turns" and "turn 2 ended" in faults.detail
    assert faults.message(True, create()) is Act.DROP and faults.message(False, ANSWER[0]) is Act.DROP


def test_an_error_event_ends_a_turn_too() -> None:
    faults = SocketFaults(SocketRules(close_after_turns=1))
    assert faults.message(True, create()) is Act.PASS
    assert faults.message(False, event("error", status=400)) is Act.CLOSE


def test_what_only_looks_like_a_turn_or_its_end_counts_for_nothing() -> None:
    faults = SocketFaults(SocketRules(close_after_turns=1, cut_after_events=9))
    # Not a create: another type, the type's name in a text, a create sent by the server, binary.
    for message in (event("response.cancel"), event("x", note="response.create"), b"response.create"):
        assert faults.message(True, message) is Act.PASS
    assert faults.message(True, create(), text=False) is Act.PASS
    assert faults.message(False, create()) is Act.PASS
    assert faults.turns == 0
    # Not terminal: the name inside a delta, a terminal type sent by the client, a binary message.
    assert faults.message(True, create()) is Act.PASS
    assert faults.message(False, event("response.output_text.delta", delta='"response.completed"')) is Act.PASS
    assert faults.message(True, event("response.completed")) is Act.PASS
    assert faults.message(False, event("response.completed"), text=False) is Act.PASS
    assert faults.message(False, b"not json") is Act.PASS
    assert faults.ended == 0 and faults.closing is None


def test_a_turn_is_cut_after_k_events_only_from_the_turn_asked_for() -> None:
    faults = SocketFaults(SocketRules(cut_after_events=2, from_turn=2))
    first, second = run(faults, ANSWER, ANSWER)
    assert set(first) == {Act.PASS}
    assert second == [Act.PASS, Act.PASS, Act.CLOSE, Act.DROP, Act.DROP]  # 2 events, then nothing
    assert faults.closing == "ws_cut_after_events" and faults.detail == "turn 2 cut after 2 events"


def test_a_turn_that_ends_before_its_kth_event_is_not_cut_nor_is_the_next_one_early() -> None:
    faults = SocketFaults(SocketRules(cut_after_events=5))
    (first,) = run(faults, ANSWER)  # four events: over before the fifth
    assert set(first) == {Act.PASS} and faults.closing is None
    # Messages between turns do not count toward the next turn's events.
    assert faults.message(False, event("response.output_text.delta")) is Act.PASS
    acts = [faults.message(True, create())] + [faults.message(False, ANSWER[1]) for _ in range(5)]
    assert acts == [Act.PASS] * 5 + [Act.CLOSE]


def test_zero_events_cuts_right_after_the_create() -> None:
    faults = SocketFaults(SocketRules(cut_after_events=0))
    assert faults.message(True, create()) is Act.CLOSE
    assert faults.message(False, ANSWER[0]) is Act.DROP


def test_a_create_no_larger_than_min_body_is_not_cut() -> None:
    big = create(instructions="x" * 100)
    faults = SocketFaults(SocketRules(cut_after_events=1, min_body=len(big) - 1))
    assert faults.message(True, create()) is Act.PASS and faults.message(False, ANSWER[0]) is Act.PASS
    faults.message(False, ANSWER[-1])
    assert faults.message(True, big) is Act.PASS and faults.message(False, ANSWER[0]) is Act.CLOSE
    at_limit = SocketFaults(SocketRules(cut_after_events=1, min_body=len(big)))
    assert at_limit.message(True, big) is Act.PASS and at_limit.message(False, ANSWER[0]) is Act.PASS


def test_the_first_decision_to_close_stands() -> None:
    faults = SocketFaults(SocketRules(close_after_turns=1))
    assert faults.close("ws_idle_close", "idle") is Act.CLOSE
    assert faults.message(True, create()) is Act.DROP
    faults.close("ws_max_life", "old")
    assert (faults.closing, faults.detail) == ("ws_idle_close", "idle")


@pytest.mark.parametrize(("code", "ok"), [(1000, True), (1001, True), (1011, True), (3000, True), (4999, True),
                                          (999, False), (1004, False), (1005, False), (1006, False), (1015, False),
                                          (5000, False), (0, False)])  # fmt: skip
def test_only_codes_a_close_frame_may_carry_are_sendable(code: int, ok: bool) -> None:
    assert sendable_close_code(code) is ok
