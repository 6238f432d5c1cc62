"""`proxycheck bench`'s load generator: a recording's requests at a fixed load, on aiohttp.

A benchmark measures the server under the traffic the harness really sends, not under synthetic
prompts: the load is the recording's, in recorded order and cycled, in units of two kinds
(`load_units`):

* an HTTP turn is one unit: one request, sent as recorded (exact bodies, which carry their
  history), independent of the others;
* a WebSocket session (the Responses API's WebSocket mode: Codex's default) is one unit: a
  socket replayed as recorded by the replayer's own socket transport (`proxycheck.io.ws_replay`):
  its turns in order on one socket, each `previous_response_id` mapped to the live response it
  continues. A socket's turns are not independent requests (each continues the server's memory
  of the socket), so the socket is what is cycled. As HTTP turns are sent without their think
  time, a socket's next turn is sent when the one before ended. The upgrade alone (a recorded
  socket with no turn) and the socket's idle end are no requests: left out. A turn that fails
  ends its socket: the turns after it continue that socket's memory and are not sent (nor
  counted); the load goes on with the next unit.

A recording with both kinds cycles both, each unit in its recorded place. The load is either

* closed loop: `concurrency` workers, each starting its next unit as soon as its previous one
  ended, HTTP on its own keep-alive connection (the way an agent fleet of that size loads a
  server), a socket on its own socket;
* open loop: unit arrivals (requests or sockets) at `rate` per second with gamma-distributed gaps
  of shape `burstiness` (1: Poisson; below 1 burstier), as `vllm bench serve` draws them, seeded;
  with `concurrency` too, at most that many units in flight (later arrivals wait, as with its
  --max-concurrency).

Every request, and every turn of a socket, is observed like a replayed exchange (the same
exchange machine and watchdogs): a stalled one fails at its timeout, is counted by its outcome,
and the run goes on. This is the difference from benchmark clients that have no stall timeout
and count a cut stream as a success. The statistics are over requests, a socket's turns each one:
`proxycheck.core.bench.perf`'s. The measurement window starts after `warmup` seconds and ends
`duration` seconds later (no request or turn is sent after it, and those in flight finish), or,
with `requests`, when that many measured requests (turns) have been sent and have ended.

Past one process: a shard (`shard_share`) runs its part of the load — its share of the
concurrency, rate and requests, its own arrival seed, and its own starting point in the request
cycle, so shards do not send the same request at the same moment — from a common wall-clock
start (`start_at`); sockets shard as requests do (the cycle is of units). `proxycheck merge` (or
`bench --workers N`, which runs N shards on this machine) puts the shards' runs back together.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Sequence

import aiohttp

from proxycheck.core.bench.perf import Window
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.replay.chain import Route
from proxycheck.core.replay.plan import PlannedSession, PlannedTurn
from proxycheck.io.observe import ConnState, aiohttp_trace_config, observe_aiohttp
from proxycheck.io.proxying import aiohttp_session
from proxycheck.io.replayer import (
    QuietListener,
    ReplayOptions,
    collector_out_of_the_way,
    request_headers,
    tls_context,
)
from proxycheck.io.ws_replay import run_socket

# What a bench cycles: an HTTP turn (one request), or a socket (its turns, in order, on one socket).
Unit = PlannedTurn | PlannedSession


@dataclass(frozen=True)
class BenchOptions:
    """How to load the server (validated by the command)."""

    watchdogs: Watchdogs
    concurrency: int | None = None  # closed loop at C; with a rate, the cap on requests in flight
    rate: float | None = None  # open loop: requests/s
    burstiness: float = 1.0  # gamma shape of the gaps between arrivals (1: Poisson)
    duration: float | None = None  # measured seconds (after the warm-up)
    requests: int | None = None  # measured requests (after the warm-up)
    warmup: float = 0.0
    seed: int = 0
    offset: int = 0  # where in the request cycle to begin (a shard's own starting point)

    def __post_init__(self) -> None:
        if self.concurrency is None and self.rate is None:
            raise ValueError("give a concurrency (closed loop) or a rate (open loop)")
        if (self.duration is None) == (self.requests is None):
            raise ValueError("give a duration or a number of requests (one of them)")


@dataclass(frozen=True)
class BenchResult:
    window: Window  # the measurement window, seconds from the run's start
    issued: int  # requests sent in all (warm-up included)
    measured: int  # requests started inside the window
    interrupted: bool = False


def shard_share(options: BenchOptions, index: int, count: int, cycle: int) -> BenchOptions:
    """Shard `index` (0-based) of `count`: its part of the load of `options`. Concurrency and
    requests are split as evenly as integers allow (the first shards take the remainder), the rate
    evenly; each shard gets its own arrival seed and starts `index/count` of the way through the
    request cycle of length `cycle`. ValueError when a shard would get no concurrency."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index + 1}/{count} does not exist")

    def part(total: int) -> int:
        return total // count + (1 if index < total % count else 0)

    concurrency = None if options.concurrency is None else part(options.concurrency)
    if concurrency == 0:
        raise ValueError(f"a concurrency of {options.concurrency} cannot be split into {count} shards")
    requests = None if options.requests is None else max(part(options.requests), 1)
    rate = None if options.rate is None else options.rate / count
    return replace(options, concurrency=concurrency, rate=rate, requests=requests, seed=options.seed + index,
                   offset=options.offset + index * cycle // count)  # fmt: skip


def request_cycle(sessions: Sequence[PlannedSession]) -> list[Unit]:
    """The recording's load units in the order a bench sends them: sessions by recorded start, an
    HTTP session's turns each a unit, in order; a socket one unit, with its turns that send a
    message (`socket_unit`; a socket with none is left out: see `load_units`)."""
    return load_units(sessions)[0]


def load_units(sessions: Sequence[PlannedSession]) -> tuple[list[Unit], int]:
    """`request_cycle`'s units, and how many sockets were left out for sending no message (an
    upgrade refused or never used: no request to load the server with)."""
    units: list[Unit] = []
    bare = 0
    for session in sorted(sessions, key=lambda s: s.start):
        if session.transport != "websocket":
            units.extend(session.turns)
        elif (unit := socket_unit(session)) is not None:
            units.append(unit)
        else:
            bare += 1
    return units, bare


def socket_unit(session: PlannedSession) -> PlannedSession | None:
    """A socket as a bench sends it: its message turns, without the upgrade-only turn and the
    recorded idle end (no request either); None when no message is left."""
    turns = tuple(t for t in session.turns if not t.handshake and not t.socket_end)
    return replace(session, turns=turns) if turns else None


class _Load:
    """Shared state of one bench: the next unit, the clock, what was issued."""

    def __init__(self, units: Sequence[Unit], route: Route, options: BenchOptions, run_id: str,
                 sink: Callable[[Observation], None]) -> None:  # fmt: skip
        if not units:
            raise ValueError("the recording has no requests to send")
        self.units = units
        self.route = route
        self.options = options
        self.run_id = run_id
        self.sink = sink
        self.tls = tls_context(route.verify)
        self.origin = time.monotonic()
        self.warm_until = self.origin + options.warmup
        self.stop_at = None if options.duration is None else self.warm_until + options.duration
        self.counter = itertools.count()
        self.issued = 0
        self.measured = 0
        self.last_end = 0.0  # of a measured request, seconds from the origin

    def over(self, now: float) -> bool:
        """Whether the load is over: its duration passed, or its measured requests all sent."""
        if self.stop_at is not None and now >= self.stop_at:
            return True
        return self.options.requests is not None and now >= self.warm_until and self.measured >= self.options.requests

    def request(self) -> bool:
        """Count one request about to be sent (an HTTP one, or a socket's turn); False when the
        load is over and it must not be sent."""
        now = time.monotonic()
        if self.over(now):
            return False
        self.issued += 1
        if now >= self.warm_until:
            self.measured += 1
        return True

    def take(self) -> tuple[int, Unit] | None:
        """The next unit to send (its index, the unit), or None when the load is over. An HTTP
        request is counted here; a socket's turns as each is sent (`request`)."""
        if self.over(time.monotonic()):
            return None
        index = next(self.counter)
        unit = self.units[(index + self.options.offset) % len(self.units)]
        if isinstance(unit, PlannedTurn):
            self.request()
        return index, unit

    def new_session(self, limit: int) -> aiohttp.ClientSession:
        return aiohttp_session(self.route, tls=self.tls, limit=limit, trace_configs=[aiohttp_trace_config()],
                               auto_decompress=True)  # fmt: skip

    async def send(self, session: aiohttp.ClientSession, index: int, unit: Unit, conn: ConnState) -> None:
        if isinstance(unit, PlannedSession):
            await self.socket(index, unit)
            return
        turn = unit
        url = self.route.url_for(turn.url)
        headers = request_headers(turn, self.route, self.run_id)
        observed = await observe_aiohttp(session, turn.method, url, headers, turn.body, dialect=turn.dialect,
                                         streamed=turn.streamed, watchdogs=self.options.watchdogs,
                                         clock_origin=self.origin, conn_state=conn)  # fmt: skip
        self.keep(observed.observation, index, turn)

    async def socket(self, index: int, unit: PlannedSession) -> None:
        """One socket, as the replayer replays it (`run_socket`), each turn counted as it is sent."""
        await run_socket(unit, _SocketContext(self), None, lambda turn: request_headers(turn, self.route, self.run_id),
                         lambda obs, turn, result: self.keep(obs, index, turn))  # fmt: skip

    def keep(self, obs: Observation, index: int, turn: PlannedTurn) -> None:
        # The cycle number keeps each observation's key unique when the recording repeats.
        obs = obs.with_keys(route=self.route.name, repetition=index // len(self.units) + 1, session=turn.session,
                            turn=turn.turn, xid=turn.xid)  # fmt: skip
        if self.origin + obs.t_start >= self.warm_until:
            self.last_end = max(self.last_end, obs.t_start + (obs.end or 0.0))
        self.sink(obs)

    def window(self) -> Window:
        start = self.options.warmup
        if self.options.duration is not None:
            return Window(start, start + self.options.duration)
        return Window(start, max(self.last_end, start + 1e-6))


class _SocketContext:
    """What `run_socket` reads of a replay, for a bench's socket: the route, the clock, the
    watchdogs; no think time (`pace` fast, as a bench sends HTTP turns); a turn that fails ends
    the socket (`stop-session`); each turn counted by the load before it is sent (`budget`)."""

    def __init__(self, load: _Load) -> None:
        self.route = load.route
        self.tls = load.tls
        self.origin = load.origin
        self.options = ReplayOptions(watchdogs=load.options.watchdogs, pace="fast", on_fail="stop-session")
        self.budget = _Requests(load)
        self.listener = QuietListener()
        self.alarms = _NoThinkTime()


class _Requests:
    """The load as the replay's request budget: `take` counts a socket's next turn, or refuses it."""

    def __init__(self, load: _Load) -> None:
        self.take = load.request


class _NoThinkTime:
    """A bench's socket waits no think time: nothing to keep deadlines for (the replayer's alarms
    wake sessions on time at a recorded pace)."""

    async def sleep_until(self, when: float) -> None:
        delay = when - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def ring(self) -> None:
        pass


async def bench(units: Sequence[Unit], route: Route, options: BenchOptions, run_id: str,
                sink: Callable[[Observation], None], start_at: float | None = None) -> BenchResult:  # fmt: skip
    """Load `route` with `units` (cycled: `request_cycle`) as `options` say, handing each
    observation to `sink`; from the wall-clock time `start_at` when given (shards start together).
    Cancellation (Ctrl-C) stops every request at once; what was observed has reached `sink`."""
    load = _Load(units, route, options, run_id, sink)
    interrupted = False
    if start_at is not None:
        await asyncio.sleep(max(0.0, start_at - time.time()))
    with collector_out_of_the_way():
        load.origin = time.monotonic()
        load.warm_until = load.origin + options.warmup
        load.stop_at = None if options.duration is None else load.warm_until + options.duration
        try:
            if options.rate is None:
                assert options.concurrency is not None
                await _closed_loop(load, options.concurrency)
            else:
                await _open_loop(load, options.rate, options.burstiness, options.concurrency, options.seed)
        except asyncio.CancelledError:
            interrupted = True
    window = load.window()
    if interrupted:  # the window ends where the load did
        stopped = time.monotonic() - load.origin
        window = Window(window.start, max(min(window.end, stopped), window.start + 1e-6))
    return BenchResult(window, load.issued, load.measured, interrupted)


async def _closed_loop(load: _Load, concurrency: int) -> None:
    """C workers, each on its own keep-alive connection; a stalled request holds only its own."""

    async def worker() -> None:
        async with load.new_session(limit=1) as session:
            conn = ConnState()
            while (job := load.take()) is not None:
                await load.send(session, *job, conn)

    async with asyncio.TaskGroup() as group:
        for _ in range(concurrency):
            group.create_task(worker())


def arrival_gaps(rate: float, burstiness: float, seed: int) -> Iterator[float]:
    """Gaps between arrivals: gamma with shape `burstiness` and mean 1/rate (Poisson at 1)."""
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    while True:
        yield rng.gammavariate(burstiness, theta)


async def _open_loop(load: _Load, rate: float, burstiness: float, cap: int | None, seed: int) -> None:
    """Arrivals at their drawn times, whatever the server's pace; with `cap`, at most that many
    in flight. One shared connection pool, as an SDK client serving many callers has."""
    gate = asyncio.Semaphore(cap) if cap else None
    conn = ConnState()

    async def one(session: aiohttp.ClientSession, index: int, unit: Unit) -> None:
        if gate is None:
            await load.send(session, index, unit, conn)
            return
        async with gate:
            await load.send(session, index, unit, conn)

    gaps = arrival_gaps(rate, burstiness, seed)
    async with load.new_session(limit=0) as session, asyncio.TaskGroup() as group:
        due = time.monotonic()
        while (job := load.take()) is not None:
            group.create_task(one(session, *job))
            due += next(gaps)
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
