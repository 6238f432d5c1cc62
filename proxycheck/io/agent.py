"""The synthetic agent's client loop: sessions of streamed turns over httpx, each turn observed.

Each session behaves like an application built on the OpenAI or Anthropic SDK: ONE
`httpx.AsyncClient` for its whole life (connection pooling and keep-alive across turns, so a hop
that mishandles idle or reused connections shows up), the proxy given as the client's proxy, and a
read timeout as the wedge detector. Sessions run concurrently. What to send comes from
`proxycheck.core.conversation`; reading the stream is `StreamTracker`'s job; this module measures
and classifies each turn into the outcome taxonomy (DESIGN.md, "Outcomes"). Failures are data:
every httpx error ends up as a turn outcome, never as an exception out of `run_agent`.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import httpx

from proxycheck.core.analysis import ResponseAnalysis, StreamTracker
from proxycheck.core.conversation import ENDPOINTS, Conversation, ConversationConfig
from proxycheck.core.model import EventKind, Result
from proxycheck.core.outcomes import Outcome, classify_recorded
from proxycheck.core.wire import BYTES_HEADER, SHA_HEADER

ANTHROPIC_VERSION = "2023-06-01"
# Events that move a response forward. Comments, pings and other bookkeeping (META) do not:
# a hop that sends keep-alives while the engine behind it hangs is still a stall.
_PROGRESS = frozenset({EventKind.CONTENT, EventKind.TERMINAL, EventKind.ERROR})
_ERROR_BODY_LIMIT = 200  # characters of a non-2xx body quoted in the turn's detail


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """Everything `proxycheck agent` takes (validated by the command)."""

    base_url: str
    sessions: int = 1
    turns: int = 4
    dialect: str = "openai_chat"
    model: str = "proxycheck-agent"
    proxy: str | None = None
    think: float = 1.0
    read_timeout: float = 60.0
    connect_timeout: float = 10.0
    max_tokens: int = 256
    tool_result_bytes: int = 2000
    session_id_header: str | None = None
    on_fail: Literal["stop", "continue"] = "stop"
    seed: int = 0


@dataclass(frozen=True, slots=True)
class TurnReport:
    """One turn as the agent saw it; times in seconds from the turn's request start, except
    `start`, which is from the start of the run."""

    session: str
    turn: int
    start: float
    request_bytes: int
    messages: int
    outcome: Outcome
    detail: str = ""
    status: int | None = None
    connection: int | None = None  # 1 for the session's first TCP connection, 2 for the next...
    ttft: float | None = None
    duration: float | None = None
    events: int = 0
    content_events: int = 0
    comments: int = 0  # SSE comments (keep-alives)
    response_bytes: int = 0
    finish_reason: str | None = None
    tool_calls: tuple[str, ...] = ()
    completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SessionReport:
    id: str
    turns: tuple[TurnReport, ...]

    @property
    def ok(self) -> bool:
        return all(t.outcome is Outcome.OK for t in self.turns)


@dataclass(frozen=True, slots=True)
class AgentRun:
    options: AgentOptions
    url: str
    started: float  # wall-clock time (epoch seconds) the run started
    duration: float
    sessions: tuple[SessionReport, ...]

    @property
    def ok(self) -> bool:
        """Every requested turn of every session was made and came back ok."""
        return all(s.ok and len(s.turns) == self.options.turns for s in self.sessions)


def endpoint_url(base_url: str, dialect: str) -> str:
    """The dialect's endpoint under `base_url`, which may or may not end in /v1 (the OpenAI SDK's
    base URL does, the Anthropic SDK's does not)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/{ENDPOINTS[dialect]}", parts.query, ""))


def request_headers(options: AgentOptions, session: str) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if options.dialect == "anthropic_messages":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    if options.session_id_header:
        headers[options.session_id_header] = session
    return headers


async def run_agent(options: AgentOptions) -> AgentRun:
    """Run every session concurrently to its end; never raises for what the network did."""
    url = endpoint_url(options.base_url, options.dialect)
    started, t0 = time.time(), time.monotonic()
    ids = [f"s{i}" for i in range(1, options.sessions + 1)]
    reports = await asyncio.gather(*(run_session(options, url, sid, t0) for sid in ids))
    return AgentRun(options, url, started, time.monotonic() - t0, tuple(reports))


def new_client(options: AgentOptions) -> httpx.AsyncClient:
    """A client like the SDKs make: pooled keep-alive connections and a read timeout.

    `trust_env=False`: the only proxy is the one given, so a stray HTTP_PROXY in the environment
    cannot silently add a hop to the chain under test."""
    timeout = httpx.Timeout(
        connect=options.connect_timeout,
        read=options.read_timeout,
        write=options.read_timeout,
        pool=options.connect_timeout,
    )
    return httpx.AsyncClient(proxy=options.proxy, timeout=timeout, trust_env=False)


async def run_session(options: AgentOptions, url: str, session: str, t0: float) -> SessionReport:
    """One agent: turn after turn on one client until T turns are done or (on-fail stop) one fails."""
    config = ConversationConfig(
        options.dialect, session, options.model, options.max_tokens, options.tool_result_bytes, options.seed
    )
    conversation = Conversation(config)
    headers = request_headers(options, session)
    connections = _ConnectionIds()
    turns: list[TurnReport] = []
    async with new_client(options) as client:
        for turn in range(1, options.turns + 1):
            if turn > 1 and options.think > 0:
                await asyncio.sleep(options.think)
            observed = await exchange(client, url, headers, conversation.encode(), options, t0)
            report = observed.report(session, turn, conversation.message_count, connections)
            turns.append(report)
            result = observed.result
            text = result.text if result else ""
            if report.outcome is Outcome.OK:
                conversation.add_reply(text, result.tool_calls if result else ())
            elif options.on_fail == "stop":
                break  # what a wedged harness does: this conversation goes no further
            else:
                conversation.add_interrupted(text, report.outcome.value)
    return SessionReport(session, tuple(turns))


class _ConnectionIds:
    """Numbers the TCP connections of one session (by local address) in the order they appear."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}

    def __call__(self, local: str | None) -> int | None:
        if local is None:
            return None
        return self._ids.setdefault(local, len(self._ids) + 1)


@dataclass(slots=True)
class Observed:
    """What one exchange produced, before it becomes a `TurnReport`."""

    start: float  # from the run's start
    request_bytes: int
    outcome: Outcome
    detail: str
    status: int | None = None
    local: str | None = None
    duration: float | None = None
    analysis: ResponseAnalysis | None = None

    @property
    def result(self) -> Result | None:
        return self.analysis.result if self.analysis else None

    def report(self, session: str, turn: int, messages: int, connections: _ConnectionIds) -> TurnReport:
        a, r = self.analysis, self.result
        usage = r.usage if r else None
        return TurnReport(
            session=session,
            turn=turn,
            start=self.start,
            request_bytes=self.request_bytes,
            messages=messages,
            outcome=self.outcome,
            detail=self.detail,
            status=self.status,
            connection=connections(self.local),
            ttft=a.first_content if a else None,
            duration=self.duration,
            events=a.events if a else 0,
            content_events=a.content_events if a else 0,
            comments=a.comments if a else 0,
            response_bytes=a.bytes if a else 0,
            finish_reason=r.finish_reason if r else None,
            tool_calls=tuple(c.name or "?" for c in r.tool_calls) if r else (),
            completion_tokens=usage.completion_tokens if usage else None,
        )


async def exchange(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], body: bytes, options: AgentOptions, t0: float
) -> Observed:
    """POST one streamed request and read its response to the end, a failure, or a stall."""
    start = time.monotonic()
    observed = Observed(start - t0, len(body), Outcome.OK, "")
    request = client.build_request("POST", url, headers=headers, content=body)
    try:
        response = await client.send(request, stream=True)
    except httpx.HTTPError as exc:
        observed.outcome, observed.detail = _before_headers(exc, options)
        observed.duration = time.monotonic() - start
        return observed
    observed.status = response.status_code
    observed.local = _local_address(response)
    try:
        if response.is_success:
            await _read_stream(response, observed, options.dialect, options.read_timeout, start)
            if observed.outcome is Outcome.OK:
                _check_digest(response, body, observed)
        else:
            observed.outcome, observed.detail = Outcome.HTTP_ERROR, await _error_detail(response)
    finally:
        await response.aclose()
    observed.duration = time.monotonic() - start
    return observed


def _check_digest(response: httpx.Response, body: bytes, observed: Observed) -> None:
    """request_mutated when the engine reports having received other bytes than were sent (the
    reference engine does; other servers send no digest and are not judged)."""
    seen = response.headers.get(SHA_HEADER)
    if seen is not None and seen != hashlib.sha256(body).hexdigest():
        got = response.headers.get(BYTES_HEADER, "?")
        observed.outcome = Outcome.REQUEST_MUTATED
        observed.detail = f"the engine received {got} bytes with another digest; {len(body)} were sent"


def _before_headers(exc: httpx.HTTPError, options: AgentOptions) -> tuple[Outcome, str]:
    """The outcome of an exchange that failed before any response headers came."""
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError, httpx.UnsupportedProtocol)):
        return Outcome.CONNECT_ERROR, _describe(exc)
    if isinstance(exc, httpx.ReadTimeout):
        return Outcome.STALL_BEFORE_HEADERS, f"no response headers within {options.read_timeout:g} s"
    if isinstance(exc, httpx.WriteTimeout):
        return Outcome.STALL_BEFORE_HEADERS, f"the request body was not accepted within {options.read_timeout:g} s"
    if isinstance(exc, httpx.PoolTimeout):
        return Outcome.CONNECT_ERROR, f"no connection within {options.connect_timeout:g} s"
    return Outcome.RESET, f"closed before response headers: {_describe(exc)}"


async def _read_stream(
    response: httpx.Response, observed: Observed, dialect: str, stall: float, start: float
) -> None:
    """Feed the body to a tracker until it ends, fails, or makes no progress for `stall` s.

    httpx's read timeout only fires when no *bytes* come; the deadline here also fires when
    bytes come but no content does (keep-alive comments, pings), measured from the headers or
    the last content event."""
    tracker = StreamTracker(dialect)
    loop = asyncio.get_running_loop()
    last_progress = time.monotonic()
    try:
        async with asyncio.timeout(stall) as deadline:
            async for chunk in response.aiter_bytes():
                now = time.monotonic()
                if any(kind in _PROGRESS for kind, _ in tracker.feed(chunk, now - start)):
                    last_progress = now
                    deadline.reschedule(loop.time() + stall)
        tracker.close(time.monotonic() - start)
    except (TimeoutError, httpx.ReadTimeout):
        observed.analysis = tracker.analysis()
        observed.outcome, observed.detail = _stall(observed.analysis, time.monotonic() - last_progress)
        return
    except httpx.HTTPError as exc:
        observed.analysis = tracker.analysis()
        observed.outcome, observed.detail = _broken(exc, observed.analysis)
        return
    observed.analysis = tracker.analysis()
    observed.outcome, observed.detail = _ended(response, observed.analysis)


def _stall(a: ResponseAnalysis, quiet: float) -> tuple[Outcome, str]:
    received = f"{_kb(a.bytes)} received" + (f", {a.comments} comment(s)" if a.comments else "")
    if a.result is not None and a.result.terminal:
        return Outcome.STALL_MID_STREAM, f"the stream did not end {quiet:.1f} s after its terminal marker"
    if a.content_events:
        return Outcome.STALL_MID_STREAM, f"no content for {quiet:.1f} s after event {a.events} ({received})"
    what = f"{a.events} event(s), {received}"
    return Outcome.STALL_BEFORE_FIRST_EVENT, f"headers came, then no content for {quiet:.1f} s ({what})"


def _broken(exc: httpx.HTTPError, a: ResponseAnalysis) -> tuple[Outcome, str]:
    if isinstance(exc, httpx.DecodingError):
        return Outcome.MALFORMED_STREAM, f"undecodable body: {_describe(exc)}"
    progress = f"{a.events} event(s), {a.content_events} with content, {_kb(a.bytes)}"
    return Outcome.RESET, f"connection closed mid-stream after {progress}: {_describe(exc)}"


def _ended(response: httpx.Response, a: ResponseAnalysis) -> tuple[Outcome, str]:
    """The outcome of a stream that ended cleanly (the taxonomy shared with recordings)."""
    ctype = response.headers.get("content-type", "")
    if a.events == 0 and "event-stream" not in ctype:
        got = ctype or "no content-type"
        return Outcome.MALFORMED_STREAM, f"expected text/event-stream, got {got} ({_kb(a.bytes)})"
    classified = classify_recorded(
        finished=True, error=None, interrupted=False, status=response.status_code, analysis=a
    )
    return classified.outcome, classified.detail


async def _error_detail(response: httpx.Response) -> str:
    """`HTTP 413: <start of the body>`; the body is read under the client's timeouts."""
    try:
        text = (await response.aread()).decode("utf-8", "replace")
    except httpx.HTTPError:
        text = ""
    text = " ".join(text.split())[:_ERROR_BODY_LIMIT]
    return f"HTTP {response.status_code}: {text}" if text else f"HTTP {response.status_code}"


def _local_address(response: httpx.Response) -> str | None:
    """The client side of the TCP connection that carried the response (to tell reuse apart)."""
    stream = response.extensions.get("network_stream")
    try:
        addr = stream.get_extra_info("client_addr") if stream is not None else None
    except Exception:  # an exotic transport without the info: the turn just shows no connection
        return None
    return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _kb(n: int) -> str:
    return f"{n / 1000:.1f} KB" if n >= 1000 else f"{n} B"
