"""Observe one exchange over the network, with watchdogs, into an `Observation`.

This module is the client side of one request on the network: sending it, reading the response as
it streams, timing every event, and cutting it when a watchdog fires. What the exchange is at
each moment, what to wait for, and what its outcome is (docs/design.md, "Outcomes") is the pure
state machine's, `proxycheck.core.exchange.machine.ExchangeMachine`: this driver feeds it the
network's events with their times and arms the watchdog it asks for. Failures are data: nothing
the network does (refusal, silence, reset, an error status, garbage) escapes as an exception; it
becomes the outcome.

Two client stacks, one behaviour: `observe_httpx` (the SDKs' stack, used by the replayer and the
synthetic agent) and `observe_aiohttp` (for high-concurrency benchmarks); `prepare_httpx` and
`prepare_aiohttp` do all of it that precedes sending, for a caller that sends at a set moment. Each is a thin adapter
(`_HttpxStack`, `_AiohttpStack`: send, chunks, close, what an exception means, what the
connection was) under one driver (`_observe`), so the two stacks cannot drift apart.

Watchdogs (`proxycheck.core.exchange.watchdogs.Watchdogs`; seconds): `connect` bounds
making a TCP (and TLS) connection and is the stack's own timeout; the others are the machine's
(`headers`, `stall`, `total`: see `proxycheck.core.exchange.machine`).

Connections: each stack reports whether the request opened a new connection (httpx's `trace`
request extension, aiohttp's `TraceConfig`) and which local address it rode; `ConnState`
numbers one session's connections and remembers when each went idle, so an observation says
"reused connection 2 after 4.8 s idle", which is what an idle-timeout wedge looks like. Neither
stack tells which pooled connection a request went on until response headers come (httpx also
names a new connection as soon as it is made); a reused connection that never answered is the
session's only idle one when it has exactly one (the common case: one connection per session),
else `reused=True` with no number.
"""

from __future__ import annotations

import abc
import asyncio
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Mapping

import aiohttp
import httpx
from aiohttp.http_exceptions import ContentEncodingError

from proxycheck.core.errors import ClientFault
from proxycheck.core.exchange.machine import (
    DEFAULT_WATCHDOGS,
    BodyData,
    Connected,
    ConnectStarted,
    ErrorKind,
    ExchangeMachine,
    RequestSent,
    ResponseHeaders,
    StreamClosed,
    TransportError,
    Wait,
    WatchdogExpired,
)
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.protocol.httpsyntax import header_problem
from proxycheck.core.protocol.result import Result

__all__ = [
    "ConnState", "Observed", "PreparedExchange", "Watchdogs", "aiohttp_trace_config", "observe_aiohttp", "observe_httpx",
    "prepare_aiohttp", "prepare_httpx",
]  # fmt: skip


class ConnState:
    """The connections one session (one client) has used: numbers, and when each went idle.

    Connections are told apart by their local address (ip:port), which is unique among the
    connections open at one time."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}
        self._idle_since: dict[str, float] = {}

    def number(self, local: str) -> int:
        return self._numbers.setdefault(local, len(self._numbers) + 1)

    def idle(self, local: str, now: float) -> float | None:
        """Seconds since the connection's previous exchange ended (None if none did cleanly)."""
        since = self._idle_since.get(local)
        return None if since is None else max(now - since, 0.0)

    def released(self, local: str, now: float) -> None:
        """The exchange ended cleanly; the connection went back to the pool at `now`."""
        self._idle_since[local] = now

    def sole_idle(self) -> str | None:
        """The session's only idle connection, if it has exactly one: a request that went on a
        pooled connection and never got an answer went on that one."""
        return next(iter(self._idle_since)) if len(self._idle_since) == 1 else None

    def dropped(self, local: str) -> None:
        """The connection was abandoned (a failure): it will not be reused."""
        self._idle_since.pop(local, None)


@dataclass(frozen=True, slots=True)
class Observed:
    """An observation (run-level keys blank: see `Observation.with_keys`) and the full dialect
    result, for a caller that continues the conversation with what the model said."""

    observation: Observation
    result: Result | None


# ------------------------------------------------------------------------------------------------
# Public entry points


