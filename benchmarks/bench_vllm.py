"""The recorder and the replayer on vLLM's real stream (SmolLM2-135M on CPU), each side by side
with its baseline in one run, to show that what was measured on the reference engine holds on a
real one:

(a) recorder: streamed chat completions (one fixed prompt, `ignore_eos` and temperature 0, so
    every stream is 64 tokens long and alike) through mitmdump with the recorder addon against
    plain mitmdump streaming, the hops of `bench_recorder.py` (two processes of each kind, visited
    in rotating order round by round), 1 and 4 streams at a time: TTFT p50, the gaps between
    content chunks p50 / p99 and tokens/s of each kind, the ratios recorder / plain, and the first
    plain process against the second as the noise floor;
(b) replayer: 8 sessions of 2 turns at once (a recording synthesized as `bench_replayer.py`
    does, vLLM's requests) replayed by `proxycheck.io.replayer.replay` with each client stack,
    against `bench_replayer.py`'s vllm-style aiohttp client sending the same requests, in
    rotating rounds: tokens/s and TTFT p50 of each, their ratios to that client, and the client
    against itself (it runs twice a round) as the noise floor.

The engine sets the pace and takes most of the CPUs, so wall-clock ratios near 1 are the point.
Both parts also give the CPU per token of the part under test (the hop's mitmdump process, this
client process): its own cost, which the engine's time hides from the wall clock. One vLLM (`proxycheck.io.vllm`, 1 GB of KV cache)
serves both and is stopped in a `finally` (also on Ctrl-C or SIGTERM). Where it is not built
(`make vllm`), the script prints why, writes `{"skipped": reason}` to `--json` and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench_recorder import compare, percentile, rotations, start_hops
from bench_replayer import WATCHDOGS, Timings, _baseline, replayed, sessions

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.replay.plan import PlannedSession
from proxycheck.core.testbed.engine_speed import settings_for
from proxycheck.io.procs import Managed
from proxycheck.io.replayer import ReplayOptions
from proxycheck.io.vllm import SERVED_MODEL, VllmSetup, measure_speed, read_cpu, start_vllm

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 64
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
KV_CACHE_GB = 1  # several engines may share the machine: the least that serves these streams
CLIENTS = ("vllm_style", "replay_aiohttp", "replay_httpx", "vllm_style_again")


def chat_body(i: int = 0, tokens: int = TOKENS) -> bytes:
    """Request i: a streamed chat completion of exactly `tokens` tokens (`ignore_eos`), greedy, so
    every stream is alike; request i > 0 opens with its number (requests of a replayed recording
    differ), the rest of the prompt shared (vLLM's prefix cache serves it alike to every client)."""
    content = f"Request {i}. {PROMPT}" if i else PROMPT
    doc = {"model": SERVED_MODEL, "stream": True, "max_tokens": tokens, "ignore_eos": True, "temperature": 0,
           "messages": [{"role": "user", "content": content}]}  # fmt: skip
    return json.dumps(doc).encode()


@dataclass
class Measured(Timings):
    """Timings, and the CPU seconds that the part under test (a hop process, or this client) used
    meanwhile: what it costs a token, beside the engine's time that the wall-clock figures show."""

    cpu: float = 0.0

    @property
    def cpu_ms_per_1k_tokens(self) -> float:
        return self.cpu * 1e6 / self.content if self.content else 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process `pid` has used (Linux's /proc; 0.0 where unreadable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the command name
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def kind_figures(t: Measured) -> dict:
    return {"streams": len(t.ttft), "tokens": t.content, "ttft_p50_ms": ms(percentile(t.ttft, 0.5)),
            "gap_p50_ms": ms(percentile(t.gaps, 0.5)), "gap_p99_ms": ms(percentile(t.gaps, 0.99)),
            "tokens_per_s": round(t.content_per_s, 1), "cpu_ms_per_1k_tokens": round(t.cpu_ms_per_1k_tokens, 1)}  # fmt: skip


def ratios(a: Measured, b: Measured) -> dict:
    """a against b: TTFT p50, gap p50 / p99, tokens/s and CPU per token."""
    gaps = compare(a.gaps, b.gaps, a.content_per_s, b.content_per_s)
    return {"ttft_p50_ratio": round(percentile(a.ttft, 0.5) / percentile(b.ttft, 0.5), 3),
            "gap_p50_ratio": gaps["p50_ratio"], "gap_p99_ratio": gaps["p99_ratio"],
            "tokens_per_s_ratio": gaps["throughput_ratio"],
            "cpu_per_token_ratio": round(a.cpu_ms_per_1k_tokens / max(b.cpu_ms_per_1k_tokens, 1e-9), 3)}  # fmt: skip


def pooled(parts: list[Measured]) -> Measured:
    out = Measured()
    for t in parts:
        out.ttft += t.ttft
        out.gaps += t.gaps
        out.content += t.content
        out.seconds += t.seconds
        out.cpu += t.cpu
    return out


# -------------------------------------------------------------------- (a) the recorder


def recorder(hops: dict[str, Managed], levels: list[int], rounds: int) -> dict:
    """Every hop process at every level of concurrent streams, in rotating order round by round;
    each kind pooled over its processes, the noise floor plain-1 against plain-2. A hop's CPU is
    its mitmdump process's."""
    timings = {(name, n): Measured() for name in hops for n in levels}
    for order in rotations(list(hops), rounds):
        for name in order:
            for n in levels:
                into, cpu = timings[(name, n)], cpu_seconds(hops[name].pid)
                asyncio.run(_baseline(hops[name].url, n, 1, True, lambda _: chat_body(), into))
                into.cpu += cpu_seconds(hops[name].pid) - cpu
    figures = {}
    for n in levels:
        rec = pooled([t for (name, m), t in timings.items() if m == n and name.startswith("recorder")])
        plain = pooled([t for (name, m), t in timings.items() if m == n and name.startswith("plain")])
        figures[f"streams_{n}"] = {
            "recorder": kind_figures(rec), "plain": kind_figures(plain),
            "recorder_vs_plain": ratios(rec, plain),
            "noise_floor": ratios(timings[("plain-1", n)], timings[("plain-2", n)]),
        }  # fmt: skip
    return figures


# -------------------------------------------------------------------- (b) the replayer


async def replay_timings(url: str, plan: list[PlannedSession], client: str, into: Timings) -> None:
    options = ReplayOptions(watchdogs=WATCHDOGS, pace="fast", client=client)  # type: ignore[arg-type]
    t0 = time.monotonic()
    observations = await replayed(url, plan, options)
    into.seconds += time.monotonic() - t0
    for obs in observations:
        add_observation(into, obs)


def add_observation(into: Timings, obs: Observation) -> None:
    """An observation's TTFT, content gaps and content events, as the vllm-style client counts them."""
    if obs.outcome is not Outcome.OK or obs.ttft is None:
        raise RuntimeError(f"benchmark stream failed: {obs.outcome.value}: {obs.detail}")
    into.ttft.append(obs.ttft)
    into.gaps.extend(obs.itl)
    into.content += obs.content_events


def replayer(url: str, concurrency: int, turns: int, rounds: int) -> dict:
    """The same requests from each client in rotating rounds (the vllm-style client twice, for the
    noise floor); a first pass, not measured, warms the engine's prefix cache."""
    plan = sessions(concurrency, turns, 0.0, TOKENS, make_body=chat_body)
    plan_body = lambda i: chat_body(i + 1)  # noqa: E731  the plan's request i + 1 (its turns count from 1)
    timings = {name: Measured() for name in CLIENTS}
    asyncio.run(_baseline(url, concurrency, turns, True, plan_body))
    for order in rotations(list(CLIENTS), rounds):
        for name in order:
            cpu = time.process_time()  # this process is the client alone (the engine is another)
            if name.startswith("vllm_style"):
                asyncio.run(_baseline(url, concurrency, turns, True, plan_body, timings[name]))
            else:
                asyncio.run(replay_timings(url, plan, name.removeprefix("replay_"), timings[name]))
            timings[name].cpu += time.process_time() - cpu
    base = timings["vllm_style"]
    figures: dict = {name: kind_figures(t) for name, t in timings.items()}
    for name in ("replay_aiohttp", "replay_httpx", "vllm_style_again"):
        t = timings[name]
        figures[f"ratio_{name}_to_vllm_style"] = {
            "tokens_per_s": round(t.content_per_s / base.content_per_s, 3),
            "ttft_p50": round(percentile(t.ttft, 0.5) / percentile(base.ttft, 0.5), 3),
            "cpu_per_token": round(t.cpu_ms_per_1k_tokens / max(base.cpu_ms_per_1k_tokens, 1e-9), 3),
        }
    return figures


# -------------------------------------------------------------------- main


def report(figures: dict, args: argparse.Namespace) -> None:
    machine = figures["machine"]
    print(f"{machine['cpu']}; vLLM with {machine['settings']}")
    print(f"vLLM ready in {figures['engine_start_s']:.0f} s; {machine['speed']}")
    print(f"streamed chat completions of {TOKENS} tokens (ignore_eos, temperature 0)")
    print(f"(a) through mitmdump + recorder against mitmdump streaming, {args.rounds} rounds over 2 processes "
          "of each kind:")  # fmt: skip
    for key, level in figures["recorder"].items():
        print(f"  {key.removeprefix('streams_')} stream(s) at a time:")
        for kind, label in (("recorder", "mitmdump + recorder"), ("plain", "mitmdump streaming ")):
            f = level[kind]
            print(f"    {label}  TTFT p50 {f['ttft_p50_ms']:7.1f} ms  gap p50 {f['gap_p50_ms']:6.1f} ms  "
                  f"p99 {f['gap_p99_ms']:6.1f} ms  {f['tokens_per_s']:6.1f} tokens/s  "
                  f"CPU {f['cpu_ms_per_1k_tokens']:5.0f} ms/1k tokens ({f['streams']} streams)")  # fmt: skip
        for key2, label in (("recorder_vs_plain", "ratio recorder / plain"), ("noise_floor", "noise floor plain / plain")):
            r = level[key2]
            print(f"    {label:<26} TTFT p50 {r['ttft_p50_ratio']:.2f}  gap p50 {r['gap_p50_ratio']:.2f}  "
                  f"p99 {r['gap_p99_ratio']:.2f}  tokens/s {r['tokens_per_s_ratio']:.2f}  CPU/token {r['cpu_per_token_ratio']:.2f}")  # fmt: skip
    rp = figures["replayer"]
    print(f"(b) {args.concurrency} sessions of {args.turns} turns at once, {args.replay_rounds} rounds "
          "(ratios to the vllm-style aiohttp client):")  # fmt: skip
    for name, label in (("vllm_style", "vllm-style aiohttp client"), ("replay_aiohttp", "replay --client aiohttp"),
                        ("replay_httpx", "replay --client httpx"), ("vllm_style_again", "vllm-style, again (noise)")):  # fmt: skip
        f = rp[name]
        line = (f"  {label:<26} {f['tokens_per_s']:6.1f} tokens/s  TTFT p50 {f['ttft_p50_ms']:7.1f} ms  "
                f"gap p50 {f['gap_p50_ms']:5.1f} ms  CPU {f['cpu_ms_per_1k_tokens']:4.0f} ms/1k tokens")  # fmt: skip
        if (r := rp.get(f"ratio_{name}_to_vllm_style")) is not None:
            line += f"  ratios: tokens/s {r['tokens_per_s']:.2f}  TTFT p50 {r['ttft_p50']:.2f}  CPU/token {r['cpu_per_token']:.2f}"
        print(line)


def stream_counts(text: str) -> list[int]:
    return [int(n) for n in text.split(",")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds of (a); each visits every hop process once")
    ap.add_argument("--streams", default=[1, 4], type=stream_counts,
                    help="concurrent streams of (a), a comma-separated list (1,4)")  # fmt: skip
    ap.add_argument("--concurrency", type=int, default=8, help="sessions replayed at once in (b)")
    ap.add_argument("--turns", type=int, default=2, help="turns of each session in (b)")
    ap.add_argument("--replay-rounds", type=int, default=3, help="rounds of (b); each runs every client once")
    ap.add_argument("--quick", action="store_true", help="fewer rounds (3 and 2), for a try")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.replay_rounds = min(args.rounds, 3), min(args.replay_rounds, 2)

    setup = VllmSetup.of_project(ROOT)
    reason = setup.missing()
    if reason:
        print(f"skipped: {reason}")
        if args.json:
            Path(args.json).write_text(json.dumps({"skipped": reason}) + "\n")
        return 0
    # SIGTERM (a parent's timeout, a CI cancel) unwinds like Ctrl-C, so the finally stops vLLM.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    out = Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    hops: dict[str, Managed] = {}
    engine: Managed | None = None
    try:
        t0 = time.monotonic()
        engine = start_vllm(setup, kv_cache_gb=KV_CACHE_GB)
        figures: dict = {"engine_start_s": round(time.monotonic() - t0, 1)}
        # The machine and the engine's own speed on it: the ratios below are side by side on one
        # machine, the absolute figures are this CPU's (docs/design.md, "A real engine").
        cpu = read_cpu()
        figures["machine"] = {"cpu": cpu.describe(), "settings": settings_for(cpu).describe(),
                              "speed": measure_speed(engine.url).describe()}  # fmt: skip
        asyncio.run(_baseline(engine.url, 1, 1, True, lambda _: chat_body()))  # the first request, not measured
        start_hops(hops, engine.url, 2, out)
        figures["recorder"] = recorder(hops, args.streams, args.rounds)
        for proc in hops.values():  # (b) goes straight to the engine: the idle hops leave the CPUs to it
            proc.stop()
        hops.clear()
        figures["replayer"] = replayer(engine.url, args.concurrency, args.turns, args.replay_rounds)
    finally:
        for proc in hops.values():
            proc.stop()
        if engine is not None:
            engine.stop(grace=15)
        shutil.rmtree(out, ignore_errors=True)
    report(figures, args)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # the finally has stopped vLLM and the hops
        print("interrupted", file=sys.stderr)
        sys.exit(130)
