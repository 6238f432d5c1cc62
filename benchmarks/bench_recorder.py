"""Recorder overhead: per-event latency and throughput of streamed SSE through mitmdump with the
recorder addon, against the same mitmdump streaming without it (`--set stream_large_bodies=1`),
measured side by side in one run.

The recorder must not be what a user notices on a proxy: the goals are p50 and p99 latency
ratios <= 1.10 and a throughput ratio >= 0.9. The upstream is a small aiohttp SSE server, run as
a subprocess of this script, whose every event carries the `time.time()` at which it was
written; the client (one aiohttp process) subtracts that from the time the event arrives (the
same machine, so the same clock). Latency streams are paced (an event every 10 ms, a few
streams at once, like decoding); throughput streams are written as fast as they are read.

Each kind of hop runs as two mitmdump processes, visited in rotating order round by round, and
each kind's samples are pooled: on a shared machine two identical mitmdump processes differ by
up to a quarter in latency, so one process per kind would measure where each landed, not the
recorder. That difference, the first plain process against the second, is printed as the noise
floor next to each ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from aiohttp import web

from proxycheck.io.procs import Managed, free_port, start_mitmdump

ADDON = str(Path(__file__).resolve().parents[1] / "addons" / "record.py")
PATH = "/v1/chat/completions"
PAD = 120  # bytes of text per event, about a vLLM chunk's size


# ----------------------------------------------------------------------- the timestamping upstream


def run_upstream(port: int) -> None:
    """Stream `events` SSE events per request, `interval` seconds apart (0: as fast as the client
    reads), each stamped with its send time."""
    pad = "x" * PAD

    async def handler(request: web.Request) -> web.StreamResponse:
        doc = await request.json()
        events, interval = int(doc["events"]), float(doc["interval"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for i in range(events):
            if interval:
                await asyncio.sleep(interval)
            event = json.dumps({"i": i, "t": time.time(), "p": pad}, separators=(",", ":"))
            await resp.write(b"data: " + event.encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post(PATH, handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def request_body(events: int, interval: float) -> bytes:
    doc = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "benchmark"}],
           "events": events, "interval": interval}
    return json.dumps(doc).encode()


# ---------------------------------------------------------------------------------- the client


async def stream_once(session: aiohttp.ClientSession, url: str, body: bytes, latencies: list[float] | None) -> int:
    """Read one stream; append each event's latency (s) when asked; return the events read."""
    count = 0
    async with session.post(url + PATH, data=body, headers={"content-type": "application/json"}) as resp:
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            arrived = time.time()
            count += 1
            if latencies is not None:
                latencies.append(arrived - json.loads(line[6:])["t"])
    return count


async def latency_round(url: str, streams: int, events: int, interval: float) -> list[float]:
    latencies: list[float] = []
    body = request_body(events, interval)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        await asyncio.gather(*(stream_once(session, url, body, latencies) for _ in range(streams)))
    return latencies


async def throughput_round(url: str, concurrency: int, events: int, duration: float) -> float:
    """Events per second over `duration` seconds at `concurrency` streams."""
    body = request_body(events, 0.0)
    total = 0
    stop_at = time.monotonic() + duration

    async def worker() -> None:
        nonlocal total
        while time.monotonic() < stop_at:
            events = await stream_once(session, url, body, None)
            total += events  # not `total += await ...`: that reads `total` before the await

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                     timeout=aiohttp.ClientTimeout(total=120)) as session:
        t0 = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - t0
    return total / elapsed


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---------------------------------------------------------------------------------------- main


def rotations(names: list[str], rounds: int) -> list[list[str]]:
    """The hops' order in each round: each one goes first in turn, so none is always first."""
    return [names[r % len(names):] + names[: r % len(names)] for r in range(rounds)]


def latency_figures(samples: list[float]) -> dict:
    return {
        "events": len(samples),
        "p50_ms": round(percentile(samples, 0.50) * 1000, 3),
        "p99_ms": round(percentile(samples, 0.99) * 1000, 3),
        "mean_ms": round(statistics.fmean(samples) * 1000, 3),
    }


def compare(a: list[float], b: list[float], rate_a: float, rate_b: float) -> dict:
    """p50, p99 and throughput ratios of a to b."""
    return {
        "p50_ratio": round(percentile(a, 0.50) / percentile(b, 0.50), 3),
        "p99_ratio": round(percentile(a, 0.99) / percentile(b, 0.99), 3),
        "throughput_ratio": round(rate_a / rate_b, 3),
    }


def start_hops(hops: dict[str, Managed], upstream: str, processes: int, out: Path) -> None:
    """`processes` mitmdump processes of each kind in front of `upstream`, added to `hops` as each
    starts (so that the caller stops those started when one fails): `recorder-i` with the
    recorder addon writing to `out`/i, `plain-i` streaming without it."""
    mode = f"reverse:{upstream}"
    for i in range(1, processes + 1):
        hops[f"recorder-{i}"] = start_mitmdump("--mode", mode, "-s", ADDON, "--set", f"proxycheck_out={out / str(i)}")
        hops[f"plain-{i}"] = start_mitmdump("--mode", mode, "--set", "stream_large_bodies=1")