async def observe_httpx(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    dialect: str | None,
    streamed: bool = True,
    watchdogs: Watchdogs = DEFAULT_WATCHDOGS,
    clock_origin: float | None = None,
    conn_state: ConnState | None = None,
    after_each_read: Callable[[], None] | None = None,
) -> Observed:
    """Send one request on `client` and observe it. `clock_origin` is the run's start on the
    monotonic clock (None: the request's own start); `conn_state` is the session's;
    `after_each_read` is called after each step that handled what the network sent (the response
    headers, each read of the body, its end, the connection's release): the replayer wakes its
    sessions due to send there (`proxycheck.io.replayer`, "Waking on time"). A request the
    client cannot send raises `ClientFault` (see `_sendable`)."""
    prepared = prepare_httpx(
        client, method, url, headers, body, dialect=dialect, streamed=streamed, watchdogs=watchdogs,
        clock_origin=clock_origin, conn_state=conn_state, after_each_read=after_each_read,
    )  # fmt: skip
    return await prepared.observe()


async def observe_aiohttp(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    dialect: str | None,
    streamed: bool = True,
    watchdogs: Watchdogs = DEFAULT_WATCHDOGS,
    clock_origin: float | None = None,
    conn_state: ConnState | None = None,
    after_each_read: Callable[[], None] | None = None,
) -> Observed:
    """As `observe_httpx`, on an aiohttp session created with `aiohttp_trace_config()` among its
    `trace_configs` (ValueError otherwise: without it connection reuse cannot be seen)."""
    prepared = prepare_aiohttp(
        session, method, url, headers, body, dialect=dialect, streamed=streamed, watchdogs=watchdogs,
        clock_origin=clock_origin, conn_state=conn_state, after_each_read=after_each_read,
    )  # fmt: skip
    return await prepared.observe()


class PreparedExchange:
    """One request made ready (checked, built by its client, its machine made) but not sent:
    `observe()` sends and observes it, once. The replayer prepares a turn while its think time
    runs, so that waking up is sending: building an httpx request alone is a fifth of a
    millisecond of CPU or more, which the request would otherwise go out late by, and every
    other session due at that moment after it."""

    __slots__ = ("_stack", "_machine", "_clock_origin", "_conn_state", "_after_each_read")

    def __init__(
        self,
        stack: _Stack,
        machine: ExchangeMachine,
        clock_origin: float | None,
        conn_state: ConnState | None,
        after_each_read: Callable[[], None] | None,
    ) -> None:
        self._stack = stack
        self._machine = machine
        self._clock_origin = clock_origin
        self._conn_state = conn_state or ConnState()
        self._after_each_read = after_each_read or _nothing

    async def observe(self) -> Observed:
        return await _observe(self._stack, self._machine, self._clock_origin, self._conn_state, self._after_each_read)


def prepare_httpx(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    dialect: str | None,
    streamed: bool = True,
    watchdogs: Watchdogs = DEFAULT_WATCHDOGS,
    clock_origin: float | None = None,
    conn_state: ConnState | None = None,
    after_each_read: Callable[[], None] | None = None,
) -> PreparedExchange:
    """`observe_httpx`'s request, made ready to send (its `ClientFault` raised now)."""
    _sendable(method, url, headers)
    try:
        stack = _HttpxStack(client, method, url, headers, body, watchdogs)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
        raise _client_fault(f"{method} {url}", exc) from None
    machine = ExchangeMachine(dialect=dialect, streamed=streamed, watchdogs=watchdogs, request_body=body)
    return PreparedExchange(stack, machine, clock_origin, conn_state, after_each_read)


def prepare_aiohttp(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    dialect: str | None,
    streamed: bool = True,
    watchdogs: Watchdogs = DEFAULT_WATCHDOGS,
    clock_origin: float | None = None,
    conn_state: ConnState | None = None,
    after_each_read: Callable[[], None] | None = None,
) -> PreparedExchange:
    """`observe_aiohttp`'s request, made ready to send (its errors raised now)."""
    if not any(isinstance(tc, _TraceConfig) for tc in _trace_configs(session)):
        raise ValueError("the aiohttp session needs trace_configs=[aiohttp_trace_config()] to observe connections")
    _sendable(method, url, headers)
    stack = _AiohttpStack(session, method, url, headers, body, watchdogs)
    machine = ExchangeMachine(dialect=dialect, streamed=streamed, watchdogs=watchdogs, request_body=body)
    return PreparedExchange(stack, machine, clock_origin, conn_state, after_each_read)


def aiohttp_trace_config() -> aiohttp.TraceConfig:
    """The TraceConfig `observe_aiohttp` needs on its session: it sees new and reused connections."""
    config = _TraceConfig()
    config.on_connection_create_start.append(_on_create_start)
    config.on_connection_create_end.append(_on_create_end)
    config.on_connection_reuseconn.append(_on_reuse)
    return config


