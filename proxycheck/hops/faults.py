"""Faults: a mitmproxy addon that makes a hop break streamed LLM traffic the ways real proxies do.

This module owns the fault-injecting hop used to test proxycheck itself (and to rehearse a
diagnosis): `mitmdump --mode reverse:ENGINE -s addons/faults.py --set proxycheck_fault_...=...`.
Every fault is off by default, and then the hop is a *correct* proxy: unlike a plain mitmproxy,
it streams SSE through as it arrives. Only LLM API flows (`dialects.detect`) get faults;
everything else passes untouched. What to forward of a stream is decided by the pure
`proxycheck.core.testbed.ssefilter.SSEFilter`; this module wires it to mitmproxy's hooks.

How each fault works in mitmproxy 11 (checked in `mitmproxy/proxy/layers/http/__init__.py`):

* pass-through: `responseheaders` sets `flow.response.stream = True` for `text/event-stream`.
* buffer: `flow.response.stream` is left unset, so mitmproxy reads the whole body first.
* stall after K events: the stream callable forwards the first K events and withholds the rest.
  mitmproxy runs the `response` hook when the upstream body has ended but *before* it sends
  the end of the message (the last chunk of a chunked body) to the client, and an async hook
  pauses only its own flow, so the `response` hook holds the end for `stall_seconds` (or until
  the client leaves) and then kills the flow: the client sees silence, then a dropped
  connection, never a clean end.
* keep-alive stall: as above, but each withheld upstream chunk is answered by one `: keep-alive`
  comment: bytes flow, content does not.
* drop terminal: the stream callable leaves out `[DONE]` / `message_stop` /
  `response.completed`; the response then ends cleanly.
* hold open: every event goes through (with drop terminal, all but the terminal marker), and
  the `response` hook holds the end of the body as a stall does: a gateway that never ends the
  stream after its last event.
* reset after K events: `flow.kill()` cannot act mid-stream (mitmproxy checks for a kill only at
  its hooks, see mitmproxy issue 4711), so the addon closes the client connection itself through
  the proxyserver's connection handler (`close_connection`), right after the K-th event is
  written. The socket is closed with the body unfinished (no last chunk), which a client sees as
  a connection error. Without that handler it falls back to `flow.kill()`, which acts at the end
  of the upstream body; the `response` hook kills the flow as well, so that an upstream body that
  ended in the chunk holding the K-th event (an answer sent at once) gets no clean end either.
* max body: a 413 response set in `requestheaders` (Content-Length known) or `request`;
  mitmproxy then answers it without opening an upstream connection.
* max concurrent: the addon keeps the ids of the LLM flows it lets through to the upstream (past
  the 413 and blackhole checks of `request`) until their `response` hook (the upstream body has
  ended) or their `error` hook (e.g. the client left mid-stream); mitmproxy runs one of the two
  for every flow it forwarded, and removing an id from a set is idempotent, so each flow frees
  its slot exactly once. A request that arrives while N flows are in flight is answered 429 with
  `retry-after: 1` in `request`, like the 413, and never counts itself.
* status first: the first N LLM requests past the `min_body` and `from_turn` gates are answered
  `status_code` (504 by default) in `request`, like the 413, without contacting the upstream;
  the ones after go through. The count is the hop's own, in order of arrival: an SDK that
  retries a 504 twice gets through on its third attempt when N is 2.
* delay headers: an async `responseheaders` hook that sleeps.
* idle blackhole: the addon remembers when the last response on each client connection ended;
  the next LLM request after more than I idle seconds is held in an async `request` hook until
  the client leaves (at most `stall_seconds`), then killed, and never reaches the upstream.
* truncate messages: `request` rewrites the JSON body (`truncate_messages`).
* reserialize: `request` parses the JSON body and writes the same JSON another way
  (`reserialize_json`), after any truncation, as a gateway that parses and re-dumps requests
  does: the content is unchanged, the bytes are not.
* probability and seed: one seeded draw per LLM flow (`ssefilter.coin`), in order of arrival.
* active for: the hop remembers when (`time.monotonic()`) it saw its first LLM flow; a flow that
  starts (its request headers arrive) more than `active_for` seconds later gets no fault at all,
  as a flow whose draw came up tails: a hop that wedges for a while and then behaves. The draws
  go on being made, so a seeded run picks the same flows with the window as without it.

WebSocket sessions (the Responses API's WebSocket mode), faults of their own (`ws_*`):

* refuse the upgrade: `request` answers the upgrade GET with `ws_refuse` and a JSON error body,
  like the 413; mitmproxy then never contacts the upstream and no socket opens.
* swallow the upgrade: `request` holds the GET as the idle blackhole holds a request (until the
  client leaves, at most `stall_seconds`), then kills the flow: no status ever comes.
* an open socket (`websocket_start` .. `websocket_end`): each faulted socket has the pure
  `SocketFaults` (`proxycheck.core.testbed.socketfaults`), fed every whole message in
  `websocket_message`; it says when the K-th turn has ended (`ws_close_after_turns`) or a turn
  has had K events (`ws_cut_after_events`), and the close then acts once mitmproxy has relayed
  that message (`faults_ws.after_hook`). Messages that come after the decision are dropped
  (`message.drop()`). A timer task per socket closes it when no message has passed either way for
  `ws_idle_close` seconds (mitmproxy relays pings without a hook: they are not seen) or
  `ws_max_life` seconds after the upgrade; it is cancelled in `websocket_end`.
* how a socket is closed (`faults_ws`): code 0 is a cut (the client connection closed through the
  connection handler, as the reset does; no close frame, the client sees 1006, as nginx's
  `proxy_read_timeout` does to a socket); any other code is a close frame with that code to
  both sides, made by mitmproxy itself from a close event handed to the upstream side's wsproto
  connection. `ws_idle_close_code` says how the idle close closes, `ws_close_code` the others.

Gates: the probability draw and the active_for window gate every fault; a socket's faults are
decided by its upgrade's draw and window. Stall, keep-alive stall, drop terminal, reset and
status first also need a request body larger than `min_body` and a turn >= `from_turn`, as does
`ws_cut_after_events` (there the turn is the socket's count of `response.create` messages and
the body the create message); the stream faults act only on SSE responses that are not
content-encoded (a JSON answer has no events to count). With both stall and reset on, the smaller K wins; on a tie,
the reset. With buffer on as well, the stream faults apply to the buffered body: a stall then
holds the whole response, a reset sends none.

A hook that raises is caught: the error is logged once for that flow, and the flow goes on
unfaulted (an SSE response then streams through). Each fault that fires is logged at info
level once per flow.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import ctx, exceptions, http
from mitmproxy.addonmanager import Loader
from mitmproxy.connection import Client, ConnectionState

from proxycheck.core.protocol import dialects
from proxycheck.core.testbed.socketfaults import Act, SocketFaults, SocketRules, sendable_close_code
from proxycheck.core.testbed.ssefilter import SSEFilter, coin, truncate_messages, turn_number
from proxycheck.hops import faults_ws

__all__ = ["PREFIX", "FaultConfig", "Faults", "parse_config", "reserialize_json"]

logger = logging.getLogger(__name__)

PREFIX = "proxycheck_fault_"
_POLL = 0.1  # seconds between checks whether a held client has gone

# (name without PREFIX, type, default, help). Floats are strings: mitmproxy's --set cannot
# parse float options.
_OPTIONS: tuple[tuple[str, type, Any, str], ...] = (
    ("buffer", bool, False, "Buffer SSE responses instead of streaming them: the client gets all events at the end."),
    (
        "stall_after",
        int,
        -1,
        "Stall mid-stream: forward the first K events of an SSE response, then nothing, and hold the end "
        "of the response (-1: off).",
    ),
    (
        "stall_seconds",
        str,
        "600",
        "Seconds a stall or blackhole holds a response before dropping the connection (a float).",
    ),
    (
        "stall_keepalive",
        bool,
        False,
        "While stalled, send one ': keep-alive' comment per withheld upstream chunk instead of content.",
    ),
    (
        "drop_terminal",
        bool,
        False,
        "Drop the terminal marker ([DONE], message_stop, response.completed): the stream ends cleanly without it.",
    ),
    ("reset_after", int, -1, "Close the client connection after forwarding K events of an SSE response (-1: off)."),
    (
        "hold_open",
        bool,
        False,
        "Forward every event, then hold the end of the response for stall_seconds and drop the connection "
        "(with drop_terminal: held open after the finish reason, without the terminal marker).",
    ),
    (
        "min_body",
        int,
        0,
        "Stall, drop_terminal, reset and ws_cut_after_events only requests (create messages) whose body is "
        "larger than this (bytes).",
    ),
    (
        "from_turn",
        int,
        1,
        "Stall, drop_terminal, reset and ws_cut_after_events only from this turn on (turn = the answers in the "
        "request's history + 1; on a WebSocket, the socket's count of response.create messages).",
    ),
    ("max_body", int, 0, "Answer 413, without contacting the upstream, to request bodies larger than this (bytes; 0: off)."),
    (
        "max_concurrent",
        int,
        0,
        "Answer 429, without contacting the upstream, to a request that arrives while this many LLM requests "
        "are in flight through the hop, like a gateway's parallel-request limit (0: off).",
    ),
    (
        "status_first",
        int,
        0,
        "Answer status_code, without contacting the upstream, to the first N LLM requests that pass the "
        "min_body and from_turn gates, like a gateway timing out on an engine that then recovers (0: off).",
    ),
    ("status_code", int, 504, "The status status_first answers (default 504)."),
    ("delay_headers", str, "0", "Delay the response headers by this many seconds (a float; 0: off)."),
    (
        "idle_blackhole",
        str,
        "0",
        "Never answer a request that arrives on a client connection idle for longer than this many seconds, "
        "like a hop reusing a pooled connection the upstream closed (a float; 0: off).",
    ),
    (
        "truncate_messages",
        int,
        0,
        "Cut the request's message list to its last N messages, leading system messages kept (0: off).",
    ),
    (
        "reserialize",
        bool,
        False,
        "Re-serialize JSON request bodies as a gateway does: the same content, other bytes (members in "
        "reverse order, spaces, \\u escapes, float parameters spelled 1.0).",
    ),
    (
        "ws_refuse",
        int,
        0,
        "Answer a WebSocket upgrade of an LLM path with this status (e.g. 404, 405, 426), without contacting "
        "the upstream, as a gateway without WebSocket support does (0: off).",
    ),
    (
        "ws_swallow",
        bool,
        False,
        "Never answer a WebSocket upgrade of an LLM path: hold it (at most stall_seconds), then drop the "
        "connection, as a proxy that never sends the 101 does.",
    ),
    (
        "ws_idle_close",
        str,
        "0",
        "Close a WebSocket through which no message passed either way for this many seconds (a float; 0: off).",
    ),
    (
        "ws_idle_close_code",
        int,
        0,
        "How ws_idle_close closes: 0, a cut without a close frame (the client sees 1006), as nginx's "
        "proxy_read_timeout does; or a close frame with this code (e.g. 1001).",
    ),
    ("ws_close_after_turns", int, 0, "Close a WebSocket once its K-th turn (response.create) has ended (0: off)."),
    (
        "ws_cut_after_events",
        int,
        -1,
        "Close a WebSocket after K events of a turn, mid-answer (gated by from_turn and min_body; -1: off).",
    ),
    (
        "ws_close_code",
        int,
        0,
        "How ws_close_after_turns, ws_cut_after_events and ws_max_life close: 0, a cut without a close frame "
        "(1006); or a close frame with this code (e.g. 1011).",
    ),
    (
        "ws_max_life",
        str,
        "0",
        "Close a WebSocket this many seconds after its upgrade, whatever flows (a float; 0: off).",
    ),
    ("probability", str, "1", "Probability that a flow's faults fire: one seeded draw per LLM flow (a float)."),
    (
        "active_for",
        str,
        "0",
        "Faults fire only on flows that start within this many seconds of the first LLM flow the hop sees; "
        "later flows pass unfaulted, like a hop that wedges for a while and then behaves (a float; 0: always).",
    ),
    ("seed", int, 0, "Seed of the per-flow draws."),
)


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """The validated options (names without PREFIX; -1 or 0 means off, as in the help)."""

    buffer: bool = False
    stall_after: int = -1
    stall_seconds: float = 600.0
    stall_keepalive: bool = False
    drop_terminal: bool = False
    reset_after: int = -1
    hold_open: bool = False
    min_body: int = 0
    from_turn: int = 1
    max_body: int = 0
    max_concurrent: int = 0
    status_first: int = 0
    status_code: int = 504
    delay_headers: float = 0.0
    idle_blackhole: float = 0.0
    truncate_messages: int = 0
    reserialize: bool = False
    ws_refuse: int = 0
    ws_swallow: bool = False
    ws_idle_close: float = 0.0
    ws_idle_close_code: int = 0
    ws_close_after_turns: int = 0
    ws_cut_after_events: int = -1
    ws_close_code: int = 0
    ws_max_life: float = 0.0
    probability: float = 1.0
    active_for: float = 0.0
    seed: int = 0

    @property
    def cut_after(self) -> int | None:
        """Where the stream is cut: the smaller K of stall and reset (None: neither is on)."""
        ks = [k for k in (self.stall_after, self.reset_after) if k >= 0]
        return min(ks) if ks else None

    @property
    def cut_is_reset(self) -> bool:
        """True when the cut resets the connection; on a tie with a stall, the reset wins."""
        return self.reset_after >= 0 and self.reset_after == self.cut_after

    @property
    def filters_stream(self) -> bool:
        return self.cut_after is not None or self.drop_terminal or self.hold_open

    @property
    def socket_rules(self) -> SocketRules:
        return SocketRules(self.ws_close_after_turns, self.ws_cut_after_events, self.from_turn, self.min_body)

    @property
    def faults_sockets(self) -> bool:
        """Whether any fault acts on an open WebSocket (the upgrade's faults aside)."""
        return bool(self.ws_idle_close) or self.ws_close_code_used

    @property
    def ws_close_code_used(self) -> bool:
        """Whether a fault closes with ws_close_code (every socket fault but the idle close)."""
        return bool(self.ws_close_after_turns or self.ws_max_life) or self.ws_cut_after_events >= 0

    def describe(self) -> str:
        """The options that differ from their defaults, as `name=value` (empty: no fault)."""
        default = FaultConfig()
        parts = [
            f"{name}={getattr(self, name)}"
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(default, name)
        ]
        return " ".join(parts)


class _Reader:
    """Reads the fault options one by one, collecting every problem instead of stopping at the
    first, so one OptionsError names all of them."""

    def __init__(self, options: Any) -> None:
        self.options = options
        self.problems: list[str] = []

    def raw(self, name: str) -> Any:
        return getattr(self.options, PREFIX + name)

    def integer(self, name: str, minimum: int) -> int:
        value = self.raw(name)
        if value < minimum:
            self.problems.append(f"{PREFIX}{name} must be >= {minimum}, not {value}")
        return value

    def status(self, name: str) -> int:
        value = self.raw(name)
        if not 100 <= value <= 599:
            self.problems.append(f"{PREFIX}{name} must be an HTTP status (100-599), not {value}")
        return value

    def status_or_off(self, name: str) -> int:
        value = self.raw(name)
        if value != 0 and not 400 <= value <= 599:
            self.problems.append(f"{PREFIX}{name} must be 0 (off) or an HTTP error status (400-599), not {value}")
        return value

    def close_code(self, name: str) -> int:
        value = self.raw(name)
        if value != 0 and not sendable_close_code(value):
            self.problems.append(
                f"{PREFIX}{name} must be 0 (a cut) or a close code a close frame may carry "
                f"(1000-4999 but 1004, 1005, 1006, 1015), not {value}"
            )
        return value

    def number(self, name: str, *, positive: bool = False, at_most: float | None = None) -> float:
        text = self.raw(name)
        try:
            value = float(text)
        except ValueError:
            self.problems.append(f"{PREFIX}{name} must be a number, not {text!r}")
            return 0.0
        low_ok = value > 0 if positive else value >= 0
        if not math.isfinite(value) or not low_ok or (at_most is not None and value > at_most):
            bound = "> 0" if positive else ">= 0"
            if at_most is not None:
                bound += f" and <= {at_most:g}"
            self.problems.append(f"{PREFIX}{name} must be a number {bound}, not {text!r}")
        return value


def parse_config(options: Any) -> FaultConfig:
    """The fault options of a mitmproxy `Options`, validated; one OptionsError names every bad one."""
    read = _Reader(options)
    config = FaultConfig(
        buffer=read.raw("buffer"),
        stall_after=read.integer("stall_after", -1),
        stall_seconds=read.number("stall_seconds", positive=True),
        stall_keepalive=read.raw("stall_keepalive"),
        drop_terminal=read.raw("drop_terminal"),
        reset_after=read.integer("reset_after", -1),
        hold_open=read.raw("hold_open"),
        min_body=read.integer("min_body", 0),
        from_turn=read.integer("from_turn", 1),
        max_body=read.integer("max_body", 0),
        max_concurrent=read.integer("max_concurrent", 0),
        status_first=read.integer("status_first", 0),
        status_code=read.status("status_code"),
        delay_headers=read.number("delay_headers"),
        idle_blackhole=read.number("idle_blackhole"),
        truncate_messages=read.integer("truncate_messages", 0),
        reserialize=read.raw("reserialize"),
        ws_refuse=read.status_or_off("ws_refuse"),
        ws_swallow=read.raw("ws_swallow"),
        ws_idle_close=read.number("ws_idle_close"),
        ws_idle_close_code=read.close_code("ws_idle_close_code"),
        ws_close_after_turns=read.integer("ws_close_after_turns", 0),
        ws_cut_after_events=read.integer("ws_cut_after_events", -1),
        ws_close_code=read.close_code("ws_close_code"),
        ws_max_life=read.number("ws_max_life"),
        probability=read.number("probability", at_most=1.0),
        active_for=read.number("active_for"),
        seed=read.raw("seed"),
    )
    if config.ws_refuse and config.ws_swallow:
        read.problems.append(f"{PREFIX}ws_refuse and {PREFIX}ws_swallow exclude each other")
    if read.problems:
        raise exceptions.OptionsError("; ".join(read.problems))
    return config


@dataclass(slots=True, eq=False)
class _Plan:
    """What the addon decided and did for one LLM flow."""

    index: int  # the flow's draw index
    fires: bool  # the probability coin came up, inside the active_for window
    turn: int = 1
    body_bytes: int = 0  # request body as received (before any truncation)
    answered: bool = False  # the hop answers (413, 429) or never answers (blackhole): nothing else applies
    stream_faults: bool = False  # stall / drop_terminal / reset passed their gates
    buffered: bool = False
    filter: SSEFilter | None = None
    reset_sent: bool = False
    disabled: bool = False  # a hook failed: the flow goes on unfaulted
    logged: set[str] = field(default_factory=set)


@dataclass(slots=True, eq=False)
class _Socket:
    """One WebSocket the hop faults: its message-driven faults, its clock, its timer."""

    plan: _Plan
    config: FaultConfig  # as when the socket opened
    faults: SocketFaults
    opened: float  # loop time of the upgrade
    last: float  # loop time of the last message either way
    timer: asyncio.Task[None] | None = None


def _is_sse(response: http.Response | None) -> bool:
    if response is None:
        return False
    return response.headers.get("content-type", "").split(";")[0].strip().lower() == "text/event-stream"


def _content_length(request: http.Request) -> int | None:
    """The request's declared body size, None when it is not known from the headers."""
    if "transfer-encoding" in request.headers:
        return None
    try:
        return int(request.headers.get("content-length", ""))
    except ValueError:
        return None


def _json_object(body: bytes) -> dict | None:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc if type(doc) is dict else None


# Parameters a gateway's typed models hold as floats: an integer given there comes out as 1.0.
_FLOAT_PARAMS = ("temperature", "top_p", "presence_penalty", "frequency_penalty")


def reserialize_json(body: bytes) -> bytes | None:
    """The same JSON object written another way, as a gateway that parses requests into its own
    models and dumps them again does: members in reverse order at every level, `", "` and `": "`
    separators, every non-ASCII character as a \\u escape, and integers in float parameters
    spelled as floats (`1` -> `1.0`). None when the body is not a JSON object."""
    doc = _json_object(body)
    if doc is None:
        return None
    for name in _FLOAT_PARAMS:
        value = doc.get(name)
        if type(value) is int:
            doc[name] = float(value)
    return json.dumps(_reversed(doc), ensure_ascii=True, separators=(", ", ": ")).encode("ascii")


def _reversed(doc: Any) -> Any:
    if type(doc) is dict:
        return {k: _reversed(v) for k, v in reversed(list(doc.items()))}
    if type(doc) is list:
        return [_reversed(v) for v in doc]
    return doc


def _client_gone(client: Client) -> bool:
    """True once the client closed its side (mitmproxy clears CAN_READ on EOF)."""
    return not client.state & ConnectionState.CAN_READ


def _kill(flow: http.HTTPFlow) -> None:
    if flow.killable:
        flow.kill()


def _error_body(status: int, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "proxycheck_fault", "code": status}}).encode()


