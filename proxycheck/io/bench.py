"""`proxycheck bench`'s load generator: a recording's requests at a fixed load, on aiohttp.

The requests are the recording's turns, each sent as recorded (exact bodies, which carry their
history), in recorded order and cycled: a benchmark measures the server under the traffic the
harness really sends, not under synthetic prompts. The load is either

* closed loop: `concurrency` workers, each sending its next request as soon as its previous one
  ended, on its own keep-alive connection (the way an agent fleet of that size loads a server);
* open loop: arrivals at `rate` requests/s with gamma-distributed gaps of shape `burstiness`
  (1: Poisson; below 1 burstier), as `vllm bench serve` draws them, seeded; with `concurrency`
  too, at most that many in flight (later arrivals wait, as with its --max-concurrency).

Every request is observed like a replayed exchange (`observe_aiohttp`, with the watchdogs): a
stalled request fails at its timeout, is counted by its outcome, and the run goes on. This is
the difference from benchmark clients that have no stall timeout and count a cut stream as a
success. The measurement window starts after `warmup` seconds and ends `duration` seconds later
(new requests stop then, and those in flight finish), or, with `requests`, when that many
measured requests have been issued and have ended. The statistics are `proxycheck.core.bench.perf`'s.

Past one process: a shard (`shard_share`) runs its part of the load — its share of the
concurrency, rate and requests, its own arrival seed, and its own starting point in the request
cycle, so shards do not send the same request at the same moment — from a common wall-clock
start (`start_at`). `proxycheck merge` (or `bench --workers N`, which runs N shards on this
machine) puts the shards' runs back together.
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
from proxycheck.io.replayer import collector_out_of_the_way, request_headers, tls_context


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


def request_cycle(sessions: Sequence[PlannedSession]) -> list[PlannedTurn]:
    """The recording's requests in the order a bench sends them: sessions by recorded start,
    each session's turns in order."""
    ordered = sorted(sessions, key=lambda s: s.start)
    return [t for s in ordered for t in s.turns]


class _Load:
    """Shared state of one bench: the next request, the clock, what was issued."""

    def __init__(self, turns: Sequence[PlannedTurn], route: Route, options: BenchOptions, run_id: str,
                 sink: Callable[[Observation], None]) -> None:  # fmt: skip
        if not turns:
            raise ValueError("the recording has no requests to send")
        self.turns = turns
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

    def take(self) -> tuple[int, PlannedTurn] | None:
        """The next request to send (its index, its turn), or None when the load is over."""
        now = time.monotonic()
        if self.stop_at is not None and now >= self.stop_at:
            return None
        if self.options.requests is not None and now >= self.warm_until and self.measured >= self.options.requests:
            return None
        index = next(self.counter)
        self.issued += 1
        if now >= self.warm_until:
            self.measured += 1
        return index, self.turns[(index + self.options.offset) % len(self.turns)]

    def new_session(self, limit: int) -> aiohttp.ClientSession:
        return aiohttp_session(self.route, tls=self.tls, limit=limit, trace_configs=[aiohttp_trace_config()],
                               auto_decompress=True)  # fmt: skip

    async def send(self, session: aiohttp.ClientSession, index: int, turn: PlannedTurn, conn: ConnState) -> None:
        url = self.route.url_for(turn.url)
        headers = request_headers(turn, self.route, self.run_id)
        observed = await observe_aiohttp(session, turn.method, url, headers, turn.body, dialect=turn.dialect,
                                         streamed=turn.streamed, watchdogs=self.options.watchdogs,
                                         clock_origin=self.origin, conn_state=conn)  # fmt: skip
        # The cycle number keeps each observation's key unique when the recording repeats.
        obs = observed.observation.with_keys(route=self.route.name, repetition=index // len(self.turns) + 1,
                                             session=turn.session, turn=turn.turn, xid=turn.xid)  # fmt: skip
        if self.origin + obs.t_start >= self.warm_until:
            self.last_end = max(self.last_end, obs.t_start + (obs.end or 0.0))
        self.sink(obs)

    def window(self) -> Window:
        start = self.options.warmup
        if self.options.duration is not None:
            return Window(start, start + self.options.duration)
        return Window(start, max(self.last_end, start + 1e-6))


async def bench(turns: Sequence[PlannedTurn], route: Route, options: BenchOptions, run_id: str,
                sink: Callable[[Observation], None], start_at: float | None = None) -> BenchResult:  # fmt: skip
    """Load `route` with `turns` (cycled) as `options` say, handing each observation to `sink`;
    from the wall-clock time `start_at` when given (shards start together). Cancellation (Ctrl-C)
    stops every request at once; what was observed has reached `sink`."""
    load = _Load(turns, route, options, run_id, sink)
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

    async def one(session: aiohttp.ClientSession, index: int, turn: PlannedTurn) -> None:
        if gate is None:
            await load.send(session, index, turn, conn)
            return
        async with gate:
            await load.send(session, index, turn, conn)

    gaps = arrival_gaps(rate, burstiness, seed)
    async with load.new_session(limit=0) as session, asyncio.TaskGroup() as group:
        due = time.monotonic()
        while (job := load.take()) is not None:
            group.create_task(one(session, *job))
            due += next(gaps)
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
