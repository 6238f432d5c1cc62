"""Bench runs on disk: an ordinary run (`proxycheck.io.runstore`) whose run.json also keeps, under
"bench", the measurement window, the requests issued and measured, the load, the shard and the
summary. `bench` writes them (`bench_doc`), `compare` reads them (`load_bench`), and `merge_runs`
puts the runs of a bench's shards back together as one."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from proxycheck.core.bench.perf import SLO, PerfSummary, Window, steady_state
from proxycheck.core.errors import BadInput
from proxycheck.core.exchange.observation import Observation
from proxycheck.io.runstore import RunWriter, load_run

BENCH_KEY = "bench"  # run.json's key for the bench's window and summary
SUMMED = ("concurrency", "rate", "requests")  # a merged run's load is the sum of its shards'
NOT_A_BENCH = "not a bench run (run.json has no \"bench\"; make it with proxycheck bench)"


def bench_doc(window: Window, issued: int, measured: int, load: str, shard: Sequence[int] | None,
              summary: PerfSummary) -> dict[str, Any]:  # fmt: skip
    """What run.json keeps under BENCH_KEY."""
    return {
        "window": [window.start, window.end],
        "issued": issued,
        "measured": measured,
        "load": load,
        "shard": list(shard) if shard else None,
        "summary": summary.to_json(),
    }


class BenchRun:
    """A bench run loaded for comparison: its observations on its route, window, options, SLO."""

    def __init__(self, directory: str) -> None:
        run = load_run(directory)
        bench = run.meta.get(BENCH_KEY)
        if not isinstance(bench, dict):
            raise BadInput(directory, NOT_A_BENCH)
        try:
            start, end = (float(v) for v in bench["window"])
            self.window = Window(start, end)
        except (KeyError, TypeError, ValueError) as exc:
            raise BadInput(f"{directory}/run.json", f"bench window unreadable: {exc}") from None
        self.options: dict[str, Any] = dict(run.meta.get("options") or {})
        self.slo = slo_of(self.options, f"{directory}/run.json")
        self.observations: list[Observation] = run.observations
        if not self.observations:
            raise BadInput(directory, "the run holds no observations")


def load_bench(directory: str) -> BenchRun:
    return BenchRun(directory)


def slo_of(options: Mapping[str, Any], where: str) -> SLO | None:
    """The SLO a bench run was made with (its options in run.json), or None."""
    doc = options.get("slo")
    if doc is None:
        return None
    try:
        return SLO(**doc)
    except (TypeError, ValueError) as exc:
        raise BadInput(where, f"bad slo {doc!r}: {exc}") from None


@dataclass(frozen=True)
class MergedRun:
    """The run `merge_runs` wrote: its summary, and what its report says of it."""

    summary: PerfSummary
    run_id: str
    count: int  # requests (observations) in it
    runs: int  # the runs merged
    route: str
    load: str


def merge_runs(directories: list[str], out: str, title_extra: str = "") -> MergedRun:
    """Merge the bench runs in `directories` into a new run `out`: one time base (the earliest
    run's start), the window where every shard was loading, the summary made again."""
    runs = [load_run(d) for d in directories]
    benches = []
    for directory, r in zip(directories, runs):
        bench = r.meta.get(BENCH_KEY)
        if not isinstance(bench, dict) or not isinstance(bench.get("window"), list):
            raise BadInput(directory, NOT_A_BENCH)
        benches.append(bench)
    routes = {tuple(r.routes) for r in runs}
    if len(routes) > 1:
        raise BadInput(directories[1], f"the runs went over different routes: {sorted(routes)}")
    if len({r.run_id for r in runs}) < len(runs):
        raise BadInput(directories[-1], "the same run is given twice")
    _warn_about_shards(benches)
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
    issued = sum(int(b.get("issued", 0)) for b in benches)
    measured = sum(int(b.get("measured", 0)) for b in benches)
    writer.meta[BENCH_KEY] = bench_doc(window, issued, measured, load, None, summary)
    writer.close("completed" if all(r.status == "completed" for r in runs) else "interrupted")
    route = runs[0].routes[0] if runs[0].routes else "?"
    return MergedRun(summary, writer.run_id, writer.count, len(runs), route, load)


def _warn_about_shards(benches: list[dict[str, Any]]) -> None:
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
