"""The fault hop's WebSocket faults: a real mitmdump fault hop in front of the reference engine's
WebSocket mode, driven by an aiohttp WebSocket client as Codex drives one socket per session.

What a client notices: the refused upgrade's status (the engine never saw it); an upgrade never
answered; a socket closed by the hop, with a close frame of the configured code or cut without
one, when the configured fault says (idle, after a turn, mid-answer, at the end of its life) and
not before; and, with every option off or on a socket the gates leave alone, the same socket as
without the hop. Times are only bounded from below by the configured values, and from above
generously."""

from __future__ import annotations

import asyncio
import re
import subprocess
from typing import Any

import aiohttp
import httpx
import pytest
from processes import FAULTS, EngineFactory, MitmdumpFactory
from test_faults import log_of
from wsclient import TERMINAL, WAIT, socket, ws_url

from proxycheck.io.procs import Managed, mitmdump_path

pytestmark = pytest.mark.timeout(60)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
SLACK = 10.0  # how much later than its configured time a close may come on a busy machine
UPGRADE = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
           "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}  # fmt: skip


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines(*FAST)


# --------------------------------------------------------------------------------------------
# the hop leaves sockets and HTTP alone


def timeless(doc: Any) -> Any:
    """An answer without its `created_at` (the engine's clock, which may turn a second between
    two runs of the same conversation)."""
    if isinstance(doc, dict):
        return {k: timeless(v) for k, v in doc.items() if k != "created_at"}
    if isinstance(doc, list):
        return [timeless(v) for v in doc]
    if isinstance(doc, str):
        return re.sub(r'"created_at": ?\d+', "", doc)
    return doc


async def conversation(proc: Managed) -> tuple[list[list[dict[str, Any]]], Any]:
    """Three turns continuing each other on one socket, then the client's close; every turn's
    events and the code of the close the client got back."""
    out = []
    async with socket(proc) as ws:
        previous: dict[str, Any] = {}
        for _ in range(3):
            events = await ws.turn(**previous)
            out.append(timeless(events))
            previous = {"previous_response_id": events[-1]["response"]["id"]}
        await ws.ws.close()
        return out, ws.ws.close_code


async def test_a_socket_passes_unchanged_with_every_option_off(engine: Managed, mitmdumps: MitmdumpFactory) -> None:
    direct = await conversation(engine)
    through = await conversation(mitmdumps.faults(engine))
    assert through == direct
    assert [t[-1]["type"] for t in through[0]] == ["response.completed"] * 3 and through[1] == 1000


async def test_the_socket_faults_leave_http_and_unfaulted_sockets_alone(
    engine: Managed, mitmdumps: MitmdumpFactory
) -> None:
    every = ("ws_refuse=404", "ws_close_after_turns=1", "ws_cut_after_events=0", "ws_idle_close=0.5",
             "ws_max_life=1", "ws_close_code=1011")  # fmt: skip
    # A streamed POST to the same path goes through whole, every socket fault on.
    hop = mitmdumps.faults(engine, *every)
    body = {"model": "m", "input": "go", "max_output_tokens": 6, "stream": True}
    direct = httpx.post(engine.url + "/v1/responses", json=body, timeout=WAIT)
    through = httpx.post(hop.url + "/v1/responses", json=body, timeout=WAIT)
    assert through.status_code == 200 and timeless(through.text) == timeless(direct.text)
    # The draw leaves this socket alone: no fault on it, whatever its options.
    unlucky = mitmdumps.faults(engine, *every, "probability=0")
    assert await conversation(unlucky) == await conversation(engine)
    assert "proxycheck fault " not in log_of(hop) + log_of(unlucky)  # no fault fired


async def test_a_close_code_without_its_fault_is_warned_about_and_changes_nothing(
    engine: Managed, mitmdumps: MitmdumpFactory
) -> None:
    hop = mitmdumps.faults(engine, "ws_close_code=1011", "ws_idle_close_code=1001")
    assert await conversation(hop) == await conversation(engine)
    log = log_of(hop)
    assert "proxycheck_fault_ws_idle_close_code has no effect without proxycheck_fault_ws_idle_close" in log
    assert "proxycheck_fault_ws_close_code has no effect without" in log