def _sendable(method: str, url: str, headers: Mapping[str, str]) -> None:
    """Refuse, before anything is sent, a request no client can send: the stacks fail on it
    inside the client (httpx raises a protocol error, aiohttp a ValueError or nothing at all),
    which would otherwise read as a connection cut by the hop or the engine."""
    for name, value in headers.items():
        problem = header_problem(name, value)
        if problem is not None:
            raise ClientFault(f"{method} {url}", f"cannot send the request: {problem} (a header from the chain file or the recording)")


def _client_fault(target: str, exc: BaseException) -> ClientFault:
    return ClientFault(
        target,
        f"the client could not send the request ({_describe(exc)}): a mistake on this side, not a failure of the network",
    )


# ------------------------------------------------------------------------------------------------
# The driver: the network's events into the machine, the machine's waits onto the event loop


@dataclass(slots=True)
class _Head:
    status: int
    headers: list[tuple[str, str]]
    http_version: str | None
    local: str | None  # local address of the connection that carried the response


class _Stack(abc.ABC):
    """What the driver needs from a client stack. The stack's connection hooks set `reused`
    (False when the request opened a new connection, True when it went on a pooled one) and
    `local`, its address, and tell the exchange's machine when a new connection started and was
    made (`new_connection`, `connection_made`)."""

    errors: tuple[type[BaseException], ...] = ()
    #: What the stack raises when it refuses to send a request as built (before the network).
    local_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, target: str) -> None:
        self.target = target  # "METHOD URL", to name the request in a ClientFault
        self.machine: ExchangeMachine | None = None  # set by the driver before sending
        self.reused: bool | None = None
        self.local: str | None = None
        self.head_local: str | None = None  # the address the response named, when it came

    def new_connection(self) -> None:
        self.reused = False
        self._tell(ConnectStarted(time.monotonic()))

    def connection_made(self) -> None:
        self._tell(Connected(time.monotonic()))

    def _tell(self, event: ConnectStarted | Connected) -> None:
        if self.machine is not None and self.machine.status is None and not self.machine.ended:
            self.machine.handle(event)

    @abc.abstractmethod
    async def send(self) -> _Head:
        """Send the request; return when the response headers came."""

    @abc.abstractmethod
    def chunks(self) -> AsyncIterator[bytes]:
        """The response body as it arrives (content-decoded)."""

    @abc.abstractmethod
    async def close(self, clean: bool) -> None:
        """Release the response; `clean` when its body was read to the end."""

    @abc.abstractmethod
    def kind_of(self, exc: BaseException) -> ErrorKind:
        """What the stack's exception means."""


class _Timer:
    """The asyncio timeout that fires when the machine's current `Wait` runs out. The machine's
    times are `time.monotonic()`; the loop's clock may have another origin."""

    def __init__(self) -> None:
        self.skew = asyncio.get_running_loop().time() - time.monotonic()
        self.timeout: asyncio.Timeout | None = None
        self.at: float | None = None

    def when(self, wait: Wait | None) -> float | None:
        return None if wait is None else wait.at + self.skew

    def follow(self, wait: Wait | None) -> None:
        """Move the deadline to `wait`'s (rescheduling only when it moved: the per-chunk hot path)."""
        if wait is not None and wait.at != self.at and self.timeout is not None:
            self.at = wait.at
            self.timeout.reschedule(wait.at + self.skew)

    @property
    def expired(self) -> bool:
        return self.timeout is not None and self.timeout.expired()


async def _observe(
    stack: _Stack,
    machine: ExchangeMachine,
    clock_origin: float | None,
    conn_state: ConnState,
    after_each_read: Callable[[], None],
) -> Observed:
    stack.machine = machine
    timer = _Timer()
    wait = machine.handle(RequestSent(time.monotonic()))
    timer.at = wait.at if wait is not None else None
    refused: BaseException | None = None
    try:
        async with asyncio.timeout_at(timer.when(wait)) as timer.timeout:
            await _run(stack, machine, timer, after_each_read)
    except TimeoutError as exc:
        now = time.monotonic()  # a watchdog, or one of aiohttp's own timeouts (TimeoutErrors too)
        if timer.expired and machine.wait is not None:
            _end(machine, WatchdogExpired(now, machine.wait.watchdog))
        else:
            _end(machine, TransportError(now, stack.kind_of(exc), _describe(exc)))
    except stack.local_errors as exc:
        if machine.status is not None:  # refused mid-response: the response is what is judged
            _end(machine, TransportError(time.monotonic(), stack.kind_of(exc), _describe(exc)))
        else:
            refused = exc
    except stack.errors as exc:
        _end(machine, TransportError(time.monotonic(), stack.kind_of(exc), _describe(exc)))
    finally:
        with suppress(*stack.errors, TimeoutError):
            await stack.close(machine.ended_cleanly)
        after_each_read()  # releasing a connection is a read's worth of work too
    if refused is not None:
        raise _client_fault(stack.target, refused) from None
    return _finish(stack, machine, clock_origin, conn_state)


