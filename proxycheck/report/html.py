"""The HTML report of `check` and `diff` (`--html F`): one self-contained, offline page.

This module owns the page: inline CSS, inline SVG, no script, no external resource of any kind
(no CDN, no font, no image URL), so the file can be mailed, attached to a CI run or opened
from disk years later and look the same. It shows the verdict (the element with id "verdict",
e.g. "proxy: hop edge"), the summary and the statistics that decided, the routes in ladder order
(counts per outcome, with a bar of their shares), the routes an `incomplete` run lacks (the
section with id "missing"), the findings, the advice (the section with id "advice": once per hop
and kind of finding, what was seen, the likely causes and the fix), what differed from the
recording (`not-reproduced`), and the evidence: the first failing exchange's arrival timeline
drawn beside the reference's (x = seconds since the request was sent, one lane per
exchange, a tick per content event, other marks for comments, meta, terminal and error events,
the end or cut marked).

Every piece of text from a verdict goes through `html.escape`; the words are shared with the
terminal report (`proxycheck.report.verdict_view`).
"""

from __future__ import annotations

import html
import math
from typing import Iterable, Sequence

from proxycheck.core.diagnose.verdict import Advice, Evidence, Finding, RouteReport, Verdict
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import attempt_text
from proxycheck.report.verdict_view import (
    advice_groups,
    advice_heading,
    cut_time,
    exchange_label,
    floor_line,
    group_findings,
    headline,
    hops_text,
    key_lines,
    lane_end,
    missing_lines,
    outcome_columns,
    repetitions_text,
    seconds,
    statistics_line,
    timeline_span,
    timing_text,
)

# Colours: one meaning each, in the CSS, the bars and the timeline alike.
OK_COLOUR, DEGRADED_COLOUR, FAILED_COLOUR = "#2e7d32", "#b7791f", "#c62828"
CONTENT_COLOUR, QUIET_COLOUR = "#1f5fa8", "#8a8f98"

CSS = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2127; background: #f6f7f9;
       margin: 0; }