async def test_sockets_opened_after_the_active_for_window_pass_unfaulted(
    engine: Managed, mitmdumps: MitmdumpFactory
) -> None:
    hop = mitmdumps.faults(engine, "ws_refuse=404", "ws_close_after_turns=1", "active_for=1")
    with pytest.raises(aiohttp.WSServerHandshakeError):  # the first LLM flow opens the window
        async with socket(hop):
            pass
    await asyncio.sleep(1.5)
    direct = await conversation(engine)
    assert await conversation(hop) == direct  # neither refused nor closed after its first turn


# --------------------------------------------------------------------------------------------
# the upgrade


@pytest.mark.parametrize("status", [404, 405, 426])
async def test_a_refused_upgrade_gets_the_status_and_never_reaches_the_engine(
    engine: Managed, mitmdumps: MitmdumpFactory, status: int
) -> None:
    hop = mitmdumps.faults(engine, f"ws_refuse={status}")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with socket(hop):
            pass
    assert refused.value.status == status
    resp = httpx.get(hop.url + "/v1/responses", headers=UPGRADE, timeout=WAIT)
    assert resp.status_code == status and "x-proxycheck-request-sha256" not in resp.headers  # not the engine's
    assert resp.json()["error"]["message"] == f"WebSocket upgrade refused with {status}"
    assert (resp.headers.get("allow") == "POST") == (status == 405)
    # Only an LLM path's upgrade is refused.
    other = httpx.get(hop.url + "/v1/models", headers=UPGRADE, timeout=WAIT)
    assert "WebSocket upgrade refused" not in other.text
    # A POST is no upgrade: it still streams through.
    post = httpx.post(hop.url + "/v1/responses", json={"model": "m", "input": "go", "stream": True}, timeout=WAIT)
    assert post.status_code == 200 and "response.completed" in post.text


async def test_a_swallowed_upgrade_is_never_answered(engine: Managed, mitmdumps: MitmdumpFactory) -> None:
    hop = mitmdumps.faults(engine, "ws_swallow=true")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(asyncio.TimeoutError):  # nothing came back until the client gave up
            await asyncio.wait_for(session.ws_connect(ws_url(hop)), timeout=2)
    assert "proxycheck fault ws_swallow" in log_of(hop)


async def test_a_swallowed_upgrade_is_dropped_after_stall_seconds(engine: Managed, mitmdumps: MitmdumpFactory) -> None:
    hop = mitmdumps.faults(engine, "ws_swallow=true", "stall_seconds=1")
    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession() as session:
        started = loop.time()
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await asyncio.wait_for(session.ws_connect(ws_url(hop)), timeout=WAIT)
        assert 0.9 <= loop.time() - started < 1 + SLACK  # no status: a dropped connection


# --------------------------------------------------------------------------------------------
# an open socket closed by the hop


async def test_an_idle_socket_is_cut_by_default_and_traffic_keeps_it_open(
    engine: Managed, mitmdumps: MitmdumpFactory
) -> None:
    hop = mitmdumps.faults(engine, "ws_idle_close=1.5")
    loop = asyncio.get_running_loop()
    async with socket(hop) as ws:
        opened = loop.time()
        # Turns 0.5 s apart: never idle for 1.5 s, though the socket lives longer than that.
        while loop.time() - opened < 3:
            assert (await ws.turn())[-1]["type"] == "response.completed"
            last = loop.time()  # the last message either way
            await asyncio.sleep(0.5)
        how, code, at = await ws.end(within=1.5 + SLACK)
    assert (how, code) == ("cut", None)  # as nginx's proxy_read_timeout: no close frame
    assert at - last >= 1.4  # not before the socket was idle that long
    assert "proxycheck fault ws_idle_close" in log_of(hop)


async def test_an_idle_socket_gets_the_close_code_asked_for(engine: Managed, mitmdumps: MitmdumpFactory) -> None:
    hop = mitmdumps.faults(engine, "ws_idle_close=1", "ws_idle_close_code=1001")
    loop = asyncio.get_running_loop()
    async with socket(hop) as ws:
        assert (await ws.turn())[-1]["type"] == "response.completed"
        last = loop.time()
        how, code, at = await ws.end(within=1 + SLACK)
    assert (how, code) == ("close", 1001)
    assert at - last >= 0.9


