"""Replayer benchmarks, measured side by side in one run against the reference engine:

(a) sustained SSE events/s at 256 concurrent streams (`--token-interval 0`) replayed by
    `proxycheck.io.replayer.replay` with each client stack (`--client aiohttp`, and the default
    httpx), each as a ratio against a minimal aiohttp streaming client of the kind
    `vllm bench serve` uses (goal >= 0.8 for aiohttp), and against one that only counts lines;
(b) at 64 concurrent sessions replayed by `proxycheck.io.replayer.replay`: the p99 of
    |replayed - recorded| think time (goal <= 5 ms) with the sessions' starts spread over a think
    time as recorded sessions' are (and, for scale, all in lockstep), against the same replay
    with its sessions woken by plain `asyncio.sleep` (how the replayer slept before its alarms:
    `plain_sleeps`), in alternating rounds; and the p99 of how late the stall watchdog cuts a
    stalled stream beyond its configured timeout (goal <= 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Iterator

import aiohttp

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.replay.chain import Route
from proxycheck.core.replay.plan import PlannedSession, PlannedTurn, RecordedOutcome, p99
from proxycheck.io import replayer as replayer_module
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
#
# The same work for every client: 256 sessions at once, each sending `turns` requests one after
# the other with no think time. The replayer runs it as it runs any replay (a client per
# session, the connection reused across turns, every event parsed and timed). The baselines
# share one aiohttp session among 256 workers, as `vllm bench serve` does: `vllm_style` reads
# the stream line by line and, for each `data:` line, takes a timestamp, decodes the JSON and
# keeps the delta text (what that client does to measure TTFT and ITL); `lines_only` only counts
# `data:` lines, the least any client can do.


@dataclass
class Timings:
    """What the vllm-style client measured, when asked (`bench_vllm.py`): each stream's TTFT (from
    the send to its first event with content), the gaps between its content events, and the
    content events and seconds of every run."""

    ttft: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    content: int = 0
    seconds: float = 0.0

    def add_stream(self, sent: float, marks: list[float]) -> None:
        """One stream sent at `sent` whose content events came at `marks` (perf_counter times)."""
        if marks:
            self.ttft.append(marks[0] - sent)
            self.gaps.extend(b - a for a, b in zip(marks, marks[1:]))
            self.content += len(marks)

    @property
    def content_per_s(self) -> float:
        return self.content / self.seconds if self.seconds else 0.0


async def _baseline(url: str, concurrency: int, turns: int, parse: bool,
                    make_body: Callable[[int], bytes] = body, timings: Timings | None = None) -> float:  # fmt: skip
    """Events per second; with `timings` (and `parse`), every stream's timings are added to it."""
    events = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker(s: int) -> None:
            nonlocal events
            for t in range(turns):
                sent = time.perf_counter()
                async with session.post(url + PATH, data=make_body(s * turns + t), headers=HEADERS) as resp:
                    if resp.status != 200:
                        raise RuntimeError(f"baseline request failed: HTTP {resp.status}: {await resp.text()}")
                    got, text, stamps, marks = 0, [], [], []
                    async for line in resp.content:
                        if not line.startswith(b"data:"):
                            continue
                        got += 1
                        data = line[5:].strip()
                        if parse and data != b"[DONE]":
                            stamps.append(time.perf_counter())
                            choices = json.loads(data).get("choices")
                            if choices:
                                text.append(delta := choices[0]["delta"].get("content") or "")
                                if delta and timings is not None:
                                    marks.append(stamps[-1])
                events += got
                if timings is not None:
                    timings.add_stream(sent, marks)

        t0 = time.monotonic()
        await asyncio.gather(*(worker(s) for s in range(concurrency)))
        elapsed = time.monotonic() - t0
        if timings is not None:
            timings.seconds += elapsed
        return events / elapsed


async def replayer(url: str, concurrency: int, turns: int, client: str) -> float:
    plan = sessions(concurrency, turns, 0.0, TOKENS)
    options = ReplayOptions(watchdogs=WATCHDOGS, pace="fast", client=client)  # type: ignore[arg-type]
    t0 = time.monotonic()
    observations = await replayed(url, plan, options)
    elapsed = time.monotonic() - t0
    return sum(_events(obs) for obs in observations) / elapsed