main { max-width: 1040px; margin: 0 auto; padding: 24px; }
h1, h2 { line-height: 1.2; }
h2 { font-size: 18px; margin: 28px 0 10px; }
.card { background: #fff; border: 1px solid #d9dde3; border-radius: 8px; padding: 16px 20px; }
.verdict-card { border-left: 8px solid #555; }
.verdict-card.healthy { border-left-color: #2e7d32; }
.verdict-card.proxy, .verdict-card.server { border-left-color: #c62828; }
.verdict-card.not-reproduced, .verdict-card.inconclusive { border-left-color: #b7791f; }
.verdict-card.incomplete { border-left-color: #8e24aa; }
.kicker { margin: 0; color: #5b6270; font-size: 13px; text-transform: uppercase; letter-spacing: .06em; }
#verdict { font-size: 30px; margin: 4px 0 6px; }
.summary { font-size: 17px; margin: 6px 0; }
.dim { color: #5b6270; font-size: 13px; margin: 4px 0; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { border-bottom: 1px solid #e3e6ea; padding: 6px 8px; text-align: left; vertical-align: top; }
th { font-size: 13px; color: #5b6270; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.zero { color: #b0b5bd; }
.state-clean { color: #2e7d32; font-weight: 600; }
.state-degraded { color: #b7791f; font-weight: 600; }
.state-failing { color: #c62828; font-weight: 600; }
.outcome-ok { color: #2e7d32; }
.outcome-degraded { color: #b7791f; font-weight: 600; }
.outcome-failed { color: #c62828; font-weight: 600; }
ol.findings { padding-left: 22px; }
ol.findings li { margin-bottom: 10px; }
.advice { margin: 2px 0 0; padding: 6px 10px; background: #fff8e6; border-left: 3px solid #b7791f; }
ol.advice-list { padding-left: 22px; }
ol.advice-list li { margin-bottom: 12px; }
.advice p { margin: 2px 0; }
code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 13px; }
svg.timeline { display: block; width: 100%; height: auto; background: #fff; border: 1px solid #d9dde3;
               border-radius: 8px; }
svg text { font-family: system-ui, sans-serif; font-size: 12px; fill: #1d2127; }
svg text.small { font-size: 11px; fill: #5b6270; }
ul.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 14px; font-size: 13px; }
.swatch { display: inline-block; width: 14px; height: 10px; margin-right: 5px; vertical-align: baseline; }
footer { margin-top: 32px; color: #8a8f98; font-size: 12px; }
"""


def e(text: object) -> str:
    """Text for HTML, quotes included (the same function serves element text and attributes)."""
    return html.escape(str(text), quote=True)


def _outcome_class(outcome: str) -> str:
    try:
        o = Outcome(outcome)
    except ValueError:  # an outcome a newer writer added
        return "outcome-failed"
    return "outcome-ok" if o is Outcome.OK else "outcome-degraded" if o.is_degradation else "outcome-failed"


def _outcome_colour(outcome: str) -> str:
    return {"outcome-ok": OK_COLOUR, "outcome-degraded": DEGRADED_COLOUR}.get(_outcome_class(outcome), FAILED_COLOUR)


# -- the verdict card ---------------------------------------------------------------------------


def verdict_card(verdict: Verdict) -> str:
    lines = [
        f'<header class="card verdict-card {e(verdict.verdict)}">',
        '<p class="kicker">proxycheck verdict</p>',
        f'<h1 id="verdict" class="verdict">{e(headline(verdict))}</h1>',
        f'<p id="summary" class="summary">{e(verdict.summary)}</p>',
    ]
    if verdict.first_turn is not None:
        lines.append(f'<p class="dim">failures start at turn {verdict.first_turn}</p>')
    stats = statistics_line(verdict)
    if stats:
        lines.append(f'<p id="statistics" class="dim">{e(stats)}</p>')
    if verdict.floor:
        lines.append(f'<p class="dim">{e(floor_line(verdict.floor))}</p>')
    where = f"strategy {verdict.strategy}" + (f" · run {verdict.run}" if verdict.run else "")
    lines.append(f'<p class="dim">{e(where)}</p>')
    lines.append("</header>")
    return "\n".join(lines)


# -- routes -------------------------------------------------------------------------------------


def share_bar(route: RouteReport, width: int = 120, height: int = 12) -> str:
    """The outcomes of a route as one stacked bar, in the order of the table's columns."""
    total = sum(route.outcomes.values())
    if total <= 0:
        return ""
    parts, x = [], 0.0
    for o in outcome_columns([route]):
        w = route.outcomes[o] / total * width
        parts.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{_outcome_colour(o)}">'
                     f"<title>{e(o)}: {route.outcomes[o]}</title></rect>")  # fmt: skip
        x += w
    label = ", ".join(f"{route.outcomes[o]} {o}" for o in outcome_columns([route]))
    return (f'<svg class="bar" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{e(label)}">{"".join(parts)}</svg>')  # fmt: skip


def routes_table(routes: Sequence[RouteReport]) -> str:
    outcomes = outcome_columns(routes)
    head = ["route", "hops", "reps", "exch"] + outcomes + ["share", "state", "TTFT p50", "added"]
    numeric = {"reps", "exch", "TTFT p50", "added", *outcomes}
    rows = ["<tr>" + "".join(f'<th class="{"num" if h in numeric else ""}">{e(h)}</th>' for h in head) + "</tr>"]
    for r in routes:
        cells = [f"<td><strong>{e(r.route)}</strong></td>", f"<td>{e(hops_text(r))}</td>",
                 f'<td class="num">{r.repetitions}</td>', f'<td class="num">{r.exchanges}</td>']  # fmt: skip
        for o in outcomes:
            n = r.outcomes.get(o, 0)
            cls = f"num {_outcome_class(o)}" if n else "num zero"
            cells.append(f'<td class="{cls}">{n if n else "·"}</td>')
        cells += [
            f"<td>{share_bar(r)}</td>",
            f'<td class="state-{e(r.state)}">{e(r.state)}</td>',
            f'<td class="num">{e(seconds(r.ttft_p50))}</td>',
            f'<td class="num">{e(seconds(r.added_latency, signed=True))}</td>',
        ]
        rows.append(f'<tr data-route="{e(r.route)}">' + "".join(cells) + "</tr>")
    return ('<section id="routes"><h2>Routes, in ladder order (direct first)</h2>'
            f'<table class="routes">{"".join(rows)}</table></section>')  # fmt: skip


# -- findings, differences ----------------------------------------------------------------------


def findings_list(findings: Sequence[Finding], verdict: Verdict | None = None, keys: Sequence[str] = ()) -> str:
    """The findings, sessions named as `verdict` knows them (labels, attempts); `keys` are the
    lines that say which label is which keyed session."""
    items = []
    for f, reps in group_findings(findings):
        detail = f" — {e(f.detail)}" if f.detail else ""
        items.append(
            f"<li><strong>{e(f.route)}</strong> session {_turn_html(verdict, f)} "
            f'({e(repetitions_text(reps))}): <span class="{_outcome_class(f.outcome)}">{e(f.outcome)}</span>'
            f"{detail}</li>"
        )
    named = "".join(f"<li>{e(line)}</li>" for line in keys)
    named = f'<ul class="sessions">{named}</ul>' if named else ""
    return (f'<section id="findings"><h2>Findings ({len(findings)})</h2>'
            f'<ol class="findings">{"".join(items)}</ol>{named}</section>')  # fmt: skip


def advice_list(advice: Sequence[Advice]) -> str:
    """Each advice once (an <li> with its hop, outcome and kind as data attributes): its heading,
    then what was seen, the likely causes and the fix."""
    items = []
    for a in advice:
        parts = [f'<p class="seen">{e(a.seen)}</p>'] if a.seen else []
        parts += [f'<p class="{name}"><strong>{name}:</strong> {e(v)}</p>'
                  for name, v in (("likely", a.likely), ("fix", a.fix)) if v]  # fmt: skip
        items.append(f'<li data-hop="{e(a.hop or "")}" data-outcome="{e(a.outcome)}" data-kind="{e(a.kind)}">'
                     f'<strong>{e(advice_heading(a))}</strong>'
                     f'<div class="advice">{"".join(parts)}</div></li>')  # fmt: skip
    return (f'<section id="advice"><h2>Advice ({len(advice)})</h2>'
            f'<ol class="advice-list">{"".join(items)}</ol></section>')  # fmt: skip


def missing_list(verdict: Verdict) -> str:
    """The routes an `incomplete` run lacks (each an <li data-route>)."""
    items = "".join(f'<li data-route="{e(m.route)}">{e(line)}</li>'
                    for m, line in zip(verdict.missing, missing_lines(verdict)))  # fmt: skip
    return f'<section id="missing"><h2>Routes missing: no verdict without them</h2><ul>{items}</ul></section>'


def _turn_html(verdict: Verdict | None, f: Finding) -> str:
    """`<code>s1</code> turn 2, attempt 1 of 3`."""
    if verdict is None:
        return f"<code>{e(f.session)}</code> turn {f.turn}"
    turn = attempt_text(f.turn, *verdict.attempt_of(f.session, f.xid))
    return f"<code>{e(verdict.session_label(f.session))}</code> {e(turn)}"


def differences_list(differences: Iterable[str]) -> str:
    items = "".join(f"<li>{e(d)}</li>" for d in differences)
    return f'<section id="differences"><h2>What differed from the recording</h2><ul>{items}</ul></section>'


# -- the timeline -------------------------------------------------------------------------------

SVG_WIDTH, LABEL_W, RIGHT_PAD, TOP, LANE_H, AXIS_H = 960, 190, 24, 16, 64, 46


def nice_step(span: float, ticks: int = 8) -> float:
    """A 1, 2 or 5 times a power of ten that cuts `span` into at most about `ticks` steps."""
    raw = max(span / ticks, 1e-9)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _tick_label(t: float, step: float) -> str:
    digits = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{t:.{digits}f} s"


def _lane(obs: Observation, role: str, y: float, x: _Scale) -> list[str]:
    """One exchange: its label, a baseline over its life, a mark per event, the end or cut."""
    mid = y + LANE_H / 2
    colour = FAILED_COLOUR if role == "failing" else OK_COLOUR
    out = [
        f'<g class="lane {e(role)}" data-route="{e(obs.route)}">',
        f"<title>{e(obs.route)} ({e(role)}): {e(timing_text(obs))}</title>",
        f'<text x="8" y="{mid - 8:.1f}" font-weight="600" fill="{colour}">{e(obs.route)}</text>',
        f'<text class="small" x="8" y="{mid + 8:.1f}">{e(role)} · {e(obs.outcome.value)}</text>',
        f'<line x1="{x(0):.2f}" y1="{mid}" x2="{x(lane_end(obs)):.2f}" y2="{mid}" stroke="#c9ced6" stroke-width="1"/>',
    ]
    out += _event_marks(obs, mid, x)
    out += _end_mark(obs, y, mid, x)
    out.append("</g>")
    return out


def _event_marks(obs: Observation, mid: float, x: _Scale) -> list[str]:
    # Ticks of a kind go into one path each: a stream of thousands of events stays a few elements.
    paths: dict[str, list[str]] = {"content": [], "meta": []}
    out: list[str] = []
    for ev in obs.events:
        px = x(ev.t)
        if ev.kind == "content":
            paths["content"].append(f"M{px:.2f} {mid - 12:.1f}V{mid + 12:.1f}")
        elif ev.kind == "meta":
            paths["meta"].append(f"M{px:.2f} {mid - 5:.1f}V{mid + 5:.1f}")
        elif ev.kind == "comment":
            out.append(f'<circle class="comment" cx="{px:.2f}" cy="{mid}" r="3" fill="{QUIET_COLOUR}"/>')
        elif ev.kind == "terminal":
            out.append(f'<rect class="terminal" x="{px - 2:.2f}" y="{mid - 16:.1f}" width="4" height="32" '
                       f'fill="{OK_COLOUR}"/>')  # fmt: skip
        else:  # error, malformed: a cross
            out.append(f'<path class="{e(ev.kind)}" d="M{px - 5:.2f} {mid - 5:.1f}l10 10m0 -10l-10 10" '
                       f'stroke="{FAILED_COLOUR}" stroke-width="2"/>')  # fmt: skip
    if paths["content"]:
        out.insert(0, f'<path class="content" d="{"".join(paths["content"])}" stroke="{CONTENT_COLOUR}" '
                      'stroke-width="1.5"/>')  # fmt: skip
    if paths["meta"]:
        out.insert(0, f'<path class="meta" d="{"".join(paths["meta"])}" stroke="{QUIET_COLOUR}" stroke-width="1"/>')
    return out


def _end_mark(obs: Observation, y: float, mid: float, x: _Scale) -> list[str]:
    cut = cut_time(obs)
    if cut is not None:
        px = x(cut)
        return [
            f'<line class="cut" x1="{px:.2f}" y1="{y + 4}" x2="{px:.2f}" y2="{y + LANE_H - 4}" '
            f'stroke="{FAILED_COLOUR}" stroke-width="2" stroke-dasharray="4 3"/>',
            f'<text class="small" x="{px - 4:.2f}" y="{y + 12}" text-anchor="end" fill="{FAILED_COLOUR}">'
            f"cut at {e(seconds(cut))}</text>",
        ]
    if obs.e2e is not None:
        px = x(obs.e2e)
        return [f'<text class="small" x="{px + 6:.2f}" y="{mid + 4}">E2E {e(seconds(obs.e2e))}</text>']
    return []


class _Scale:
    """Seconds to x in the plot area."""

    def __init__(self, span: float) -> None:
        self.span = span
        self.width = SVG_WIDTH - LABEL_W - RIGHT_PAD

    def __call__(self, t: float) -> float:
        return LABEL_W + max(0.0, min(t, self.span)) / self.span * self.width


def _axis(y: float, x: _Scale) -> list[str]:
    step = nice_step(x.span)
    out = [f'<line x1="{LABEL_W}" y1="{y}" x2="{x(x.span):.2f}" y2="{y}" stroke="#5b6270"/>']
    for i in range(int(x.span / step + 1e-9) + 1):
        t = i * step
        out.append(f'<line x1="{x(t):.2f}" y1="{y}" x2="{x(t):.2f}" y2="{y + 5}" stroke="#5b6270"/>')
        out.append(f'<text class="small" x="{x(t):.2f}" y="{y + 18}" text-anchor="middle">'
                   f"{e(_tick_label(t, step))}</text>")  # fmt: skip
    out.append(f'<text class="small" x="{LABEL_W + x.width / 2:.1f}" y="{y + 36}" text-anchor="middle">'
               "seconds since the request was sent</text>")  # fmt: skip
    return out


def timeline_svg(evidence: Evidence, verdict: Verdict | None = None) -> str:
    """The reference lane above the failing one, on one time axis."""
    lanes = ([("reference", evidence.reference)] if evidence.reference else []) + [("failing", evidence.failing)]
    x = _Scale(timeline_span(evidence))
    height = TOP + LANE_H * len(lanes) + AXIS_H
    title = f"Arrival of events: {exchange_label(evidence.failing, verdict)}, " + " and ".join(
        f"{o.route} ({role})" for role, o in lanes
    )
    body = [f'<title id="timeline-title">{e(title)}</title>']
    for i, (role, obs) in enumerate(lanes):
        body += _lane(obs, role, TOP + i * LANE_H, x)
    body += _axis(TOP + LANE_H * len(lanes) + 4, x)
    return (f'<svg id="timeline" class="timeline" width="{SVG_WIDTH}" height="{height}" '
            f'viewBox="0 0 {SVG_WIDTH} {height}" role="img" aria-labelledby="timeline-title">'
            + "\n".join(body) + "</svg>")  # fmt: skip


def _legend() -> str:
    items = [
        (CONTENT_COLOUR, "content event"), (QUIET_COLOUR, "comment (keep-alive) or meta event"),
        (OK_COLOUR, "terminal event"), (FAILED_COLOUR, "cut (no terminal event), error"),
    ]  # fmt: skip
    return '<ul class="legend">' + "".join(
        f'<li><span class="swatch" style="background:{c}"></span>{e(t)}</li>' for c, t in items
    ) + "</ul>"  # fmt: skip


def evidence_section(evidence: Evidence, verdict: Verdict | None = None) -> str:
    lanes = ([("reference", evidence.reference)] if evidence.reference else []) + [("failing", evidence.failing)]
    rows = "".join(
        f"<tr><td><strong>{e(o.route)}</strong></td><td>{e(role)}</td><td>{e(timing_text(o))}</td></tr>"
        for role, o in lanes
    )
    missing = "" if evidence.reference else '<p class="dim">no reference exchange to compare with</p>'
    return (f'<section id="evidence"><h2>First failing exchange: {e(exchange_label(evidence.failing, verdict))}</h2>'
            f"{timeline_svg(evidence, verdict)}{_legend()}{missing}"
            f'<table class="timings"><tr><th>route</th><th>role</th><th>timings</th></tr>{rows}</table>'
            "</section>")  # fmt: skip


# -- the page -----------------------------------------------------------------------------------


def html_report(verdict: Verdict) -> str:
    """The whole page, as one string of HTML5 with nothing to fetch."""
    parts = [verdict_card(verdict), routes_table(verdict.routes)]
    if verdict.missing:
        parts.append(missing_list(verdict))
    if verdict.findings:
        parts.append(findings_list(verdict.findings, verdict, key_lines(verdict)))
    advice = advice_groups(verdict)
    if advice:
        parts.append(advice_list(advice))
    if verdict.seen_while_recording is not None:
        seen = verdict.seen_while_recording
        items = "".join(f"<li>{e(line)}</li>" for line in seen.exchanges)
        parts.append(f'<section id="seen"><h2>Seen while recording (points {e(", ".join(seen.points))})</h2>'
                     f"<ul>{items}</ul></section>")
    if verdict.differences:
        parts.append(differences_list(verdict.differences))
    if verdict.scope is not None:
        items = "".join(f"<li>{e(line)}</li>" for line in verdict.scope.said)
        parts.append(f'<section id="scope"><h2>What was replayed</h2><ul>{items}</ul></section>')
    if verdict.waits is not None:
        items = "".join(f"<li>{e(line)}</li>" for line in verdict.waits.said)
        parts.append(f'<section id="waits"><h2>Waits</h2><ul>{items}</ul></section>')
    if verdict.evidence is not None:
        parts.append(evidence_section(verdict.evidence, verdict))
    body = "\n".join(parts)
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>proxycheck: {e(headline(verdict))}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n{body}\n"
        "<footer>proxycheck report · schema proxycheck.verdict/1</footer>\n"
        "</main>\n</body>\n</html>\n"
    )
