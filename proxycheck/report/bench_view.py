"""The terminal reports of `proxycheck bench` and `proxycheck compare`.

This module owns how a bench summary and a comparison read in a terminal. Both are built from
their JSON documents (`PerfSummary.to_json()`, the compare document), so what the terminal shows
is what `--json` writes. `bench_view` / `compare_view` build renderables and never print;
`render_bench` / `render_compare` print them.

bench: throughput (output tokens/s, requests/s, goodput), then one row per latency metric (TTFT,
TPOT, ITL, E2E: mean, p50, p90, p99 in milliseconds), then failures by outcome — in red, because
a failed request is never a fast one. compare: one row per metric, A, B, the delta and its
confidence interval; significant changes in bold, green when better, red when worse; the
regressions that set the exit status under the table.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "E2E"))
QUANTILES = ("mean", "p50", "p90", "p99")


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _rate(value: Any) -> str:
    return "-" if value is None else f"{value:,.1f}"


def bench_view(summary: dict[str, Any], title: str = "bench") -> RenderableType:
    requests, completed = summary.get("requests", 0), summary.get("completed", 0)
    head = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    head.add_column(style="bold")
    head.add_column(justify="right")
    head.add_row("measured", f"{summary.get('duration', 0):.1f} s, {requests} request(s), {completed} completed")
    head.add_row("output tokens/s", _rate(summary.get("output_tokens_per_s")))
    head.add_row("requests/s", _rate(summary.get("requests_per_s")))
    if summary.get("goodput_per_s") is not None:
        head.add_row("goodput (requests/s in SLO)", _rate(summary.get("goodput_per_s")))
    lat = Table(box=None, pad_edge=False)
    lat.add_column("ms", style="bold")
    for q in QUANTILES:
        lat.add_column(q, justify="right")
    lat.add_column("n", justify="right")
    for key, name in LATENCIES:
        dist = summary.get(key) or {}
        lat.add_row(name, *(_ms(dist.get(q)) for q in QUANTILES), str(dist.get("n", 0)))
    parts: list[RenderableType] = [head, Text(""), lat]
    failures = summary.get("failures") or {}
    if failures:
        shown = ", ".join(f"{outcome} {n}" for outcome, n in sorted(failures.items()))
        rate = summary.get("failure_rate")
        share = f" ({rate:.1%} of measured requests)" if rate is not None else ""
        parts += [Text(""), Text(f"failed: {shown}{share}", style="bold red")]
    else:
        parts += [Text(""), Text("failed: none", style="green")]
    return Group(*parts)


def _delta(metric: dict[str, Any]) -> Text:
    delta = metric.get("delta")
    if delta is None:
        return Text("-")
    worse = delta < 0 if metric.get("better") == "higher" else delta > 0
    style = ("red" if worse else "green") + (" bold" if metric.get("significant") else "")
    return Text(f"{delta:+.1%}", style=style if metric.get("significant") else "")


def _interval(metric: dict[str, Any]) -> str:
    low, high = metric.get("ci_low"), metric.get("ci_high")
    if low is None or high is None:
        return "-"
    return f"{low:+.1%} .. {high:+.1%}"


def _value(metric: dict[str, Any], side: str) -> str:
    value = metric.get(side)
    if value is None:
        return "-"
    return _ms(value) if metric.get("unit") == "s" else _rate(value)


def compare_view(doc: dict[str, Any], title: str = "compare") -> RenderableType:
    confidence = doc.get("confidence", 0.95)
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    table.add_column("metric", style="bold")
    table.add_column("A", justify="right")
    table.add_column("B", justify="right")
    table.add_column("B vs A", justify="right")
    level = f"{confidence * 100:g}%"
    table.add_column(f"{level} CI", justify="right")
    table.add_column("")
    for metric in doc.get("metrics", []):
        unit = " (ms)" if metric.get("unit") == "s" else ""
        name = metric["name"] + unit
        mark = "significant" if metric.get("significant") else ""
        table.add_row(Text(name, style="" if metric.get("headline") else "dim"), _value(metric, "a"),
                      _value(metric, "b"), _delta(metric), _interval(metric), mark)  # fmt: skip
    parts: list[RenderableType] = [table]
    noise = doc.get("noise") or 0.0
    band = f"beyond ±{noise:.0%} (the noise band)" if noise else "excluding 0"
    parts.append(Text(f"significant: the {level} interval lies wholly {band}", style="dim"))
    failures = doc.get("failures") or {}
    if failures:
        line = (f"failures: A {failures.get('a_failed', 0)}/{failures.get('a_requests', 0)}, "
                f"B {failures.get('b_failed', 0)}/{failures.get('b_requests', 0)}")  # fmt: skip
        p_value = failures.get("p_value")
        if p_value is not None:
            line += f" (Fisher p = {p_value:.3g}{', significant' if failures.get('significant') else ''})"
        parts += [Text(""), Text(line, style="bold red" if failures.get("significant") else "")]
    regressions = doc.get("regressions") or []
    parts.append(Text(""))
    if regressions:
        limit = doc.get("max_regression")
        head = f"regressions beyond {limit:g}%:" if limit is not None else "regressions:"
        parts.append(Text(head, style="bold red"))
        parts += [Text(f"  {line}", style="red") for line in regressions]
    else:
        parts.append(Text("no regression", style="green"))
    return Group(*parts)


def render_bench(summary: dict[str, Any], title: str = "bench", console: Console | None = None) -> None:
    (console or Console()).print(bench_view(summary, title))


def render_compare(doc: dict[str, Any], title: str = "compare", console: Console | None = None) -> None:
    (console or Console()).print(compare_view(doc, title))