def measure(hops: dict[str, Managed], args: argparse.Namespace) -> dict:
    """Latency samples and throughput of every hop process, visited in rotating order round by
    round. Each kind (recorder, plain) runs as several processes, because two identical
    mitmdump processes differ by up to a quarter in latency on a shared machine (where each one
    lands on the CPUs): the kinds are compared over all their processes, and the noise floor is
    the first plain process against the second."""
    samples: dict[str, list[float]] = {name: [] for name in hops}
    rates: dict[str, list[float]] = {name: [] for name in hops}
    for order in rotations(list(hops), args.rounds):
        for name in order:
            samples[name] += asyncio.run(latency_round(hops[name].url, args.streams, args.events, args.interval))
    for order in rotations(list(hops), args.rounds):
        for name in order:
            rates[name].append(asyncio.run(throughput_round(hops[name].url, args.concurrency, 500, args.duration)))
    best = {name: max(r) for name, r in rates.items()}

    def kind(prefix: str) -> tuple[list[float], float]:
        names = [n for n in hops if n.startswith(prefix)]
        return [x for n in names for x in samples[n]], statistics.fmean(best[n] for n in names)

    (rec, rec_rate), (plain, plain_rate) = kind("recorder"), kind("plain")
    return {
        "processes_per_kind": args.processes,
        "latency": {"recorder": latency_figures(rec), "plain": latency_figures(plain)}
        | {name: latency_figures(samples[name]) for name in hops},
        "throughput": {"recorder": round(rec_rate), "plain": round(plain_rate)}
        | {name: {"best": round(best[name]), "rounds": [round(r) for r in rates[name]]} for name in hops},
        "recorder_vs_plain": compare(rec, plain, rec_rate, plain_rate),
        "noise_floor": compare(samples["plain-1"], samples["plain-2"], best["plain-1"], best["plain-2"]),
    }


def report(figures: dict, args: argparse.Namespace, recorded: int) -> None:
    lat, thr = figures["latency"], figures["throughput"]
    got, noise = figures["recorder_vs_plain"], figures["noise_floor"]
    print(f"per-event latency, upstream -> client, {args.streams} streams x {args.events} events "
          f"{args.interval * 1000:g} ms apart, {args.rounds} rounds over {args.processes} processes of each kind:")
    for name, label in (("recorder", "mitmdump + recorder"), ("plain", "mitmdump streaming ")):
        f = lat[name]
        print(f"  {label}  p50 {f['p50_ms']:7.3f} ms  p99 {f['p99_ms']:7.3f} ms  mean {f['mean_ms']:7.3f} ms "
              f"({f['events']} events)")
    print(f"  ratio p50 {got['p50_ratio']:.2f}  p99 {got['p99_ratio']:.2f}  (goal <= 1.10; noise floor, one plain "
          f"process against another: p50 {noise['p50_ratio']:.2f}  p99 {noise['p99_ratio']:.2f})")
    print(f"throughput, {args.concurrency} streams of 500 events as fast as read, best of {args.rounds} per process:")
    print(f"  mitmdump + recorder {thr['recorder']:>8,} events/s  mitmdump streaming {thr['plain']:>8,} events/s")
    print(f"  ratio {got['throughput_ratio']:.2f} (goal >= 0.9; noise floor {noise['throughput_ratio']:.2f})")
    print(f"  the recorders journaled {recorded:,} bytes")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="rounds; each visits every hop process once")
    ap.add_argument("--processes", type=int, default=2, help="mitmdump processes of each kind (at least 2)")
    ap.add_argument("--streams", type=int, default=8, help="concurrent paced streams (latency)")
    ap.add_argument("--events", type=int, default=100, help="events per paced stream (latency)")
    ap.add_argument("--interval", type=float, default=0.01, help="seconds between paced events (latency)")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent streams (throughput)")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds per throughput round")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--upstream-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.upstream_server:
        run_upstream(args.upstream_server)
        return 0
    if args.processes < 2:
        ap.error("--processes must be at least 2 (the noise floor compares two plain processes)")

    out = Path(tempfile.mkdtemp(prefix="bench-recorder-"))
    port = free_port()
    upstream = Managed([sys.executable, __file__, "--upstream-server", str(port)], "127.0.0.1", port, name="upstream")
    hops: dict[str, Managed] = {}
    try:
        upstream.wait_ready()
        start_hops(hops, upstream.url, args.processes, out)
        figures = measure(hops, args)
    finally:
        for proc in (*hops.values(), upstream):
            proc.stop()
    recorded = sum(p.stat().st_size for p in out.glob("*/journal.jsonl"))
    shutil.rmtree(out, ignore_errors=True)
    report(figures, args, recorded)
    figures["journal_bytes"] = recorded
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
