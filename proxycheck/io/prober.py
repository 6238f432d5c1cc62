"""The prober: runs `proxycheck probe`'s synthetic probes over each route of a chain.

This module owns the network side of the probes; what to try next (`Ladder`), what to send
(`request_body`), how a stream was delivered (`Delivery`) and what the results mean
(`proxycheck.core.probe.findings`) are the pure core's. Every exchange goes through
`observe_httpx`, the replayer's observer, so outcomes and timings mean what they mean in a replay.
Clients are made as the replayer makes them: `trust_env=False` (only the chain file's proxy may add
a hop), the route's proxy and TLS verification (one SSL context per route), the route's headers,
and `x-proxycheck-replay: RUN_ID`, so a recorder left in the chain does not record probes.

Per route, first a baseline (a small streamed request; a route that fails it is `failed` for every
probe); its response also tells whether the engine is the reference engine (its digest header),
which then gets the timing extension. Then, in three phases:

1. route by route along the ladder, one request at a time: `body` (streamed requests padded to a
   size; pass = a complete answer), `header` (one padded header), `sse` (a paced stream: are
   its events delivered as produced?), `compression` (the same with `Accept-Encoding: gzip`, then
   `identity`: does a hop compress SSE, and do events still flow?);
2. at the same time, every route at once, trials side by side on separate connections: `idle`
   (a request, an idle gap, a second request on the same connection: does reuse after the gap
   fail?) and `gap` (a stream with a gap between two tokens: is it cut?). A failing trial
   cancels the trials at longer gaps, so a round lasts about the gap that failed plus the watchdog;
3. route by route: `concurrency` (N streams at once, N doubling to the bound: do some fail, or
   queue, their TTFT far beyond one stream's?).

Against an engine other than the reference one, `gap` cannot ask for a gap between tokens; it
sends one long prefill (the largest body `direct` accepted, else 64 KiB) and reports whether routes
survive a wait as long as direct's TTFT for it.

Every wait is bounded (watchdogs from `--timeout`, the probes' own bounds); every request is paid
for from the token budget first, and a probe the budget cannot pay for stops and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ssl
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Awaitable, Callable, Protocol, Sequence

import httpx

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.probe.findings import (
    DEGRADED,
    FAILED,
    INCOMPLETE,
    INFO,
    LIMIT,
    NONE,
    SKIPPED,
    TITLES,
    Evidence,
    ProbeReport,
    ProbeResult,
    RouteInfo,
)
from proxycheck.core.probe.searches import ENDPOINTS, PROBES, Ask, Delivery, Ladder, TokenBudget, header_value, request_body
from proxycheck.core.protocol.requestparts import SHA_HEADER
from proxycheck.core.replay.chain import Route
from proxycheck.io.observe import ConnState, observe_httpx
from proxycheck.io.proxying import httpx_client
from proxycheck.io.replayer import REPLAY_HEADER, tls_context

ANTHROPIC_VERSION = "2023-06-01"
PAD_HEADER = "x-proxycheck-pad"
DEFAULT_MODEL = "proxycheck-probe"

# What the probes ask for. With the reference engine the timing is asked for explicitly; a real
# engine streams at its own pace, so it is asked for more tokens to make the stream last.
BASELINE = Ask(4)
SMALL_REF = Ask(1, ttft=0.0, token_interval=0.0)  # body and header trials: answered at once
SSE_REF, SSE_REAL = Ask(20, ttft=0.05, token_interval=0.05), Ask(32)
GZIP_REF, GZIP_REAL = Ask(10, ttft=0.05, token_interval=0.05), Ask(16)
IDLE_REF, IDLE_REAL = Ask(2, ttft=0.0, token_interval=0.01), Ask(2)
GAP_TTFT = 0.05
# Streams of about a second: long enough that a stream queued behind another (first token after
# that one's end) stands well apart from streams merely slowed by load (64 streams through two
# mitmdump hops on two cores: first tokens within 0.5 s).
CONC_REF, CONC_REAL = Ask(10, ttft=0.05, token_interval=0.1), Ask(32)
PREFILL_DEFAULT = 64 << 10
TIMEOUT_STATUSES = (408, 502, 503, 504)  # what a hop answers when its upstream took too long

BODY_START, BODY_GROWTH, BODY_TOL = 4096, 4.0, 0.05
HEADER_START, HEADER_GROWTH, HEADER_TOL = 1024, 2.0, 0.05
TIME_START, TIME_GROWTH, TIME_TOL, TIME_QUANTUM = 1.0, 2.0, 0.5, 0.05
BISECT_WIDTH = 3  # side-by-side trials per bisection round of the time ladders
CONC_START, CONC_GROWTH, CONC_TOL = 2, 4.0, 0.1
UPLOAD_RATE = 1_000_000  # bytes/s the header watchdog allows for sending a big body
# A route's client reuses a connection only within a burst of requests: one left idle longer
# (between probes) could meet the very idle limit the idle probe measures, and fail a body or a
# header probe for the wrong reason. The idle probe's own clients keep theirs as long as asked.
BURST_KEEPALIVE = 0.5
IDLE_KEEPALIVE_MARGIN = 30.0

# Output tokens asked for by the probe running in this task (and the tasks it starts).
_SPENT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("probe_tokens", default=None)


@dataclass(frozen=True, slots=True)
class ProbeOptions:
    """What to probe and how far (validated by the command)."""

    probes: tuple[str, ...] = PROBES
    dialect: str = "openai_chat"
    model: str | None = None  # None: the engine's first model (GET /v1/models), else DEFAULT_MODEL
    max_body: int = 16 << 20
    max_header: int = 64 << 10
    max_idle: float = 30.0
    max_gap: float = 30.0
    max_concurrency: int = 64
    timeout: float = 10.0  # silence that fails a probe request (headers, or content)
    max_tokens_total: int | None = None
    run_id: str = field(default_factory=lambda: f"probe-{uuid.uuid4().hex[:12]}")

    def bounds(self) -> dict[str, float]:
        return {"body": self.max_body, "header": self.max_header, "idle": self.max_idle, "gap": self.max_gap,
                "concurrency": self.max_concurrency}  # fmt: skip


class ProbeListener(Protocol):
    def finished(self, result: ProbeResult) -> None: ...


class _Quiet:
    def finished(self, result: ProbeResult) -> None:
        pass


class _OutOfBudget(Exception):
    """The token budget cannot pay for the next request."""


@dataclass
class _RouteCtx:
    route: Route
    url: str
    tls: ssl.SSLContext | bool
    client: httpx.AsyncClient
    baseline: Observation | None = None

    def new_client(self, keepalive: float = BURST_KEEPALIVE) -> httpx.AsyncClient:
        return _client(self.route, self.tls, keepalive)


def _client(route: Route, tls: ssl.SSLContext | bool, keepalive: float = BURST_KEEPALIVE) -> httpx.AsyncClient:
    # No pool cap: the concurrency probe opens as many connections as it has streams. httpx drops
    # a pooled connection idle for longer than `keepalive_expiry` (5 s by default, as in the
    # OpenAI SDK), so the idle probe sets it beyond the longest gap it tries.
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=keepalive)
    return httpx_client(route, verify=tls, limits=limits)


async def probe_routes(
    routes: Sequence[Route],
    options: ProbeOptions,
    *,
    chain: str = "",
    engine: str = "",
    listener: ProbeListener | None = None,
) -> ProbeReport:
    """Probe every route (given in ladder order, direct first) and report what was found."""
    prober = _Prober(routes, options, listener or _Quiet())
    started, t0 = time.time(), time.monotonic()
    try:
        results = await prober.run()
    finally:
        await prober.close()
    infos = tuple(RouteInfo(r.name, r.hops) for r in routes)
    return ProbeReport(
        chain=chain, engine=engine, reference=prober.reference, dialect=options.dialect, model=prober.model,
        routes=infos, probes=tuple(p for p in PROBES if p in options.probes), bounds=options.bounds(),
        results=tuple(results), max_tokens_total=options.max_tokens_total, tokens_spent=prober.budget.spent,
        budget_exhausted=prober.budget.exhausted, started=started, duration=time.monotonic() - t0,
        warnings=tuple(prober.warnings),
    )  # fmt: skip


class _Prober:
    def __init__(self, routes: Sequence[Route], options: ProbeOptions, listener: ProbeListener) -> None:
        self.options = options
        self.listener = listener
        self.budget = TokenBudget(options.max_tokens_total)
        self.reference = False
        self.model = options.model or DEFAULT_MODEL
        self.warnings: list[str] = []
        self.results: dict[tuple[str, str], ProbeResult] = {}
        self.routes: list[_RouteCtx] = []
        self.body_ok: dict[str, int] = {}  # route -> largest body that passed (the gap fallback uses it)
        self.groups: dict[tuple[str, str], int] = {}  # (route, probe) -> arrival groups of its stream
        self.prefill_gap: float | None = None  # direct's TTFT for the long prefill (real engines)
        path = ENDPOINTS[options.dialect]
        for route in routes:
            tls = tls_context(route.verify)
            self.routes.append(_RouteCtx(route, route.url_for(path), tls, _client(route, tls)))
        self._seq = 0

    async def close(self) -> None:
        for rc in self.routes:
            with contextlib.suppress(Exception):
                await rc.client.aclose()

    # --- the run -------------------------------------------------------------------------------

    async def run(self) -> list[ProbeResult]:
        if self.options.model is None and self.options.dialect != "sglang_generate":
            self.model = await self._discover_model()
        live = [rc for rc in self.routes if await self._baseline(rc)]
        wanted = [p for p in PROBES if p in self.options.probes]
        fast = [p for p in ("body", "header", "sse", "compression") if p in wanted]
        slow = [p for p in ("idle", "gap") if p in wanted]

        async def phase_fast() -> None:
            for rc in live:
                for probe in fast:
                    await self._run(rc, probe, getattr(self, f"_probe_{probe}"))

        async def prefill_gaps() -> None:
            for rc in live:  # direct first: its TTFT for the long prefill is the gap tried
                await self._run(rc, "gap", self._probe_gap_prefill)

        async def phase_slow() -> None:
            async with asyncio.TaskGroup() as group:
                if "idle" in slow:
                    for rc in live:
                        group.create_task(self._run(rc, "idle", self._probe_idle))
                if "gap" in slow and self.reference:
                    for rc in live:
                        group.create_task(self._run(rc, "gap", self._probe_gap))
                elif "gap" in slow:
                    group.create_task(prefill_gaps())

        if "gap" in slow and not self.reference and "body" in fast:
            await phase_fast()  # the prefill fallback sends the largest body every route accepted
            await phase_slow()
        else:
            # The slow probes mostly wait (idle gaps, gaps between tokens): they run meanwhile.
            async with asyncio.TaskGroup() as group:
                group.create_task(phase_fast())
                group.create_task(phase_slow())
        if "concurrency" in wanted:
            for rc in live:
                await self._run(rc, "concurrency", self._probe_concurrency)
        order = {name: i for i, name in enumerate(PROBES)}
        names = [rc.route.name for rc in self.routes]
        why = "token budget spent" if self.budget.exhausted else ""
        for rc in self.routes:
            for probe in wanted:
                self.results.setdefault((rc.route.name, probe), ProbeResult(rc.route.name, probe, SKIPPED, detail=why))
        return sorted(self.results.values(), key=lambda r: (names.index(r.route), order[r.probe]))

    async def _run(self, rc: _RouteCtx, probe: str, fn: Callable[[_RouteCtx], Awaitable[ProbeResult]]) -> None:
        name = rc.route.name
        if self.budget.exhausted:
            result = ProbeResult(name, probe, SKIPPED, detail="token budget spent")
        else:
            spent = [0]
            token = _SPENT.set(spent)
            try:
                result = await fn(rc)
            finally:
                _SPENT.reset(token)
            result = _with_tokens(result, spent[0])
        self.results[(name, probe)] = result
        self.listener.finished(result)

    # --- sending -------------------------------------------------------------------------------

    def _charge(self, tokens: int) -> bool:
        """Pay for a request from the budget (and count it for the running probe)."""
        if not self.budget.take(tokens):
            return False
        spent = _SPENT.get()
        if spent is not None:
            spent[0] += tokens
        return True

    def _nonce(self) -> str:
        self._seq += 1
        return f"{self.options.run_id}-{self._seq}"

    def _body(self, ask: Ask, size: int | None = None) -> bytes:
        return request_body(self.options.dialect, ask, model=self.model, nonce=self._nonce(), size=size,
                            reference=self.reference)  # fmt: skip

    def _headers(self, rc: _RouteCtx, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self.options.dialect == "anthropic_messages":
            headers["anthropic-version"] = ANTHROPIC_VERSION
        headers.update(rc.route.headers)
        headers.update(extra or {})
        headers[REPLAY_HEADER] = self.options.run_id
        return headers

    def _watchdogs(self, headers: float | None = None, stall: float | None = None) -> Watchdogs:
        t = self.options.timeout
        h, s = headers or t, stall or t
        return Watchdogs(connect=min(t, 10.0), headers=h, stall=s, total=h + s + 60.0)

    def _paced(self, ask: Ask) -> Watchdogs:
        """Watchdogs for a stream paced as `ask` says: a buffering hop sends nothing, not even
        headers, until the engine has finished, so the whole stream's length is allowed before
        the headers, and the longest gap asked for between tokens after them."""
        length = (ask.ttft or 0.0) + (ask.token_interval or 0.0) * ask.max_tokens
        return self._watchdogs(headers=self.options.timeout + length,
                               stall=self.options.timeout + (ask.token_interval or 0.0))  # fmt: skip

    async def _send(
        self,
        rc: _RouteCtx,
        body: bytes,
        tokens: int,
        *,
        client: httpx.AsyncClient | None = None,
        headers: dict[str, str] | None = None,
        watchdogs: Watchdogs | None = None,
        conn: ConnState | None = None,
    ) -> Observation:
        if tokens and not self._charge(tokens):
            raise _OutOfBudget
        observed = await observe_httpx(
            client or rc.client, "POST", rc.url, self._headers(rc, headers), body, dialect=self.options.dialect,
            streamed=True, watchdogs=watchdogs or self._watchdogs(), conn_state=conn,
        )  # fmt: skip
        return observed.observation

    async def _discover_model(self) -> str:
        """The engine's first model from GET /v1/models (direct, else the first route)."""
        rc = next((r for r in self.routes if not r.route.hops), self.routes[0] if self.routes else None)
        if rc is None:
            return DEFAULT_MODEL
        url = rc.route.url_for("/v1/models")
        try:
            resp = await rc.client.get(url, headers=dict(rc.route.headers), timeout=min(self.options.timeout, 5.0))
            data = resp.json().get("data") if resp.status_code == 200 else None
            if isinstance(data, list) and data and isinstance(data[0], dict) and isinstance(data[0].get("id"), str):
                return data[0]["id"]
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        self.warnings.append(f"could not list the engine's models at {url}; asking for model {DEFAULT_MODEL!r} "
                             "(give --model)")  # fmt: skip
        return DEFAULT_MODEL

    async def _baseline(self, rc: _RouteCtx) -> bool:
        """One small streamed request; a route that fails it is `failed` for every probe."""
        try:
            obs = await self._send(rc, self._body(BASELINE), BASELINE.max_tokens)
        except _OutOfBudget:
            return False
        rc.baseline = obs
        if obs.outcome is Outcome.OK:
            if any(k == SHA_HEADER for k, _ in obs.response_headers):
                self.reference = True
            return True
        ev = _evidence(None, obs)
        detail = f"the baseline request failed, so nothing could be probed: {ev.short()}" + (
            f": {obs.detail}" if obs.detail else "")
        for probe in self.options.probes:
            result = ProbeResult(rc.route.name, probe, FAILED, evidence=ev, trials=1, detail=detail)
            self.results[(rc.route.name, probe)] = result
            self.listener.finished(result)
        return False

    # --- body and header: one request at a time ------------------------------------------------

    async def _sequential(self, rc: _RouteCtx, probe: str, ladder: Ladder,
                          trial: Callable[[float], Awaitable[Observation]]) -> ProbeResult:  # fmt: skip
        try:
            while values := ladder.next(1):
                value = values[0]
                obs = await trial(value)
                ladder.feed(value, obs.outcome is Outcome.OK, _evidence(value, obs))
        except _OutOfBudget:
            return _ladder_result(rc.route.name, probe, ladder, stopped=True)
        return _ladder_result(rc.route.name, probe, ladder)

    async def _probe_body(self, rc: _RouteCtx) -> ProbeResult:
        floor = rc.baseline.request_bytes if rc.baseline else 0
        bound = self.options.max_body
        if bound <= floor:
            return ProbeResult(rc.route.name, "body", SKIPPED, detail=f"--max-body is below the baseline's {floor} B")
        ladder = Ladder(max(BODY_START, floor + 1), bound, growth=BODY_GROWTH, floor=floor, rel_tol=BODY_TOL,
                        confirm=True)  # fmt: skip
        ask = SMALL_REF if self.reference else Ask(1)

        async def trial(size: float) -> Observation:
            n = int(size)
            # Sending takes time over a slow link, and a real engine prefills a big prompt before
            # it answers: both are allowed for, beyond the usual silence.
            extra = n / UPLOAD_RATE + (0 if self.reference else 30.0)
            wd = self._watchdogs(headers=self.options.timeout + extra, stall=self.options.timeout + extra)
            return await self._send(rc, self._body(ask, n), ask.max_tokens, watchdogs=wd)

        result = await self._sequential(rc, "body", ladder, trial)
        self.body_ok[rc.route.name] = int(ladder.lo)
        return result

    async def _probe_header(self, rc: _RouteCtx) -> ProbeResult:
        ladder = Ladder(HEADER_START, self.options.max_header, growth=HEADER_GROWTH, rel_tol=HEADER_TOL, confirm=True)
        ask = SMALL_REF if self.reference else Ask(1)

        async def trial(size: float) -> Observation:
            return await self._send(rc, self._body(ask), ask.max_tokens, headers={PAD_HEADER: header_value(int(size))})

        return await self._sequential(rc, "header", ladder, trial)

    # --- delivery: SSE and compression ---------------------------------------------------------

    def _reference_groups(self, probe: str, rc: _RouteCtx, ask: Ask, own: Delivery) -> int:
        """The arrival groups a streamed response should show: direct's, when it was measured
        (a route is judged against the engine as reached directly), else one per content event
        the engine was asked to space out (reference engine), else the route's own events."""
        self.groups[(rc.route.name, probe)] = own.groups
        direct = next((r for r in self.routes if not r.route.hops), None)
        if direct is not None and direct is not rc and (direct.route.name, probe) in self.groups:
            return self.groups[(direct.route.name, probe)]
        return ask.max_tokens if self.reference else own.events

    async def _probe_sse(self, rc: _RouteCtx) -> ProbeResult:
        ask = SSE_REF if self.reference else SSE_REAL
        name = rc.route.name
        try:
            obs = await self._send(rc, self._body(ask), ask.max_tokens, watchdogs=self._paced(ask))
        except _OutOfBudget:
            return ProbeResult(name, "sse", SKIPPED, detail="token budget spent")
        if obs.outcome is not Outcome.OK:
            return _failed(name, "sse", obs, 1)
        d = _delivery(obs)
        ref = self._reference_groups("sse", rc, ask, d)
        kind = d.kind(ref)
        detail = _delivery_text(d, obs, ref)
        state = DEGRADED if kind in ("buffered", "batched") else NONE
        return ProbeResult(name, "sse", state, kind=kind, detail=detail, trials=1)

    async def _probe_compression(self, rc: _RouteCtx) -> ProbeResult:
        ask = GZIP_REF if self.reference else GZIP_REAL
        name = rc.route.name
        try:
            wd = self._paced(ask)
            gz = await self._send(rc, self._body(ask), ask.max_tokens, headers={"accept-encoding": "gzip"},
                                  watchdogs=wd)  # fmt: skip
            plain = await self._send(rc, self._body(ask), ask.max_tokens, headers={"accept-encoding": "identity"},
                                     watchdogs=wd)  # fmt: skip
        except _OutOfBudget:
            return ProbeResult(name, "compression", SKIPPED, detail="token budget spent")
        for obs in (gz, plain):
            if obs.outcome is not Outcome.OK:
                return _failed(name, "compression", obs, 2)
        enc, forced = _encoding(gz), _encoding(plain)
        d = _delivery(gz)
        if forced:
            return ProbeResult(name, "compression", DEGRADED, kind=f"{forced} (unasked)", trials=2,
                               detail=f"SSE is {forced}-encoded although the client asked for identity")  # fmt: skip
        if not enc:
            return ProbeResult(name, "compression", NONE, detail="SSE is not compressed (gzip was offered)", trials=2)
        ref = self._reference_groups("compression", rc, ask, d)
        kind = d.kind(ref)
        flowing = kind in ("streamed", "unknown")
        state = INFO if flowing else DEGRADED
        how = "events still flow as produced" if flowing else f"events bunch up: {_delivery_text(d, gz, ref)}"
        return ProbeResult(name, "compression", state, kind=enc, trials=2,
                           detail=f"SSE is {enc}-encoded when the client offers gzip; {how}")  # fmt: skip

    # --- idle and gap: trials side by side -----------------------------------------------------

    async def _rounds(self, rc: _RouteCtx, probe: str, ladder: Ladder,
                      trial: Callable[[float], Awaitable[tuple[bool, Evidence]]]) -> ProbeResult:  # fmt: skip
        """Round after round: every growth step at once, then BISECT_WIDTH values at a time. A
        failure cancels the trials of longer gaps still running (they can no longer matter)."""
        stopped = False
        while not stopped:
            width = len(ladder.steps) if ladder.hi is None else BISECT_WIDTH
            values = ladder.next(width)
            if not values:
                break
            tasks = {asyncio.ensure_future(trial(v)): v for v in values}
            try:
                pending = set(tasks)
                while pending:
                    done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        value = tasks[task]
                        exc = task.exception()
                        if isinstance(exc, _OutOfBudget):
                            stopped = True
                            ladder.forget(value)
                            continue
                        if exc is not None:
                            raise exc
                        ok, ev = task.result()
                        ladder.feed(value, ok, ev)
                    for task in list(pending):
                        if ladder.needless(tasks[task]):
                            task.cancel()
                            ladder.forget(tasks[task])
                            pending.discard(task)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        return _ladder_result(rc.route.name, probe, ladder, stopped=stopped)

    async def _probe_idle(self, rc: _RouteCtx) -> ProbeResult:
        ladder = Ladder(TIME_START, self.options.max_idle, growth=TIME_GROWTH, abs_tol=TIME_TOL, quantum=TIME_QUANTUM)
        ask = IDLE_REF if self.reference else IDLE_REAL
        closed: list[float] = []  # gaps after which the connection had been closed (and was reopened)
        keepalive = self.options.max_idle + IDLE_KEEPALIVE_MARGIN

        async def trial(gap: float) -> tuple[bool, Evidence]:
            conn = ConnState()
            async with rc.new_client(keepalive) as client:
                first = await self._send(rc, self._body(ask), ask.max_tokens, client=client, conn=conn)
                if first.outcome is not Outcome.OK:
                    return False, _evidence(gap, first, "the first request, before the idle gap, failed: ")
                await asyncio.sleep(gap)
                second = await self._send(rc, self._body(ask), ask.max_tokens, client=client, conn=conn)
            if second.outcome is Outcome.OK and second.reused is False:
                closed.append(gap)
            return second.outcome is Outcome.OK, _evidence(gap, second)

        result = await self._rounds(rc, "idle", ladder, trial)
        if closed:
            reused = [v for v, ok in ladder.results.items() if ok and v not in closed]
            since = max((v for v in reused if v < min(closed)), default=0.0)
            result = _with_note(result, f"idle connections were closed between {since:g} and {min(closed):g} s and "
                                        "a new one was opened (harmless)")  # fmt: skip
        return result

    async def _probe_gap(self, rc: _RouteCtx) -> ProbeResult:
        ladder = Ladder(TIME_START, self.options.max_gap, growth=TIME_GROWTH, abs_tol=TIME_TOL, quantum=TIME_QUANTUM)

        async def trial(gap: float) -> tuple[bool, Evidence]:
            ask = Ask(2, ttft=GAP_TTFT, token_interval=gap)
            async with rc.new_client() as client:
                obs = await self._send(rc, self._body(ask), ask.max_tokens, client=client, watchdogs=self._paced(ask))
            return obs.outcome is Outcome.OK, _evidence(gap, obs)

        return await self._rounds(rc, "gap", ladder, trial)

    async def _probe_gap_prefill(self, rc: _RouteCtx) -> ProbeResult:
        """A real engine: one long prefill; the gap tried is direct's TTFT for it. The prompt is
        the largest body every route accepted (so no route refuses it for its size), else 64 KiB."""
        direct = next((r for r in self.routes if not r.route.hops), None)
        size = min(min(self.body_ok.values(), default=PREFILL_DEFAULT), self.options.max_body)
        name = rc.route.name
        note = f"a real engine cannot be asked for gaps: one prompt of {size} B, whose prefill is the gap"
        ask = Ask(2)
        wd = self._watchdogs(headers=self.options.timeout + 60.0, stall=self.options.timeout + 60.0)
        try:
            obs = await self._send(rc, self._body(ask, size), ask.max_tokens, watchdogs=wd)
        except _OutOfBudget:
            return ProbeResult(name, "gap", SKIPPED, detail="token budget spent")
        ttft = obs.first_content
        if rc is direct:
            self.prefill_gap = ttft
        gap = self.prefill_gap or ttft
        if obs.outcome is Outcome.OK:
            return ProbeResult(name, "gap", NONE, value=ttft, bound=gap, trials=1, note=note)
        if obs.outcome is Outcome.HTTP_ERROR and obs.status not in TIMEOUT_STATUSES:
            return _failed(name, "gap", obs, 1)  # refused, not cut: no read timeout to speak of
        ev = _evidence(gap, obs)
        return ProbeResult(name, "gap", LIMIT, value=None, failed_at=gap, evidence=ev, trials=1, note=note)

    # --- concurrency ---------------------------------------------------------------------------

    async def _probe_concurrency(self, rc: _RouteCtx) -> ProbeResult:
        ask = CONC_REF if self.reference else CONC_REAL
        name = rc.route.name
        bound = self.options.max_concurrency
        try:
            alone = await self._send(rc, self._body(ask), ask.max_tokens, watchdogs=self._paced(ask))
        except _OutOfBudget:
            return ProbeResult(name, "concurrency", SKIPPED, detail="token budget spent")
        if alone.outcome is not Outcome.OK or alone.first_content is None:
            return _failed(name, "concurrency", alone, 1)
        if bound < 2:
            return ProbeResult(name, "concurrency", NONE, value=1, bound=1, trials=1)
        ttft1 = alone.first_content
        duration = max((alone.end or 0.0) - ttft1, 0.0)
        # Queued streams wait for others to end before their headers (or, behind a buffering
        # hop, for their own end too): a few streams' length is allowed for.
        wd = self._watchdogs(headers=self.options.timeout + 4 * (alone.end or 0.0))
        ladder = Ladder(CONC_START, bound, growth=CONC_GROWTH, floor=1, rel_tol=CONC_TOL, confirm=True)
        try:
            while values := ladder.next(1):
                n = int(values[0])
                if not self._charge(n * ask.max_tokens):  # the whole level, or none of it
                    raise _OutOfBudget
                level = await asyncio.gather(*(self._send(rc, self._body(ask), 0, watchdogs=wd) for _ in range(n)))
                ok, ev = _level(n, level, ttft1)
                ladder.feed(n, ok, ev)
        except _OutOfBudget:
            return _ladder_result(name, "concurrency", ladder, stopped=True)
        note = f"one stream alone: TTFT {ttft1:.2f} s, then {duration:.2f} s of tokens"
        return _with_note(_ladder_result(name, "concurrency", ladder), note)


