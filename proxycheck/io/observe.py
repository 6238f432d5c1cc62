"""Observe one exchange over the network, with watchdogs, into an `Observation`.

This module owns the client side of one request: sending it, reading the response as it streams,
timing every event, cutting it when a watchdog fires, and classifying what happened into the
outcome taxonomy (docs/design.md, "Outcomes"). Failures are data: nothing the network does (refusal,
silence, reset, an error status, garbage) escapes as an exception; it becomes the outcome.

Two client stacks, one behaviour: `observe_httpx` (the SDKs' stack, used by the replayer and the
synthetic agent) and `observe_aiohttp` (for high-concurrency benchmarks). Each is a thin adapter
(`_HttpxStack`, `_AiohttpStack`: send, chunks, close, what an exception means, what the
connection was) under one driver (`_observe`) that owns the watchdogs and the classification, so
the two stacks cannot drift apart.

Watchdogs (`proxycheck.core.replay.plan.Watchdogs`, re-exported here; seconds): `connect` bounds making a TCP (and TLS) connection; `headers`
bounds the wait for response headers from the moment the request is sent; `stall` bounds the time
without *content* progress after the headers (keep-alive comments and pings are bytes, not
progress: a hop that pings while the engine behind it hangs is still stalled); `total` bounds the
whole exchange and, when it fires, counts as a stall of the phase it cut.

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
import hashlib
import math
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping

import aiohttp
import httpx
from aiohttp.http_exceptions import ContentEncodingError

from proxycheck.core.errors import ClientFault
from proxycheck.core.exchange.observation import Observation, ResultSummary, select_headers
from proxycheck.core.exchange.outcomes import Outcome, after_answer, classify_recorded
from proxycheck.core.protocol.analysis import ResponseAnalysis, StreamTracker, analyze_body
from proxycheck.core.protocol.httpsyntax import header_problem
from proxycheck.core.protocol.requestparts import judge as judge_request
from proxycheck.core.protocol.result import Result
from proxycheck.core.replay.plan import Watchdogs  # one definition: the replay plan's
from proxycheck.core.testbed.wire import BYTES_HEADER, CANONICAL_HEADER, PARTS_HEADER, SHA_HEADER

__all__ = ["ConnState", "Observed", "Watchdogs", "aiohttp_trace_config", "observe_aiohttp", "observe_httpx"]

_ERROR_BODY_READ = 4096  # bytes of a non-2xx body read (to quote its start in the detail)
_ERROR_BODY_QUOTE = 200  # characters of it quoted
DEFAULT_WATCHDOGS = Watchdogs()


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
) -> Observed:
    """Send one request on `client` and observe it. `clock_origin` is the run's start on the
    monotonic clock (None: the request's own start); `conn_state` is the session's. A request
    the client cannot send raises `ClientFault` (see `_sendable`)."""
    _sendable(method, url, headers)
    try:
        stack = _HttpxStack(client, method, url, headers, body, watchdogs)
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, ValueError) as exc:
        raise _client_fault(f"{method} {url}", exc) from None
    return await _observe(stack, body, dialect, streamed, watchdogs, clock_origin, conn_state or ConnState())


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
) -> Observed:
    """As `observe_httpx`, on an aiohttp session created with `aiohttp_trace_config()` among its
    `trace_configs` (ValueError otherwise: without it connection reuse cannot be seen)."""
    if not any(isinstance(tc, _TraceConfig) for tc in _trace_configs(session)):
        raise ValueError("the aiohttp session needs trace_configs=[aiohttp_trace_config()] to observe connections")
    _sendable(method, url, headers)
    stack = _AiohttpStack(session, method, url, headers, body, watchdogs)
    return await _observe(stack, body, dialect, streamed, watchdogs, clock_origin, conn_state or ConnState())


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
# The driver: watchdogs and classification, whatever the stack


@dataclass(slots=True)
class _Head:
    status: int
    headers: list[tuple[str, str]]
    http_version: str | None
    local: str | None  # local address of the connection that carried the response


class _Stack(abc.ABC):
    """What the driver needs from a client stack. The stack's connection hooks set `reused`
    (False when the request opened a new connection, True when it went on a pooled one),
    `connect_started` / `connected` (monotonic) for a new connection, and `local`, its address."""

    errors: tuple[type[BaseException], ...] = ()
    #: What the stack raises when it refuses to send a request as built (before the network).
    local_errors: tuple[type[BaseException], ...] = ()

    def __init__(self, target: str) -> None:
        self.target = target  # "METHOD URL", to name the request in a ClientFault
        self.reused: bool | None = None
        self.connect_started: float | None = None
        self.connected: float | None = None
        self.local: str | None = None

    def new_connection(self) -> None:
        self.reused, self.connect_started = False, time.monotonic()

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
    def kind_of(self, exc: BaseException) -> str:
        """"connect", "connect_timeout", "read_timeout", "decode" or "reset"."""


class _Exchange:
    """The state of one exchange while it is observed (times on the monotonic clock)."""

    def __init__(self, body: bytes, dialect: str | None, streamed: bool, watchdogs: Watchdogs) -> None:
        self.body = body
        self.dialect = dialect
        self.streamed = streamed
        self.watchdogs = watchdogs
        self.start = time.monotonic()
        self.head: _Head | None = None
        self.headers_at: float | None = None
        self.tracker = StreamTracker(dialect, log=True)
        self.parts: list[bytes] = []  # the body, when it is read whole (non-streamed, or an error)
        self.last_progress = self.start
        self.ended_cleanly = False
        self.end: float | None = None
        self._analysis: ResponseAnalysis | None = None

    def offset(self, t: float | None = None) -> float:
        return (time.monotonic() if t is None else t) - self.start

    def feed(self, chunk: bytes) -> bool:
        """Feed a streamed chunk; True if it completed an event that is progress."""
        now = time.monotonic()
        if self.tracker.feed(chunk, _r(now - self.start)):
            self.last_progress = now
            return True
        return False

    def close_stream(self) -> None:
        now = time.monotonic()
        if self.tracker.close(_r(now - self.start)):
            self.last_progress = now

    @property
    def ok_status(self) -> bool:
        return self.head is not None and 200 <= self.head.status < 300

    def quiet(self) -> float:
        """Seconds without progress when the exchange ended."""
        return (self.end or time.monotonic()) - self.last_progress

    def analysis(self) -> ResponseAnalysis:
        """What the response held; computed once, after the exchange ended."""
        if self._analysis is None:
            if self.streamed:
                self._analysis = self.tracker.analysis()
            else:
                # A non-streamed body's content all arrives at once, when the body is complete.
                t = _r(self.offset(self.end)) if self.ended_cleanly and self.end is not None else None
                self._analysis = analyze_body(self.dialect, b"".join(self.parts), t)
        return self._analysis


class _Deadline:
    """One asyncio deadline that is the earlier of a phase watchdog and the total watchdog, and
    knows which of the two it is when it fires."""

    def __init__(self, total: float | None) -> None:
        self.loop = asyncio.get_running_loop()
        self.total_at = self.loop.time() + total if total is not None else math.inf
        self.by_total = False
        self.timeout: asyncio.Timeout | None = None

    def arm(self, seconds: float) -> float:
        """Fire `seconds` from now (or at the total deadline, if sooner); returns when."""
        when = self.loop.time() + seconds
        self.by_total = self.total_at < when
        when = min(when, self.total_at)
        if self.timeout is not None:
            self.timeout.reschedule(when)
        return when

    @property
    def expired(self) -> bool:
        return self.timeout is not None and self.timeout.expired()


async def _observe(
    stack: _Stack,
    body: bytes,
    dialect: str | None,
    streamed: bool,
    watchdogs: Watchdogs,
    clock_origin: float | None,
    conn_state: ConnState,
) -> Observed:
    x = _Exchange(body, dialect, streamed, watchdogs)
    deadline = _Deadline(watchdogs.total)
    failure: BaseException | None = None
    local: BaseException | None = None
    try:
        async with asyncio.timeout_at(deadline.arm(watchdogs.headers)) as deadline.timeout:
            await _run(stack, x, deadline)
    except TimeoutError as exc:
        failure = exc  # a watchdog, or one of aiohttp's own timeouts (TimeoutErrors too)
    except stack.local_errors as exc:
        if x.head is not None:
            failure = exc  # refused mid-response: the response is what is judged
        else:
            local = exc
    except stack.errors as exc:
        failure = exc
    finally:
        x.end = time.monotonic()
        with suppress(*stack.errors, TimeoutError):
            await stack.close(x.ended_cleanly)
    if local is not None:
        raise _client_fault(stack.target, local) from None
    if failure is None:
        verdict = _ended(x)
    elif deadline.expired:
        verdict = _watchdog(stack, x, deadline)
    else:
        verdict = _failure(stack, x, failure)
    return _finish(stack, x, _mutated(x, verdict), clock_origin, conn_state)


async def _run(stack: _Stack, x: _Exchange, deadline: _Deadline) -> None:
    """Send, then read the response as the status and `streamed` say."""
    x.head = await stack.send()
    x.headers_at = x.last_progress = time.monotonic()
    deadline.arm(x.watchdogs.stall)
    if not x.ok_status:
        await _read_error_body(stack, x)
    elif x.streamed:
        async for chunk in stack.chunks():
            if x.feed(chunk):
                deadline.arm(x.watchdogs.stall)
        x.close_stream()
        x.ended_cleanly = True
    else:
        # No content can arrive before the whole body, so the stall watchdog bounds all of it.
        async for chunk in stack.chunks():
            x.parts.append(chunk)
        x.ended_cleanly = True


async def _read_error_body(stack: _Stack, x: _Exchange) -> None:
    """The start of a non-2xx body, to quote. The status is the outcome, so a body that breaks
    only shortens the quote (the stall watchdog still bounds the wait)."""
    size = 0
    try:
        async for chunk in stack.chunks():
            x.parts.append(chunk)
            size += len(chunk)
            if size >= _ERROR_BODY_READ:
                return  # not read to its end: the connection will not be reused
    except stack.errors:
        return
    x.ended_cleanly = True


Verdict = tuple[Outcome, str, str]  # outcome, detail, error


def _watchdog(stack: _Stack, x: _Exchange, deadline: _Deadline) -> Verdict:
    """The outcome when a watchdog cut the exchange."""
    wd = x.watchdogs
    total = f"the total timeout of {wd.total:g} s" if deadline.by_total else ""
    if x.head is None:
        # The headers watchdog counts from the send, so it can fire while still connecting.
        if stack.connect_started is not None and stack.connected is None:
            return Outcome.CONNECT_ERROR, f"no connection within {total or f'{wd.headers:g} s'}", ""
        return Outcome.STALL_BEFORE_HEADERS, f"no response headers within {total or f'{wd.headers:g} s'}", ""
    if not x.ok_status:
        return Outcome.HTTP_ERROR, _http_detail(x), ""
    # A stall watchdog fired exactly `stall` after the last progress; the total one, whenever.
    quiet = f"{x.quiet():.1f}" if deadline.by_total else _secs(wd.stall)
    outcome, detail = _stall(x, quiet)
    return outcome, f"{detail}; {total} ended it" if total else detail, ""


def _stall(x: _Exchange, quiet: str) -> tuple[Outcome, str]:
    """A stream the client gave up waiting on: held open after its answer, or stalled."""
    a = x.analysis()
    held = after_answer(a, ended_at=x.offset(x.end), client_left=False, timed_out=True)
    if held is not None:
        return held.outcome, held.detail
    received = f"{_kb(a.bytes)} received" + (f", {a.comments} comment(s)" if a.comments else "")
    if a.content_events:
        return Outcome.STALL_MID_STREAM, f"no content for {quiet} s after event {a.events} ({received})"
    what = f"{a.events} event(s), {received}"
    return Outcome.STALL_BEFORE_FIRST_EVENT, f"headers came, then no content for {quiet} s ({what})"


def _failure(stack: _Stack, x: _Exchange, exc: BaseException) -> Verdict:
    """The outcome when the client stack raised."""
    kind, text, wd = stack.kind_of(exc), _describe(exc), x.watchdogs
    if x.head is None:
        if kind == "connect":
            return Outcome.CONNECT_ERROR, text, text
        if kind == "connect_timeout":
            return Outcome.CONNECT_ERROR, f"no connection within {wd.connect:g} s", text
        if kind == "read_timeout":
            return Outcome.STALL_BEFORE_HEADERS, f"no response headers ({text})", text
        return Outcome.RESET, f"closed before response headers: {text}", text
    if not x.ok_status:
        return Outcome.HTTP_ERROR, _http_detail(x), text
    a = x.analysis()
    if kind == "read_timeout":
        outcome, detail = _stall(x, f"{x.quiet():.1f}")
        return outcome, detail, text
    if kind == "decode":
        return Outcome.MALFORMED_STREAM, f"undecodable body: {text}", text
    # Cut after the answer had come: judged by what was received (the terminal marker = ok).
    answered = after_answer(a, ended_at=x.offset(x.end), client_left=False, timed_out=False)
    if answered is not None:
        return answered.outcome, answered.detail, text
    progress = f"{a.events} event(s), {a.content_events} with content, {_kb(a.bytes)}"
    return Outcome.RESET, f"connection closed mid-stream after {progress}: {text}", text


def _ended(x: _Exchange) -> Verdict:
    """The outcome of a response read to its end (the taxonomy shared with recordings)."""
    assert x.head is not None
    if not x.ok_status:
        return Outcome.HTTP_ERROR, _http_detail(x), ""
    a = x.analysis()
    ctype = _header(x.head, "content-type") or ""
    if x.streamed and a.events == 0 and "event-stream" not in ctype:
        return Outcome.MALFORMED_STREAM, f"expected text/event-stream, got {ctype or 'no content-type'} ({_kb(a.bytes)})", ""
    classified = classify_recorded(finished=True, error=None, interrupted=False, status=x.head.status, analysis=a)
    return classified.outcome, classified.detail, ""


def _mutated(x: _Exchange, verdict: Verdict) -> Verdict:
    """request_mutated when the engine reports having received another request than was sent:
    one in which what the model sees differs (messages, system prompt, tools, sampling
    parameters, max tokens: `proxycheck.core.protocol.requestparts.judge`), with what changed in the
    detail. Other bytes of the same content (a gateway that re-serializes JSON, or adds
    `stream_options`) are no change; a changed model name alone (gateways map aliases) is a note
    added to the detail, not a failure. The reference engine reports what it received; other
    servers send no digest and are not judged; from an older reference engine, which sends only
    the raw digest, any other bytes count. request_mutated replaces what else happened after the
    headers, which is kept in the detail: the engine answered another request than the one
    sent, and that explains the rest."""
    seen = _engine_header(x.head, SHA_HEADER)
    if seen is None:
        return verdict
    judged = judge_request(
        x.body, raw_sha256=seen, raw_bytes=_engine_header(x.head, BYTES_HEADER),
        canonical=_engine_header(x.head, CANONICAL_HEADER), parts=_engine_header(x.head, PARTS_HEADER),
    )  # fmt: skip
    outcome, other, error = verdict
    if not judged.mutated:
        if judged.note:
            other = f"{other}; {judged.note}" if other else judged.note
        return outcome, other, error
    detail = judged.detail
    if outcome is not Outcome.OK:
        detail += f" (then {outcome.value}: {other})" if other else f" (then {outcome.value})"
    return Outcome.REQUEST_MUTATED, detail, error


# Gateways that pass the upstream's response headers on under a prefix of their own (LiteLLM:
# `llm_provider-<name>`): the engine's report of what it received reaches the client that way.
_UPSTREAM_PREFIXES = ("llm_provider-",)


def _engine_header(head: _Head | None, name: str) -> str | None:
    """One of the engine's headers, as sent or as a gateway passed it on."""
    value = _header(head, name)
    for prefix in _UPSTREAM_PREFIXES:
        if value is not None:
            break
        value = _header(head, prefix + name)
    return value


def _finish(stack: _Stack, x: _Exchange, verdict: Verdict, origin: float | None, conn: ConnState) -> Observed:
    """The Observation, and the session's connection bookkeeping."""
    outcome, detail, error = verdict
    a = x.analysis() if x.ok_status else None
    local = x.head.local if x.head is not None and x.head.local else stack.local
    if local is None and stack.reused:
        local = conn.sole_idle()  # no answer told which pooled connection: the only one there was
    end = x.end if x.end is not None else time.monotonic()
    idle = conn.idle(local, x.start) if local and stack.reused else None
    obs = Observation(
        t_start=_r(x.start - (x.start if origin is None else origin)),
        connect=_offset(x, stack.connected),
        headers=_offset(x, x.headers_at),
        first_event=_opt_r(a.first_event) if a else None,
        first_content=_opt_r(a.first_content) if a else None,
        end=_offset(x, end),
        events=tuple(x.tracker.log or ()),
        streamed=x.streamed,
        status=x.head.status if x.head else None,
        response_headers=select_headers(x.head.headers) if x.head else (),
        request_bytes=len(x.body),
        request_sha256=hashlib.sha256(x.body).hexdigest(),
        response_bytes=a.bytes if a else sum(len(p) for p in x.parts),
        result=ResultSummary.of(a.result) if a and a.result else None,
        reused=stack.reused,
        idle=_opt_r(idle),
        http_version=x.head.http_version if x.head else None,
        connection=conn.number(local) if local else None,
        outcome=outcome,
        detail=detail,
        error=error,
    )
    if local:
        if x.ended_cleanly:
            conn.released(local, end)
        else:
            conn.dropped(local)
    return Observed(obs, a.result if a else None)


def _http_detail(x: _Exchange) -> str:
    """`HTTP 413: <start of the body>`."""
    assert x.head is not None
    text = b"".join(x.parts)[:_ERROR_BODY_READ].decode("utf-8", "replace")
    text = " ".join(text.split())[:_ERROR_BODY_QUOTE]
    return f"HTTP {x.head.status}: {text}" if text else f"HTTP {x.head.status}"


def _header(head: _Head | None, name: str) -> str | None:
    if head is None:
        return None
    return next((v for k, v in head.headers if k.lower() == name), None)


def _offset(x: _Exchange, t: float | None) -> float | None:
    return None if t is None else _r(t - x.start)


def _r(t: float) -> float:
    """Times are kept to the microsecond (what a run file stores)."""
    return round(t, 6)


def _opt_r(t: float | None) -> float | None:
    return None if t is None else _r(t)


def _secs(s: float) -> str:
    return f"{s:.1f}" if round(s, 1) == s else f"{s:g}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _kb(n: int) -> str:
    return f"{n / 1000:.1f} KB" if n >= 1000 else f"{n} B"


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
            self.connected = time.monotonic()
            self.local = _stream_address(info.get("return_value"))
        elif name.endswith("start_tls.complete"):
            self.connected = time.monotonic()

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
        if self.response is not None:
            await self.response.aclose()

    def kind_of(self, exc: BaseException) -> str:
        if isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout)):
            return "connect_timeout"
        if isinstance(exc, (httpx.ConnectError, httpx.ProxyError, httpx.UnsupportedProtocol)):
            return "connect"
        if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout)):
            return "read_timeout"
        if isinstance(exc, httpx.DecodingError):
            return "decode"
        return "reset"


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
        self.stack = stack


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
        stack.connected = time.monotonic()


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
        if self.response is None:
            return
        if clean:
            self.response.release()  # back to the pool for reuse
        else:
            self.response.close()  # a half-read connection must not be reused

    def kind_of(self, exc: BaseException) -> str:
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return "connect_timeout"
        if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ClientHttpProxyError, aiohttp.InvalidURL)):
            return "connect"
        if isinstance(exc, aiohttp.SocketTimeoutError):
            return "read_timeout"
        if isinstance(exc, aiohttp.ClientPayloadError) and isinstance(exc.__cause__, ContentEncodingError):
            return "decode"
        return "reset"