class Faults:
    """The fault-injecting hop (see the module docstring for the faults and their mechanisms)."""

    def __init__(self) -> None:
        self.config = FaultConfig()
        self._plans: weakref.WeakKeyDictionary[http.HTTPFlow, _Plan] = weakref.WeakKeyDictionary()
        self._draws = 0  # LLM flows seen so far: the index of the next draw
        # client connection id -> time.monotonic() when its last response ended
        self._last_done: dict[str, float] = {}
        # ids of the LLM flows forwarded upstream whose response has not ended (max_concurrent)
        self._in_flight: set[str] = set()
        self._statuses_sent = 0  # requests answered by status_first so far
        self._first_flow_at: float | None = None  # time.monotonic() of the first LLM flow (active_for)
        self._window_closed = False  # the active_for window is over (logged once)
        self._sockets: dict[str, _Socket] = {}  # flow id -> a faulted WebSocket, until its end

    # ---------------------------------------------------------------------------------------
    # options

    def load(self, loader: Loader) -> None:
        for name, typespec, default, help_text in _OPTIONS:
            loader.add_option(PREFIX + name, typespec, default, help_text)

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith(PREFIX) for name in updated):
            return
        config = parse_config(ctx.options)
        if config.stall_keepalive and config.stall_after < 0:
            logger.warning(f"{PREFIX}stall_keepalive has no effect without {PREFIX}stall_after")
        if config.ws_idle_close_code and not config.ws_idle_close:
            logger.warning(f"{PREFIX}ws_idle_close_code has no effect without {PREFIX}ws_idle_close")
        if config.ws_close_code and not config.ws_close_code_used:
            logger.warning(
                f"{PREFIX}ws_close_code has no effect without {PREFIX}ws_close_after_turns, "
                f"{PREFIX}ws_cut_after_events or {PREFIX}ws_max_life"
            )
        if config != self.config and config.describe():
            logger.info(f"proxycheck faults: {config.describe()}")
        self.config = config

    # ---------------------------------------------------------------------------------------
    # hooks: thin wrappers that keep any exception from reaching mitmproxy

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "requestheaders", self._on_requestheaders)

    async def request(self, flow: http.HTTPFlow) -> None:
        await self._guarded_async(flow, "request", self._on_request)

    async def responseheaders(self, flow: http.HTTPFlow) -> None:
        if not await self._guarded_async(flow, "responseheaders", self._on_responseheaders):
            if _is_sse(flow.response) and not flow.response.stream:  # type: ignore[union-attr]
                flow.response.stream = True  # type: ignore[union-attr]  # unfaulted: stream it

    async def response(self, flow: http.HTTPFlow) -> None:
        await self._guarded_async(flow, "response", self._on_response)

    def error(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "error", self._on_error)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "websocket_start", self._on_ws_start)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "websocket_message", self._on_ws_message)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "websocket_end", self._on_ws_end)

    def client_disconnected(self, client: Client) -> None:
        self._last_done.pop(client.id, None)

    def _guarded(self, flow: http.HTTPFlow, where: str, fn: Callable[[http.HTTPFlow], None]) -> bool:
        try:
            fn(flow)
            return True
        except Exception:
            self._failed(flow, where)
            return False

    async def _guarded_async(
        self, flow: http.HTTPFlow, where: str, fn: Callable[[http.HTTPFlow], Awaitable[None]]
    ) -> bool:
        try:
            await fn(flow)
            return True
        except Exception:
            self._failed(flow, where)
            return False

    def _failed(self, flow: http.HTTPFlow, where: str) -> None:
        """Log a hook's exception once per flow and let the flow go on unfaulted."""
        plan = self._plans.get(flow)
        if plan is None:
            plan = self._plans[flow] = _Plan(index=-1, fires=False)
        if plan.disabled:
            return
        plan.disabled = True
        logger.error(
            f"proxycheck faults: the {where} hook failed on {flow.request.method} {flow.request.path}; "
            "this flow goes on unfaulted",
            exc_info=True,
        )

    # ---------------------------------------------------------------------------------------
    # requests

    def _on_requestheaders(self, flow: http.HTTPFlow) -> None:
        dialect = dialects.detect(flow.request.path)
        if dialect is None:
            return  # not an LLM path, or one only its body can tell: decided in `request`
        plan = self._new_plan(flow)
        size = _content_length(flow.request)
        if size is not None:
            self._maybe_too_large(flow, plan, size)

    async def _on_request(self, flow: http.HTTPFlow) -> None:
        plan = self._plans.get(flow)
        if plan is not None and (plan.answered or plan.disabled):
            return
        body = flow.request.content or b""  # decoded: a bad Content-Encoding raises (-> unfaulted)
        doc = _json_object(body)  # parsed once: agent bodies run to megabytes
        if dialects.detect(flow.request.path, doc, flow.request.headers) is None:
            self._plans.pop(flow, None)  # e.g. another engine's /generate: not ours to fault
            return
        if plan is None:
            plan = self._new_plan(flow)
        plan.turn = turn_number(doc)
        plan.body_bytes = len(flow.request.raw_content or b"")
        if faults_ws.is_upgrade(flow.request) and await self._maybe_upgrade_fault(flow, plan):
            return
        if self._maybe_too_large(flow, plan, plan.body_bytes):
            return
        if await self._maybe_blackhole(flow, plan):
            return
        if self._maybe_too_many(flow, plan):
            return
        if self._maybe_status_first(flow, plan):
            return
        self._in_flight.add(flow.id)  # no await since the check: no other request can slip in between
        self._maybe_truncate(flow, plan, body)
        self._maybe_reserialize(flow, plan)
        cfg = self.config
        plan.stream_faults = (
            plan.fires and cfg.filters_stream and plan.body_bytes > cfg.min_body and plan.turn >= cfg.from_turn
        )

    def _new_plan(self, flow: http.HTTPFlow) -> _Plan:
        cfg = self.config
        index = self._draws
        self._draws += 1  # drawn inside the window or not: the seeded draws pick the same flows either way
        active = self._active()  # first: the first LLM flow opens the window whatever its draw
        plan = self._plans[flow] = _Plan(index=index, fires=coin(cfg.probability, cfg.seed, index) and active)
        return plan

    def _active(self) -> bool:
        """Whether a flow starting now is inside the active_for window (opened by the first LLM flow)."""
        now = time.monotonic()
        if self._first_flow_at is None:
            self._first_flow_at = now
        limit = self.config.active_for
        if not limit or now - self._first_flow_at <= limit:
            return True
        if not self._window_closed:
            self._window_closed = True
            logger.info(f"proxycheck faults: active for {limit:g} s since the first LLM flow: over, flows pass unfaulted")
        return False

    def _maybe_too_large(self, flow: http.HTTPFlow, plan: _Plan, size: int) -> bool:
        limit = self.config.max_body
        if not limit or size <= limit or not plan.fires:
            return False
        message = f"request body of {size} bytes is larger than {limit} bytes"
        flow.response = http.Response.make(413, _error_body(413, message), {"content-type": "application/json"})
        plan.answered = True
        self._fired(flow, plan, "max_body", f"answered 413 without contacting the upstream: {message}")
        return True

    def _maybe_too_many(self, flow: http.HTTPFlow, plan: _Plan) -> bool:
        limit = self.config.max_concurrent
        in_flight = len(self._in_flight)
        if not limit or in_flight < limit or not plan.fires:
            return False
        message = f"{in_flight} requests already in flight, the limit is {limit}"
        headers = {"content-type": "application/json", "retry-after": "1"}
        flow.response = http.Response.make(429, _error_body(429, message), headers)
        plan.answered = True
        self._fired(flow, plan, "max_concurrent", f"answered 429 without contacting the upstream: {message}")
        return True

    def _maybe_status_first(self, flow: http.HTTPFlow, plan: _Plan) -> bool:
        cfg = self.config
        if self._statuses_sent >= cfg.status_first or not plan.fires:
            return False
        if plan.body_bytes <= cfg.min_body or plan.turn < cfg.from_turn:
            return False
        self._statuses_sent += 1
        message = f"answered {cfg.status_code} to LLM request {self._statuses_sent} of the first {cfg.status_first}"
        flow.response = http.Response.make(cfg.status_code, _error_body(cfg.status_code, message),
                                           {"content-type": "application/json"})  # fmt: skip
        plan.answered = True
        self._fired(flow, plan, "status_first", f"{message}, without contacting the upstream")
        return True

    async def _maybe_blackhole(self, flow: http.HTTPFlow, plan: _Plan) -> bool:
        limit = self.config.idle_blackhole
        last = self._last_done.get(flow.client_conn.id)
        if not limit or last is None or not plan.fires:
            return False
        idle = time.monotonic() - last
        if idle <= limit:
            return False
        plan.answered = True
        self._fired(flow, plan, "idle_blackhole", f"connection idle {idle:.1f} s > {limit:g} s: never answering")
        await self._never_answer(flow)
        return True

    async def _never_answer(self, flow: http.HTTPFlow) -> None:
        """Hold a request until the client leaves (at most stall_seconds), then drop it."""
        await self._hold(flow, self.config.stall_seconds)
        _kill(flow)  # mitmproxy then drops the request: it never reaches the upstream

    async def _maybe_upgrade_fault(self, flow: http.HTTPFlow, plan: _Plan) -> bool:
        """Refuse (ws_refuse) or swallow (ws_swallow) a WebSocket upgrade; True when done."""
        cfg = self.config
        if not plan.fires or not (cfg.ws_refuse or cfg.ws_swallow):
            return False
        plan.answered = True
        if cfg.ws_swallow:
            self._fired(flow, plan, "ws_swallow", f"upgrade never answered (held at most {cfg.stall_seconds:g} s)")
            await self._never_answer(flow)
            return True
        status = cfg.ws_refuse
        headers = {"content-type": "application/json"}
        if status == 405:
            headers["allow"] = "POST"  # what a server without the WebSocket mode says of this path
        message = f"WebSocket upgrade refused with {status}"
        flow.response = http.Response.make(status, _error_body(status, message), headers)
        self._fired(flow, plan, "ws_refuse", f"{message}, without contacting the upstream")
        return True

    def _maybe_truncate(self, flow: http.HTTPFlow, plan: _Plan, body: bytes) -> None:
        keep = self.config.truncate_messages
        if not keep or not plan.fires:
            return
        cut = truncate_messages(body, keep)
        if cut is None:
            return
        flow.request.content = cut  # also fixes Content-Length
        self._fired(
            flow, plan, "truncate_messages", f"messages cut to the last {keep}: body {len(body)} -> {len(cut)} bytes"
        )

    def _maybe_reserialize(self, flow: http.HTTPFlow, plan: _Plan) -> None:
        if not self.config.reserialize or not plan.fires:
            return
        body = flow.request.content or b""
        again = reserialize_json(body)
        if again is None:
            return
        flow.request.content = again  # also fixes Content-Length
        self._fired(flow, plan, "reserialize", f"body re-serialized: {len(body)} -> {len(again)} bytes")

    # ---------------------------------------------------------------------------------------
    # responses

    async def _on_responseheaders(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        assert response is not None
        plan = self._live_plan(flow)
        if plan is None or plan.answered:
            if _is_sse(response):
                response.stream = True  # a correct proxy streams SSE (mitmproxy buffers by default)
            return
        cfg = self.config
        if cfg.delay_headers and plan.fires:
            self._fired(flow, plan, "delay_headers", f"response headers held for {cfg.delay_headers:g} s")
            await self._hold(flow, cfg.delay_headers)
        if not _is_sse(response):
            return  # a JSON body: mitmproxy forwards it whole, as any proxy would
        plan.filter = self._make_filter(flow, plan)
        if cfg.buffer and plan.fires:
            plan.buffered = True  # stream stays unset: mitmproxy reads the whole body first
            self._fired(flow, plan, "buffer", "SSE response buffered until its end")
        elif plan.filter is None:
            response.stream = True
        else:
            self._ensure_chunked(flow)
            response.stream = self._stream_fn(flow, plan, plan.filter)

    def _make_filter(self, flow: http.HTTPFlow, plan: _Plan) -> SSEFilter | None:
        if not plan.stream_faults:
            return None
        encoding = flow.response.headers.get("content-encoding", "").strip().lower()  # type: ignore[union-attr]
        if encoding not in ("", "identity"):
            self._fired(
                flow, plan, "skipped", f"stream faults not applied: body is {encoding}-encoded", logging.WARNING
            )
            return None
        cfg = self.config
        cut = cfg.cut_after
        keepalive = cfg.stall_keepalive and cut is not None and not cfg.cut_is_reset
        return SSEFilter(cut_after=cut, drop_terminal=cfg.drop_terminal, keepalive=keepalive)

    def _ensure_chunked(self, flow: http.HTTPFlow) -> None:
        """Send a filtered HTTP/1.1 body chunked: its length changes, and a client must be able to
        tell a cut body (reset) from a complete one, which a close-delimited body cannot show."""
        response = flow.response
        assert response is not None
        if flow.request.http_version != "HTTP/1.1" or "chunked" in response.headers.get("transfer-encoding", ""):
            return
        response.headers.pop("content-length", None)
        response.headers["transfer-encoding"] = "chunked"

    def _stream_fn(self, flow: http.HTTPFlow, plan: _Plan, flt: SSEFilter) -> Callable[[bytes], list[bytes]]:
        """The `flow.response.stream` callable: runs on mitmproxy's event loop, must not block."""

        def stream(chunk: bytes) -> list[bytes]:
            if plan.disabled:
                return [chunk] if chunk else []
            try:
                out = flt.feed(chunk) if chunk else flt.close()
                self._after_filter(flow, plan, flt)
            except Exception:
                self._failed(flow, "stream")
                return [chunk] if chunk else []
            # Never return b"" to withhold: mitmproxy 11 writes it as an empty HTTP/1 chunk, which
            # is the end of a chunked body. No chunk at all is what withholds.
            return [out] if out else []

        return stream

    def _after_filter(self, flow: http.HTTPFlow, plan: _Plan, flt: SSEFilter) -> None:
        """Log what the filter did and, when the cut is a reset, reset the client."""
        cfg = self.config
        if flt.terminals_dropped:
            self._fired(flow, plan, "drop_terminal", "terminal marker dropped")
        if not flt.cut_passed:
            return
        detail = f"after {cfg.cut_after} events (turn {plan.turn}, request body {plan.body_bytes} bytes)"
        if cfg.cut_is_reset:
            self._fired(flow, plan, "reset_after", f"client connection closed {detail}")
            if not plan.buffered and not plan.reset_sent:
                plan.reset_sent = True
                self._reset_client(flow)
        elif cfg.stall_keepalive:
            self._fired(flow, plan, "stall_keepalive", f"stalled with keep-alive comments {detail}")
        else:
            self._fired(flow, plan, "stall_after", f"stalled {detail}")

    def _reset_client(self, flow: http.HTTPFlow) -> None:
        if faults_ws.connection_handler(flow) is None:
            _kill(flow)  # acts only at the response hook, when the upstream body has ended
            return
        # After this chunk has been written: mitmproxy sends what the stream callable returns
        # once it returns, and closing flushes what was written.
        asyncio.get_running_loop().call_soon(self._close_client, flow)

    def _close_client(self, flow: http.HTTPFlow) -> None:
        try:
            faults_ws.cut(flow)
        except Exception:
            self._failed(flow, "reset")

    async def _on_response(self, flow: http.HTTPFlow) -> None:
        self._release(flow)
        self._mark_done(flow)
        plan = self._live_plan(flow)
        if plan is None or plan.answered or plan.filter is None:
            return
        flt = plan.filter
        if plan.buffered:
            body = flow.response.raw_content or b""  # type: ignore[union-attr]
            flow.response.content = flt.feed(body) + flt.close()  # type: ignore[union-attr]
            self._after_filter(flow, plan, flt)
        if not flt.cut_passed:
            if self.config.hold_open:
                self._fired(flow, plan, "hold_open", "every event forwarded; the end of the body held")
                await self._hold_then_drop(flow, plan)
            return
        if self.config.cut_is_reset:
            # Killed in every case: buffered, nothing was sent yet and the client gets no response
            # at all; streamed, the upstream body may have ended in the very chunk that passed the
            # K-th event (an engine that sends an answer at once), before the close scheduled then
            # has run, and mitmproxy would now write the body's clean end.
            _kill(flow)
            return
        await self._hold_then_drop(flow, plan)

    async def _hold_then_drop(self, flow: http.HTTPFlow, plan: _Plan) -> None:
        """Hold the end of the body for stall_seconds (or until the client leaves), then drop the
        connection: the client sees silence and a cut body, never a clean end."""
        if not await self._hold(flow, self.config.stall_seconds):
            self._fired(flow, plan, "stall_end", f"stall of {self.config.stall_seconds:g} s over: connection dropped")
            _kill(flow)  # a wedged hop that gives up: the client sees a cut body, not a clean end

    def _on_error(self, flow: http.HTTPFlow) -> None:
        self._release(flow)
        self._mark_done(flow)

    def _release(self, flow: http.HTTPFlow) -> None:
        """The flow is no longer in flight (max_concurrent); a flow that never was, or was already
        released, is ignored, so the count can neither leak nor go below zero."""
        self._in_flight.discard(flow.id)

    def _mark_done(self, flow: http.HTTPFlow) -> None:
        """Remember when the connection's last response ended (for the idle blackhole)."""
        if not _client_gone(flow.client_conn):  # a closed connection's entry would never be removed
            self._last_done[flow.client_conn.id] = time.monotonic()

    # ---------------------------------------------------------------------------------------
    # WebSocket sessions (the socket's end: `faults_ws`; its turns: `socketfaults`)

    def _on_ws_start(self, flow: http.HTTPFlow) -> None:
        plan = self._live_plan(flow)
        cfg = self.config
        if plan is None or plan.answered or not plan.fires or not cfg.faults_sockets:
            return
        now = asyncio.get_running_loop().time()
        sock = self._sockets[flow.id] = _Socket(plan, cfg, SocketFaults(cfg.socket_rules), now, now)
        if cfg.ws_idle_close or cfg.ws_max_life:
            sock.timer = asyncio.ensure_future(self._watch(flow, sock))

    def _on_ws_message(self, flow: http.HTTPFlow) -> None:
        sock = self._sockets.get(flow.id)
        if sock is None or sock.plan.disabled:
            return
        message = flow.websocket.messages[-1]  # type: ignore[union-attr]
        sock.last = asyncio.get_running_loop().time()
        act = sock.faults.message(message.from_client, message.content, message.is_text)
        if act is Act.DROP:
            message.drop()  # the hop is closing the socket: nothing passes any more
        elif act is Act.CLOSE:
            faults_ws.after_hook(lambda: self._close_socket(flow, sock))  # once the message is relayed

    def _on_ws_end(self, flow: http.HTTPFlow) -> None:
        sock = self._sockets.pop(flow.id, None)
        if sock is not None and sock.timer is not None:
            sock.timer.cancel()

    async def _watch(self, flow: http.HTTPFlow, sock: _Socket) -> None:
        """The socket's timers: closed once idle for ws_idle_close, or ws_max_life after the upgrade."""
        cfg = sock.config
        loop = asyncio.get_running_loop()
        try:
            while sock.faults.closing is None and not sock.plan.disabled:
                due = []
                if cfg.ws_idle_close:
                    due.append((sock.last + cfg.ws_idle_close, "ws_idle_close"))
                if cfg.ws_max_life:
                    due.append((sock.opened + cfg.ws_max_life, "ws_max_life"))
                at, fault = min(due)
                if at > loop.time():
                    await asyncio.sleep(at - loop.time())  # `last` may move meanwhile: looked at again
                    continue
                if fault == "ws_idle_close":
                    detail = f"no message either way for {cfg.ws_idle_close:g} s"
                else:
                    detail = f"{cfg.ws_max_life:g} s after the upgrade"
                sock.faults.close(fault, detail)
                self._close_socket(flow, sock)
        except Exception:
            self._failed(flow, "websocket timer")

    def _close_socket(self, flow: http.HTTPFlow, sock: _Socket) -> None:
        """End the socket as its fault says: a close frame with the configured code, or a cut."""
        try:
            fault = sock.faults.closing or "ws_close"
            cfg = sock.config
            code = cfg.ws_idle_close_code if fault == "ws_idle_close" else cfg.ws_close_code
            detail = sock.faults.detail
            if code and faults_ws.close_with_code(flow, code, f"proxycheck fault {fault}"):
                self._fired(flow, sock.plan, fault, f"{detail}: close frame {code} to both sides")
            elif faults_ws.cut(flow):
                if code:
                    detail += f" (no close frame {code} could be sent)"
                self._fired(flow, sock.plan, fault, f"{detail}: cut without a close frame")
        except Exception:
            self._failed(flow, "websocket close")

    # ---------------------------------------------------------------------------------------
    # helpers

    def _live_plan(self, flow: http.HTTPFlow) -> _Plan | None:
        plan = self._plans.get(flow)
        return plan if plan is not None and not plan.disabled else None

    async def _hold(self, flow: http.HTTPFlow, seconds: float) -> bool:
        """Wait `seconds`, or until the client has gone; True when it went."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not _client_gone(flow.client_conn):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await asyncio.sleep(min(_POLL, remaining))
        return True

    def _fired(self, flow: http.HTTPFlow, plan: _Plan, name: str, detail: str, level: int = logging.INFO) -> None:
        """Log a fault (or why one did not apply) once per flow."""
        if name in plan.logged:
            return
        plan.logged.add(name)
        logger.log(level, f"proxycheck fault {name}: {flow.request.method} {flow.request.path}: {detail}")
