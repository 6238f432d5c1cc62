"""The replayer: carries out a replay plan over the network, route after route.

This module owns the live replay: for each route (`proxycheck.core.replay.chain.Route`) and each
repetition it runs every `PlannedSession` as its own asyncio task, with its own client (httpx by
default, aiohttp on request), so that one session's stall can never hold up another beyond its
own watchdog. Within a session the turns go in recorded order, each after its recorded think time
(scaled by the pace) measured from the end of the previous response, on the connection the plan
says: the session's current one, or a new client when the plan says `new_connection`.

Sessions start at their recorded offsets (open loop), or, with `concurrency`, closed loop: at
most C at once, the next starting when one ends. One route's sessions all finish before the
next route starts, and repetition after repetition.

Waking on time: every start and think time is kept by the loop's `_Alarms`, which a session
due to send jumps the loop's queue with, rung between the reads of every other session's
responses; a turn's request is built (and its new client made) while its think time runs, so
that waking up is sending; the cyclic garbage collector is kept out of the way
(`collector_out_of_the_way`). Measured by benchmarks/bench_replayer.py (b).

What is sent: the recorded method, path and query on the route's URL (`Route.url_for`: never a
recorded host), the recorded headers the plan kept, overridden by the route's headers of the
same name, plus `x-proxycheck-replay: RUN_ID`; the recorded body (exact mode) or the body with
the replayed replies in it (chained mode, `ChainedSession`); with `greedy`, greedy sampling
parameters are written into either (`proxycheck.core.replay.greedy`). Every exchange becomes one
`Observation` (keys filled in) handed to the caller's sink as it happens. Decisions that need no
network (the plan, pacing, watchdogs, chained bodies) are `proxycheck.core.replay.plan`'s;
observing one exchange is `proxycheck.io.observe`'s.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import heapq
import itertools
import math
import ssl
import threading
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterator, Literal, Protocol, Sequence

import httpx

from proxycheck.core.errors import BadInput, ClientFault
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.replay.chain import Chain, Route
from proxycheck.core.replay.credentials import raise_if_refused
from proxycheck.core.replay.greedy import greedy_sessions
from proxycheck.core.replay.marker import REPLAY_HEADER
from proxycheck.core.replay.plan import (
    ChainedSession,
    Pace,
    PlannedSession,
    PlannedTurn,
    Watchdogs,
    start_delay,
    think_delay,
)
from proxycheck.io.observe import ConnState, Observed, PreparedExchange, aiohttp_trace_config, prepare_aiohttp, prepare_httpx
from proxycheck.io.proxying import aiohttp_session, httpx_client
from proxycheck.io.ws_replay import run_socket

Mode = Literal["exact", "chained"]
ClientKind = Literal["httpx", "aiohttp"]
OnFail = Literal["continue", "stop-session"]
Status = Literal["completed", "limited"]


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to replay (validated by the command). `concurrency` None: open loop at the recorded
    start offsets; a number: closed loop with at most that many sessions at once."""

    watchdogs: Watchdogs = field(default_factory=Watchdogs)
    repeat: int = 1
    concurrency: int | None = None
    pace: Pace = "recorded"
    mode: Mode = "exact"
    client: ClientKind = "httpx"
    on_fail: OnFail = "continue"
    max_requests: int | None = None
    first_repetition: int = 1  # the number of the first repetition (a run replayed in steps)
    # --greedy: temperature 0 and a fixed seed written into every body, on every route alike
    # (`proxycheck.core.replay.greedy`), so a sampling engine's content can be compared per exchange.
    greedy: bool = False
    # The chain the routes come from: with it, a route refusing a request the recording shows
    # succeeding (401/403/407; see `proxycheck.core.replay.credentials`) stops the replay with
    # `MissingCredential` (bad input, exit 2) at that first exchange, instead of being taken for
    # a fault of the hop.
    chain: Chain | None = None


class ReplayListener(Protocol):
    """What a progress display (or a test) hears while a replay runs. Every method is called on
    the event loop's thread and must not block."""

    def route_started(self, route: Route, repetition: int, turns: int) -> None: ...

    def request(self, route: Route, turn: PlannedTurn, url: str, headers: dict[str, str], body: bytes) -> None: ...

    def observed(self, obs: Observation) -> None: ...

    def route_ended(self, route: Route, repetition: int) -> None: ...


class QuietListener:
    """A listener that hears nothing (the default)."""

    def route_started(self, route: Route, repetition: int, turns: int) -> None:
        pass

    def request(self, route: Route, turn: PlannedTurn, url: str, headers: dict[str, str], body: bytes) -> None:
        pass

    def observed(self, obs: Observation) -> None:
        pass

    def route_ended(self, route: Route, repetition: int) -> None:
        pass


def request_headers(turn: PlannedTurn, route: Route, run_id: str) -> dict[str, str]:
    """The headers to send: the recorded ones the plan kept, the route's replacing any of the
    same name (in any case), and the replay marker last, so nothing can override it."""
    override = {name.lower() for name, _ in route.headers} | {REPLAY_HEADER}
    headers = {name: value for name, value in turn.headers if name.lower() not in override}
    headers.update(route.headers)
    headers[REPLAY_HEADER] = run_id
    return headers


class _Budget:
    """The --max-requests budget, shared by every session of the replay."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit
        self.exhausted = False

    def take(self) -> bool:
        if self.left is None:
            return True
        if self.left <= 0:
            self.exhausted = True
            return False
        self.left -= 1
        return True


@dataclass
class _Context:
    """One route and repetition being replayed."""

    route: Route
    repetition: int
    run_id: str
    options: ReplayOptions
    sink: Callable[[Observation], None]
    listener: ReplayListener
    budget: _Budget
    origin: float  # monotonic start of the replay (observation times are offsets from it)
    tls: ssl.SSLContext | bool  # the route's TLS verification, made once (`tls_context`)
    alarms: _Alarms  # the loop's: every session's start and think times (`_Alarms`)
    answered: bool = False  # an exchange has succeeded on this route (for the credential rule)


async def replay(
    sessions: Sequence[PlannedSession],
    routes: Sequence[Route],
    options: ReplayOptions,
    run_id: str,
    sink: Callable[[Observation], None],
    listener: ReplayListener | None = None,
) -> Status:
    """Replay `sessions` over each route, `options.repeat` times, handing each observation to
    `sink` as it is made. "limited" when `max_requests` stopped it early. Cancellation (Ctrl-C)
    cancels every session at once; what was observed before has already reached `sink`."""
    heard = listener or QuietListener()
    if options.greedy:  # every body rewritten once, before any clock starts
        sessions = greedy_sessions(sessions)
    budget = _Budget(options.max_requests)
    tls = {route.name: tls_context(route.verify) for route in routes}  # bad CA files fail before any traffic
    turns = sum(len(s.turns) for s in sessions)
    alarms = _alarms()
    with collector_out_of_the_way():
        origin = time.monotonic()
        for route in routes:
            for repetition in range(options.first_repetition, options.first_repetition + options.repeat):
                if budget.exhausted:
                    return "limited"
                ctx = _Context(route, repetition, run_id, options, sink, heard, budget, origin, tls[route.name], alarms)
                heard.route_started(route, repetition, turns)
                await _replay_route(sessions, ctx)
                heard.route_ended(route, repetition)
    return "limited" if budget.exhausted else "completed"


_collector_lock = threading.Lock()
_collector_held = 0  # replays inside `collector_out_of_the_way` (several may run on one loop at once)


@contextmanager
def collector_out_of_the_way() -> Iterator[None]:
    """Keep the cyclic garbage collector from pausing the event loop mid-replay.

    A full collection walks every object alive: with a recording and a plan in memory that is
    tens of milliseconds during which no think time ends and no watchdog fires (measured: a
    66 ms pause in a 64-session replay, against a 5 ms think-time budget). What exists when the
    replay starts (the recording, the plan) is frozen out of the collector's sight for its
    duration (undone at the end). Young collections stay as they are: they are short, and more
    objects per collection would make each pause longer.

    Re-entrant: replays running at once (one per route, on one loop) share the freeze. The first
    to enter collects and freezes; one entering while another runs only freezes (what it brought
    along joins the frozen objects: collecting then would pause the running replay); the freeze is
    undone when the last one leaves, not when the first does."""
    global _collector_held
    with _collector_lock:
        if _collector_held == 0:
            gc.collect()
        gc.freeze()
        _collector_held += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_held -= 1
            if _collector_held == 0:
                gc.unfreeze()


async def _replay_route(sessions: Sequence[PlannedSession], ctx: _Context) -> None:
    if ctx.options.concurrency is None:
        await _open_loop(sessions, ctx)
    else:
        await _closed_loop(sessions, ctx, ctx.options.concurrency)


async def _open_loop(sessions: Sequence[PlannedSession], ctx: _Context) -> None:
    """Each session starts at its recorded offset (scaled by the pace) from the route's start."""
    start = time.monotonic()
    async with asyncio.TaskGroup() as group:
        for session in sessions:
            group.create_task(_run_session(session, ctx, start_at=start + start_delay(session, ctx.options.pace)))


async def _closed_loop(sessions: Sequence[PlannedSession], ctx: _Context, concurrency: int) -> None:
    """At most `concurrency` sessions at once, in recorded start order; each worker is its own
    task, so a stalled session holds up only its own worker."""
    queue = list(reversed(sessions))

    async def worker() -> None:
        while queue and not ctx.budget.exhausted:
            await _run_session(queue.pop(), ctx)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(sessions))):
            group.create_task(worker())


# --------------------------------------------------------------------------------------------
# Waking on time

# How early a deadline's timer is set: the selector waits in whole milliseconds rounded up, so a
# timer set for the deadline itself fires up to 1 ms after it; the rest is spun off in loop turns.
_EARLY = 0.001


class _Alarms:
    """The deadlines (session starts, think times) of every replay on one event loop, and the
    wake-up that keeps them.

    A session that sleeps with `asyncio.sleep` is woken two loop turns late: its timer runs
    after every callback already queued in the turn in progress, and its task in the turn after
    that, behind every other session's read handled meanwhile. With 64 sessions streaming over
    httpx, turns last milliseconds and a wake-up was late by two of them (measured on a shared
    2-core machine: 5 ms at p50 for each, 20 ms and more at p99). Here a due session's wake-up
    goes to the front of the loop's queue, and not only the timer wakes it: every observed
    exchange rings the alarms after each step that handled what the network sent (`ring`: one
    clock read when nothing is due), as does every session going to sleep, so a due session
    sends after at most the one step being run, not after a turn of them. The timer still fires
    (for a loop that is not reading), `_EARLY` before the deadline, and the last fraction is spun
    off in loop turns (never blocking them), so an idle loop is not up to a millisecond late."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, asyncio.Future[None]]] = []  # a heap, by deadline
        self._order = itertools.count()  # ties wake in the order they slept
        self._next = math.inf  # the earliest deadline (monotonic clock): what `ring` compares
        self._spinning = False

    async def sleep_until(self, when: float) -> None:
        """Return at `when` (time.monotonic()), or at once if it has passed."""
        self.ring()  # the session going to sleep may have done a read's worth of work since its last
        if when <= time.monotonic():
            return
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        heapq.heappush(self._due, (when, next(self._order), woken))
        self._next = self._due[0][0]
        # The loop's clock may have another origin than time.monotonic().
        timer = loop.call_at(when + loop.time() - time.monotonic() - _EARLY, self._timer)
        try:
            await woken
        finally:
            timer.cancel()
            if not woken.done() or woken.cancelled():  # cancelled (Ctrl-C): the deadline goes too
                self._due = [entry for entry in self._due if entry[2] is not woken]
                heapq.heapify(self._due)
                self._next = self._due[0][0] if self._due else math.inf

    def ring(self) -> None:
        """Wake every session whose deadline has passed (cheap when none has: the hot path)."""
        if time.monotonic() >= self._next:
            self._wake()

    def _wake(self) -> None:
        now = time.monotonic()
        loop = asyncio.get_running_loop()
        # The loop's queue of callbacks to run: a woken task's step is put at its front. Not a
        # public interface: without it (another loop), wake-ups only lose their priority.
        ready = getattr(loop, "_ready", None)
        queue = ready if isinstance(ready, collections.deque) else None
        steps = []
        while self._due and self._due[0][0] <= now:
            woken = heapq.heappop(self._due)[2]
            if woken.done():
                continue
            queued = len(queue) if queue is not None else 0
            woken.set_result(None)  # queues the sleeping task's next step, last
            if queue is not None and len(queue) == queued + 1:
                steps.append(queue.pop())
        self._next = self._due[0][0] if self._due else math.inf
        if queue is not None:
            queue.extendleft(reversed(steps))  # first, in deadline order

    def _timer(self) -> None:
        self._wake()
        if not self._spinning and self._next - time.monotonic() < _EARLY:
            self._spinning = True
            asyncio.get_running_loop().call_soon(self._spin)

    def _spin(self) -> None:
        self._wake()
        if self._next - time.monotonic() < _EARLY:
            asyncio.get_running_loop().call_soon(self._spin)
        else:
            self._spinning = False


_alarms_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Alarms] = weakref.WeakKeyDictionary()


def _alarms() -> _Alarms:
    """The running loop's alarms, shared by every replay on it (routes replayed at once ring
    each other's)."""
    loop = asyncio.get_running_loop()
    alarms = _alarms_by_loop.get(loop)
    if alarms is None:
        alarms = _alarms_by_loop[loop] = _Alarms()
    return alarms


# --------------------------------------------------------------------------------------------
# One session


async def _run_session(session: PlannedSession, ctx: _Context, start_at: float | None = None) -> None:
    """The turns of one session, in order, on the connections the plan says, the first at
    `start_at` (monotonic; None: at once). What a turn needs that is not the network (the new
    client when the plan opens a new connection, the request built) is made before its wait
    ends, so that waking up is sending; the connection it replaces is still closed only then."""
    if session.transport == "websocket":  # a transport of its own (`proxycheck.io.ws_replay`)
        await run_socket(session, ctx, start_at, lambda turn: request_headers(turn, ctx.route, ctx.run_id),
                         lambda obs, turn, result: _keep(obs, turn, ctx))  # fmt: skip
        return
    chained = ChainedSession(session) if ctx.options.mode == "chained" else None
    conn_state = ConnState()
    client: _Client | None = None  # the client the previous turn went on
    ready: _Client | None = None  # the one the next turn goes on (a new one, until it is used)
    prev_end: float | None = None
    try:
        for turn in session.turns:
            ready = _new_client(ctx.options.client, ctx.route, turn, ctx.tls) if client is None or turn.new_connection else client
            url = ctx.route.url_for(turn.url)
            headers = request_headers(turn, ctx.route, ctx.run_id)
            body = chained.body_for(turn) if chained is not None else turn.body
            prepared: PreparedExchange | ClientFault
            try:
                prepared = ready.prepare(turn, url, headers, body, ctx, conn_state)
            except ClientFault as exc:  # raised when the turn would have been sent, as before
                prepared = exc
            wake_at = start_at if prev_end is None else prev_end + think_delay(turn, ctx.options.pace)
            if wake_at is not None:
                await ctx.alarms.sleep_until(wake_at)
            if not ctx.budget.take():
                return
            if ready is not client:
                if client is not None:
                    await client.close()
                client = ready
            ctx.listener.request(ctx.route, turn, url, headers, body)
            if isinstance(prepared, ClientFault):
                raise prepared
            observed = await _observed(prepared, turn, ctx)
            obs = observed.observation
            # Think time counts from the end of the response, as the recorder measured it.
            prev_end = ctx.origin + obs.t_start + (obs.end or 0.0)
            if chained is not None:
                # A failed turn's reply is not chained in, but its live response id still is.
                chained.record_reply(turn, observed.result, failed=obs.outcome.is_failure)
            if obs.outcome.is_failure and ctx.options.on_fail == "stop-session":
                return
    finally:
        for unclosed in (client, ready if ready is not client else None):
            if unclosed is not None:
                await asyncio.shield(unclosed.close())


async def _observed(prepared: PreparedExchange, turn: PlannedTurn, ctx: _Context) -> Observed:
    """Send the prepared turn; its observation, keyed, to the sink and the listener."""
    observed = await prepared.observe()
    return Observed(_keep(observed.observation, turn, ctx), observed.result)


def _keep(observation: Observation, turn: PlannedTurn, ctx: _Context) -> Observation:
    """One turn's observation, keyed, to the sink and the listener (any transport); a refused
    credential stops the replay (`raise_if_refused`)."""
    obs = observation.with_keys(
        route=ctx.route.name, repetition=ctx.repetition, session=turn.session, turn=turn.turn, xid=turn.xid
    )
    ctx.sink(obs)
    ctx.listener.observed(obs)
    if ctx.options.chain is not None:
        raise_if_refused(obs, turn, ctx.route, ctx.options.chain, first=not ctx.answered)
    ctx.answered = ctx.answered or obs.outcome.answered
    return obs


# --------------------------------------------------------------------------------------------
# Client stacks: one client per session connection


@dataclass
class _Client:
    """A session's client: one connection pool (httpx client or aiohttp session) and the
    observer for its stack. The plan's `new_connection` replaces it with a new one."""

    handle: Any
    prepare_with: Callable[..., PreparedExchange]
    close_with: Callable[[], Awaitable[Any]]

    def prepare(
        self, turn: PlannedTurn, url: str, headers: dict[str, str], body: bytes, ctx: _Context, conn_state: ConnState
    ) -> PreparedExchange:
        return self.prepare_with(
            self.handle, turn.method, url, headers, body, dialect=turn.dialect, streamed=turn.streamed,
            watchdogs=ctx.options.watchdogs, clock_origin=ctx.origin, conn_state=conn_state, after_each_read=ctx.alarms.ring,
        )  # fmt: skip

    async def close(self) -> None:
        await self.close_with()


_KEEP_ALIVE = 24 * 3600.0  # aiohttp's keep-alive (15 s by default): as long as the session, as for httpx


def _new_client(kind: ClientKind, route: Route, turn: PlannedTurn, tls: ssl.SSLContext | bool) -> _Client:
    if kind == "httpx":
        # Only the chain file's proxy, never a stray HTTP_PROXY, may add a hop (`httpx_client`).
        # HTTP/2 when the turn was recorded over it (negotiated by ALPN on https).
        client = httpx_client(
            route,
            verify=tls,
            http2=(turn.http_version or "").upper().startswith("HTTP/2"),
            # The plan says when a turn reuses the session's connection, whatever its idle time:
            # httpx's own 5 s expiry would quietly open a new one after a longer think time, and
            # hide a hop that drops idle connections. The client ends with its session.
            limits=httpx.Limits(keepalive_expiry=None),
        )
        return _Client(client, prepare_httpx, client.aclose)
    # A connector of its own per session connection: a new connection is a new connector.
    session = aiohttp_session(route, tls=tls, limit=0, keepalive=_KEEP_ALIVE,
                              trace_configs=[aiohttp_trace_config()], auto_decompress=True)  # fmt: skip
    return _Client(session, prepare_aiohttp, session.close)


def tls_context(verify: bool | str) -> ssl.SSLContext | bool:
    """A chain file's `verify` (True, False, or the path of a CA bundle) as one SSL context for
    every client of a route. Made once because making one loads a CA bundle (about 20 ms of CPU
    with httpx's): per client, a replay opening connections mid-run would stall its event loop
    and every other session's timing with it. True is httpx's own default context (certifi's
    CAs), so both stacks verify as the SDKs do."""
    if verify is False:
        return False
    if isinstance(verify, str):
        try:
            return ssl.create_default_context(cafile=verify)
        except (OSError, ssl.SSLError) as exc:
            raise BadInput(verify, f"cannot load it as a CA file for verify: {exc.strerror or exc}") from None
    return httpx.create_ssl_context(trust_env=False)