@pytest.mark.parametrize("close_code", [0, 1011])
async def test_a_socket_is_closed_after_its_kth_turn_ends(
    engine: Managed, mitmdumps: MitmdumpFactory, close_code: int
) -> None:
    hop = mitmdumps.faults(engine, "ws_close_after_turns=2", f"ws_close_code={close_code}")
    async with socket(hop) as ws:
        first = await ws.turn()
        second = await ws.turn(previous_response_id=first[-1]["response"]["id"])
        assert first[-1]["type"] == second[-1]["type"] == "response.completed"  # both turns whole
        how, code, _ = await ws.end(within=WAIT)
    assert (how, code) == (("close", 1011) if close_code else ("cut", None))


@pytest.mark.parametrize("close_code", [0, 1011])
async def test_a_turn_is_cut_mid_answer_from_the_turn_asked_for(
    engine: Managed, mitmdumps: MitmdumpFactory, close_code: int
) -> None:
    hop = mitmdumps.faults(engine, "ws_cut_after_events=3", "from_turn=2", f"ws_close_code={close_code}")
    async with socket(hop) as ws:
        first = await ws.turn(tokens=8)
        assert first[-1]["type"] == "response.completed" and len(first) > 3  # turn 1: before from_turn
        second = await ws.turn(tokens=8, previous_response_id=first[-1]["response"]["id"])
        how, code, _ = await ws.end(within=WAIT)
    assert len(second) == 3 and second[-1]["type"] not in TERMINAL  # three events, then the end
    assert (how, code) == (("close", 1011) if close_code else ("cut", None))
    assert "turn 2 cut after 3 events" in log_of(hop)


async def test_a_turn_below_min_body_is_not_cut(engine: Managed, mitmdumps: MitmdumpFactory) -> None:
    hop = mitmdumps.faults(engine, "ws_cut_after_events=1", "min_body=2000")
    async with socket(hop) as ws:
        small = await ws.turn()
        assert small[-1]["type"] == "response.completed"
        large = await ws.turn(instructions="x" * 2000)
        how, code, _ = await ws.end(within=WAIT)
    assert len(large) == 1 and (how, code) == ("cut", None)


@pytest.mark.parametrize("close_code", [0, 1001])
async def test_a_socket_is_closed_at_the_end_of_its_life_whatever_flows(
    engine: Managed, mitmdumps: MitmdumpFactory, close_code: int
) -> None:
    hop = mitmdumps.faults(engine, "ws_max_life=2", f"ws_close_code={close_code}")
    loop = asyncio.get_running_loop()
    async with socket(hop) as ws:
        opened = loop.time()
        turns = 0
        while True:  # turns one after another: never idle, and yet closed
            events = await ws.turn()
            if not events or events[-1]["type"] != "response.completed":
                break
            turns += 1
            assert loop.time() - opened < 2 + SLACK
        how, code, at = await ws.end(within=WAIT)
    assert (how, code) == (("close", 1001) if close_code else ("cut", None)) and turns >= 1
    assert at - opened >= 1.9


# --------------------------------------------------------------------------------------------
# options


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("ws_close_code=1006",), "proxycheck_fault_ws_close_code must be 0 (a cut) or a close code"),
        (("ws_idle_close_code=999",), "proxycheck_fault_ws_idle_close_code must be 0 (a cut) or a close code"),
        (("ws_refuse=200",), "proxycheck_fault_ws_refuse must be 0 (off) or an HTTP error status (400-599), not 200"),
        (("ws_refuse=404", "ws_swallow=true"), "ws_refuse and proxycheck_fault_ws_swallow exclude each other"),
        (("ws_idle_close=soon",), "proxycheck_fault_ws_idle_close must be a number"),
        (("ws_cut_after_events=-2",), "proxycheck_fault_ws_cut_after_events must be >= -1, not -2"),
    ],
)
def test_bad_socket_options_stop_mitmdump_with_a_clear_message(
    engine: Managed, options: tuple[str, ...], message: str
) -> None:
    sets = [a for o in options for a in ("--set", f"proxycheck_fault_{o}")]
    argv = [mitmdump_path(), "-q", "--listen-host", "127.0.0.1", "--listen-port", "0", "--mode",
            f"reverse:{engine.url}", "-s", str(FAULTS), *sets]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=50)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr
