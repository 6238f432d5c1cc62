"""The reference engine's Responses API WebSocket mode (`GET /v1/responses` upgraded), as a real
process driven with an aiohttp WebSocket client: turns on one socket continuing each other with
`previous_response_id` (the same answers POST gives), each socket's memory, refused messages,
every fault over a socket, and the close handshake."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import aiohttp
import httpx
import pytest
from processes import EngineFactory

from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(60)

PATH = "/v1/responses"
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")
TOOLS = [{"type": "function", "name": "read_file", "description": "Read a file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]  # fmt: skip
FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
WAIT = 10.0  # the longest any one message is waited for
QUIET = 1.0  # a silence this long, where the engine sends a message every few ms, is a stop


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines(*FAST)


@pytest.fixture(scope="module")
def tool_engine(module_engines: EngineFactory) -> Managed:
    """An engine that calls a tool whenever it may (the rule of two rounds still ends each loop)."""
    return module_engines("--token-interval", "0.002", "--ttft-base", "0.01", "--tool-call-rate", "1")


def ws_url(proc: Managed) -> str:
    return proc.url.replace("http://", "ws://") + PATH


def create(**body: Any) -> str:
    return json.dumps({"type": "response.create", "model": "m", **body})


async def receive(ws: aiohttp.ClientWebSocketResponse, timeout: float = WAIT) -> dict[str, Any]:
    msg = await ws.receive(timeout=timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.data)
    return json.loads(msg.data)


async def turn(ws: aiohttp.ClientWebSocketResponse, message: str) -> list[dict[str, Any]]:
    """Send one create message; every event up to its terminal one (or its error)."""
    await ws.send_str(message)
    events = [await receive(ws)]
    while events[-1]["type"] not in TERMINAL:
        events.append(await receive(ws))
    return events


async def silent(ws: aiohttp.ClientWebSocketResponse) -> asyncio.Task[aiohttp.WSMessage]:
    """Nothing arrives for QUIET seconds, and the socket is still open; the receive still
    waiting, for the caller to close the socket and then await (a receive that times out would
    mark the socket abnormally closed in the client, whatever the engine does next)."""
    waiting = asyncio.ensure_future(ws.receive())
    done, _ = await asyncio.wait({waiting}, timeout=QUIET)
    assert not done, waiting.result()
    assert not ws.closed
    return waiting


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def post_events(proc: Managed, body: dict[str, Any]) -> list[dict[str, Any]]:
    resp = httpx.post(proc.url + PATH, json={**body, "stream": True}, timeout=WAIT)
    assert resp.status_code == 200, resp.text
    return [json.loads(block.split("data: ", 1)[1]) for block in resp.text.split("\n\n") if block.strip()]


async def test_a_conversation_on_one_socket_continues_by_previous_response_id(tool_engine) -> None:
    messages, kinds, socket_events = [], [], []
    beta = {"OpenAI-Beta": "responses_websockets=2026-02-06"}  # what Codex sends; accepted with or without
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(tool_engine), headers=beta) as ws:
        body: dict[str, Any] = {"input": "go", "tools": TOOLS}
        for _ in range(3):
            message = create(**body)
            events = await turn(ws, message)
            names = [e["type"] for e in events]
            assert names[0] == "response.created" and names[-1] == "response.completed", names
            assert [e["sequence_number"] for e in events] == list(range(len(events)))
            # What the engine received, as the HTTP answer's headers say it.
            seen = events[0]["proxycheck"]
            assert seen["x-proxycheck-request-sha256"] == hashlib.sha256(message.encode()).hexdigest()
            assert seen["x-proxycheck-request-bytes"] == str(len(message.encode()))
            assert seen["x-proxycheck-turn"] == str(len(messages) + 1)
            assert all("proxycheck" not in e for e in events[1:])
            response = events[-1]["response"]
            item = response["output"][0]
            kinds.append(item["type"])
            messages.append(body)
            socket_events.append(events)
            if item["type"] != "function_call":
                break
            body = {"previous_response_id": response["id"], "tools": TOOLS,
                    "input": [{"type": "function_call_output", "call_id": item["call_id"], "output": "contents"}]}
        await ws.close()
    # The stored tool rounds count as if resent: after two the engine answers with text.
    assert kinds == ["function_call", "function_call", "message"]
    # The same create bodies sent by POST get the same answers: the socket is only a transport.
    for body, events in zip(messages, socket_events):
        posted = post_events(tool_engine, {"model": "m", **body})
        assert posted[-1]["response"]["id"] == events[-1]["response"]["id"]
        assert posted[-1]["response"]["output"] == events[-1]["response"]["output"]
        assert [e["type"] for e in posted] == [e["type"] for e in events]


async def test_each_socket_has_its_own_memory(engine) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(ws_url(engine)) as first:
            unstored = (await turn(first, create(input="kept here only", store=False, max_output_tokens=3)))[-1]
            stored = (await turn(first, create(input="kept for all", max_output_tokens=3)))[-1]
            # The socket itself continues its unstored answer.
            again = await turn(first, create(input="more", previous_response_id=unstored["response"]["id"],
                                             store=False, max_output_tokens=2))  # fmt: skip
            assert again[-1]["type"] == "response.completed" and again[0]["proxycheck"]["x-proxycheck-turn"] == "2"
        async with session.ws_connect(ws_url(engine)) as second:
            missing = unstored["response"]["id"]
            (error,) = await turn(second, create(input="more", previous_response_id=missing, store=False))
            assert {k: v for k, v in error.items() if k != "proxycheck"} == {
                "type": "error", "status": 400,
                "error": {"type": "invalid_request_error", "code": "previous_response_not_found",
                          "message": f"Previous response with id '{missing}' not found.",
                          "param": "previous_response_id"}}  # fmt: skip
            assert "x-proxycheck-request-sha256" in error["proxycheck"]
            # The socket stays open and usable: a stored answer (as the API persists it) continues here.
            events = await turn(second, create(input="on", previous_response_id=stored["response"]["id"],
                                               max_output_tokens=2))  # fmt: skip
            assert events[-1]["type"] == "response.completed" and events[0]["proxycheck"]["x-proxycheck-turn"] == "2"
    # An answer POST stored continues on a socket too.
    posted = httpx.post(engine.url + PATH, json={"model": "m", "input": "by POST", "max_output_tokens": 2},
                        timeout=WAIT).json()  # fmt: skip
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(engine)) as ws:
        events = await turn(ws, create(input="then", previous_response_id=posted["id"], max_output_tokens=2))
        assert events[-1]["type"] == "response.completed"


async def test_malformed_messages_get_an_error_and_the_socket_stays_open(engine) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(engine)) as ws:
        for message, code in (("not json", "invalid_json"), ('{"type": "response.cancel"}', "invalid_value"),
                              ('{"input": "no type"}', "invalid_value")):  # fmt: skip
            (error,) = await turn(ws, message)
            assert error["type"] == "error" and error["status"] == 400 and error["error"]["code"] == code
            assert error["proxycheck"]["x-proxycheck-request-sha256"] == hashlib.sha256(message.encode()).hexdigest()
        await ws.send_bytes(create(input="binary").encode())
        error = await receive(ws)
        assert error["type"] == "error" and error["error"]["code"] == "invalid_message"
        (error,) = await turn(ws, create(input="hi", proxycheck={"ttft": "soon"}))  # a bad timing extension
        assert error["status"] == 400 and "proxycheck.ttft" in error["error"]["message"]
        events = await turn(ws, create(input="still here", max_output_tokens=3))
        assert events[-1]["type"] == "response.completed" and len(text_of(events).split()) == 3
        # The client closes; the engine answers the close.
        assert await ws.close() and ws.close_code == aiohttp.WSCloseCode.OK
    # A GET without the upgrade is what it was: the path takes POST.
    resp = httpx.get(engine.url + PATH, timeout=WAIT)
    assert resp.status_code == 405 and resp.headers["allow"] == "POST"


async def test_turns_sent_at_once_are_answered_in_order(engine) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(engine)) as ws:
        await ws.send_str(create(input="first", max_output_tokens=4))
        await ws.send_str(create(input="second", max_output_tokens=4))
        events = [await receive(ws)]
        while sum(e["type"] == "response.completed" for e in events) < 2:
            events.append(await receive(ws))
    ids = [e["response"]["id"] for e in events if e["type"] in ("response.created", "response.completed")]
    assert ids[0] == ids[1] and ids[2] == ids[3] and ids[0] != ids[2]  # one answer, then the other


async def answered(proc: Managed, *bodies: dict[str, Any]) -> tuple[aiohttp.ClientSession, Any, list]:
    """A session and socket on `proc`, and the events of a first turn continued by each body
    (`previous_response_id` of the turn before)."""
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(ws_url(proc))
    events = await turn(ws, create(input="one", max_output_tokens=3))
    for body in bodies:
        events = await turn(ws, create(previous_response_id=events[-1]["response"]["id"], **body))
    return session, ws, events


async def test_a_stall_leaves_the_socket_open_and_silent(engines: EngineFactory) -> None:
    proc = engines(*FAST, "--fault", "stall:after=3,seconds=30,from_turn=2")
    session, ws, first = await answered(proc)
    try:
        assert first[-1]["type"] == "response.completed"  # turn 1 is not touched
        await ws.send_str(create(input="two", previous_response_id=first[-1]["response"]["id"], max_output_tokens=5))
        got = [await receive(ws) for _ in range(3)]
        assert [e["type"] for e in got] == ["response.created", "response.in_progress", "response.output_item.added"]
        waiting = await silent(ws)
        # The client gives up and closes: the engine, stalled, still answers the close.
        assert await ws.close() and ws.close_code == aiohttp.WSCloseCode.OK
        assert (await asyncio.wait_for(waiting, WAIT)).type == aiohttp.WSMsgType.CLOSING
    finally:
        await ws.close()
        await session.close()
    assert httpx.get(proc.url + "/health", timeout=WAIT).status_code == 200


async def test_close_drops_the_connection_without_a_close_frame(engines: EngineFactory) -> None:
    proc = engines(*FAST, "--fault", "close:after=4")
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(proc)) as ws:
        await ws.send_str(create(input="hi", max_output_tokens=5))
        assert len([await receive(ws) for _ in range(4)]) == 4
        msg = await ws.receive(timeout=WAIT)
        # No close frame came: the client sees the connection end (1006, abnormal closure).
        assert msg.type == aiohttp.WSMsgType.CLOSED and ws.close_code == aiohttp.WSCloseCode.ABNORMAL_CLOSURE


async def test_ws_close_sends_a_close_frame_with_its_code(engines: EngineFactory) -> None:
    proc = engines(*FAST, "--fault", "ws_close:after=2,code=1011")
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(proc)) as ws:
        await ws.send_str(create(input="hi", max_output_tokens=5))
        assert [(await receive(ws))["type"] for _ in range(2)] == ["response.created", "response.in_progress"]
        msg = await ws.receive(timeout=WAIT)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1011
    # Over HTTP the fault is not there: the whole stream, to its terminal event.
    assert post_events(proc, {"model": "m", "input": "hi", "max_output_tokens": 5})[-1]["type"] == "response.completed"


async def test_a_pause_is_a_silence_then_the_rest(engines: EngineFactory) -> None:
    proc = engines(*FAST, "--fault", "pause:after=5,seconds=1.5")
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(proc)) as ws:
        await ws.send_str(create(input="hi", max_output_tokens=6))
        times, events = [], []
        while not events or events[-1]["type"] not in TERMINAL:
            events.append(await receive(ws))
            times.append(time.monotonic())
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert events[-1]["type"] == "response.completed" and len(text_of(events).split()) == 6
    assert max(gaps) >= 1.5 and gaps.index(max(gaps)) == 4  # after the fifth message, once


async def test_delay_headers_delays_a_turns_first_message(engines: EngineFactory) -> None:
    proc = engines(*FAST, "--fault", "delay_headers:seconds=1")
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(proc)) as ws:
        t0 = time.monotonic()
        await ws.send_str(create(input="hi", max_output_tokens=2))
        first = await receive(ws)
        assert first["type"] == "response.created" and time.monotonic() - t0 >= 1.0
        while first["type"] != "response.completed":
            first = await receive(ws)


async def test_a_status_fault_is_an_error_event_and_the_socket_stays_open(engines: EngineFactory) -> None:
    proc = engines(*FAST, "--fault", "status:code=503,from_turn=2")
    session, ws, first = await answered(proc)
    try:
        (error,) = await turn(ws, create(input="two", previous_response_id=first[-1]["response"]["id"]))
        assert error["type"] == "error" and error["status"] == 503 and error["error"]["type"] == "server_error"
        assert error["proxycheck"]["x-proxycheck-turn"] == "2"
        events = await turn(ws, create(input="a new conversation", max_output_tokens=2))  # turn 1 again
        assert events[-1]["type"] == "response.completed"
    finally:
        await ws.close()
        await session.close()


async def test_drop_terminal_ends_a_turn_without_its_terminal_event(engines: EngineFactory) -> None:
    proc = engines(*FAST, "--fault", "drop_terminal")
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(proc)) as ws:
        await ws.send_str(create(input="hi", max_output_tokens=3))
        events = [await receive(ws)]
        while events[-1]["type"] != "response.output_item.done":
            events.append(await receive(ws))
        assert len(text_of(events).split()) == 3
        waiting = await silent(ws)  # no response.completed: the client waits on
        assert await ws.close() and ws.close_code == aiohttp.WSCloseCode.OK
        await asyncio.wait_for(waiting, WAIT)


async def test_the_engine_stopping_closes_its_sockets_going_away(engines: EngineFactory) -> None:
    proc = engines(*FAST)
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(proc)) as ws:
        assert (await turn(ws, create(input="hi", max_output_tokens=2)))[-1]["type"] == "response.completed"
        stopping = asyncio.ensure_future(asyncio.to_thread(proc.stop))  # SIGTERM, waited for in a thread
        msg = await ws.receive(timeout=WAIT)
        assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.GOING_AWAY
        # The client's answer lets the engine end at once, as it ends without a socket: exit 0,
        # not killed after the grace period.
        assert await asyncio.wait_for(stopping, WAIT) == 0


async def test_a_warm_up_generates_nothing_and_is_continued(tool_engine) -> None:
    # What Codex sends first: the request with `generate: false`, then the turn continuing it.
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(tool_engine)) as ws:
        warm = await turn(ws, create(input="go", tools=TOOLS, store=False, generate=False))
        assert [e["type"] for e in warm] == ["response.created", "response.in_progress", "response.completed"]
        done = warm[-1]["response"]
        assert done["output"] == [] and done["usage"]["output_tokens"] == 0
        events = await turn(ws, create(input=[], tools=TOOLS, store=False, previous_response_id=done["id"]))
        answer = events[-1]["response"]
        # The warm-up's input is the conversation; it added no assistant turn.
        assert answer["id"] != done["id"] and events[0]["proxycheck"]["x-proxycheck-turn"] == "1"
        assert answer["output"][0]["type"] == "function_call"
