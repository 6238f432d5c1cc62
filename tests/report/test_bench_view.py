"""The terminal reports of bench and compare, as a user reads them on a console 100 characters wide.

The documents come from the real statistics (`proxycheck.core.bench.perf`) over synthetic runs, so the
view is tested on what bench and compare really hand it."""

from __future__ import annotations

import io
import re

from rich.console import Console

from proxycheck.core.bench.perf import Window, compare, steady_state
from proxycheck.core.exchange.observation import Observation, ResultSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol.result import Event
from proxycheck.report.bench_view import render_bench, render_compare


def stream(start: float, interval: float, tokens: int = 10, outcome: Outcome = Outcome.OK) -> Observation:
    times = [0.05 + i * interval for i in range(tokens)]
    events = tuple(Event(t, 40, "content") for t in times)
    if outcome is Outcome.OK:
        events += (Event(times[-1] + 0.001, 14, "terminal"),)
    end = times[-1] + (0.002 if outcome is Outcome.OK else 1.0)
    return Observation(t_start=start, headers=0.01, first_content=0.05, first_event=0.05, end=end, events=events,
                       status=200, outcome=outcome,
                       result=ResultSummary(text_sha256="0" * 64, text_len=tokens, completion_tokens=tokens,
                                            terminal=outcome is Outcome.OK))  # fmt: skip


def run(interval: float, stalled_every: int = 0) -> list[Observation]:
    out = []
    for i in range(200):
        failed = stalled_every and i % stalled_every == 0
        out.append(stream(i * 0.05, interval * (1 + 0.05 * ((i * 7) % 5 - 2) / 2),
                          outcome=Outcome.STALL_MID_STREAM if failed else Outcome.OK))  # fmt: skip
    return out


def rendered(draw, *args: object) -> str:  # type: ignore[no-untyped-def]
    console = Console(width=100, record=True, color_system=None, file=io.StringIO())
    draw(*args, console=console)
    return console.export_text()


WINDOW = Window(0.0, 10.0)


def test_bench_summary_shows_throughput_latencies_in_ms_and_failures_by_outcome() -> None:
    summary = steady_state(run(0.01, stalled_every=10), WINDOW).to_json()
    out = rendered(render_bench, summary, "bench direct: concurrency 8")
    lines = out.splitlines()
    assert lines[0].rstrip() == "bench direct: concurrency 8"
    assert "measured" in out and "200 request(s), 180 completed" in out
    tpot = next(line for line in lines if line.startswith("TPOT"))
    assert tpot.split()[2] == f"{summary['tpot']['p50'] * 1000:.1f}"  # p50, in milliseconds
    assert 9.5 <= float(tpot.split()[2]) <= 10.5
    assert "failed: stall_mid_stream 20 (10.0% of measured requests)" in out
    assert all(len(line) <= 100 for line in lines)
    clean = rendered(render_bench, steady_state(run(0.01), WINDOW).to_json(), "bench")
    assert "failed: none" in clean


def test_compare_marks_significant_changes_and_lists_the_regressions() -> None:
    doc = compare(run(0.01), WINDOW, run(0.0112), WINDOW, iterations=200).to_json()
    doc["regressions"] = ["tpot_p50 +12.0% (95% CI +11.0% .. +13.0%)"]
    doc["max_regression"] = 5.0
    out = rendered(render_compare, doc, "b against a")
    tpot = next(line for line in out.splitlines() if line.startswith("tpot_p50"))
    assert re.search(r" \+1[12]\.\d%  ", tpot) and tpot.rstrip().endswith("significant"), tpot
    ttft = next(line for line in out.splitlines() if line.startswith("ttft_p50"))
    assert not ttft.rstrip().endswith("significant")
    assert "regressions beyond 5%:" in out and "  tpot_p50 +12.0%" in out
    doc["regressions"] = []
    assert "no regression" in rendered(render_compare, doc, "b against a")
