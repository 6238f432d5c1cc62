"""How a `proxycheck agent` run is shown: a rich view (sessions x turns, then the failed turns in
detail, then one verdict line) and the JSON document (schema ``proxycheck.agent/1``).

Functions here build values and never print, so tests render them on a Console of fixed width.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.testbed.agent import AgentRun, SessionReport, TurnReport
from proxycheck.report.sessions_view import human_bytes

SCHEMA = "proxycheck.agent/1"
_GRID_TURNS = 12  # up to this many turns, one column per turn; beyond, folded runs of outcomes


def _style(outcome: Outcome) -> str:
    return "green" if outcome is Outcome.OK else "bold red"


def _seconds(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def outcome_counts(turns: Sequence[TurnReport]) -> dict[str, int]:
    return dict(Counter(t.outcome.value for t in turns))


def _all_turns(run: AgentRun) -> list[TurnReport]:
    return [t for s in run.sessions for t in s.turns]


# -- JSON ---------------------------------------------------------------------------------------


def turn_json(t: TurnReport) -> dict[str, Any]:
    return {
        "turn": t.turn,
        "start": round(t.start, 4),
        "request_bytes": t.request_bytes,
        "messages": t.messages,
        "connection": t.connection,
        "status": t.status,
        "ttft": None if t.ttft is None else round(t.ttft, 4),
        "duration": None if t.duration is None else round(t.duration, 4),
        "events": t.events,
        "content_events": t.content_events,
        "comments": t.comments,
        "response_bytes": t.response_bytes,
        "finish_reason": t.finish_reason,
        "tool_calls": list(t.tool_calls),
        "completion_tokens": t.completion_tokens,
        "outcome": t.outcome.value,
        "detail": t.detail,
    }


def session_json(s: SessionReport, requested_turns: int) -> dict[str, Any]:
    last = s.turns[-1] if s.turns else None
    stopped = last is not None and last.outcome is not Outcome.OK and len(s.turns) < requested_turns
    return {
        "id": s.id,
        "ok": s.ok and len(s.turns) == requested_turns,
        "turns_done": len(s.turns),
        "stopped_at": last.turn if stopped and last else None,
        "outcomes": outcome_counts(s.turns),
        "turns": [turn_json(t) for t in s.turns],
    }


def to_json(run: AgentRun) -> dict[str, Any]:
    o = run.options
    return {
        "schema": SCHEMA,
        "ok": run.ok,
        "url": run.url,
        "proxy": o.proxy,
        "dialect": o.dialect,
        "model": o.model,
        "options": {
            "sessions": o.sessions,
            "turns": o.turns,
            "think": o.think,
            "read_timeout": o.read_timeout,
            "connect_timeout": o.connect_timeout,
            "max_tokens": o.max_tokens,
            "tool_result_bytes": o.tool_result_bytes,
            "session_id_header": o.session_id_header,
            "on_fail": o.on_fail,
            "seed": o.seed,
            "tools": o.tools,
        },
        "started": run.started,
        "duration": round(run.duration, 4),
        "outcomes": outcome_counts(_all_turns(run)),
        "sessions": [session_json(s, o.turns) for s in run.sessions],
    }


# -- terminal -----------------------------------------------------------------------------------


def _outcome_cells(s: SessionReport, turns: int) -> list[Text]:
    """One cell per requested turn: its outcome, or a dim dash for a turn never made."""
    done = {t.turn: t for t in s.turns}
    return [
        Text(done[i].outcome.value, style=_style(done[i].outcome)) if i in done else Text("-", style="dim")
        for i in range(1, turns + 1)
    ]


def _outcome_runs(s: SessionReport) -> Text:
    """Consecutive equal outcomes folded: `1-2 ok · 3 stall_mid_stream`."""
    runs: list[tuple[int, int, Outcome]] = []
    for t in s.turns:
        if runs and runs[-1][2] is t.outcome:
            runs[-1] = (runs[-1][0], t.turn, t.outcome)
        else:
            runs.append((t.turn, t.turn, t.outcome))
    text = Text()
    for i, (a, b, outcome) in enumerate(runs):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{a}" if a == b else f"{a}-{b}", style="dim")
        text.append(" " + outcome.value, style=_style(outcome))
    return text


def heading(run: AgentRun) -> Text:
    """What was run, on a line of its own (a table title would wrap at the table's width)."""
    o = run.options
    via = f" via {o.proxy}" if o.proxy else ""
    return Text(f"agent: {o.sessions} session(s) x {o.turns} turn(s), {o.dialect} → {run.url}{via}", style="bold")


def sessions_grid(run: AgentRun) -> Table:
    """Sessions as rows; the outcome of every turn, with what grew (request bytes) and how fast."""
    o = run.options
    table = Table()
    table.add_column("session", no_wrap=True)
    table.add_column("tool calls", justify="right")
    table.add_column("request bytes", no_wrap=True)
    table.add_column("ttft s (max)", justify="right")
    grid = o.turns <= _GRID_TURNS
    if grid:
        for i in range(1, o.turns + 1):
            table.add_column(str(i), no_wrap=True)
    else:
        table.add_column("outcome per turn")
    for s in run.sessions:
        first, last = (s.turns[0], s.turns[-1]) if s.turns else (None, None)
        sizes = f"{human_bytes(first.request_bytes)} → {human_bytes(last.request_bytes)}" if first and last else "-"
        ttfts = [t.ttft for t in s.turns if t.ttft is not None]
        cells: list[Text | str] = [
            s.id,
            str(sum(len(t.tool_calls) for t in s.turns)),
            sizes,
            _seconds(max(ttfts) if ttfts else None),
        ]
        cells.extend(_outcome_cells(s, o.turns) if grid else [_outcome_runs(s)])
        table.add_row(*cells)
    return table


def failures_table(turns: Sequence[TurnReport]) -> Table:
    """The failed turns in detail: what was sent, on which connection, what came back."""
    table = Table(title="Failed turns", title_justify="left")
    for name, justify in [
        ("session", "left"), ("turn", "right"), ("request", "right"), ("msgs", "right"), ("conn", "right"),
        ("status", "right"), ("ttft s", "right"), ("total s", "right"), ("events", "right"),
        ("outcome", "left"), ("detail", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in turns:
        table.add_row(
            t.session,
            str(t.turn),
            human_bytes(t.request_bytes),
            str(t.messages),
            "-" if t.connection is None else str(t.connection),
            "-" if t.status is None else str(t.status),
            _seconds(t.ttft),
            _seconds(t.duration, 1),
            str(t.events),
            Text(t.outcome.value, style=_style(t.outcome)),
            t.detail or "-",
        )
    return table


def verdict_line(run: AgentRun) -> Text:
    turns = _all_turns(run)
    failed = [t for t in turns if t.outcome is not Outcome.OK]
    tools = sum(len(t.tool_calls) for t in turns)
    if not failed:
        return Text(f"all {len(turns)} turn(s) ok ({tools} tool call(s), {run.duration:.1f} s)", style="green")
    first = min(failed, key=lambda t: t.turn)
    counts = ", ".join(f"{n} {k}" for k, n in sorted(Counter(t.outcome.value for t in failed).items()))
    stopped = sum(1 for s in run.sessions if len(s.turns) < run.options.turns)
    line = f"{len(failed)} of {len(turns)} turn(s) failed ({counts}); first failure at turn {first.turn}"
    if stopped:
        line += f"; {stopped} session(s) stopped early"
    return Text(line, style="bold red")


def agent_view(run: AgentRun) -> RenderableType:
    parts: list[RenderableType] = [heading(run), sessions_grid(run)]
    failed = [t for t in _all_turns(run) if t.outcome is not Outcome.OK]
    if failed:
        parts.append(failures_table(failed))
    parts.append(verdict_line(run))
    return Group(*parts)
