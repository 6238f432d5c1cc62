"""`proxycheck bench DIR --chain F --route R --concurrency C --out RUN`: the server under load.

This module owns the command: its flags (one clear line and exit 2 for a bad one), the run
directory (an ordinary run: `run.json` + `observations.jsonl`, with the bench's window and
summary kept in `run.json` under "bench" for `compare` and `merge`), the summary table and
`--json`, Ctrl-C (the run is kept, marked interrupted, its window cut where the load stopped) and
the exit status: 0 when every measured request completed, 1 when any failed (they are counted by
outcome, never dropped). The load is `proxycheck.io.bench`'s; the statistics
`proxycheck.core.bench.perf`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from proxycheck.commandline.common import (
    load_sessions,
    print_warnings,
    non_negative_int,
    non_negative_seconds,
    positive_int,
    positive_number,
    positive_seconds,
)
from proxycheck.commandline.flags import add_watchdog_flags, watchdogs_of
from proxycheck.core.bench.perf import SLO, parse_slo, steady_state
from proxycheck.core.errors import EXIT_FAULT, EXIT_INTERRUPTED, EXIT_OK, BadInput
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.replay.plan import PlannedSession
from proxycheck.io.benchrun import BENCH_KEY, bench_doc, merge_runs
from proxycheck.io.inputs import check_out, check_tls, load_chain
from proxycheck.io.outputs import check_outputs, open_private, write_file
from proxycheck.io.runstore import RunWriter, options_doc
from proxycheck.report.bench_view import render_bench

if TYPE_CHECKING:  # io.bench loads aiohttp: imported in `run`, off the start-up path of other commands
    from proxycheck.io.bench import BenchOptions, Unit

DEFAULT_DURATION = 60.0
WORKERS_START = 2.0  # seconds for the workers to start (imports take ~1 s), plus WORKER_START each
WORKER_START = 0.5


def _slo(text: str) -> SLO:
    try:
        return parse_slo(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "bench",
        help="load the server (over a route) with a recording's requests; TTFT, TPOT, ITL, tokens/s",
        description="Send the recording's requests (cycled, exact bodies) over one route at a fixed "
        "concurrency (closed loop) or arrival rate (open loop, gamma/Poisson), streamed, on aiohttp. Each "
        "request is watched like a replay: a stalled one fails at its timeout and is counted by outcome, "
        "never as a fast success. Exit 0 all measured requests completed, 1 some failed, 2 bad input.",
    )
    p.add_argument("directory", metavar="DIR", help="a recording directory")
    p.add_argument("--chain", required=True, metavar="F", help="the chain file (TOML)")
    p.add_argument("--route", required=True, metavar="R", help="direct, or via:HOP")
    p.add_argument("--concurrency", type=positive_int, metavar="C",
                   help="closed loop: C requests in flight; with --rate, the cap on requests in flight")
    p.add_argument("--rate", type=positive_number, metavar="L", help="open loop: L requests/s")
    p.add_argument("--burstiness", type=positive_number, default=1.0, metavar="B",
                   help="gamma shape of the gaps between arrivals (1: Poisson; below 1 burstier)")
    p.add_argument("--duration", type=positive_seconds, metavar="S",
                   help=f"measured seconds after the warm-up (default {DEFAULT_DURATION:g} unless --requests)")
    p.add_argument("--requests", type=positive_int, metavar="N", help="measured requests after the warm-up")
    p.add_argument("--warmup", type=non_negative_seconds, default=0.0, metavar="S",
                   help="seconds of load before the measurement starts (default 0)")
    p.add_argument("--slo", type=_slo, metavar="ttft:MS,tpot:MS",
                   help="service level objective: goodput counts the requests that meet it")
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="N", help="seed of the arrival times")
    add_watchdog_flags(p)
    p.add_argument("--workers", type=positive_int, default=1, metavar="N",
                   help="split the load over N processes on this machine (merged into --out)")
    p.add_argument("--shard", type=_shard, metavar="I/N",
                   help="run part I of N of the load (one machine of several; combine with proxycheck merge)")
    p.add_argument("--start-at", type=positive_number, metavar="EPOCH",
                   help="start the load at this wall-clock time (seconds since the epoch): shards start together")
    p.add_argument("--json", metavar="F", help="write the summary as JSON to F")
    p.add_argument("--out", required=True, metavar="RUN", help="the run directory to write")
    p.set_defaults(run=run)


def _shard(text: str) -> tuple[int, int]:
    index, sep, count = text.partition("/")
    if not sep or not index.isdigit() or not count.isdigit() or not 1 <= int(index) <= int(count):
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N with 1 <= I <= N (e.g. 2/4)")
    return int(index), int(count)


def run(args: argparse.Namespace) -> int:
    # io.bench loads aiohttp: imported when a bench runs, not at every command's start.
    from proxycheck.io.bench import BenchOptions, bench, load_units, shard_share

    if args.concurrency is None and args.rate is None:
        raise BadInput("--concurrency", "give --concurrency C (closed loop) or --rate L (open loop)")
    if args.duration is not None and args.requests is not None:
        raise BadInput("--duration", "give --duration or --requests, not both")
    if args.duration is None and args.requests is None:
        args.duration = DEFAULT_DURATION
    if args.workers > 1 and args.shard is not None:
        raise BadInput("--workers", "give --workers or --shard, not both (run --workers on each machine's shard "
                                    "by giving it as many shards)")  # fmt: skip
    check_outputs(files={"--json": args.json})
    check_out(args.out)
    chain = load_chain(args.chain)
    route = chain.route(args.route)
    check_tls([route])
    sessions = load_sessions(args.directory)
    units, bare = load_units(sessions)
    if bare:
        print_warnings([f"{args.directory}: {bare} WebSocket upgrade(s) without a turn left out: no request to send"])
    if not units:
        raise BadInput(args.directory, "no LLM requests to send")
    options = BenchOptions(
        watchdogs=watchdogs_of(args, sessions, patience=False), concurrency=args.concurrency, rate=args.rate,
        burstiness=args.burstiness, duration=args.duration, requests=args.requests, warmup=args.warmup,
        seed=args.seed,
    )  # fmt: skip
    if args.workers > 1:
        return _workers(args, options)
    whole = options
    if args.shard is not None:
        try:
            options = shard_share(options, args.shard[0] - 1, args.shard[1], len(units))
        except ValueError as exc:
            raise BadInput("--shard", str(exc)) from None
    doc = _options_doc(args, options)
    doc["whole"] = _options_doc(args, whole)
    writer = RunWriter(args.out, chain=chain.to_doc(), routes=[route.name], options=doc,
                       started_at=args.start_at)  # fmt: skip
    load = _describe_load(options)
    part = f" (shard {args.shard[0]}/{args.shard[1]})" if args.shard else ""
    print(f"proxycheck: bench {route.name}{part}: {load}, {_describe_units(units)} cycled", file=sys.stderr)
    observations: list[Observation] = []

    def sink(obs: Observation) -> None:
        writer.add(obs)
        observations.append(obs)

    with writer:  # the load's own Ctrl-C ends it early (result.interrupted); the run is kept either way
        result = asyncio.run(bench(units, route, options, writer.run_id, sink, start_at=args.start_at))
        summary = steady_state(observations, result.window, args.slo)
        writer.meta[BENCH_KEY] = bench_doc(result.window, result.issued, result.measured, load, args.shard, summary)
        writer.close("interrupted" if result.interrupted else "completed")
    render_bench(summary.to_json(), title=f"bench {route.name}: {load}")
    if args.json:
        write_file(args.json, json.dumps(summary.to_json(), indent=2) + "\n")
    note = " (interrupted)" if result.interrupted else ""
    print(f"proxycheck: run {writer.run_id}: {writer.count} request(s){note}; {args.out}", file=sys.stderr)
    if result.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_FAULT if summary.failures else EXIT_OK


def _workers(args: argparse.Namespace, options: "BenchOptions") -> int:
    """`--workers N`: N shard processes of this same bench, started together, merged into --out."""
    if options.concurrency is not None and options.concurrency < args.workers:
        raise BadInput("--workers", f"more workers ({args.workers}) than --concurrency ({options.concurrency})")
    shards = Path(tempfile.mkdtemp(prefix="proxycheck-bench-"))
    start_at = time.time() + WORKERS_START + WORKER_START * args.workers  # every worker is up by then
    argv = _child_argv(args)
    procs: list[tuple[subprocess.Popen[bytes], Path]] = []
    print(f"proxycheck: bench: {args.workers} worker processes, starting together", file=sys.stderr)
    try:
        for i in range(1, args.workers + 1):
            log = shards / f"worker-{i}.log"
            with os.fdopen(open_private(log), "wb") as err:
                proc = subprocess.Popen([sys.executable, "-m", "proxycheck", "bench", *argv, "--shard",
                                         f"{i}/{args.workers}", "--start-at", f"{start_at:.6f}", "--out",
                                         str(shards / f"shard-{i}")],
                                        stdout=subprocess.DEVNULL, stderr=err, env=os.environ.copy())  # fmt: skip
            procs.append((proc, log))
        statuses = [proc.wait() for proc, _ in procs]
    except BaseException:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        raise
    broken = [(i, log) for i, ((_, log), status) in enumerate(zip(procs, statuses), 1) if status not in (0, 1)]
    if broken:
        i, log = broken[0]
        last = (log.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
        raise BadInput(f"worker {i}", f"exited without a run: {last}")
    merged = merge_runs([str(shards / f"shard-{i}") for i in range(1, args.workers + 1)], args.out,
                        title_extra=f"{args.workers} workers")  # fmt: skip
    render_bench(merged.summary.to_json(), title=f"bench {merged.route}: {merged.load}")
    print(f"proxycheck: run {merged.run_id}: {merged.count} request(s) from {merged.runs} runs; {args.out}",
          file=sys.stderr)  # fmt: skip
    if args.json:
        write_file(args.json, json.dumps(merged.summary.to_json(), indent=2) + "\n")
    return EXIT_FAULT if merged.summary.failures else EXIT_OK


def _child_argv(args: argparse.Namespace) -> list[str]:
    """This bench's flags for a worker (without --workers, --out, --json, which the parent owns)."""
    argv = [str(args.directory), "--chain", str(args.chain), "--route", args.route, "--warmup", repr(args.warmup),
            "--burstiness", repr(args.burstiness), "--seed", str(args.seed)]  # fmt: skip
    for flag, value in (("--concurrency", args.concurrency), ("--rate", args.rate), ("--duration", args.duration),
                        ("--requests", args.requests), ("--connect-timeout", args.connect_timeout),
                        ("--header-timeout", args.header_timeout), ("--stall-timeout", args.stall_timeout),
                        ("--total-timeout", args.total_timeout)):  # fmt: skip
        if value is not None:
            argv += [flag, repr(value) if isinstance(value, float) else str(value)]
    if args.slo is not None:
        argv += ["--slo", str(args.slo)]
    return argv


