"""`proxycheck bench` benchmarks, measured side by side in one run on this machine:

(a) the load generator's reach: output tokens/s (and SSE events/s) that `proxycheck.io.bench.bench`
    achieves against the reference engine (no token delay) in a closed loop at concurrency 256,
    64-token answers, the requests of a recording made for the purpose (512 distinct bodies,
    cycled), against a client of the kind `vllm bench serve` is (one shared aiohttp session, 256
    tasks, each event's JSON decoded and timestamped) sending the same requests, as many of them.
    Goal: ratio >= 0.8. Alternating rounds, each side's best, so noise hits both alike;
(b) the CPU time of `proxycheck.core.bench.perf.compare` (1000 bootstrap resamples of 20 blocks) on two
    synthetic runs of 2000 observations each, against merely summarizing both (`steady_state`).

Prints a table and, with --json FILE, writes the figures. Not a test: nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import sys
import time
from pathlib import Path

import aiohttp

from proxycheck.core.bench.perf import Window, compare, steady_state, tokens_of
from proxycheck.core.exchange.observation import Observation, ResultSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.protocol.result import Event
from proxycheck.core.replay.chain import Route
from proxycheck.core.replay.plan import PlannedSession, PlannedTurn, RecordedOutcome
from proxycheck.io.bench import BenchOptions, bench, request_cycle
from proxycheck.io.procs import start_engine

TOKENS = 64
CONCURRENCY = 256
PATH = "/v1/chat/completions"
HEADERS = {"content-type": "application/json"}
WATCHDOGS = Watchdogs(connect=10.0, headers=30.0, stall=30.0, total=120.0)


# -------------------------------------------------------------------- (a) the load generator


def body(i: int) -> bytes:
    doc = {"model": "m", "stream": True, "max_tokens": TOKENS,
           "messages": [{"role": "user", "content": f"benchmark request {i} " + "x" * 400}]}  # fmt: skip
    return json.dumps(doc).encode()


def recording(sessions: int = 32, turns: int = 16) -> list[PlannedTurn]:
    """The requests `proxycheck bench` would send for a recording of `sessions` agent sessions
    of `turns` turns each (as `bench_replayer.py` builds its plan), in bench order."""
    plan = []
    for s in range(sessions):
        planned = tuple(
            PlannedTurn(
                session=f"s{s}", turn=t, xid=s * turns + t, method="POST", url="http://recorded.invalid" + PATH,
                dialect="openai_chat", streamed=True, http_version="HTTP/1.1",
                headers=tuple(HEADERS.items()), body=body(s * turns + t),
                think_time=None if t == 1 else 0.0, new_connection=t == 1, client_id=f"c{s}",
                recorded=RecordedOutcome(Outcome.OK),
            )  # fmt: skip
            for t in range(1, turns + 1)
        )
        plan.append(PlannedSession(f"s{s}", "bench", "openai_chat", 0.01 * s, planned))
    return request_cycle(plan)


async def ours(url: str, turns: list[PlannedTurn], requests: int) -> dict[str, float]:
    seen: list[Observation] = []
    options = BenchOptions(watchdogs=WATCHDOGS, concurrency=CONCURRENCY, requests=requests)
    t0 = time.monotonic()
    result = await bench(turns, Route("direct", url), options, "bench", seen.append)
    elapsed = time.monotonic() - t0
    failed = [o for o in seen if o.outcome is not Outcome.OK]
    if failed or len(seen) != requests:
        detail = f"{failed[0].outcome.value}: {failed[0].detail}" if failed else f"{len(seen)} requests"
        raise RuntimeError(f"benchmark load failed: {detail}")
    tokens = sum(tokens_of(o) for o in seen)
    events = sum(1 for o in seen for e in o.events if e.kind != "comment")
    reported = steady_state(seen, result.window).output_tokens_per_s
    return {"tokens_per_s": tokens / elapsed, "events_per_s": events / elapsed, "reported_tokens_per_s": reported}


async def vllm_style(url: str, bodies: list[bytes], requests: int) -> dict[str, float]:
    """What `vllm bench serve`'s OpenAI chat client does per request: stream the answer line by
    line and, for each `data:` event, take a timestamp, decode the JSON, note TTFT or the
    inter-token gap and keep the delta text. One shared session, `CONCURRENCY` tasks taking the
    next request from a shared counter (its --max-concurrency)."""
    counter = itertools.count()
    tokens = events = 0
    timeout = aiohttp.ClientTimeout(total=6 * 3600)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as session:

        async def worker() -> None:
            nonlocal tokens, events
            while (i := next(counter)) < requests:
                start = time.perf_counter()
                ttft, itl, text, last, got, content = 0.0, [], [], start, 0, 0
                async with session.post(url + PATH, data=bodies[i % len(bodies)], headers=HEADERS) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"baseline request failed: HTTP {resp.status}")
                    async for line in resp.content:
                        line = line.strip()
                        if not line:
                            continue
                        got += 1
                        data = line.removeprefix(b"data: ")
                        if data == b"[DONE]":
                            continue
                        now = time.perf_counter()
                        choices = json.loads(data).get("choices")
                        if choices and (delta := choices[0]["delta"].get("content")):
                            if ttft == 0.0:
                                ttft = now - start
                            else:
                                itl.append(now - last)
                            last = now
                            text.append(delta)
                            content += 1
                tokens += content
                events += got

        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        elapsed = time.monotonic() - t0
    return {"tokens_per_s": tokens / elapsed, "events_per_s": events / elapsed}


def load(url: str, requests: int, rounds: int) -> dict[str, dict[str, float]]:
    """Each side's best of `rounds` alternating rounds. A first pass, not measured, fills the
    engine's answer cache, so both sides meet the same engine."""
    turns = recording()
    bodies = [t.body for t in turns]
    asyncio.run(vllm_style(url, bodies, len(bodies)))
    best: dict[str, dict[str, float]] = {"ours": {}, "vllm_style": {}}
    for _ in range(rounds):
        for name, run in (("ours", lambda: ours(url, turns, requests)),
                          ("vllm_style", lambda: vllm_style(url, bodies, requests))):  # fmt: skip
            got = asyncio.run(run())
            if got["tokens_per_s"] > best[name].get("tokens_per_s", 0.0):
                best[name] = got
    return best


