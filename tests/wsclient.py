"""A WebSocket client for tests on the Responses API's WebSocket mode: one aiohttp socket, its
turns, and how it ended as the client sees it (a close frame and its code, or a cut)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from proxycheck.core.recording.websocket import TERMINAL
from proxycheck.io.procs import Managed
from websocket_clients import ws_url as ws_url  # one rule for the socket's URL

__all__ = ["TERMINAL", "WAIT", "Client", "create", "socket", "ws_url"]

WAIT = 10.0  # the longest any one message is waited for


class Client:
    """One socket of an aiohttp client, and the message that ended it once one did."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ended: aiohttp.WSMessage | None = None

    async def turn(self, **body: Any) -> list[dict[str, Any]]:
        """Send one create message; the events that came, up to its terminal one or the socket's end."""
        await self.ws.send_str(create(**body))
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] not in TERMINAL:
            msg = await self.ws.receive(timeout=WAIT)
            if msg.type != aiohttp.WSMsgType.TEXT:
                self.ended = msg
                break
            events.append(json.loads(msg.data))
        return events

    async def end(self, within: float) -> tuple[str, int | None, float]:
        """How the socket ended, waiting at most `within` seconds: ("close", code) when a close
        frame came, ("cut", None) when the connection ended without one; and when (loop time)."""
        while self.ended is None:
            msg = await self.ws.receive(timeout=within)
            if msg.type != aiohttp.WSMsgType.TEXT:
                self.ended = msg
        at = asyncio.get_running_loop().time()
        if self.ended.type == aiohttp.WSMsgType.CLOSE:
            return "close", self.ended.data, at
        assert self.ended.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR), self.ended
        return "cut", None, at


@asynccontextmanager
async def socket(proc: Managed) -> AsyncIterator[Client]:
    # autoclose off: a close frame from the hop is seen as it came, not answered at once
    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url(proc), autoclose=False) as ws:
        yield Client(ws)


def create(tokens: int = 6, **body: Any) -> str:
    return json.dumps({"type": "response.create", "model": "m", "max_output_tokens": tokens, "input": "go", **body})