def _events(obs: Observation) -> int:
    if obs.outcome is not Outcome.OK:
        raise RuntimeError(f"benchmark stream failed: {obs.outcome.value}: {obs.detail}")
    return sum(1 for e in obs.events if e.kind != "comment")


def throughput(url: str, concurrency: int, turns: int) -> dict[str, float]:
    """Best of two alternating rounds for each client, so noise hits all alike. A first pass,
    not measured, fills the engine's answer cache, so every client meets the same engine."""
    clients: dict[str, Callable[[], Awaitable[float]]] = {
        "vllm_style": lambda: _baseline(url, concurrency, turns, parse=True),
        "lines_only": lambda: _baseline(url, concurrency, turns, parse=False),
        "replay_aiohttp": lambda: replayer(url, concurrency, turns, "aiohttp"),
        "replay_httpx": lambda: replayer(url, concurrency, turns, "httpx"),
    }
    asyncio.run(_baseline(url, concurrency, turns, parse=False))
    best = dict.fromkeys(clients, 0.0)
    for _ in range(2):
        for name, run in clients.items():
            best[name] = max(best[name], asyncio.run(run()))
    return best


# -------------------------------------------------------------------- (b) replay timing


def sessions(count: int, turns: int, think: float, tokens: int, spread: float = 0.0,
             make_body: Callable[[int, int], bytes] = body) -> list[PlannedSession]:  # fmt: skip
    """`count` sessions of `turns` turns; their recorded starts are spread evenly over `spread`
    seconds (0: all at once); `make_body(i, tokens)` is request i's body."""
    out = []
    for s in range(count):
        planned = tuple(
            PlannedTurn(
                session=f"s{s}", turn=t, xid=s * turns + t, method="POST", url="http://recorded.invalid" + PATH,
                dialect="openai_chat", streamed=True, http_version="HTTP/1.1",
                headers=tuple(HEADERS.items()), body=make_body(s * turns + t, tokens),
                think_time=None if t == 1 else think, new_connection=t == 1, client_id=f"c{s}",
                recorded=RecordedOutcome(Outcome.OK),
            )  # fmt: skip
            for t in range(1, turns + 1)
        )
        out.append(PlannedSession(f"s{s}", "bench", "openai_chat", spread * s / count, planned))
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


@contextmanager
def plain_sleeps() -> Iterator[None]:
    """The baseline of (b): every wait of the replay slept with `asyncio.sleep` and nothing
    woken between reads, as the replayer did before its alarms (`proxycheck.io.replayer._Alarms`);
    the rest of the replay is the same."""
    alarms = replayer_module._Alarms
    saved = alarms.sleep_until, alarms.ring

    async def sleep_until(self: object, when: float) -> None:
        delay = when - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    alarms.sleep_until, alarms.ring = sleep_until, lambda self: None  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        alarms.sleep_until, alarms.ring = saved  # type: ignore[method-assign]


def timing(url: str, rounds: int, think: float) -> dict[str, list[float]]:
    """|replayed - recorded| think times of 64 sessions of 4 turns, for each way of waking
    (the replayer's, `plain_sleeps`) and each start pattern, pooled over `rounds` rounds that
    alternate them, so the machine's noise hits all alike. A first replay, not counted, warms up."""
    errors: dict[str, list[float]] = {}
    asyncio.run(replayed(url, sessions(64, 4, think, 16, think), ReplayOptions(watchdogs=WATCHDOGS)))
    for _ in range(rounds):
        # Recorded sessions start at different times; lockstep (all 64 start, and so wake from
        # their think times, in the same millisecond) is the worst case, shown for scale.
        for starts, spread in (("staggered", think), ("lockstep", 0.0)):
            for waking in ("replayer", "plain_sleep"):
                plan = sessions(64, 4, think, 16, spread)
                with plain_sleeps() if waking == "plain_sleep" else nullcontext():
                    observed = asyncio.run(replayed(url, plan, ReplayOptions(watchdogs=WATCHDOGS)))
                errors.setdefault(f"{starts}_{waking}", []).extend(think_errors(observed, think))
    return errors


