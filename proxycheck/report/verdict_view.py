"""The terminal report of `check` and `diff`: the verdict, the routes, the findings, the evidence.

This module owns how a `Verdict` (proxycheck.core.diagnose.verdict) reads in a terminal, and the words of a
verdict the other reports reuse (`headline`, `statistics_line`, `advice_groups`, `advice_heading`,
`hops_text`, `timing_text`, the outcome column order, where a failing stream was cut), so the
terminal, JUnit and HTML reports say the same thing the same way.

Layout, top to bottom: a panel with the verdict word, the culprit, the summary and the statistics
that decided; a route x outcome table in ladder order; the routes an `incomplete` run lacks
(`missing_lines`); the first findings; the advice, once per hop and kind of finding (what was
seen, the likely causes, the fix: `advice_view`); what differed from the recording
(`not-reproduced`); and, when the verdict carries evidence, the first failing exchange's event
timeline above the reference's, as character strips on one time axis. `verdict_view` builds the
renderable and never prints; `render_verdict` prints it.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from proxycheck.core.diagnose.waits import Waits
from proxycheck.core.diagnose.verdict import (
    CUT_SHORT,
    ENGINE,
    HEALTHY,
    INCOMPLETE,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    PROXY,
    SERVER,
    Advice,
    Evidence,
    Finding,
    NoiseFloor,
    RouteReport,
    Scope,
    SeenWhileRecording,
    Verdict,
)
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import attempt_text

ROUTES_TITLE = "Routes (ladder order: direct first)"
MAX_FINDINGS = 5  # the rest are in the JSON document; a terminal report says what to do first
VERDICT_STYLE = {HEALTHY: "green", PROXY: "red", SERVER: "red", NOT_REPRODUCED: "yellow", INCONCLUSIVE: "yellow",
                 INCOMPLETE: "magenta"}  # fmt: skip
MISSING_TITLE = "Routes missing (no verdict without them):"
STATE_STYLE = {"clean": "green", "degraded": "yellow", "failing": "bold red"}

# The timeline strip: one character per time slot. When several events share a slot the most
# telling one wins (an end marker over content, content over keep-alive comments).
MARKS = {"terminal": "]", "error": "!", "malformed": "?", "content": "|", "comment": ".", "meta": "-"}
CUT_MARK = "X"
_PRIORITY = {CUT_MARK: 6, "]": 5, "!": 4, "?": 3, "|": 2, ".": 1, "-": 0, " ": -1}
LEGEND = "| content  . comment  - meta  ] terminal  ! error  ? malformed  X cut (no terminal)"


# -- words shared by the reports ----------------------------------------------------------------


def headline(verdict: Verdict) -> str:
    """The verdict word and its culprit: "proxy: hop edge", "server: the engine", "healthy"."""
    if verdict.culprit == ENGINE:
        return f"{verdict.verdict}: the engine"
    if verdict.culprit:
        return f"{verdict.verdict}: hop {verdict.culprit}"
    seen = verdict.seen_while_recording
    if seen is not None and seen.outer is not None:
        return f"{verdict.verdict}: between {seen.inner} and {seen.outer}"
    return verdict.verdict


def hops_text(route: RouteReport) -> str:
    """The hops a route passes, from its entry inward; direct passes none."""
    return " → ".join(route.hops) if route.hops else "-"


def outcome_columns(routes: Iterable[RouteReport]) -> list[str]:
    """Every outcome seen on any route, in the taxonomy's order (ok first, failures, degradations)."""
    seen = {o for r in routes for o in r.outcomes}
    order = [o.value for o in Outcome]
    return [o for o in order if o in seen] + sorted(seen - set(order))


