"""The terminal report of `proxycheck probe`: the limits of every route, and whose they are.

This module owns how a `ProbeReport` (proxycheck.core.probe.findings) reads in a terminal: a panel
with the conclusion (healthy, or how many findings belong to hops) and what was probed; the
limits table, one row per probe and one column per route in ladder order (direct first), with the
owner of each row's findings in the last column; then each finding in a sentence, the engine's own
limits, and notes. `probe_view` builds the renderable and never prints; `render_probe` prints it.

Cell styles: bold red for a finding that first appears on that route (the hop's own), yellow for
the engine's, dim for one inherited from a route further in, green when nothing was found up to
the bound, cyan for what is only worth knowing.
"""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from proxycheck.core.probe.findings import (
    ENGINE,
    FINDING_STATES,
    INCOMPLETE,
    INFO,
    NONE,
    TITLES,
    Owned,
    ProbeReport,
    attribute,
    cell_text,
    exit_failed,
    finding_text,
    findings,
)

LEGEND = (
    "bold red: first seen on that route (the hop's own) · yellow: the engine's · dim: inherited · green: none found"
)


def _style(o: Owned) -> str:
    state = o.result.state
    if state in FINDING_STATES:
        if o.inherited:
            return "dim"
        return "yellow" if o.owner == ENGINE else "bold red"
    if state == INFO:
        return "cyan"
    if state == NONE:
        return "green"
    if state == INCOMPLETE:
        return "yellow"
    return "dim"


def limits_table(report: ProbeReport, owned: list[Owned]) -> Table:
    table = Table(title="Limits (routes in ladder order: direct first)", title_justify="left")
    table.add_column("probe", no_wrap=True)
    for route in report.routes:
        hops = " → ".join(route.hops) if route.hops else "engine"
        table.add_column(f"{route.name}\n[dim]{hops}[/dim]")
    table.add_column("belongs to")
    for probe in report.probes:
        row: list[RenderableType] = [TITLES.get(probe, probe)]
        owners: list[str] = []
        for route in report.routes:
            o = next((x for x in owned if x.result.route == route.name and x.result.probe == probe), None)
            if o is None:
                row.append(Text("-", style="dim"))
                continue
            row.append(Text(cell_text(o.result), style=_style(o)))
            if o.result.state in FINDING_STATES and not o.inherited and o.owner and o.owner not in owners:
                owners.append(o.owner)
        row.append(Text(", ".join(owners) or "-", style="bold red" if any(w != ENGINE for w in owners) else ""))
        table.add_row(*row)
    return table


def probe_view(report: ProbeReport) -> Group:
    owned = attribute(report)
    hop_findings = [o for o in findings(owned) if o.hop_owned]
    engine_findings = [o for o in findings(owned) if o.owner == ENGINE]
    failed = exit_failed(report)
    head = Text()
    if failed:
        head.append(f"{len(hop_findings)} finding(s) in the chain's hops", style="bold red")
    else:
        head.append("healthy: no hop adds a limit", style="bold green")
    if report.budget_exhausted:
        head.append(f"  (incomplete: --max-tokens-total {report.max_tokens_total} reached)", style="yellow")
    engine = "the reference engine (timing asked per request)" if report.reference else "an engine"
    lines: list[RenderableType] = [
        head,
        Text(f"{engine} at {report.engine}; {report.dialect}, model {report.model}; "
             f"{report.tokens_spent} output tokens asked for; {report.duration:.1f} s", style="dim"),  # fmt: skip
    ]
    parts: list[RenderableType] = [Panel(Group(*lines), title="proxycheck probe", title_align="left",
                                         border_style="red" if failed else "green", expand=False)]  # fmt: skip
    parts.append(limits_table(report, owned))
    parts.append(Text(LEGEND, style="dim"))
    if hop_findings:
        parts.append(Text("\nFindings", style="bold"))
        parts += [Text(f"- {finding_text(o)}") for o in hop_findings]
    if engine_findings:
        parts.append(Text("\nThe engine's own (direct shows them too; not a hop's fault)", style="bold"))
        parts += [Text(f"- {finding_text(o)}", style="yellow") for o in engine_findings]
    # Notes of what was found, and of idle probes (connections closed while idle: worth knowing).
    notes: list[str] = []
    for o in owned:
        r = o.result
        if r.note and (o.finding or r.state == INFO or r.probe == "idle"):
            line = f"- {r.route} {TITLES.get(r.probe, r.probe)}: {r.note}"
            if line not in notes:
                notes.append(line)
    if notes:
        parts.append(Text("\nNotes", style="bold"))
        parts += [Text(line, style="dim") for line in notes]
    return Group(*parts)


def render_probe(report: ProbeReport, console: Console) -> None:
    console.print(probe_view(report))
