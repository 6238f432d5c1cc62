"""`proxycheck merge RUN... --out RUN`: one bench run from the shards of several.

A load too large for one client process or machine is run as shards (`bench --shard I/N
--start-at EPOCH` on each machine, or `bench --workers N` on one); this command puts their runs
back together: every observation on one time base (the earliest run's wall-clock start; the
machines' clocks must agree, as NTP keeps them), the measurement window where all shards were
loading at once (the intersection of theirs: the whole load's steady state), and the summary
made again from all of it (`proxycheck.io.benchrun.merge_runs`). The merged run is an ordinary
bench run: `compare` takes it.
"""

from __future__ import annotations

import argparse
import sys

from proxycheck.core.errors import EXIT_FAULT, EXIT_OK
from proxycheck.io.benchrun import merge_runs
from proxycheck.io.inputs import check_out
from proxycheck.report.bench_view import render_bench


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "merge",
        help="combine the shards of a bench (several processes or machines) into one run",
        description="Put bench runs made as shards (bench --shard I/N) back together: one time base, the "
        "window where every shard was loading, one summary. Exit 0 no measured request failed, 1 some "
        "failed, 2 bad input.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN", help="bench runs (the shards)")
    p.add_argument("--out", required=True, metavar="RUN", help="the merged run directory to write")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_out(args.out)
    merged = merge_runs(args.runs, args.out)
    render_bench(merged.summary.to_json(), title=f"bench {merged.route}: {merged.load}")
    print(f"proxycheck: run {merged.run_id}: {merged.count} request(s) from {merged.runs} runs; {args.out}",
          file=sys.stderr)  # fmt: skip
    return EXIT_FAULT if merged.summary.failures else EXIT_OK