def _describe_units(units: "Sequence[Unit]") -> str:
    """"3 recorded request(s)", "2 recorded WebSocket session(s) (6 turns)", or both."""
    sockets = [u for u in units if isinstance(u, PlannedSession)]
    said = []
    if len(sockets) < len(units):
        said.append(f"{len(units) - len(sockets)} recorded request(s)")
    if sockets:
        said.append(f"{len(sockets)} recorded WebSocket session(s) ({sum(len(s.turns) for s in sockets)} turns)")
    return " and ".join(said)


def _describe_load(options: "BenchOptions") -> str:
    if options.rate is None:
        load = f"concurrency {options.concurrency}"
    else:
        shape = "Poisson" if options.burstiness == 1 else f"gamma shape {options.burstiness:g}"
        cap = f", at most {options.concurrency} in flight" if options.concurrency else ""
        load = f"{options.rate:g} requests/s ({shape}){cap}"
    amount = f"{options.duration:g} s" if options.duration is not None else f"{options.requests} requests"
    warm = f" after {options.warmup:g} s of warm-up" if options.warmup else ""
    return f"{load}, {amount}{warm}"


def _options_doc(args: argparse.Namespace, options: "BenchOptions") -> dict[str, Any]:
    slo = None if args.slo is None else {"ttft": args.slo.ttft, "tpot": args.slo.tpot, "e2e": args.slo.e2e}
    settings = {
        "command": "bench", "client": "aiohttp", "concurrency": options.concurrency, "rate": options.rate,
        "burstiness": options.burstiness, "duration": options.duration, "requests": options.requests,
        "warmup": options.warmup, "seed": options.seed, "slo": slo,
    }  # fmt: skip
    return options_doc(str(args.directory), settings, options.watchdogs)
