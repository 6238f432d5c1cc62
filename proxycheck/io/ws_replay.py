"""The replayer's WebSocket transport: one recorded WebSocket session replayed over one socket.

A new transport beside the HTTP one (`proxycheck.io.observe`), not branches through it: the
replayer (`proxycheck.io.replayer`) hands a session whose plan says `transport == "websocket"`
here (`run_socket`), with the same context (route, run, alarms, sink) it gives an HTTP session.

* The socket: one per recorded socket, opened on the route's URL (`ws://` / `wss://`, TLS as the
  route verifies it) through the route's forward hop if any (an HTTP proxy: CONNECT for `wss://`;
  a SOCKS5 proxy: `proxycheck.io.proxying`), with the handshake's recorded headers and the
  route's own (`proxycheck.core.replay.socket.handshake_headers`). On aiohttp, whichever client
  stack the replay was asked for: httpx has no WebSocket client.
* Each turn is one exchange of the sans-IO exchange machine (`proxycheck.core.exchange.machine`),
  so every outcome rule, watchdog and the client's patience apply as for a stream: the send (the
  first turn's includes the handshake, and a handshake answered with another status than 101 is
  that status: a refused upgrade), the answer's first message as its "headers", each server
  message as one event of the stream (`MessageData`: the transport framed it), its terminal
  event as the stream's end; a close or a cut of the socket mid-answer is the transport error
  that ends it (`reset`).
* Between turns: the recorded think time, measured from the end of the turn before. A socket
  that closed while it waited is the next turn's failure, said with how long it had been idle
  ("the socket was closed by the server (1001) 12.3 s into the wait before this turn").
* After a failure the socket is done with (a watchdog's cut, a close): the turns left are not
  sent (they continue the socket's memory, which no other socket has) and each is observed as
  failed for that reason, so the run holds every turn and a route fails from the turn that broke;
  with `--on-fail stop-session` (and in a bench) the socket ends at its failed turn, as an HTTP
  session does, and the turns left are neither sent nor observed.
* The socket's end while idle: where the recording shows the chain closing or cutting the socket
  after its last turn (a hop's idle timeout), the plan adds that end as a last turn with nothing
  to send (`PlannedTurn.socket_end`); the replay watches the socket as long (and half again: a
  hop's timer is not exact): a close or cut in that time is the same end (`reset`, with the idle
  it came after), a socket still open outlived it (`ok`).
* While the replay waits a think time, one receive stays pending on the socket, given no timeout
  (aiohttp marks a socket closed when a receive times out): a close then is seen when it comes.
  Within an answer the watchdog's deadline (`_Deadline`) cancels the receive when it passes: the
  socket is given up anyway.
* `previous_response_id` of each message is mapped to the live ids (`SocketIds`).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import replace
from typing import Any

import aiohttp

from proxycheck.core.exchange.machine import (
    ErrorKind,
    ExchangeMachine,
    MessageData,
    RequestSent,
    ResponseHeaders,
    StreamClosed,
    TransportError,
    WatchdogExpired,
)
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome, Watchdog
from proxycheck.core.recording.websocket import NOT_SENT, WsMessage, ended_idle
from proxycheck.core.replay.plan import PlannedSession, PlannedTurn, think_delay
from proxycheck.core.replay.socket import SocketIds, handshake_headers, upgrade_url, ws_url
from proxycheck.io.proxying import aiohttp_session

__all__ = ["run_socket"]

SSE = (("content-type", "text/event-stream"),)
WEBSOCKET = "websocket"  # `Observation.transport`


class _Ended(Exception):
    """The socket is done with: the turns left are not sent (`why`)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Socket:
    """An open socket, and the receive left pending on it while a think time runs (see the module
    docstring): a close that comes while nothing is sent is seen when it comes."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._pending: asyncio.Future[aiohttp.WSMessage] | None = None
        self.closed_at: float | None = None  # when a close (or a cut) came while nothing was asked

    async def receive(self, deadline: "_Deadline") -> aiohttp.WSMessage | None:
        """The next message of an answer, or None when the answer's watchdog fired first
        (`deadline`): the socket is given up. A receive left pending by a think time is taken
        first."""
        try:
            if self._pending is not None:
                pending, self._pending = self._pending, None
                return await pending  # a cancel cancels it too: the socket is given up
            return await self.ws.receive()
        except asyncio.CancelledError:
            if deadline.fired and deadline.task.uncancel() == 0:  # the watchdog's, not a Ctrl-C
                return None
            raise

    async def watch_until(self, when: float, alarms: Any) -> None:
        """Wait until `when` (the replayer's alarms), noting a close that comes meanwhile."""
        if self.closed_at is not None:
            await alarms.sleep_until(when)
            return
        sleeper = asyncio.ensure_future(alarms.sleep_until(when))
        if self._pending is None:
            self._pending = asyncio.ensure_future(self.ws.receive())
        try:
            done, _ = await asyncio.wait({sleeper, self._pending}, return_when=asyncio.FIRST_COMPLETED)
            if self._pending in done and self._pending.result().type in _ENDS:
                self.closed_at = time.monotonic()
            # A message between turns stays taken (the next answer reads it first); a close is
            # noted: either way the think time is waited out.
            await sleeper
        finally:
            if not sleeper.done():
                sleeper.cancel()

    async def close(self) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
        if not self.ws.closed:
            await self.ws.close()


_ENDS = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)