# ------------------------------------------------------------------------------------------------
# Helpers (no network)


def _failed(route: str, probe: str, obs: Observation, trials: int) -> ProbeResult:
    """A probe whose own request failed outright (the baseline had passed)."""
    ev = _evidence(None, obs)
    detail = f"the {TITLES[probe]} probe's request failed: {ev.short()}" + (f": {obs.detail}" if obs.detail else "")
    return ProbeResult(route, probe, FAILED, evidence=ev, detail=detail, trials=trials)


def _evidence(at: float | None, obs: Observation, prefix: str = "") -> Evidence:
    detail = obs.detail or ""
    return Evidence(at, obs.outcome.value, obs.status, f"{prefix}{detail}" if prefix or detail else "")


def _ladder_result(route: str, probe: str, ladder: Ladder, *, stopped: bool = False) -> ProbeResult:
    hi = ladder.hi
    note = "a larger value passed after a smaller one failed (flaky, or not monotonic)" if ladder.inconsistent else ""
    if hi is not None:
        why = "; stopped by the token budget (bracket coarse)" if stopped and not ladder.done else ""
        return ProbeResult(route, probe, LIMIT, value=ladder.lo, failed_at=hi, bound=ladder.bound,
                           evidence=ladder.evidence.get(hi), trials=ladder.tried, note=note + why)  # fmt: skip
    if stopped:
        return ProbeResult(route, probe, INCOMPLETE, value=ladder.lo, bound=ladder.bound, trials=ladder.tried,
                           detail="stopped by the token budget")  # fmt: skip
    return ProbeResult(route, probe, NONE, value=ladder.lo, bound=ladder.bound, evidence=ladder.evidence.get(ladder.lo),
                       trials=ladder.tried, note=note)  # fmt: skip


