"""`proxycheck merge RUN... --out RUN`: one bench run from the shards of several.

A load too large for one client process or machine is run as shards (`bench --shard I/N
--start-at EPOCH` on each machine, or `bench --workers N` on one); this command puts their runs
back together: every observation on one time base (the earliest run's wall-clock start; the
machines' clocks must agree, as NTP keeps them), the measurement window where all shards were
loading at once (the intersection of theirs: the whole load's steady state), and the summary
made again from all of it. The merged run is an ordinary bench run: `compare` takes it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from proxycheck.commands.common import EXIT_FAULT, EXIT_OK, reports_bad_input
from proxycheck.core.errors import BadInput

SUMMED = ("concurrency", "rate", "requests")


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


@reports_bad_input
def run(args: argparse.Namespace) -> int:
    from proxycheck.commands.replay import check_out

    check_out(args.out)
    summary = merge_runs(args.runs, args.out)
    return EXIT_FAULT if summary.failures else EXIT_OK


def merge_runs(directories: list[str], out: str, title_extra: str = "") -> Any:
    """Merge the bench runs in `directories` into a new run `out`; print and return its summary."""
    from proxycheck.commands.bench import BENCH_KEY
    from proxycheck.commands.compare import slo_of
    from proxycheck.core.bench.perf import Window, steady_state
    from proxycheck.io.runstore import RunWriter, load_run
    from proxycheck.report.bench_view import render_bench

    runs = [load_run(d) for d in directories]
    benches = []
    for directory, r in zip(directories, runs):
        bench = r.meta.get(BENCH_KEY)
        if not isinstance(bench, dict) or not isinstance(bench.get("window"), list):
            raise BadInput(directory, "not a bench run (run.json has no \"bench\"; make it with proxycheck bench)")
        benches.append(bench)
    routes = {tuple(r.routes) for r in runs}
    if len(routes) > 1:
        raise BadInput(directories[1], f"the runs went over different routes: {sorted(routes)}")
    if len({r.run_id for r in runs}) < len(runs):
        raise BadInput(directories[-1], "the same run is given twice")
    _warn_about_shards(directories, benches)
    base = min(r.started_at for r in runs)
    observations = []
    starts, ends = [], []
    for r, bench in zip(runs, benches):
        shift = r.started_at - base
        observations += [replace(o, t_start=round(o.t_start + shift, 6)) for o in r.observations]
        starts.append(float(bench["window"][0]) + shift)
        ends.append(float(bench["window"][1]) + shift)
    if max(starts) >= min(ends):
        raise BadInput(directories[0], "the runs' measurement windows do not overlap: they did not run at the same "
                                       "time (start the shards together with bench --start-at)")  # fmt: skip
    window = Window(max(starts), min(ends))
    options = dict(runs[0].meta.get("options") or {})
    whole = options.pop("whole", None)
    for key in SUMMED:
        values = [(r.meta.get("options") or {}).get(key) for r in runs]
        options[key] = None if any(v is None for v in values) else sum(values)
    if isinstance(whole, dict):
        options["whole"] = whole
    options["merged_from"] = [r.run_id for r in runs]
    slo = slo_of(options, f"{directories[0]}/run.json")
    summary = steady_state(observations, window, slo)
    writer = RunWriter(out, chain=runs[0].meta.get("chain"), routes=runs[0].routes, options=options,
                       started_at=base)  # fmt: skip
    for obs in sorted(observations, key=lambda o: o.t_start):
        writer.add(obs)
    load = f"{len(runs)} runs merged" + (f" ({title_extra})" if title_extra else "")
    writer.meta[BENCH_KEY] = {
        "window": [window.start, window.end],
        "issued": sum(int(b.get("issued", 0)) for b in benches),
        "measured": sum(int(b.get("measured", 0)) for b in benches),
        "load": load,
        "shard": None,
        "summary": summary.to_json(),
    }
    writer.close("completed" if all(r.status == "completed" for r in runs) else "interrupted")
    route = runs[0].routes[0] if runs[0].routes else "?"
    render_bench(summary.to_json(), title=f"bench {route}: {load}")
    print(f"proxycheck: run {writer.run_id}: {writer.count} request(s) from {len(runs)} runs; {out}", file=sys.stderr)
    return summary


def _warn_about_shards(directories: list[str], benches: list[dict[str, Any]]) -> None:
    """A shard missing or given twice skews the merged load: said, not refused."""
    shards = [b.get("shard") for b in benches]
    if any(s is None for s in shards):
        return
    counts = {s[1] for s in shards}
    indices = sorted(s[0] for s in shards)
    if len(counts) > 1 or indices != list(range(1, next(iter(counts)) + 1)):
        shown = ", ".join(f"{s[0]}/{s[1]}" for s in shards)
        print(f"proxycheck: warning: the shards merged are {shown}: not every shard of one load once",
              file=sys.stderr)  # fmt: skip