def seconds(v: float | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    sign = "+" if signed else ""
    return f"{v:{sign}.3f} s" if abs(v) < 10 else f"{v:{sign}.1f} s"


def culprit_route(verdict: Verdict) -> RouteReport | None:
    """The route whose entry is the culprit hop (or direct, for a server verdict)."""
    if verdict.culprit is None:
        return None
    if verdict.culprit == ENGINE:
        return next((r for r in verdict.routes if not r.hops), None)
    return next(
        (r for r in verdict.routes if (r.hops and r.hops[0] == verdict.culprit) or r.route == f"via:{verdict.culprit}"),
        None,
    )


# The localizer's `statistics["method"]`, in words, for statistics that do not say which rule decided.
METHODS = {
    "fisher_exact": "Fisher's exact test",
    "deterministic": "the deterministic rule",
    "direct": "the direct route fails",
}


def _counts(verdict: Verdict) -> list[tuple[str, int, int]]:
    """(route, failed, exchanges) of the routes the deciding test compared: the figures the
    localizer gave (`failing_route`/`failing`, `clean_route`/`clean`), else the culprit's route
    and the next one inward (the ladder step that turned failing), else the failing routes."""
    stats = verdict.statistics
    given = [
        (stats[name], *stats[pair])
        for name, pair in (("failing_route", "failing"), ("clean_route", "clean"))
        if isinstance(stats.get(name), str) and isinstance(stats.get(pair), (list, tuple)) and len(stats[pair]) == 2
    ]
    if given:
        return given
    culprit = culprit_route(verdict)
    if culprit is not None:
        i = verdict.routes.index(culprit)
        compared = [culprit] + ([verdict.routes[i - 1]] if i > 0 else [])
    else:
        compared = [r for r in verdict.routes if r.failures]
    return [(r.route, r.failures, r.exchanges) for r in compared]


def _p_value(stats: dict[str, Any]) -> float | None:
    p = next((stats[k] for k in ("p_value", "p") if k in stats), None)
    return p if isinstance(p, (int, float)) and not isinstance(p, bool) else None


def decision_text(verdict: Verdict) -> str:
    """Which rule decided, or that none did: the localizer's own words (`statistics["rule"]`),
    else the same said from the figures, where a p-value is shown as deciding only when
    Fisher's test did ("" when the statistics say nothing)."""
    stats = verdict.statistics
    for key in ("rule", "test"):
        if isinstance(stats.get(key), str) and stats[key].strip():
            return str(stats[key]).strip()
    method = str(stats.get("method", ""))
    # Statistics without `decided_by`: a proxy or server verdict was decided by its method.
    decided_by = stats.get("decided_by", method if verdict.verdict in (PROXY, SERVER) else None)
    p, alpha = _p_value(stats), stats.get("alpha")
    bound = f" {alpha:g}" if isinstance(alpha, (int, float)) and not isinstance(alpha, bool) else ""
    if decided_by == "direct":
        return METHODS["direct"]
    if decided_by == "deterministic":
        return ("the deterministic rule decided: the same exchanges failed in every repetition of the failing "
                "route and none in the next one inward")  # fmt: skip
    if decided_by == "fisher_exact":
        if p is None:
            return "Fisher's exact test decided"
        return f"Fisher's exact test decided: p={p:.2g}" + (f" <{bound}" if bound else "")
    if p is not None:
        under = bound and p >= float(alpha)  # type: ignore[arg-type]
        return f"neither rule decided: Fisher's exact test p={p:.2g}" + (f", not under{bound}" if under else "")
    return METHODS.get(method, method)


def statistics_line(verdict: Verdict) -> str | None:
    """The rule that decided and the counts it saw: "Fisher's exact test decided: p=0.0003 <
    0.01 (via:edge 10/40 failed, via:gateway 0/40)"."""
    head = decision_text(verdict)
    counts = [f"{route} {k}/{n}" for route, k, n in _counts(verdict)]
    if counts:
        counts[0] += " failed"
    tail = ", ".join(counts)
    if head and tail:
        return f"{head} ({tail})"
    return head or tail or None


def floor_line(floor: NoiseFloor) -> str:
    if floor.deterministic:
        same = "same answers each time"
    elif floor.sampling:
        same = (f"answers vary between repetitions ({floor.content_differs}/{floor.content_compared} "
                "in structure)")  # fmt: skip
    else:
        same = "not known whether answers vary (no exchange repeated)"
    return (f"noise floor ({floor.reference}, {floor.pairs} pair(s)): TTFT ±{seconds(floor.ttft)}, "
            f"E2E ±{seconds(floor.e2e)}, burstiness x{floor.burst:.2f}; {same}")  # fmt: skip


def exchange_label(obs: Observation, verdict: Verdict | None = None) -> str:
    """`session s1 turn 4, repetition 1` (`turn 2, attempt 1 of 3` for a retried turn): by the
    session's label when the verdict knows it."""
    return f"session {turn_text(verdict, obs.session, obs.turn, obs.xid)}, repetition {obs.repetition}"


def turn_text(verdict: Verdict | None, session: str, turn: int, xid: int | None) -> str:
    """`s1 turn 2`, or `s1 turn 2, attempt 1 of 3`: one exchange of a session, as people read it."""
    if verdict is None:
        return f"{session} turn {turn}"
    return f"{verdict.session_label(session)} {attempt_text(turn, *verdict.attempt_of(session, xid))}"


def named_sessions(verdict: Verdict) -> list[str]:
    """The sessions the findings and the evidence name, in order of first mention."""
    mentioned = [f.session for f in verdict.findings]
    if verdict.evidence is not None:
        mentioned.append(verdict.evidence.failing.session)
    return list(dict.fromkeys(mentioned))


def key_lines(verdict: Verdict) -> list[str]:
    """Which label is which keyed session, for the sessions the report names."""
    names = {n.id: n for n in verdict.sessions}
    lines = (names[s].key_line() if s in names else None for s in named_sessions(verdict))
    return [line for line in lines if line]


def lane_end(obs: Observation) -> float:
    """The last moment anything is known of an exchange: its end, or its last event."""
    times = [e.t for e in obs.events]
    if obs.end is not None:
        times.append(obs.end)
    return max(times, default=0.0)


def cut_time(obs: Observation) -> float | None:
    """When a failing exchange was cut off (ended, or given up on) without its terminal event."""
    if obs.outcome.is_failure and obs.e2e is None:
        return lane_end(obs)
    return None


def timeline_span(evidence: Evidence) -> float:
    """The seconds the shared time axis covers (never zero, so it can be divided by)."""
    lanes = [evidence.failing] + ([evidence.reference] if evidence.reference else [])
    return max(max(lane_end(o) for o in lanes), 1e-3)


def timing_text(obs: Observation) -> str:
    """TTFT, E2E or where it was cut, and what arrived: one line under a timeline lane."""
    parts = [f"TTFT {seconds(obs.ttft)}"]
    if obs.e2e is not None:
        parts.append(f"E2E {seconds(obs.e2e)}")
    cut = cut_time(obs)
    if cut is not None:
        parts.append(f"cut at {seconds(cut)} ({obs.outcome.value})")
    parts.append(f"{obs.content_events} content, {obs.comments} comment(s)")
    if obs.status is not None and obs.status != 200:
        parts.append(f"HTTP {obs.status}")
    return " · ".join(parts)


# -- the panel ----------------------------------------------------------------------------------


def verdict_panel(verdict: Verdict) -> Panel:
    style = VERDICT_STYLE.get(verdict.verdict, "bold")
    top = Text()
    top.append(verdict.verdict, style=f"bold {style}")
    if verdict.culprit == ENGINE:
        top.append("   culprit: the engine (the direct route fails)")
    elif verdict.culprit:
        top.append(f"   culprit: hop {verdict.culprit}")
    if verdict.first_turn is not None:
        top.append(f"   from turn {verdict.first_turn}")
    if verdict.verdict == INCOMPLETE:
        top.append("   no verdict from part of the evidence")
    lines: list[RenderableType] = [top, Text(verdict.summary)]
    stats = statistics_line(verdict)
    if stats:
        lines.append(Text(stats, style="dim"))
    if verdict.floor:
        lines.append(Text(floor_line(verdict.floor), style="dim"))
    for hint in verdict.suggestions:
        lines.append(Text(f"suggestion: {hint}", style="yellow"))
    where = f"strategy {verdict.strategy}" + (f" · run {verdict.run}" if verdict.run else "")
    lines.append(Text(where, style="dim"))
    return Panel(Group(*lines), title="proxycheck verdict", title_align="left", border_style=style, expand=False)


# -- the route table ----------------------------------------------------------------------------


def routes_table(routes: Sequence[RouteReport], width: int = 100) -> Table:
    """One row per route in ladder order and one column per outcome seen anywhere; on a console
    too narrow for that, the outcomes of a route folded into one cell ("30 ok · 10 reset")."""
    table = outcome_matrix(routes)
    return table if _min_width(table) <= width else outcome_list_table(routes)


def _min_width(table: Table) -> int:
    """The narrowest a bordered table gets without cutting a word: rich would rather truncate
    headers than fold a table, so this is measured here, not by rich."""

    def longest_word(cell: object) -> int:
        text = cell.plain if isinstance(cell, Text) else str(cell)
        return max((len(w) for w in text.split()), default=0)

    widths = [
        max([longest_word(c.header)] + [longest_word(cell) for cell in c.cells] + [c.min_width or 0])
        for c in table.columns
    ]
    return sum(widths) + 3 * len(widths) + 1  # a space either side of each cell, and the rules


def _route_columns(table: Table, hops: bool = True) -> None:
    table.add_column("route", no_wrap=True)
    if hops:
        table.add_column("hops")
    table.add_column("reps", justify="right")
    table.add_column("exch", justify="right")


def _route_cells(r: RouteReport, hops: bool = True) -> list[RenderableType]:
    # Text, not str: a str cell is read as rich markup, and a hop's name is the user's to choose.
    names = [Text(r.route)] + ([Text(hops_text(r))] if hops else [])
    return names + [str(r.repetitions), str(r.exchanges)]


def _tail_columns(table: Table) -> None:
    table.add_column("state", no_wrap=True)
    table.add_column("TTFT p50", justify="right")
    table.add_column("added", justify="right")


def _tail_cells(r: RouteReport) -> list[RenderableType]:
    return [Text(r.state, style=STATE_STYLE.get(r.state, "")), seconds(r.ttft_p50), seconds(r.added_latency, True)]


def outcome_matrix(routes: Sequence[RouteReport]) -> Table:
    outcomes = outcome_columns(routes)
    table = Table(title=ROUTES_TITLE, title_justify="left")
    _route_columns(table)
    for o in outcomes:
        # An outcome's name is never cut: the hops column wraps first when the console is narrow.
        table.add_column(o, justify="right", no_wrap=True, min_width=len(o))
    _tail_columns(table)
    for r in routes:
        counts = [_count_cell(o, r.outcomes.get(o, 0)) for o in outcomes]
        table.add_row(*_route_cells(r), *counts, *_tail_cells(r))
    return table


def outcome_list_table(routes: Sequence[RouteReport]) -> Table:
    """The narrow form: no hops column (a route's name says where it enters; the hops are those
    inward of it) and no vertical rules, so every character goes to the cells."""
    table = Table(title=ROUTES_TITLE, title_justify="left", box=box.SIMPLE_HEAD)
    _route_columns(table, hops=False)
    table.add_column("outcomes")
    _tail_columns(table)
    order = outcome_columns(routes)
    for r in routes:
        cell = Text()
        for o in (o for o in order if r.outcomes.get(o)):
            if cell:
                cell.append(" · ", style="dim")
            cell.append(f"{r.outcomes[o]} {o}", style="green" if o == Outcome.OK.value else _outcome_style(o))
        table.add_row(*_route_cells(r, hops=False), cell, *_tail_cells(r))
    return table


def _count_cell(outcome: str, n: int) -> Text:
    if n == 0:
        return Text("·", style="dim")
    return Text(str(n), style="green" if outcome == Outcome.OK.value else _outcome_style(outcome))


def _outcome_style(outcome: str) -> str:
    try:
        return "yellow" if Outcome(outcome).is_degradation else "bold red"
    except ValueError:  # an outcome a newer writer added
        return "bold"


# -- findings, differences ----------------------------------------------------------------------


def group_findings(findings: Sequence[Finding]) -> list[tuple[Finding, list[int]]]:
    """Findings of the same exchange and outcome in several repetitions, as one: the first of
    them and the repetitions it happened in (a wedge that repeats is one thing to fix)."""
    groups: dict[tuple[str, str, int, int | None, str, str], tuple[Finding, list[int]]] = {}
    for f in findings:
        # The exchange too: failed attempts of one turn are findings of their own.
        key = (f.route, f.session, f.turn, f.xid, f.outcome, f.advice)
        groups.setdefault(key, (f, []))[1].append(f.repetition)
    return list(groups.values())


def repetitions_text(reps: Sequence[int]) -> str:
    """[1, 2, 3, 5] -> "repetitions 1-3, 5"."""
    runs: list[list[int]] = []
    for r in sorted(set(reps)):
        if runs and r == runs[-1][1] + 1:
            runs[-1][1] = r
        else:
            runs.append([r, r])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
    return f"repetition{'s' if len(reps) > 1 else ''} {text}"


def findings_view(findings: Sequence[Finding], limit: int = MAX_FINDINGS,
                  verdict: Verdict | None = None) -> list[RenderableType]:  # fmt: skip
    """The findings, sessions named as `verdict` knows them (labels, attempts)."""
    groups = group_findings(findings)
    shown = groups[:limit]
    parts: list[RenderableType] = [Text(f"Findings ({len(findings)} in {len(groups)} exchange(s))", style="bold")]
    for f, reps in shown:
        line = Text(f"{f.route}  session {turn_text(verdict, f.session, f.turn, f.xid)} ({repetitions_text(reps)}): ")
        line.append(f.outcome, style=_outcome_style(f.outcome))
        if f.detail:
            line.append(f" — {f.detail}")
        parts.append(line)
    if len(groups) > limit:
        parts.append(Text(f"… and {len(groups) - limit} more (all of them in the --json document)", style="dim"))
    return parts


def advice_groups(verdict: Verdict) -> list[Advice]:
    """The verdict's advice, once per hop and kind of finding; for a verdict that carries none
    (one made by hand, or by an older writer), one per outcome and words of its findings."""
    if verdict.advice:
        return list(verdict.advice)
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in verdict.findings:
        if f.advice:
            groups.setdefault((f.outcome, f.advice), []).append(f)
    return [Advice(hop="", outcome=outcome, kind=outcome, seen=text, exchanges=len(fs),
                   routes=tuple(dict.fromkeys(f.route for f in fs)))
            for (outcome, text), fs in groups.items()]  # fmt: skip


def kind_label(a: Advice) -> str:
    """What tells an advice's kind apart from its outcome, in words ("" when nothing does):
    "before first event", "body limit", "HTTP 504", "HTTP 400 from the engine"."""
    kind = a.kind
    if kind == a.outcome:
        return ""
    if kind.startswith("engine_http_"):
        return f"HTTP {kind[len('engine_http_'):]} from the engine"
    if kind.startswith("http_"):
        return f"HTTP {kind[len('http_'):]}"
    if kind.startswith(f"{a.outcome}_"):
        kind = kind[len(a.outcome) + 1 :]
    return kind.replace("_", " ")


def advice_heading(a: Advice) -> str:
    """"hop edge · stall_mid_stream · 10 exchange(s) on via:edge": whom it is about, the kind
    of finding, and what it covers."""
    who = a.about or ("the engine" if a.hop is None else f"hop {a.hop}" if a.hop else "")
    label = kind_label(a)
    what = f"{a.outcome}, {label}" if label else a.outcome
    covers = f"{a.exchanges} exchange(s)" + (f" on {' and '.join(a.routes)}" if a.routes else "")
    return " · ".join(part for part in (who, what, covers) if part)


def advice_view(advice: Sequence[Advice]) -> list[RenderableType]:
    """Each advice once: its heading, then what was seen, the likely causes and the fix."""
    total = sum(a.exchanges for a in advice)
    parts: list[RenderableType] = [Text(f"Advice ({len(advice)}, for {total} exchange(s))", style="bold")]
    for a in advice:
        parts.append(Text(advice_heading(a)))
        lines = [a.seen] + [f"{name}: {v}" for name, v in (("likely", a.likely), ("fix", a.fix)) if v]
        parts.extend(Padding(Text(line, style="italic"), (0, 0, 0, 4)) for line in lines if line)
    return parts


def missing_lines(verdict: Verdict) -> list[str]:
    """One line per route an incomplete run lacks:
    "via:edge: cut short in repetition 1 (2 of 6 exchanges observed, not judged)"."""
    lines = []
    for m in verdict.missing:
        if m.state == CUT_SHORT:
            of = f" of {m.planned}" if m.planned is not None else ""
            lines.append(f"{m.route}: cut short in repetition {m.repetition} "
                         f"({m.observed}{of} exchanges observed, not judged)")  # fmt: skip
        elif (m.repetition or 1) > 1:
            lines.append(f"{m.route}: repetition {m.repetition} not replayed")
        else:
            lines.append(f"{m.route}: not replayed")
    return lines


def missing_view(verdict: Verdict) -> list[RenderableType]:
    parts: list[RenderableType] = [Text(MISSING_TITLE, style="bold")]
    parts.extend(Padding(Text(f"- {line}"), (0, 0, 0, 2)) for line in missing_lines(verdict))
    return parts


def scope_view(scope: Scope) -> list[RenderableType]:
    """What the check replayed for the verdict, and why (its passes)."""
    parts: list[RenderableType] = [Text("What was replayed:", style="bold")]
    parts.extend(Padding(Text(f"- {line}"), (0, 0, 0, 2)) for line in scope.said)
    return parts


def waits_view(waits: Waits) -> list[RenderableType]:
    """Which wait decided: the client's patience, the watchdogs, the silences waited out."""
    parts: list[RenderableType] = [Text("Waits:", style="bold")]
    parts.extend(Padding(Text(f"- {line}"), (0, 0, 0, 2)) for line in waits.said)
    return parts


def seen_view(seen: SeenWhileRecording) -> list[RenderableType]:
    """`check --with`: what the points saw of the failures the replay did not bring back."""
    parts: list[RenderableType] = [Text(f"Seen while recording (points {', '.join(seen.points)}):", style="bold")]
    parts.extend(Padding(Text(f"- {line}"), (0, 0, 0, 2)) for line in seen.exchanges)
    return parts


def differences_view(differences: Sequence[str]) -> list[RenderableType]:
    parts: list[RenderableType] = [Text("What differed from the recording:", style="bold")]
    parts.extend(Padding(Text(f"- {d}"), (0, 0, 0, 2)) for d in differences)
    return parts


# -- the timeline -------------------------------------------------------------------------------


def strip(obs: Observation, span: float, width: int) -> str:
    """One character per span/width seconds: the event marks of an exchange, its cut as X."""
    cells = [" "] * width

    def put(t: float, mark: str) -> None:
        i = min(width - 1, max(0, int(t / span * width)))
        if _PRIORITY[mark] > _PRIORITY[cells[i]]:
            cells[i] = mark

    for e in obs.events:
        put(e.t, MARKS.get(e.kind, "?"))
    cut = cut_time(obs)
    if cut is not None:
        put(cut, CUT_MARK)
    return "".join(cells).rstrip()


def _axis(span: float, width: int) -> str:
    left, mid, right = "0 s", f"{span / 2:.1f} s", f"{span:.1f} s"
    line = [" "] * width
    for start, label in ((0, left), (width // 2 - len(mid) // 2, mid), (width - len(right), right)):
        line[start : start + len(label)] = label
    return "".join(line)


def _indent(text: str, width: int) -> Padding:
    return Padding(Text(text, style="dim"), (0, 0, 0, width))


def timeline_view(evidence: Evidence, width: int = 100, verdict: Verdict | None = None) -> list[RenderableType]:
    """The failing exchange above the reference's, one strip each on a shared time axis."""
    span = timeline_span(evidence)
    # The reference on top, as in the route table (the ladder starts with the route inward).
    lanes = ([("reference", evidence.reference)] if evidence.reference else []) + [("failing", evidence.failing)]
    label_w = max(len(o.route) for _, o in lanes) + 2
    strip_w = max(20, width - label_w - 2)
    title = (f"First failing exchange: {exchange_label(evidence.failing, verdict)} "
             f"(axis: {span / strip_w:.3g} s per character)")  # fmt: skip
    parts: list[RenderableType] = [Text(title, style="bold")]
    for role, obs in lanes:
        row = Text(obs.route.ljust(label_w), style="red" if role == "failing" else "green")
        row.append(strip(obs, span, strip_w))
        parts.append(row)
        parts.append(_indent(f"{role}: {timing_text(obs)}", label_w))
    if evidence.reference is None:
        parts.append(_indent("no reference exchange to compare with", label_w))
    parts.append(_indent(_axis(span, strip_w), label_w))
    parts.append(_indent(LEGEND, label_w))
    return parts


# -- all of it ----------------------------------------------------------------------------------


def verdict_view(verdict: Verdict, width: int = 100) -> RenderableType:
    """Everything the terminal report shows, for a console `width` characters wide."""
    parts: list[RenderableType] = [verdict_panel(verdict)]
    if verdict.routes or not verdict.missing:  # an incomplete run may have no route to show
        parts.append(routes_table(verdict.routes, width))
    if verdict.missing:
        parts.extend(missing_view(verdict))
    if verdict.findings:
        parts.extend(findings_view(verdict.findings, verdict=verdict))
    advice = advice_groups(verdict)
    if advice:
        parts.extend(advice_view(advice))
    parts.extend(Text(line, style="dim") for line in key_lines(verdict))
    if verdict.seen_while_recording is not None:
        parts.extend(seen_view(verdict.seen_while_recording))
    if verdict.differences:
        parts.extend(differences_view(verdict.differences))
    if verdict.scope is not None:
        parts.extend(scope_view(verdict.scope))
    if verdict.waits is not None:
        parts.extend(waits_view(verdict.waits))
    if verdict.evidence is not None:
        parts.append(Text(""))
        parts.extend(timeline_view(verdict.evidence, width, verdict))
    return Group(*parts)


def render_verdict(verdict: Verdict, console: Console) -> None:
    console.print(verdict_view(verdict, console.width))
