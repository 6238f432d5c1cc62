"""The Responses API's WebSocket mode in the core: what a client's message asks for, the events as
messages, the digest member, a socket's memory in front of the engine's store, and `ws_close`."""

from __future__ import annotations

import json

import pytest

from proxycheck.core.errors import BadInput
from proxycheck.core.testbed import responses_socket as rs
from proxycheck.core.testbed import synth, wire
from proxycheck.core.testbed.faultspec import active_faults, parse_fault
from proxycheck.core.testbed.response_store import ResponseStore, UnknownResponse


def test_a_create_message_is_its_body_without_the_type() -> None:
    doc = {"type": "response.create", "model": "m", "input": "hi", "store": False}
    body, message = rs.read_message(json.dumps(doc))  # type: ignore[misc]
    assert body == {"model": "m", "input": "hi", "store": False} and message == doc


@pytest.mark.parametrize(
    "data,binary,code,param",
    [
        ("not json", False, "invalid_json", None),
        ("[1, 2]", False, "invalid_json", None),
        ('{"type": "response.cancel"}', False, "invalid_value", "type"),
        ('{"model": "m", "input": "no type"}', False, "invalid_value", "type"),
        # A create sent as a binary message is still refused: events are text messages.
        (b'{"type": "response.create", "input": "hi"}', True, "invalid_message", None),
    ],
)
def test_malformed_messages_are_refused_with_a_400(data, binary, code, param) -> None:
    refusal = rs.read_message(data, binary=binary)
    assert isinstance(refusal, rs.Refusal) and (refusal.status, refusal.code, refusal.param) == (400, code, param)
    event = rs.refusal_error(refusal)
    assert event["type"] == "error" and event["status"] == 400
    assert event["error"]["type"] == "invalid_request_error" and event["error"]["code"] == code


def test_a_status_error_is_a_server_error_from_500() -> None:
    assert rs.status_error(503, "x")["error"]["type"] == "server_error"
    assert rs.status_error(429, "x") == {"type": "error", "status": 429, "error": {
        "type": "invalid_request_error", "code": None, "message": "x", "param": None}}  # fmt: skip


def test_the_events_as_messages_are_the_sse_events_json() -> None:
    req = {"input": "hi", "max_output_tokens": 3}
    plan = synth.plan("openai_responses", req, json.dumps(req).encode(), synth.Timing())
    encoded = wire.encode("openai_responses", plan, wire.Meta("m", 1, request=req))
    messages = rs.event_messages(encoded)
    assert [step for step, _ in messages] == [step for step, _ in encoded.events]
    for (_, data), (_, text) in zip(encoded.events, messages):
        assert json.loads(data.split(b"data: ", 1)[1]) == json.loads(text)
    assert json.loads(messages[-1][1])["type"] == "response.completed"
    with pytest.raises(ValueError):
        rs.event_messages(wire.Wire(((0, b"data: {}\n\n"),), b""))


def test_the_digest_rides_in_a_member_of_its_own() -> None:
    digest = {"x-proxycheck-request-sha256": "ab", "x-proxycheck-turn": "2"}
    doc = json.loads(rs.with_digest('{"type":"response.created","response":{"id":"r"}}', digest))
    assert doc == {"type": "response.created", "response": {"id": "r"}, rs.DIGEST_MEMBER: digest}
    assert json.loads(rs.with_digest({"type": "error"}, digest))[rs.DIGEST_MEMBER] == digest


def test_a_sockets_memory_keeps_unstored_answers_and_falls_back_to_the_engines_store() -> None:
    engine = ResponseStore()
    engine.remember("resp_a", {"input": "one"}, [{"type": "message", "role": "assistant", "content": "A"}])
    memory = ResponseStore(fallback=engine, keeps_unstored=True)
    other = ResponseStore(fallback=engine, keeps_unstored=True)
    # The socket continues a persisted answer and is not stored itself: its memory keeps it.
    memory.remember("resp_b", {"input": "two", "previous_response_id": "resp_a", "store": False},
                    [{"type": "message", "role": "assistant", "content": "B"}])  # fmt: skip
    engine.remember("resp_b", {"input": "two", "previous_response_id": "resp_a", "store": False}, [])
    expanded = memory.expand({"input": "three", "previous_response_id": "resp_b"})
    assert [item["content"] for item in expanded["input"]] == ["one", "A", "two", "B", "three"]  # the chain crosses
    with pytest.raises(UnknownResponse):  # another socket never saw it, and it was not stored
        other.expand({"input": "three", "previous_response_id": "resp_b"})
    assert [i["content"] for i in other.expand({"input": "x", "previous_response_id": "resp_a"})["input"]] == [
        "one", "A", "x"]  # fmt: skip
    assert len(engine) == 1 and len(memory) == 1


def test_ws_close_parses_and_fires() -> None:
    spec = parse_fault("ws_close:after=3,code=1011,from_turn=2")
    assert active_faults([spec], turn=1, draw=0).ws_close_after is None
    fired = active_faults([spec], turn=2, draw=0)
    assert (fired.ws_close_after, fired.ws_close_code) == (3, 1011)


@pytest.mark.parametrize(
    "text,message",
    [
        ("ws_close:after=3", "ws_close needs code=..."),
        ("ws_close:code=1011", "ws_close needs after=..."),
        ("ws_close:after=3,code=1006", "code must be a WebSocket close code a server may send"),
        ("ws_close:after=3,code=999", "code must be a WebSocket close code"),
        ("ws_close:after=3,code=5000", "code must be a WebSocket close code"),
    ],
)
def test_bad_ws_close_specs_name_the_spec(text: str, message: str) -> None:
    with pytest.raises(BadInput, match=message) as info:
        parse_fault(text)
    assert str(info.value).startswith(f"--fault {text}: ")


def test_a_warm_up_answer_generates_nothing_under_an_id_of_its_own() -> None:
    req = {"input": "hi", "max_output_tokens": 3}
    answer = synth.plan("openai_responses", req, json.dumps(req).encode(), synth.Timing())
    warm = synth.warmup(answer)
    assert warm.completion_tokens == 0 and wire.responses_output(warm) == []
    assert wire.responses_ids(warm)[0] != wire.responses_ids(answer)[0]
    docs = [json.loads(text) for _, text in rs.event_messages(wire.encode("openai_responses", warm, wire.Meta("m", 1)))]
    assert [d["type"] for d in docs] == ["response.created", "response.in_progress", "response.completed"]
    assert docs[-1]["response"]["output"] == [] and docs[-1]["response"]["usage"]["output_tokens"] == 0
