"""Real nginx in front of the reference engine's Responses API WebSocket mode: a socket cut while it
sits idle between turns (what nginx's `proxy_read_timeout` does to a WebSocket: it counts a
socket's silence as any read's), recorded from a client that then opens a new socket to go on, as
harnesses do; `check` names nginx and the turn its cut ended, the direct route outlives the same
idle, and the chain with a longer timeout is healthy.

What nginx 1.22 does, found by running it: with the upgrade forwarded (`proxy_http_version 1.1`,
`Upgrade`, `Connection "upgrade"`), after `proxy_read_timeout` with no frame either way it closes
both connections without a close frame (the client sees 1006)."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from common import chain_file, check
from proxies import start_nginx

from proxycheck.io.procs import start_engine, start_mitmdump
from proxycheck.io.storage import load

pytestmark = pytest.mark.timeout(180)

READ_TIMEOUT = 3  # nginx proxy_read_timeout (s): shorter than the think time below
THINK = 5.0  # the client's think time between turns (a tool running)
FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
UPGRADE = ('proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade"; '
           "proxy_buffering off;")  # fmt: skip
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


async def turn(ws: aiohttp.ClientWebSocketResponse, body: dict[str, Any]) -> dict[str, Any]:
    await ws.send_str(json.dumps({"type": "response.create", "model": "m", "max_output_tokens": 8, **body}))
    while True:
        msg = await ws.receive(timeout=10)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        event = json.loads(msg.data)
        if event["type"] in TERMINAL:
            return event


async def agent(url: str) -> list[str]:
    """Turn 1, a think time, turn 2 on the same socket, or (the socket gone) on a new one with the
    whole conversation, as a harness goes on. What happened, in words."""
    said = []
    history: list[dict[str, Any]] = [{"role": "user", "content": "step 1"}]
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(url)
        first = await turn(ws, {"input": history})
        said.append(first["type"])
        await asyncio.sleep(THINK)
        msg = None
        try:
            msg = await ws.receive(timeout=0.2)  # what came while the tool ran (a close, if the hop cut it)
        except asyncio.TimeoutError:
            pass
        if msg is not None and msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
            said.append(f"closed {ws.close_code}")
            await ws.close()
            ws = await session.ws_connect(url)
            history += [{"role": "assistant", "content": "done"}, {"role": "user", "content": "step 2"}]
            said.append((await turn(ws, {"input": history}))["type"])
        else:
            said.append((await turn(ws, {"previous_response_id": first["response"]["id"],
                                         "input": [{"role": "user", "content": "step 2"}]}))["type"])  # fmt: skip
        await ws.close()
    return said


def record(engine_url: str, out: Path, nginx_url: str) -> list[str]:
    recorder = start_mitmdump("--mode", f"reverse:{nginx_url}", "-s", str(Path(__file__).parents[2] / "addons" / "record.py"),
                              "--set", f"proxycheck_out={out}")  # fmt: skip
    try:
        said = asyncio.run(agent(recorder.url.replace("http://", "ws://") + "/v1/responses"))
        time.sleep(0.5)
    finally:
        recorder.stop()
    return said


def test_nginx_cutting_an_idle_socket_is_named_at_the_turn_its_cut_ended(tmp_path: Path) -> None:
    with ExitStack() as stack:
        engine = start_engine(*FAST)
        stack.callback(engine.stop)
        nginx = start_nginx(f"location / {{ proxy_pass {engine.url}; {UPGRADE} proxy_read_timeout {READ_TIMEOUT}s; }}")
        stack.callback(nginx.stop)
        rec = tmp_path / "rec"
        said = record(engine.url, rec, nginx.url)
        assert said == ["response.completed", "closed 1006", "response.completed"], said
        first, second = load(rec).exchanges
        assert first.ws_close is not None and not first.ws_close.clean and second.ws_close is not None
        chain = chain_file(tmp_path, engine.url, ("nginx", f"url={nginx.url}"))
        status, doc = check(tmp_path, rec, chain)
        assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "nginx", 2), doc["summary"]
        found = [f for f in doc["findings"] if f["route"] == "via:nginx"]
        assert found and {f["outcome"] for f in found} == {"reset"}
        assert all("while it sat idle" in f["detail"] for f in found), found
        (said,) = [a for a in doc["advice"] if a["hop"] == "nginx"]
        assert said["kind"] == "ws_idle_cut" and "nginx proxy_read_timeout" in said["likely"], said
        direct = next(r for r in doc["routes"] if r["route"] == "direct")
        assert direct["failures"] == 0
        # The same chain with a timeout longer than the think time: healthy.
        fixed = start_nginx(f"location / {{ proxy_pass {engine.url}; {UPGRADE} proxy_read_timeout 60s; }}")
        stack.callback(fixed.stop)
        chain = chain_file(tmp_path, engine.url, ("nginx", f"url={fixed.url}"), name="fixed.toml")
        status, doc = check(tmp_path, rec, chain)
        assert status == 0 and doc["verdict"] == "not-reproduced", doc["summary"]  # the recorded cut is gone