def _end(machine: ExchangeMachine, event: WatchdogExpired | TransportError) -> None:
    if not machine.ended:
        machine.handle(event)


async def _run(stack: _Stack, machine: ExchangeMachine, timer: _Timer, after_each_read: Callable[[], None]) -> None:
    """Send, then read the response until the machine has what it needs."""
    head = await stack.send()
    stack.head_local = head.local
    timer.follow(machine.handle(ResponseHeaders(time.monotonic(), head.status, head.headers, head.http_version)))
    after_each_read()
    async for chunk in stack.chunks():
        wait = machine.handle(BodyData(time.monotonic(), chunk))
        after_each_read()
        if wait is None:
            return  # it has enough (the start of an error body, to quote)
        timer.follow(wait)
    machine.handle(StreamClosed(time.monotonic()))
    after_each_read()


def _nothing() -> None:
    pass


def _finish(stack: _Stack, machine: ExchangeMachine, origin: float | None, conn: ConnState) -> Observed:
    """The Observation, and the session's connection bookkeeping."""
    local = stack.head_local or stack.local
    if local is None and stack.reused:
        local = conn.sole_idle()  # no answer told which pooled connection: the only one there was
    idle = conn.idle(local, machine.start) if local and stack.reused else None
    obs = machine.observation(
        clock_origin=origin, reused=stack.reused, idle=idle, connection=conn.number(local) if local else None
    )
    if local:
        end = machine.end if machine.end is not None else machine.start
        if machine.ended_cleanly:
            conn.released(local, end)
        else:
            conn.dropped(local)
    return Observed(obs, machine.result)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _address(addr: Any) -> str | None:
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else None


# ------------------------------------------------------------------------------------------------
# httpx


class _HttpxStack(_Stack):
    errors = (httpx.HTTPError, OSError)
    local_errors = (httpx.LocalProtocolError, httpx.UnsupportedProtocol, UnicodeEncodeError)

    def __init__(
        self,
        client: httpx.AsyncClient,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        watchdogs: Watchdogs,
    ) -> None:
        super().__init__(f"{method} {url}")
        # Only the connect timeout is httpx's: reads are bounded by the driver's watchdogs,
        # which know a keep-alive comment from content (httpx's read timeout does not).
        timeout = httpx.Timeout(connect=watchdogs.connect, read=None, write=None, pool=None)
        self.request = client.build_request(
            method, url, headers=dict(headers), content=body, timeout=timeout, extensions={"trace": self._trace}
        )
        self.client = client
        self.response: httpx.Response | None = None

    async def _trace(self, name: str, info: dict[str, Any]) -> None:
        # httpcore names these "<layer>.connect_tcp.started" and so on; the layer differs
        # behind a proxy, the step does not.
        if name.endswith("connect_tcp.started"):
            self.new_connection()
        elif name.endswith("send_request_headers.started") and self.reused is None:
            self.reused = True  # sending without having connected: a pooled connection
        elif name.endswith("connect_tcp.complete"):
            self.local = _stream_address(info.get("return_value"))
            self.connection_made()
        elif name.endswith(("start_tls.complete", "setup_socks5_connection.complete")):
            self.connection_made()  # through a SOCKS proxy: once it has connected to the target

    async def send(self) -> _Head:
        self.response = response = await self.client.send(self.request, stream=True)
        local = _stream_address(response.extensions.get("network_stream"))
        return _Head(response.status_code, list(response.headers.multi_items()), response.http_version, local)

    def chunks(self) -> AsyncIterator[bytes]:
        assert self.response is not None
        return self.response.aiter_bytes()

    async def close(self, clean: bool) -> None:
        # Closing a response that was not read to its end closes its connection (httpcore
        # never returns a half-read connection to the pool).
        try:
            if self.response is not None:
                await self.response.aclose()
        finally:
            # The trace hook is this stack's own method: left in the request, it would tie the
            # request to the stack, its machine and every event it logged in a reference cycle
            # (httpx's response and its stream make one too), all left to the cyclic garbage
            # collector: about 120 objects an exchange, whose collections paused the event loop
            # for milliseconds mid-replay. Nothing traces a request once its response is closed.
            self.request.extensions.pop("trace", None)
            if self.response is not None:
                self.response.stream = _CLOSED_STREAM

    def kind_of(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
            return ErrorKind.CONNECT_TIMEOUT
        if isinstance(exc, (httpx.ConnectError, httpx.ProxyError, httpx.UnsupportedProtocol)):
            return ErrorKind.CONNECT
        if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout)):
            return ErrorKind.READ_TIMEOUT
        if isinstance(exc, httpx.DecodingError):
            return ErrorKind.DECODE
        return ErrorKind.RESET