def _ms(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank, in ms (q = 0.99 is `p99`'s)."""
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1000, 2)


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
    ap.add_argument("--turns", type=int, default=16, help="requests per session in the throughput measurement")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the think-time measurement (each replay in each)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    fast = start_engine("--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")
    paced = start_engine("--token-interval", "0.002", "--ttft-per-kb", "0")
    stalling = start_engine("--token-interval", "0.002", "--ttft-per-kb", "0", "--fault", "stall:after=3")
    try:
        rates = throughput(fast.url, 256, args.turns)
        think, stall = 0.2, 0.5
        errors = timing(paced.url, max(1, args.rounds), think)
        stall_wd = Watchdogs(connect=10.0, headers=30.0, stall=stall, total=120.0)
        obs = asyncio.run(replayed(stalling.url, sessions(64, 1, think, 16), ReplayOptions(watchdogs=stall_wd)))
        late = stall_lateness(obs, stall)
    finally:
        for proc in (fast, paced, stalling):
            proc.stop()
    figures = {
        "streams_256": {name: round(rate) for name, rate in rates.items()}
        | {
            f"ratio_{client}_to_{base}": round(rates[f"replay_{client}"] / rates[base], 3)
            for client in ("aiohttp", "httpx")
            for base in ("vllm_style", "lines_only")
        },
        "sessions_64": {
            # think_error_p99_ms, think_error_p99_ms_lockstep, ..._plain_sleep: the baseline's
            f"think_error_{q}_ms{'' if starts == 'staggered' else '_lockstep'}{'' if waking == 'replayer' else '_plain_sleep'}":
                _ms(errors[f"{starts}_{waking}"], level)
            for starts in ("staggered", "lockstep")
            for waking in ("replayer", "plain_sleep")
            for q, level in (("p50", 0.5), ("p99", 0.99), ("max", 1.0))
        }
        | {
            "think_times": len(errors["staggered_replayer"]),
            "stall_late_p99_ms": round(p99(late) * 1000, 2),
            "stalled_exchanges": len(late),
        },
    }  # fmt: skip
    r = figures["sessions_64"]
    for starts in ("", "_lockstep"):
        r[f"ratio_think_error_p99{starts}_plain_sleep_to_replayer"] = round(
            r[f"think_error_p99_ms{starts}_plain_sleep"] / max(r[f"think_error_p99_ms{starts}"], 0.01), 2
        )
    s = figures["streams_256"]
    print(f"SSE events/s at 256 concurrent streams, {TOKENS}-token answers, no token delay")
    print("(ratios: to the vllm-style client, to the lines-only one):")
    print(f"  vllm-style aiohttp client {s['vllm_style']:>9,}")
    print(f"  lines-only aiohttp client {s['lines_only']:>9,}")
    for client in ("aiohttp", "httpx"):
        goal = "  (goal >= 0.8)" if client == "aiohttp" else ""
        ratios = f"{s[f'ratio_{client}_to_vllm_style']:.2f}, {s[f'ratio_{client}_to_lines_only']:.2f}"
        print(f"  replay --client {client:<9} {s[f'replay_{client}']:>9,}  ratio {ratios}{goal}")
    print("64 concurrent sessions replayed (16-token answers at 2 ms a token, 0.2 s think times):")
    print(f"  think time |replayed - recorded| p99 {r['think_error_p99_ms']:.2f} ms, staggered starts (goal <= 5 ms); "
          f"{r['think_error_p99_ms_lockstep']:.2f} ms in lockstep")  # fmt: skip
    print(f"  over {r['think_times']} think times each, p50 / p99 / max, and against sessions woken by plain asyncio.sleep:")
    for starts, label in (("", "staggered"), ("_lockstep", "lockstep")):
        ours = " / ".join(f"{r[f'think_error_{q}_ms{starts}']:.2f}" for q in ("p50", "p99", "max"))
        plain = " / ".join(f"{r[f'think_error_{q}_ms{starts}_plain_sleep']:.2f}" for q in ("p50", "p99", "max"))
        print(f"    {label:<9} replayer {ours} ms; asyncio.sleep {plain} ms; "
              f"p99 ratio {r[f'ratio_think_error_p99{starts}_plain_sleep_to_replayer']:.1f}x")  # fmt: skip
    print(f"  stall cut beyond its timeout p99 {r['stall_late_p99_ms']:.2f} ms over {r['stalled_exchanges']} "
          "stalls (goal <= 50 ms)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
