"""Replayer benchmarks, measured side by side in one run against the reference engine:

(a) sustained SSE events/s at 256 concurrent streams (`--token-interval 0`) through the two
    observers (`observe_httpx`, `observe_aiohttp`), each as a ratio against a minimal aiohttp
    streaming client that reads lines and counts `data:` (goal >= 0.8 for aiohttp);
(b) at 64 concurrent sessions replayed by `proxycheck.io.replayer.replay`: the p99 of
    |replayed - recorded| think time (goal <= 5 ms), and the p99 of how late the stall watchdog
    cuts a stalled stream beyond its configured timeout (goal <= 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

import aiohttp
import httpx

from proxycheck.core.chain import Route
from proxycheck.core.observation import Observation
from proxycheck.core.outcomes import Outcome
from proxycheck.core.replayplan import PlannedSession, PlannedTurn, RecordedOutcome, Watchdogs, p99
from proxycheck.io.observe import aiohttp_trace_config, observe_aiohttp, observe_httpx
from proxycheck.io.procs import start_engine
from proxycheck.io.replayer import ReplayOptions, replay

TOKENS = 64
PATH = "/v1/chat/completions"
HEADERS = {"content-type": "application/json"}
WATCHDOGS = Watchdogs(connect=10.0, headers=30.0, stall=30.0, total=120.0)


def body(i: int, tokens: int = TOKENS) -> bytes:
    doc = {"model": "m", "stream": True, "max_tokens": tokens,
           "messages": [{"role": "user", "content": f"benchmark request {i} " + "x" * 400}]}  # fmt: skip
    return json.dumps(doc).encode()


# -------------------------------------------------------------------- (a) streaming throughput

Stream = Callable[[int], Awaitable[int]]  # sends request i, returns the events it counted


async def sustain(stream: Stream, concurrency: int, duration: float) -> float:
    """Events/s with `concurrency` workers each streaming request after request."""
    events = 0
    stop_at = time.monotonic() + duration

    async def worker(i: int) -> None:
        nonlocal events
        n = i
        while time.monotonic() < stop_at:
            # Not `events += await ...`: that reads `events` before the await and writes it
            # after, losing what the other workers added meanwhile.
            got = await stream(n)
            events += got
            n += concurrency

    t0 = time.monotonic()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return events / (time.monotonic() - t0)


async def minimal(url: str, concurrency: int, duration: float) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def stream(i: int) -> int:
            async with session.post(url + PATH, data=body(i), headers=HEADERS) as resp:
                return len([line async for line in resp.content if line.startswith(b"data:")])

        return await sustain(stream, concurrency, duration)


def _events(obs: Observation) -> int:
    if obs.outcome is not Outcome.OK:
        raise RuntimeError(f"benchmark stream failed: {obs.outcome.value}: {obs.detail}")
    return sum(1 for e in obs.events if e.kind != "comment")


async def with_aiohttp(url: str, concurrency: int, duration: float) -> float:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, trace_configs=[aiohttp_trace_config()]) as session:

        async def stream(i: int) -> int:
            observed = await observe_aiohttp(session, "POST", url + PATH, HEADERS, body(i), dialect="openai_chat",
                                             watchdogs=WATCHDOGS)  # fmt: skip
            return _events(observed.observation)

        return await sustain(stream, concurrency, duration)


async def with_httpx(url: str, concurrency: int, duration: float) -> float:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:

        async def stream(i: int) -> int:
            observed = await observe_httpx(client, "POST", url + PATH, HEADERS, body(i), dialect="openai_chat",
                                           watchdogs=WATCHDOGS)  # fmt: skip
            return _events(observed.observation)

        return await sustain(stream, concurrency, duration)


def throughput(url: str, concurrency: int, duration: float) -> dict[str, float]:
    """Best of two alternating rounds for each client, so noise hits all alike."""
    clients = {"minimal_aiohttp": minimal, "observe_aiohttp": with_aiohttp, "observe_httpx": with_httpx}
    best = dict.fromkeys(clients, 0.0)
    for _ in range(2):
        for name, run in clients.items():
            best[name] = max(best[name], asyncio.run(run(url, concurrency, duration)))
    return best


# -------------------------------------------------------------------- (b) replay timing


def sessions(count: int, turns: int, think: float, tokens: int) -> list[PlannedSession]:
    out = []
    for s in range(count):
        planned = tuple(
            PlannedTurn(
                session=f"s{s}", turn=t, xid=s * turns + t, method="POST", url="http://recorded.invalid" + PATH,
                dialect="openai_chat", streamed=True, http_version="HTTP/1.1",
                headers=tuple(HEADERS.items()), body=body(s * turns + t, tokens),
                think_time=None if t == 1 else think, new_connection=t == 1, client_id=f"c{s}",
                recorded=RecordedOutcome(Outcome.OK),
            )  # fmt: skip
            for t in range(1, turns + 1)
        )
        out.append(PlannedSession(f"s{s}", "bench", "openai_chat", 0.0, planned))
    return out


async def replayed(url: str, plan: list[PlannedSession], options: ReplayOptions) -> list[Observation]:
    seen: list[Observation] = []
    await replay(plan, [Route("direct", url)], options, "bench", seen.append)
    return seen


def think_errors(observations: list[Observation], think: float) -> list[float]:
    by_session: dict[str, list[Observation]] = {}
    for obs in observations:
        by_session.setdefault(obs.session, []).append(obs)
    errors = []
    for turns in by_session.values():
        turns.sort(key=lambda o: o.turn)
        for prev, obs in zip(turns, turns[1:]):
            errors.append(abs(obs.t_start - (prev.t_start + (prev.end or 0.0)) - think))
    return errors


def stall_lateness(observations: list[Observation], stall: float) -> list[float]:
    """How long after `stall` seconds without progress each stalled exchange was cut."""
    late = []
    for obs in observations:
        if obs.outcome is Outcome.STALL_MID_STREAM and obs.end is not None:
            last = max(e.t for e in obs.events if e.kind != "comment")
            late.append(obs.end - last - stall)
    return late


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per throughput measurement")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    fast = start_engine("--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")
    paced = start_engine("--token-interval", "0.002", "--ttft-per-kb", "0")
    stalling = start_engine("--token-interval", "0.002", "--ttft-per-kb", "0", "--fault", "stall:after=3")
    try:
        rates = throughput(fast.url, 256, args.duration)
        think, stall = 0.2, 0.5
        obs = asyncio.run(replayed(paced.url, sessions(64, 4, think, 16), ReplayOptions(watchdogs=WATCHDOGS)))
        think_p99 = p99(think_errors(obs, think))
        stall_wd = Watchdogs(connect=10.0, headers=30.0, stall=stall, total=120.0)
        obs = asyncio.run(replayed(stalling.url, sessions(64, 1, think, 16), ReplayOptions(watchdogs=stall_wd)))
        late = stall_lateness(obs, stall)
    finally:
        for proc in (fast, paced, stalling):
            proc.stop()
    base = rates["minimal_aiohttp"]
    figures = {
        "streams_256": {name: round(rate) for name, rate in rates.items()}
        | {"ratio_aiohttp": round(rates["observe_aiohttp"] / base, 3), "ratio_httpx": round(rates["observe_httpx"] / base, 3)},
        "sessions_64": {
            "think_error_p99_ms": round(think_p99 * 1000, 2),
            "stall_late_p99_ms": round(p99(late) * 1000, 2),
            "stalled_exchanges": len(late),
        },
    }
    s, r = figures["streams_256"], figures["sessions_64"]
    print(f"SSE events/s at 256 concurrent streams, {TOKENS}-token answers, no token delay:")
    print(f"  minimal aiohttp {s['minimal_aiohttp']:>9,}")
    print(f"  observe_aiohttp {s['observe_aiohttp']:>9,}  ratio {s['ratio_aiohttp']:.2f} (goal >= 0.8)")
    print(f"  observe_httpx   {s['observe_httpx']:>9,}  ratio {s['ratio_httpx']:.2f}")
    print("64 concurrent sessions replayed:")
    print(f"  think time |replayed - recorded| p99 {r['think_error_p99_ms']:.2f} ms (goal <= 5 ms)")
    print(f"  stall cut beyond its timeout p99 {r['stall_late_p99_ms']:.2f} ms over {r['stalled_exchanges']} "
          "stalls (goal <= 50 ms)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