async def run_socket(session: PlannedSession, ctx: Any, start_at: float | None, headers_for: Any,
                     observed: Any) -> None:  # fmt: skip
    """Replay one WebSocket session over one socket (see the module docstring). `headers_for(turn)`
    gives a turn's request headers as the replayer builds them; `observed(obs, turn, result)`
    hands an observation on (keys, sink, listener) as the replayer does for HTTP."""
    ids = SocketIds()
    stop_at_failure = ctx.options.on_fail == "stop-session"
    first = session.turns[0]
    url = ws_url(ctx.route.url_for(first.url))
    headers = handshake_headers(headers_for(first).items())
    client = aiohttp_session(ctx.route, tls=ctx.tls, limit=0, auto_decompress=True)
    sock: _Socket | None = None
    ended: str | None = None
    prev_end: float | None = None
    try:
        for turn in session.turns:
            wake = start_at if prev_end is None else prev_end + _think(turn, ctx)
            if turn.handshake:  # only the upgrade: what the recorded client met
                if wake is not None:
                    await ctx.alarms.sleep_until(wake)
                if not ctx.budget.take():
                    return
                # No answer to read on the handshake's exchange: nothing for a dialect to parse.
                machine = ExchangeMachine(dialect=None, streamed=False, watchdogs=ctx.options.watchdogs)
                ctx.listener.request(ctx.route, turn, url, headers, b"")
                try:
                    sock = _Socket(await _open(client, url, headers, machine, ctx, send=None))
                    machine.handle(StreamClosed(time.monotonic()))  # the 101: the upgrade agreed to
                except _Ended as exc:
                    ended = exc.why
                obs = replace(machine.observation(clock_origin=ctx.origin, reused=False, idle=None, connection=1),
                              transport=WEBSOCKET)  # fmt: skip
                if obs.outcome is Outcome.OK:
                    obs = replace(obs, detail="the upgrade was agreed to (101)", status=101)
                observed(obs, turn, None)
                if obs.outcome.is_failure and stop_at_failure:
                    return
                continue
            if turn.socket_end:
                if ended is None and sock is not None and prev_end is not None:
                    observed(await _idle_end(sock, turn, ctx, prev_end), turn, None)
                else:
                    observed(_not_sent(turn, ctx, ended or "the socket was never open"), turn, None)
                continue
            if wake is not None:
                if sock is not None:
                    await sock.watch_until(wake, ctx.alarms)
                else:
                    await ctx.alarms.sleep_until(wake)
            if not ctx.budget.take():
                return
            if ended is not None:
                observed(_not_sent(turn, ctx, ended), turn, None)
                continue
            body = ids.message(turn.body)
            ctx.listener.request(ctx.route, turn, url, headers, body)
            machine = ExchangeMachine(dialect=turn.dialect, streamed=True, watchdogs=ctx.options.watchdogs,
                                      request_body=body)  # fmt: skip
            try:
                if sock is None:
                    sock = _Socket(await _open(client, url, headers, machine, ctx))
                else:
                    await _send(sock, body, machine, prev_end)
                result = await _answer(sock, machine, ctx)
            except _Ended as exc:
                ended = exc.why
                result = None
            obs = replace(machine.observation(clock_origin=ctx.origin, reused=turn is not first, idle=None, connection=1),
                          transport=WEBSOCKET)  # fmt: skip
            observed(obs, turn, result)
            prev_end = ctx.origin + obs.t_start + (obs.end or 0.0)
            if obs.outcome.is_failure and ended is None:
                ended = f"the socket was given up after turn {turn.turn} failed ({obs.outcome.value})"
            if result is not None and turn.recorded.result is not None:
                ids.record(turn.recorded.result.response_id, result.response_id)
            if obs.outcome.is_failure and stop_at_failure:
                return
    finally:
        if sock is not None:
            await asyncio.shield(sock.close())
        await asyncio.shield(client.close())