# -------------------------------------------------------------------- (b) compare's bootstrap


def synthetic_run(seed: int, count: int = 2000, concurrency: int = 16, slowdown: float = 1.0) -> list[Observation]:
    """`count` observations of a closed-loop run at `concurrency`: 64-token streams, each request
    with its own speed (log-normal, 10%) and TTFT (20%), gaps jittered +-20%, 2 ms between a
    worker's requests. `slowdown` scales every time (run B slightly slower than A)."""
    rng = random.Random(seed)
    clocks = [rng.uniform(0, 0.05) for _ in range(concurrency)]
    out = []
    for k in range(count):
        w = k % concurrency
        speed = 0.01 * slowdown * rng.lognormvariate(0, 0.1)
        t = 0.05 * slowdown * rng.lognormvariate(0, 0.2)
        times = [t]
        for _ in range(TOKENS - 1):
            t += speed * rng.uniform(0.8, 1.2)
            times.append(t)
        events = tuple(Event(x, 20, "content") for x in times) + (Event(t, 14, "terminal"),)
        out.append(Observation(
            t_start=clocks[w], first_event=times[0], first_content=times[0], end=t, events=events,
            outcome=Outcome.OK,
            result=ResultSummary(text_sha256="0" * 64, text_len=TOKENS, completion_tokens=TOKENS, terminal=True),
        ))  # fmt: skip
        clocks[w] += t + 0.002
    return sorted(out, key=lambda o: o.t_start)


def cpu_best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def statistics(repeat: int) -> dict[str, float]:
    a, b = synthetic_run(1), synthetic_run(2, slowdown=1.05)
    # The steady state: after every worker started, before the first one ran out of requests.
    wa, wb = (Window(0.1, 0.95 * run[-1].t_start) for run in (a, b))
    summarize_s = cpu_best(lambda: (steady_state(a, wa), steady_state(b, wb)), repeat)
    compare_s = cpu_best(lambda: compare(a, wa, b, wb, blocks=20, iterations=1000, seed=0), repeat)
    return {"compare_s": round(compare_s, 3), "summarize_s": round(summarize_s, 4),
            "ratio": round(compare_s / summarize_s, 1)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=4096, help="requests per measurement of the load")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of the load (each side's best)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    engine = start_engine("--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")
    try:
        rates = load(engine.url, args.requests, args.rounds)
    finally:
        engine.stop()
    stats = statistics(repeat=3)
    o, v = rates["ours"], rates["vllm_style"]
    figures = {
        "load_256": {
            "requests": args.requests,
            "ours_tokens_per_s": round(o["tokens_per_s"]),
            "ours_events_per_s": round(o["events_per_s"]),
            "ours_reported_tokens_per_s": round(o["reported_tokens_per_s"]),
            "vllm_style_tokens_per_s": round(v["tokens_per_s"]),
            "vllm_style_events_per_s": round(v["events_per_s"]),
            "ratio_tokens": round(o["tokens_per_s"] / v["tokens_per_s"], 3),
            "ratio_events": round(o["events_per_s"] / v["events_per_s"], 3),
        },
        "compare_2x2000": stats,
    }
    f = figures["load_256"]
    print(f"load at concurrency {CONCURRENCY}, {args.requests} requests of {TOKENS}-token answers, no token delay:")
    print(f"  proxycheck bench (in-process)  {f['ours_tokens_per_s']:>8,} tokens/s  "
          f"{f['ours_events_per_s']:>8,} events/s  "
          f"(its own summary: {f['ours_reported_tokens_per_s']:,} tokens/s)")  # fmt: skip
    print(f"  vllm-style aiohttp client      {f['vllm_style_tokens_per_s']:>8,} tokens/s  "
          f"{f['vllm_style_events_per_s']:>8,} events/s")  # fmt: skip
    print(f"  ratio {f['ratio_tokens']:.2f} tokens/s, {f['ratio_events']:.2f} events/s (goal >= 0.8)")
    print("compare of two runs of 2000 observations (64 tokens each), 1000 resamples of 20 blocks, CPU time:")
    print(f"  compare {stats['compare_s']:.2f} s  steady_state both {stats['summarize_s']:.3f} s  "
          f"ratio {stats['ratio']:.1f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
