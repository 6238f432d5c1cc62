"""A client of the Responses API's WebSocket mode for the tests: one socket per session, as Codex
drives one, turns continuing each other with `previous_response_id` (aiohttp's WebSocket client)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


def ws_url(proc: Any) -> str:
    return proc.url.replace("http://", "ws://") + "/v1/responses"


async def converse(url: str, turns_: int = 2, *, key: str | None = None, think: float = 0.0, linger: float = 0.0,
                   proxy: str | None = None, ssl: Any = True) -> list[list[dict[str, Any]]]:  # fmt: skip
    """One socket, `turns_` turns continuing each other, `think` seconds apart; every turn's
    events (the last may be cut). `linger`: after the last turn the socket is left open, idle,
    up to that many seconds, or until the other side ends it. `proxy`: an HTTP proxy to open it
    through (an absolute-URI upgrade for an http:// URL, CONNECT for wss://); `ssl`: aiohttp's
    (False: trust any certificate)."""
    out: list[list[dict[str, Any]]] = []
    previous = None
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url, headers={"OpenAI-Beta": "responses_websockets=2026-02-06"}, proxy=proxy,
                                      ssl=ssl) as ws:  # fmt: skip
            for i in range(turns_):
                body: dict[str, Any] = {"type": "response.create", "model": "m", "max_output_tokens": 8,
                                        "input": [{"role": "user", "content": f"step {i}"}]}  # fmt: skip
                if previous:
                    body["previous_response_id"] = previous
                    await asyncio.sleep(think)
                if key:
                    body["api_key"] = key  # a credential in a message, as some clients send one
                await ws.send_str(json.dumps(body))
                events: list[dict[str, Any]] = []
                while True:
                    msg = await ws.receive(timeout=10)
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    events.append(json.loads(msg.data))
                    if events[-1]["type"] in TERMINAL:
                        break
                out.append(events)
                if not events or events[-1]["type"] != "response.completed":
                    break
                previous = events[-1]["response"]["id"]
            else:
                if linger:
                    with contextlib.suppress(asyncio.TimeoutError):  # nothing came until the time was up
                        await ws.receive(timeout=linger)  # the other side's close, or its cut
    return out
