"""The trace in the terminal (rich) and as an HTML page: `render_trace`, `trace_html`.

Both say the same, in this order: the verdict and its summary ("proxy: between engine-side and
client-side (hops edge)"), the points from the client inward with their clocks, each pair of
neighbouring points with what diverged between them, and every exchange that failed somewhere,
one line each, as far as each point saw it. Healthy exchanges are counted, not listed. The
words are the core's (`proxycheck.core.points.trace`); nothing is decided here.
"""

from __future__ import annotations

import html

from rich.console import Console
from rich.table import Table
from rich.text import Text

from proxycheck.core.diagnose.verdict import ENGINE, HEALTHY
from proxycheck.core.points.trace import FINE, PairStats, Trace

_STYLE = {HEALTHY: "bold green"}
MAX_LINES = 50  # failed exchanges listed in the terminal; --json keeps all


def headline(trace: Trace) -> str:
    if trace.culprit == ENGINE:
        return f"{trace.verdict}: the engine"
    if trace.segment is not None and trace.verdict == "proxy":
        return f"{trace.verdict}: {trace.segment.text()}"
    if trace.culprit:
        return f"{trace.verdict}: hop {trace.culprit}"
    return trace.verdict


def offset_text(trace: Trace, i: int) -> str:
    o = trace.offsets[i]
    if i == 0:
        return "reference clock"
    if o.source == "wall clocks":
        return "clock as recorded (no exchange to estimate an offset from)"
    return f"clock {o.seconds:+.3f} s ±{max(o.spread, 0.0005):.3f} ({o.anchors} anchor exchange(s))" if o.anchors \
        else f"clock {o.seconds:+.3f} s (from the order of repeated requests)"  # fmt: skip


def diverged_text(stats: PairStats) -> str:
    kinds = {k: v for k, v in sorted(stats.diverged.items()) if v and k != "unmatched_complete"}
    return ", ".join(f"{v} {k}" for k, v in kinds.items()) or "none"


def pair_rows(trace: Trace) -> list[tuple[str, str, str, str]]:
    rows = []
    for s in trace.pairs:
        added = ""
        if s.added_ttft:
            ordered = sorted(s.added_ttft)
            added = f"{ordered[len(ordered) // 2] * 1000:.1f} ms"
        seen = f"{s.both} both, {s.outer_only} only outside, {s.inner_only} only inside"
        rows.append((f"{s.outer} → {s.inner}", seen, diverged_text(s), added))
    return rows


def render_trace(trace: Trace, console: Console) -> None:
    console.print(Text(headline(trace), style=_STYLE.get(trace.verdict, "bold red")))
    console.print(trace.summary)
    console.print()
    points = Table(title="Points, from the client inward", title_justify="left", show_edge=False)
    for column in ("point", "recording", "exchanges", "clock"):
        points.add_column(column)
    for i, p in enumerate(trace.points):
        place = f" (position {p.position})" if p.position is not None else ""
        points.add_row(p.name + place, p.directory, str(len(p.seen)), offset_text(trace, i))
    console.print(points)
    if trace.pairs:
        pairs = Table(title="Between neighbouring points", title_justify="left", show_edge=False)
        for column in ("segment", "exchanges", "diverged", "added TTFT (median)"):
            pairs.add_column(column)
        for row in pair_rows(trace):
            pairs.add_row(*row)
        console.print(pairs)
    failed = trace.failed
    fine = len(trace.tracks) - len(failed)
    console.print(f"{len(trace.tracks)} exchange(s): {fine} fine at every point that saw them, {len(failed)} failed")
    for t in failed[:MAX_LINES]:
        console.print(Text("  " + t.line))
    if len(failed) > MAX_LINES:
        console.print(f"  … and {len(failed) - MAX_LINES} more (--json lists every exchange)")
    for note in trace.notes:
        console.print(Text("note: " + note, style="yellow"))


def trace_html(trace: Trace) -> str:
    """One self-contained page (no script, nothing to fetch)."""
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(p.name)}</td><td>{e(p.directory)}</td><td>{len(p.seen)}</td><td>{e(offset_text(trace, i))}</td></tr>"
        for i, p in enumerate(trace.points)
    )
    pairs = "".join(f"<tr>{''.join(f'<td>{e(c)}</td>' for c in row)}</tr>" for row in pair_rows(trace))
    lines = "".join(f"<li>{e(t.line)}</li>" for t in trace.tracks if t.locus.kind != FINE)
    notes = "".join(f"<li>{e(n)}</li>" for n in trace.notes)
    colour = "#2e7d32" if trace.verdict == HEALTHY else "#c62828"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>proxycheck trace: {e(headline(trace))}</title>\n"
        "<style>body{font:15px/1.45 system-ui,sans-serif;margin:24px;color:#1d2127}"
        "table{border-collapse:collapse}td,th{border-bottom:1px solid #d9dde3;padding:4px 10px;text-align:left}"
        "li{font-family:ui-monospace,monospace;font-size:13px}</style>\n</head>\n<body>\n"
        f"<h1 id=\"verdict\" style=\"color:{colour}\">{e(headline(trace))}</h1>\n<p>{e(trace.summary)}</p>\n"
        f"<h2>Points, from the client inward</h2><table><tr><th>point</th><th>recording</th><th>exchanges</th>"
        f"<th>clock</th></tr>{rows}</table>\n"
        f"<h2>Between neighbouring points</h2><table><tr><th>segment</th><th>exchanges</th><th>diverged</th>"
        f"<th>added TTFT (median)</th></tr>{pairs}</table>\n"
        f"<h2 id=\"failed\">Failed exchanges</h2><ul>{lines or '<li>none</li>'}</ul>\n"
        + (f"<h2>Notes</h2><ul>{notes}</ul>\n" if notes else "")
        + "<footer>proxycheck trace · schema proxycheck.trace/1</footer>\n</body>\n</html>\n"
    )