def _with_note(result: ProbeResult, note: str) -> ProbeResult:
    joined = "; ".join(n for n in (result.note, note) if n)
    return replace(result, note=joined)


def _with_tokens(result: ProbeResult, tokens: int) -> ProbeResult:
    return replace(result, tokens=tokens)


def _delivery(obs: Observation) -> Delivery:
    return Delivery.of(e.t for e in obs.events if e.kind == "content")


def _delivery_text(d: Delivery, obs: Observation, ref: int) -> str:
    first = obs.first_content
    at = f", the first at {first:.2f} s" if first is not None else ""
    return (f"{d.events} content events arrived in {d.groups} read(s) over {d.spread:.2f} s{at} "
            f"(expected about {ref} reads)")  # fmt: skip


def _encoding(obs: Observation) -> str | None:
    value = next((v for k, v in obs.response_headers if k == "content-encoding"), None)
    value = (value or "").strip().lower()
    return value if value and value != "identity" else None


def _level(n: int, level: Sequence[Observation], ttft1: float) -> tuple[bool, Evidence]:
    """Did N concurrent streams pass: all complete, none queued?

    Queued: a stream whose first token came only after another stream of the level had ended
    (all were sent at once): it waited for a slot. Load slows every stream a little (TTFT creeps
    up, ends come later), but a stream that was served from the start has its first token long
    before any stream's end; 90% of the earliest end (and a quarter second over one stream
    alone) keeps the two apart."""
    failed = [o for o in level if o.outcome is not Outcome.OK]
    if failed:
        first = failed[0]
        kinds = sorted({_evidence(n, o).short() for o in failed})
        detail = f"{len(failed)}/{n} failed ({', '.join(kinds)})" + (f": {first.detail}" if first.detail else "")
        return False, Evidence(n, first.outcome.value, first.status, detail)
    ttfts = [o.first_content for o in level if o.first_content is not None]
    worst = max(ttfts, default=0.0)
    earliest_end = min((o.end for o in level if o.end is not None), default=0.0)
    threshold = max(0.9 * earliest_end, ttft1 + 0.25)
    if n > 1 and worst > threshold:
        queued = sum(1 for t in ttfts if t > threshold)
        detail = (f"{queued}/{n} queued: first token after {worst:.2f} s, once other streams had ended "
                  f"(the first ended at {earliest_end:.2f} s; one stream alone: TTFT {ttft1:.2f} s)")  # fmt: skip
        return False, Evidence(n, "queued", None, detail)
    return True, Evidence(n, "ok", None, f"TTFT up to {worst:.2f} s; the first stream ended at {earliest_end:.2f} s")
