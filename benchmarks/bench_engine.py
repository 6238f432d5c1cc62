"""Reference engine throughput: streamed events/s at 64 and 256 concurrent streams, against a
minimal aiohttp SSE server that writes pre-encoded events, measured side by side in one run.

The engine must never be what limits a replay benchmark, so the goal is a ratio >= 0.8. Both
servers run as separate processes with no token delay (`--token-interval 0`): they write as fast
as the client reads. The client is one aiohttp process that counts SSE events on the wire.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from proxycheck.io.procs import Managed, free_port, start_engine

TOKENS = 64  # events per stream (plus role, finish and [DONE] chunks)
BODIES = 32  # distinct request bodies, cycled, as a replay of a recording would


def request_bodies() -> list[bytes]:
    return [
        json.dumps({"model": "m", "stream": True, "max_tokens": TOKENS,
                    "messages": [{"role": "user", "content": f"benchmark request {i} " + "x" * 400}]}).encode()
        for i in range(BODIES)
    ]


# ------------------------------------------------------------------------ the baseline server


def baseline_events() -> list[bytes]:
    head = {"id": "chatcmpl-0", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    events = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    events += [{**head, "choices": [{"index": 0, "delta": {"content": " word"}, "finish_reason": None}]}] * TOKENS
    events += [{**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
    return [b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


def run_baseline(port: int) -> None:
    events = baseline_events()

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for e in events:
            await resp.write(e)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


# ---------------------------------------------------------------------------------- the client


async def drive(url: str, concurrency: int, duration: float, bodies: list[bytes]) -> tuple[float, int, int]:
    """(events/s, streams completed, errors) over `duration` seconds at `concurrency`."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    events = streams = errors = 0
    stop_at = time.monotonic() + duration

    async def worker(i: int) -> None:
        nonlocal events, streams, errors
        n = i
        while time.monotonic() < stop_at:
            body = bodies[n % len(bodies)]
            n += 1
            try:
                async with session.post(url + "/v1/chat/completions", data=body,
                                        headers={"content-type": "application/json"}) as resp:
                    count = 0
                    async for line in resp.content:
                        if line.startswith(b"data:"):
                            count += 1
                    events += count
                    streams += 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                errors += 1

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        t0 = time.monotonic()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.monotonic() - t0
    return events / elapsed, streams, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per measurement")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--baseline-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline_server:
        run_baseline(args.baseline_server)
        return 0

    engine = start_engine("--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")
    port = free_port()
    baseline = Managed([sys.executable, __file__, "--baseline-server", str(port)], "127.0.0.1", port, name="baseline")
    figures = {}
    try:
        baseline.wait_ready()
        bodies = request_bodies()
        for concurrency in (64, 256):
            rates = {"engine": 0.0, "baseline": 0.0}
            # Alternate the two servers twice and keep each one's best, so noise hits both alike.
            for _ in range(2):
                for name, url in (("engine", engine.url), ("baseline", baseline.url)):
                    rate, _, errors = asyncio.run(drive(url, concurrency, args.duration, bodies))
                    if errors:
                        print(f"  {name}: {errors} failed streams at concurrency {concurrency}")
                    rates[name] = max(rates[name], rate)
            figures[str(concurrency)] = {
                "engine_events_per_s": round(rates["engine"]),
                "baseline_events_per_s": round(rates["baseline"]),
                "ratio": round(rates["engine"] / rates["baseline"], 3),
            }
    finally:
        engine.stop()
        baseline.stop()
    print(f"streamed events/s, {TOKENS + 3} events per stream, no token delay:")
    for concurrency, f in figures.items():
        print(f"  {concurrency:>3} streams: engine {f['engine_events_per_s']:>8,}  minimal aiohttp SSE "
              f"{f['baseline_events_per_s']:>8,}  ratio {f['ratio']:.2f} (goal >= 0.8)")
    if args.json:
        Path(args.json).write_text(json.dumps({"concurrency": figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