IDLE_MARGIN = 1.5  # the socket's recorded idle end is watched this many times as long (and a second more)


async def _idle_end(sock: _Socket, turn: PlannedTurn, ctx: Any, since: float) -> Observation:
    """The recording shows the chain ending the socket while it sat idle after its last turn
    (`plan_socket`): watch the socket as long (with a margin: a hop's idle timer is not exact).
    Ended by the route within it: the same cut; still open: the route outlived it, and the
    replay closes the socket itself."""
    idle = _think(turn, ctx)
    await sock.watch_until(since + idle * IDLE_MARGIN + 1.0, ctx.alarms)
    t_start = round(since - ctx.origin, 6)
    if sock.closed_at is not None:
        waited = sock.closed_at - since
        said = f"{ended_idle(_closed_words(sock.ws), waited, waiting=False)} (the recording: {turn.recorded.detail})"
        return Observation(t_start=t_start, end=round(waited, 6), streamed=True, outcome=Outcome.RESET,
                           transport=WEBSOCKET, detail=said)  # fmt: skip
    waited = time.monotonic() - since
    said = f"the socket stayed open {waited:.1f} s after the last turn, past the recorded end"
    return Observation(t_start=t_start, end=round(waited, 6), streamed=True, outcome=Outcome.OK, transport=WEBSOCKET,
                       detail=said)  # fmt: skip


def _think(turn: PlannedTurn, ctx: Any) -> float:
    return think_delay(turn, ctx.options.pace)


async def _open(client: aiohttp.ClientSession, url: str, headers: dict[str, str], machine: ExchangeMachine,
                ctx: Any, send: bytes | None = b"") -> aiohttp.ClientWebSocketResponse:  # fmt: skip
    """The handshake, as the first turn's start: a refused upgrade ends the turn with its status.
    Then the turn's message (`send`: the machine's request body; None: the handshake alone)."""
    machine.handle(RequestSent(time.monotonic()))
    try:
        opening = client.ws_connect(upgrade_url(url), headers=headers, autoping=True, heartbeat=None, max_msg_size=0)
        ws = await asyncio.wait_for(opening, timeout=ctx.options.watchdogs.headers_limit)
    except asyncio.TimeoutError:
        machine.handle(WatchdogExpired(time.monotonic(), Watchdog.HEADERS))
        raise _Ended("the upgrade was never answered") from None
    except aiohttp.WSServerHandshakeError as exc:
        now = time.monotonic()
        machine.handle(ResponseHeaders(now, exc.status, tuple((exc.headers or {}).items()), "HTTP/1.1"))
        machine.handle(StreamClosed(now))
        raise _Ended(f"the upgrade was refused (HTTP {exc.status})") from None
    except (aiohttp.ClientConnectorError, aiohttp.ClientProxyConnectionError, OSError) as exc:
        machine.handle(TransportError(time.monotonic(), ErrorKind.CONNECT, f"{type(exc).__name__}: {exc}"))
        raise _Ended("no connection") from None
    if send is not None:
        await ws.send_str(machine.request_body.decode("utf-8", "surrogateescape"))
        machine.handle(ResponseHeaders(time.monotonic(), 200, SSE, "HTTP/1.1"))
    else:
        # The 101 (no body follows on this exchange): said as a complete answer with nothing in it.
        machine.handle(ResponseHeaders(time.monotonic(), 200, (), "HTTP/1.1"))
    return ws


async def _send(sock: _Socket, body: bytes, machine: ExchangeMachine, prev_end: float | None) -> None:
    """A later turn's message on the open socket; a socket that closed meanwhile fails the turn."""
    machine.handle(RequestSent(time.monotonic()))
    ws = sock.ws
    if sock.closed_at is not None or ws.closed:
        at = sock.closed_at if sock.closed_at is not None else time.monotonic()
        idle = at - prev_end if prev_end is not None else 0.0
        words = _closed_words(ws)
        machine.handle(TransportError(time.monotonic(), ErrorKind.RESET, ended_idle(words, idle, waiting=True)))
        raise _Ended(words)
    try:
        await ws.send_str(body.decode("utf-8", "surrogateescape"))
    except (ConnectionError, aiohttp.ClientError, RuntimeError) as exc:
        machine.handle(TransportError(time.monotonic(), ErrorKind.RESET, f"the socket failed on send: {exc}"))
        raise _Ended("the socket failed") from None
    machine.handle(ResponseHeaders(time.monotonic(), 200, SSE, "HTTP/1.1"))