_CLOSED_STREAM = httpx.ByteStream(b"")


def _stream_address(stream: Any) -> str | None:
    """The client side of an httpcore network stream (to tell connections apart)."""
    try:
        return _address(stream.get_extra_info("client_addr")) if stream is not None else None
    except Exception:  # an exotic transport without the info: the observation just shows none
        return None


# ------------------------------------------------------------------------------------------------
# aiohttp


class _TraceConfig(aiohttp.TraceConfig):
    """Marks the trace config `observe_aiohttp` installs (so it can check it is there)."""


class _ConnTrace:
    """Per-request context the trace callbacks fill in (given as `trace_request_ctx`)."""

    def __init__(self, stack: "_AiohttpStack") -> None:
        self.stack: _AiohttpStack | None = stack  # None once the exchange is closed


def _trace_configs(session: aiohttp.ClientSession) -> list[aiohttp.TraceConfig]:
    return list(getattr(session, "trace_configs", None) or getattr(session, "_trace_configs", None) or [])


def _traced(ctx: Any) -> "_AiohttpStack | None":
    traced = getattr(ctx, "trace_request_ctx", None)
    return traced.stack if isinstance(traced, _ConnTrace) else None


async def _on_create_start(session: Any, ctx: Any, params: Any) -> None:
    if (stack := _traced(ctx)) is not None:
        stack.new_connection()


async def _on_create_end(session: Any, ctx: Any, params: Any) -> None:
    if (stack := _traced(ctx)) is not None:
        stack.connection_made()


async def _on_reuse(session: Any, ctx: Any, params: Any) -> None:
    if (stack := _traced(ctx)) is not None:
        stack.reused = True


def _response_address(response: aiohttp.ClientResponse) -> str | None:
    """The local address of the connection that carried `response`. A body that came with the
    headers may already have released the connection (`response.connection` is None then), so
    the protocol the response was read from is asked as well."""
    connection = response.connection
    protocol = connection.protocol if connection is not None else getattr(response, "_protocol", None)
    transport = getattr(protocol, "transport", None)
    try:
        return _address(transport.get_extra_info("sockname")) if transport is not None else None
    except Exception:  # as for httpx: no address, no connection number
        return None


class _AiohttpStack(_Stack):
    errors = (aiohttp.ClientError, OSError)
    local_errors = (aiohttp.InvalidURL, ValueError)  # aiohttp refuses header injection with a ValueError

    def __init__(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes,
        watchdogs: Watchdogs,
    ) -> None:
        super().__init__(f"{method} {url}")
        self.session = session
        self.args = (method, url)
        # As for httpx: only connecting is aiohttp's to time out; the rest is the watchdogs'.
        timeout = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=watchdogs.connect, sock_read=None)
        self.kwargs: dict[str, Any] = dict(
            headers=dict(headers), data=body, timeout=timeout, trace_request_ctx=_ConnTrace(self),
            allow_redirects=False, raise_for_status=False,
        )  # fmt: skip
        self.response: aiohttp.ClientResponse | None = None

    async def send(self) -> _Head:
        self.response = response = await self.session.request(*self.args, **self.kwargs)
        version = f"HTTP/{response.version.major}.{response.version.minor}" if response.version else None
        return _Head(response.status, list(response.headers.items()), version, _response_address(response))

    def chunks(self) -> AsyncIterator[bytes]:
        assert self.response is not None
        return self.response.content.iter_any()

    async def close(self, clean: bool) -> None:
        # As for httpx, the trace context would tie the stack (its machine, its events) into a
        # reference cycle left to the cyclic garbage collector; nothing traces a closed request.
        self.kwargs["trace_request_ctx"].stack = None
        if self.response is None:
            return
        if clean:
            self.response.release()  # back to the pool for reuse
        else:
            self.response.close()  # a half-read connection must not be reused

    def kind_of(self, exc: BaseException) -> ErrorKind:
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return ErrorKind.CONNECT_TIMEOUT
        if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ClientHttpProxyError, aiohttp.InvalidURL)):
            return ErrorKind.CONNECT
        if isinstance(exc, aiohttp.SocketTimeoutError):
            return ErrorKind.READ_TIMEOUT
        if isinstance(exc, aiohttp.ClientPayloadError) and isinstance(exc.__cause__, ContentEncodingError):
            return ErrorKind.DECODE
        return ErrorKind.RESET
