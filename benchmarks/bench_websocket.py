"""WebSocket sessions: the recorder's per-message latency on a socket against plain mitmdump relaying
the same socket, and the replayer's messages per second over WebSocket against a plain aiohttp
WebSocket client, measured side by side in one run.

Goals (the Responses API's WebSocket mode, Codex's default transport): the recorder's latency
ratio <= 1.10 at p50 and p99, the replayer's throughput ratio >= 0.8.

The upstream is a small aiohttp WebSocket server, run as a subprocess of this script, that answers
each `response.create` with `events` delta events and a `response.completed`, every event stamped
with the `time.time()` at which it was sent; the client subtracts that from the time it arrives
(the same machine, so the same clock). Latency turns are paced (an event every 10 ms, a few
sockets at once, like decoding). As in bench_recorder.py, each kind of hop runs as two mitmdump
processes visited in rotating order, and the first plain process against the second is printed
as the noise floor.

The replayer is measured replaying a recording of sockets whose turns stream as fast as they are
read: messages per second of `replay --route direct` (its run's events over its wall time, start-up
excluded) against the same turns sent by a plain aiohttp client, rounds alternating.
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
PATH = "/v1/responses"
PAD = 120  # bytes of text per event, about a real delta's size


# ----------------------------------------------------------------------- the timestamping upstream


def run_upstream(port: int) -> None:
    """Answer each `response.create` on a socket with `events` events `interval` apart (0: as fast
    as the socket takes them), each stamped with its send time, then `response.completed`."""
    pad = "x" * PAD

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        n = 0
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            doc = json.loads(msg.data)
            events, interval = int(doc.get("events", 10)), float(doc.get("interval", 0))
            n += 1
            rid = f"resp_{id(ws):x}_{n}"
            await ws.send_str(json.dumps({"type": "response.created", "response": {"id": rid}, "t": time.time()}))
            for i in range(events):
                if interval:
                    await asyncio.sleep(interval)
                await ws.send_str(json.dumps({"type": "response.output_text.delta", "delta": pad, "i": i,
                                              "t": time.time()}, separators=(",", ":")))  # fmt: skip
            await ws.send_str(json.dumps({"type": "response.completed", "response": {"id": rid, "status": "completed"},
                                          "t": time.time()}))  # fmt: skip
        return ws

    app = web.Application(client_max_size=1 << 20)
    app.router.add_get(PATH, handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def create(events: int, interval: float, previous: str | None = None) -> str:
    doc = {"type": "response.create", "model": "m", "input": [{"role": "user", "content": "benchmark"}],
           "events": events, "interval": interval}  # fmt: skip
    if previous:
        doc["previous_response_id"] = previous
    return json.dumps(doc)


# ---------------------------------------------------------------------------------- the client


async def socket_turns(url: str, turns: int, events: int, interval: float, latencies: list[float] | None) -> int:
    """One socket, `turns` turns; each message's latency appended when asked; the messages read."""
    count = 0
    previous = None
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url + PATH, max_msg_size=0) as ws:
            for _ in range(turns):
                await ws.send_str(create(events, interval, previous))
                while True:
                    msg = await ws.receive(timeout=60)
                    now = time.time()
                    doc = json.loads(msg.data)
                    count += 1
                    if latencies is not None:
                        latencies.append(now - doc["t"])
                    if doc["type"] == "response.completed":
                        previous = doc["response"]["id"]
                        break
    return count


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def latency_round(urls: dict[str, str], sockets: int, events: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for name, url in urls.items():
        got: list[float] = []
        await asyncio.gather(*(socket_turns(url, 2, events, 0.01, got) for _ in range(sockets)))
        out[name] = got
    return out


def replay_rate(recording: Path, engine_url: str, work: Path) -> float:
    """Messages per second of `proxycheck replay --route direct --pace fast` (its run's events
    over the span of its observations: start-up excluded)."""
    import subprocess

    chain = work / "chain.toml"
    chain.write_text(f'engine = "{engine_url}"\n')
    out = work / f"run-{time.monotonic_ns()}"
    subprocess.run([sys.executable, "-m", "proxycheck", "replay", str(recording), "--chain", str(chain), "--route",
                    "direct", "--pace", "fast", "--out", str(out)], check=True, capture_output=True, timeout=600)  # fmt: skip
    from proxycheck.io.runstore import load_run

    observations = load_run(out).observations
    span = max(o.t_start + (o.end or 0) for o in observations) - min(o.t_start for o in observations)
    return sum(len(o.events) for o in observations) / span


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--sockets", type=int, default=4)
    ap.add_argument("--events", type=int, default=100)
    args = ap.parse_args()
    port = free_port()
    upstream = Managed([sys.executable, __file__, "--upstream-port", str(port)], "127.0.0.1", port, name="upstream")
    work = Path(tempfile.mkdtemp(prefix="bench-ws-"))
    hops: list[Managed] = []
    try:
        upstream.wait_ready(30)
        base = f"http://127.0.0.1:{port}"
        plain = [start_mitmdump("--mode", f"reverse:{base}") for _ in range(2)]
        recording = [start_mitmdump("--mode", f"reverse:{base}", "-s", ADDON, "--set", f"proxycheck_out={work / f'rec{i}'}")
                     for i in range(2)]  # fmt: skip
        hops = plain + recording
        urls = {"plain-0": plain[0].url, "plain-1": plain[1].url, "rec-0": recording[0].url, "rec-1": recording[1].url}
        pooled: dict[str, list[float]] = {name: [] for name in urls}
        names = list(urls)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]  # rotating: no kind always goes first
            got = asyncio.run(latency_round({n: urls[n] for n in order}, args.sockets, args.events))
            for name, values in got.items():
                pooled[name].extend(values)
        plain_l = pooled["plain-0"] + pooled["plain-1"]
        rec_l = pooled["rec-0"] + pooled["rec-1"]
        ratios = {q: pct(rec_l, q) / pct(plain_l, q) for q in (0.5, 0.99)}
        noise = {q: pct(pooled["plain-1"], q) / pct(pooled["plain-0"], q) for q in (0.5, 0.99)}
        for hop in recording:
            hop.stop()
        # The replayer: a recording of sockets streaming as fast as they are read, replayed direct.
        rec = work / "replayable"
        recorder = start_mitmdump("--mode", f"reverse:{base}", "-s", ADDON, "--set", f"proxycheck_out={rec}")
        hops.append(recorder)
        asyncio.run(_gather(recorder.url, args.sockets, 3, 2000))
        time.sleep(0.5)
        recorder.stop()
        plain_rates, replay_rates = [], []
        for _ in range(3):
            t0 = time.monotonic()
            n = asyncio.run(_gather(base, args.sockets, 3, 2000))
            plain_rates.append(n / (time.monotonic() - t0))
            replay_rates.append(replay_rate(rec, base, work))
        throughput = statistics.median(replay_rates) / statistics.median(plain_rates)
    finally:
        for hop in hops:
            hop.stop()
        upstream.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"recorder per-message latency on a socket, {len(rec_l)} messages per kind:")
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        print(f"  {name}: recorder {pct(rec_l, q) * 1000:.2f} ms, plain {pct(plain_l, q) * 1000:.2f} ms: "
              f"ratio {ratios[q]:.3f} (goal <= 1.10; noise floor, plain against plain: {noise[q]:.3f})")  # fmt: skip
    print(f"replayer over WebSocket: {statistics.median(replay_rates):,.0f} messages/s against a plain aiohttp "
          f"client's {statistics.median(plain_rates):,.0f}: ratio {throughput:.2f} (goal >= 0.8)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({
            "latency_ratio_p50": ratios[0.5], "latency_ratio_p99": ratios[0.99], "noise_p50": noise[0.5],
            "noise_p99": noise[0.99], "replay_rate": statistics.median(replay_rates),
            "plain_rate": statistics.median(plain_rates), "throughput_ratio": throughput,
        }, indent=2) + "\n")  # fmt: skip
    return 0


async def _gather(url: str, sockets: int, turns: int, events: int) -> int:
    counts = await asyncio.gather(*(socket_turns(url, turns, events, 0.0, None) for _ in range(sockets)))
    return sum(counts)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--upstream-port":
        run_upstream(int(sys.argv[2]))
    else:
        sys.exit(main())