class _Deadline:
    """The watchdog over one answer's receives: one timer at the machine's deadline (`wait.at`),
    which cancels the receive when the deadline has passed. Each message pushes the deadline on
    (the stall watchdog counts from the last progress); the timer is not moved for that, but when
    it goes off early it is set again at the deadline it finds then, so a streaming answer costs
    a timer per stall period, not one per message (a timeout per receive was a fifth of the
    replayer's time per message). A deadline that comes nearer (the answer's end shortens the
    stall watchdog to its own value) moves it at once (`check`)."""

    def __init__(self, machine: ExchangeMachine) -> None:
        self.machine = machine
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.fired = False
        self.at = math.inf  # when the timer goes off
        self._timer: asyncio.TimerHandle | None = None
        self.check()

    def check(self) -> None:
        """After an event: a nearer deadline moves the timer."""
        wait = self.machine.wait
        if wait is not None and wait.at < self.at:
            self._set(wait.at)

    def _set(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.at = at
        # The loop's clock may have another origin than time.monotonic().
        self._timer = self.loop.call_at(at + self.loop.time() - time.monotonic(), self._due)

    def _due(self) -> None:
        self._timer = None
        self.at = math.inf
        wait = self.machine.wait
        if wait is None or self.fired:
            return
        if time.monotonic() < wait.at:  # progress came since: the deadline moved on
            self._set(wait.at)
            return
        self.fired = True
        self.task.cancel()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def _answer(sock: _Socket, machine: ExchangeMachine, ctx: Any) -> Any:
    """The turn's answer, message by message, to its terminal event, a close, or a watchdog.
    The replayer's hot path: one pass of this loop per message of the answer."""
    deadline = _Deadline(machine)
    ring = ctx.alarms.ring
    handle = machine.handle
    try:
        while not machine.ended:
            msg = await sock.receive(deadline)
            if msg is None:
                wait = machine.wait
                assert wait is not None
                handle(WatchdogExpired(time.monotonic(), wait.watchdog))
                raise _Ended(f"the turn's {wait.watchdog.value} watchdog cut it")
            now = time.monotonic()
            ring()
            kind = msg.type
            if kind == _TEXT or kind == _BINARY:
                text = msg.data if kind == _TEXT else msg.data.decode("utf-8", "replace")
                wait = handle(MessageData(now, text, len(text)))
                if wait is not None and (machine.answer_ended or _is_error_event(text)):
                    handle(StreamClosed(now))  # a socket's turn ends with its terminal event
                elif wait is not None and wait.at < deadline.at:
                    deadline.check()
            else:  # CLOSE, CLOSING, CLOSED, ERROR: the socket ended mid-answer
                words = _closed_words(sock.ws)
                handle(TransportError(now, ErrorKind.RESET, f"{words} mid-answer"))
                raise _Ended(words)
    finally:
        deadline.close()
    return machine.result


_TEXT, _BINARY = aiohttp.WSMsgType.TEXT, aiohttp.WSMsgType.BINARY


def _is_error_event(text: str) -> bool:
    """An `error` event, which ends a turn on a socket (the socket stays open)."""
    if text.find('"error"', 0, 64) < 0:  # no slice made: this runs on every message
        return False
    return WsMessage(0.0, False, text.encode("utf-8", "surrogateescape")).type == "error"


def _closed_words(ws: aiohttp.ClientWebSocketResponse) -> str:
    code = ws.close_code
    if code is None or code == 1006:
        return "the socket was cut without a close frame (1006)"
    return f"the socket was closed by the server ({code})"


def _not_sent(turn: PlannedTurn, ctx: Any, why: str) -> Observation:
    """A turn the socket's end left unsent: failed for that reason (see the module docstring)."""
    t = time.monotonic() - ctx.origin
    return Observation(t_start=round(t, 6), end=0.0, streamed=True, request_bytes=len(turn.body),
                       outcome=Outcome.RESET, detail=f"{NOT_SENT}{why}", transport=WEBSOCKET)  # fmt: skip
