"""The fault hop's WebSocket part: how it ends a socket from the middle, in mitmproxy 11.

The fault hop (`proxycheck.hops.faults`) decides which socket to fault and when
(`proxycheck.core.testbed.socketfaults` for the turns, its own timers for idle and life); this
module owns the two ways it ends a socket, and the timing of an end decided in a message hook.
Checked in `mitmproxy/proxy/layers/websocket.py`, `proxy/server.py` and `proxy/layer.py`:

* a cut (no close frame; the client sees 1006, as from nginx's `proxy_read_timeout`, which
  closes the TCP connections of an upgraded request and never parses a frame): `cut` closes the
  client connection through the proxyserver's connection handler (`close_connection`); the
  HTTP reset uses it too. `flow.kill()` would do nothing here: mitmproxy checks a kill only in
  its HTTP layer. mitmproxy then ends the upstream side itself, as for any client that left
  (with a close frame 1000: wsproto never sends the 1006 it reports for a lost connection).
* a close frame with a code: mitmproxy sends a close frame only to relay one it received, from
  the wsproto connection of either side. The hop finds the flow's `WebsocketLayer` in the
  handler's layer tree, puts a `CloseConnection(code, reason)` event in front of the upstream
  side's pending events, and sends the handler an empty `DataReceived` from the upstream, which
  makes the layer read that side's events: it relays the close frame to the client and to the
  engine and closes both connections, as a gateway that closes a socket does. Bytes of a frame
  the engine has half sent stay in that side's buffer untouched (writing a close frame into it
  would corrupt them).
* after a message hook: a close decided on a message must act after mitmproxy has relayed the
  message, which it does once the hook's task has ended (the hook's `HookCompleted` goes through
  the handler in that task). `after_hook` waits for that task, then acts.

Every step checks that the connections are still there: a socket that ended meanwhile is left
alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from mitmproxy import ctx, http
from mitmproxy.proxy import events
from mitmproxy.proxy.layers.websocket import WebsocketLayer
from wsproto import ConnectionState as WsState
from wsproto.events import CloseConnection

__all__ = ["after_hook", "close_with_code", "connection_handler", "cut", "is_upgrade"]

logger = logging.getLogger(__name__)

_tasks: set[asyncio.Task[None]] = set()  # running until done: the loop keeps only weak references


def is_upgrade(request: http.Request) -> bool:
    """Whether a request asks to upgrade to a WebSocket."""
    return request.headers.get("upgrade", "").strip().lower() == "websocket"


def after_hook(action: Callable[[], None]) -> None:
    """Run `action` once the hook running now has ended and mitmproxy has acted on it (relayed
    the message); at once when no hook task runs."""
    hook = asyncio.current_task()
    if hook is None:
        action()
        return

    async def later() -> None:
        await asyncio.wait({hook})
        action()

    _spawn(later())


def cut(flow: http.HTTPFlow) -> bool:
    """Close the client connection (on a socket: without a close frame; the HTTP reset uses it
    too); False when it is already gone."""
    handler = connection_handler(flow)
    if handler is None or flow.client_conn not in handler.transports:
        return False
    handler.close_connection(flow.client_conn)
    return True


def close_with_code(flow: http.HTTPFlow, code: int, reason: str) -> bool:
    """Close the socket with a close frame of `code` to both sides (nothing when a close is
    under way already); False when it cannot: the socket's connections are gone, or mitmproxy's
    layers are not what this module expects."""
    handler = connection_handler(flow)
    layer = _websocket_layer(handler, flow) if handler is not None else None
    if layer is None or flow.server_conn not in handler.transports:
        return False
    upstream = layer.server_ws
    if upstream.state is not WsState.OPEN:
        return True  # a close is under way already
    upstream._events.appendleft(CloseConnection(code=code, reason=reason))
    _spawn(handler.server_event(events.DataReceived(flow.server_conn, b"")))
    return True


def connection_handler(flow: http.HTTPFlow) -> Any:
    """The proxyserver's handler of the flow's client connection (None when it has none)."""
    proxyserver = ctx.master.addons.get("proxyserver")
    connections = getattr(proxyserver, "connections", None)
    return connections.get(flow.client_conn.id) if connections is not None else None


def _websocket_layer(handler: Any, flow: http.HTTPFlow) -> WebsocketLayer | None:
    """The flow's WebsocketLayer, searched down the handler's layers (a next layer's `layer`, a
    layer's `child_layer`, the HTTP layer's `streams`)."""
    seen: set[int] = set()
    todo: list[Any] = [getattr(handler, "layer", None)]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, WebsocketLayer):
            if node.flow is flow:
                return node
            continue
        todo += [getattr(node, "layer", None), getattr(node, "child_layer", None)]
        streams = getattr(node, "streams", None)
        if isinstance(streams, dict):
            todo += list(streams.values())
    return None


def _spawn(coro: Any) -> None:
    task = asyncio.ensure_future(coro)
    _tasks.add(task)
    task.add_done_callback(_done)


def _done(task: asyncio.Task[None]) -> None:
    _tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("proxycheck faults: closing a socket failed", exc_info=task.exception())
