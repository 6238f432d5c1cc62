"""`proxycheck compare RUN_A RUN_B`: what changed between two bench runs, and is it real.

This module owns the command: two runs written by `proxycheck bench` (read by
`proxycheck.io.benchrun`: their windows are in run.json), the table and `--json`, and the exit
status CI scripts use after a fix or a server change: 0 when B is no worse than A beyond
`--max-regression` (by a difference whose confidence interval excludes zero), 1 on such a
regression (fewer tokens/s, slower TTFT/TPOT/ITL/E2E, more failures), 2 on bad input. The
statistics (block bootstrap intervals, Fisher's test on failures) are
`proxycheck.core.bench.perf.compare`'s.
"""

from __future__ import annotations

import argparse
import json
import sys

from proxycheck.commandline.common import non_negative_int, positive_int
from proxycheck.core.bench.perf import compare
from proxycheck.core.errors import EXIT_FAULT, EXIT_OK, BadInput
from proxycheck.io.benchrun import load_bench
from proxycheck.io.outputs import check_outputs, write_file
from proxycheck.report.bench_view import render_compare

DEFAULT_MAX_REGRESSION = 5.0  # percent
DEFAULT_NOISE = 2.0  # percent: run-to-run differences of one configuration on a shared machine
LOAD_KEYS = ("concurrency", "rate", "burstiness", "client")


def _percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a percentage between 0 and 1000")
    return value


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.5 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the confidence must be in [0.5, 1)")
    return value


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "compare",
        help="compare two bench runs: deltas with 95%% confidence intervals, exit 1 on a regression",
        description="Deltas of B against A (tokens/s, requests/s, goodput, TTFT, TPOT, ITL, E2E, failures) "
        "with bootstrap confidence intervals over time blocks of each run. Exit 0 no regression beyond "
        "--max-regression, 1 a significant one, 2 bad input.",
    )
    p.add_argument("run_a", metavar="RUN_A", help="the baseline bench run")
    p.add_argument("run_b", metavar="RUN_B", help="the bench run to judge against it")
    p.add_argument("--max-regression", type=_percent, default=DEFAULT_MAX_REGRESSION, metavar="PCT",
                   help=f"tolerated worsening of a headline metric, in percent (default {DEFAULT_MAX_REGRESSION:g})")
    p.add_argument("--noise", type=_percent, default=DEFAULT_NOISE, metavar="PCT",
                   help="a change is significant only when its whole interval lies beyond +-PCT "
                   f"(default {DEFAULT_NOISE:g}: what two runs of one configuration differ by on a shared machine)")
    p.add_argument("--confidence", type=_confidence, default=0.95, metavar="P", help="interval level (default 0.95)")
    p.add_argument("--iterations", type=positive_int, default=1000, metavar="N", help="bootstrap resamples")
    p.add_argument("--blocks", type=positive_int, default=20, metavar="N", help="time blocks per run")
    p.add_argument("--seed", type=non_negative_int, default=0, metavar="N", help="bootstrap seed")
    p.add_argument("--json", metavar="F", help="write the comparison as JSON to F")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.noise >= 100:
        raise BadInput("--noise", f"{args.noise:g}% is no noise band (give less than 100)")
    check_outputs(files={"--json": args.json})
    a, b = load_bench(args.run_a), load_bench(args.run_b)
    for key in LOAD_KEYS:
        if a.options.get(key) != b.options.get(key):
            print(f"proxycheck: warning: the runs differ in {key} ({a.options.get(key)} vs {b.options.get(key)}): "
                  "an A/B comparison should keep the load the same", file=sys.stderr)  # fmt: skip
    slo = a.slo if a.slo == b.slo else None
    result = compare(a.observations, a.window, b.observations, b.window, slo=slo, blocks=args.blocks,
                     iterations=args.iterations, seed=args.seed, confidence=args.confidence,
                     noise=args.noise / 100)  # fmt: skip
    regressions = result.regressions(args.max_regression / 100)
    doc = {**result.to_json(), "a": str(args.run_a), "b": str(args.run_b), "max_regression": args.max_regression,
           "regressions": regressions}  # fmt: skip
    render_compare(doc, title=f"{args.run_b} against {args.run_a}")
    if args.json:
        write_file(args.json, json.dumps(doc, indent=2) + "\n")
    return EXIT_FAULT if regressions else EXIT_OK
