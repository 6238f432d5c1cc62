"""Session grouping of Responses API conversations continued through `previous_response_id`."""

from __future__ import annotations

from proxycheck.core.recording.sessions import TurnInput, group, turn_number
from proxycheck.core.testbed.synth import assistant_turns, conversation_of


def turn(xid: int, t: float, items: tuple[str, ...], *, rid: str | None = None, prev: str | None = None,
         client: str | None = None, failed: bool = False, end: float = 0.5) -> TurnInput:  # fmt: skip
    return TurnInput(xid=xid, t_start=t, t_end=t + end, history=items, client=client, failed=failed,
                     response_id=rid, previous_response_id=prev, route="POST /v1/responses")  # fmt: skip


def shape(sessions) -> list[list[tuple[int, int, int]]]:  # type: ignore[no-untyped-def]
    """Each session as (xid, turn, attempt) triples."""
    return [list(zip(s.xids, s.turn_numbers, s.attempt_numbers)) for s in sessions]


def test_turns_naming_the_previous_response_are_one_session() -> None:
    # Each request holds only its new input items: no continuity of histories to go on.
    turns = [
        turn(1, 0.0, ("u1",), rid="resp_a"),
        turn(2, 2.0, ("call_out_1",), rid="resp_b", prev="resp_a"),
        turn(3, 4.0, ("u2",), rid="resp_c", prev="resp_b"),
    ]
    sessions = group(turns)
    assert shape(sessions) == [[(1, 1, 1), (2, 2, 1), (3, 3, 1)]]
    assert sessions[0].think_times == (None, 1.5, 1.5)


def test_two_interleaved_chains_on_one_connection_are_told_apart_by_the_ids() -> None:
    turns = [
        turn(1, 0.0, ("hello",), rid="r1", client="c"),
        turn(2, 0.1, ("good morning",), rid="r2", client="c"),
        turn(3, 1.0, ("x",), rid="r3", prev="r2", client="c"),
        turn(4, 1.1, ("x",), rid="r4", prev="r1", client="c"),
        turn(5, 2.0, ("y",), prev="r4", client="c"),
    ]
    assert shape(group(turns)) == [[(1, 1, 1), (4, 2, 1), (5, 3, 1)], [(2, 1, 1), (3, 2, 1)]]


def test_a_fork_stays_in_the_session_of_the_response_it_names() -> None:
    turns = [
        turn(1, 0.0, ("u1",), rid="r1"),
        turn(2, 1.0, ("branch a",), rid="r2", prev="r1"),
        turn(3, 2.0, ("branch b",), rid="r3", prev="r1"),
    ]
    assert shape(group(turns)) == [[(1, 1, 1), (2, 2, 1), (3, 3, 1)]]


def test_a_retry_of_a_request_naming_a_response_is_an_attempt() -> None:
    turns = [
        turn(1, 0.0, ("u1",), rid="r1"),
        turn(2, 1.0, ("u2",), prev="r1", failed=True),
        turn(3, 2.0, ("u2",), rid="r3", prev="r1"),
        turn(4, 3.0, ("u3",), prev="r3"),
    ]
    assert shape(group(turns)) == [[(1, 1, 1), (2, 2, 1), (3, 2, 2), (4, 3, 1)]]


def test_an_id_no_exchange_got_falls_back_to_the_other_rules() -> None:
    turns = [turn(1, 0.0, ("u1",), rid="r1"), turn(2, 1.0, ("other",), prev="resp_elsewhere")]
    assert shape(group(turns)) == [[(1, 1, 1)], [(2, 1, 1)]]


def test_a_conversation_mixing_both_ways_is_one_session() -> None:
    # Turn 2 names turn 1's response; turn 3 resends the whole conversation instead.
    turns = [
        turn(1, 0.0, ("u1",), rid="r1"),
        turn(2, 1.0, ("u2",), rid="r2", prev="r1"),
        turn(3, 2.0, ("u1", "a1", "u2", "a2", "u3"), rid="r3"),
        turn(4, 3.0, ("u4",), prev="r3"),
    ]
    assert shape(group(turns)) == [[(1, 1, 1), (2, 2, 1), (3, 3, 1), (4, 4, 1)]]


def test_the_turn_of_a_responses_request_counts_the_models_answers() -> None:
    # What a hop that sees one request at a time counts (`--fault ...,from_turn=N`): a Codex-style
    # input, where one answer is reasoning plus two function calls, then their outputs.
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list it"}]}
    answer = [{"type": "reasoning", "summary": []},
              {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
              {"type": "function_call", "call_id": "c2", "name": "shell", "arguments": "{}"}]  # fmt: skip
    outputs = [{"type": "function_call_output", "call_id": "c1", "output": "a"},
               {"type": "function_call_output", "call_id": "c2", "output": "b"}]  # fmt: skip
    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
    developer = {"type": "message", "role": "developer", "content": "be brief"}
    assert turn_number({"input": [developer, user]}) == 1
    assert turn_number({"input": "hello"}) == 1
    assert turn_number({"input": [developer, user, *answer, *outputs]}) == 2
    assert turn_number({"input": [developer, user, *answer, *outputs, said, user]}) == 3  # text after the tools
    assert turn_number({"input": [user, said, user, *answer, *outputs]}) == 3
    # The engine counts the same turns from the conversation it reads out of the input.
    for items in ([developer, user, *answer, *outputs, said, user], [user, said, user, *answer, *outputs]):
        req = {"input": items}
        assert turn_number(req) == 1 + assistant_turns(conversation_of("openai_responses", req))
