"""Terminal rendering with rich: the sessions of a recording.

Functions here build rich renderables from core summaries and never print by themselves, so tests
render them on a Console of fixed width and compare text.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from proxycheck.core.outcomes import Outcome
from proxycheck.core.summary import SessionSummary, TurnSummary

_STYLE = {Outcome.OK: "green", Outcome.IN_FLIGHT: "bold red", Outcome.BUFFERED: "yellow", Outcome.SLOW: "yellow"}


def human_bytes(n: int) -> str:
    """1234 -> 1.2K (decimal units, as proxies' size limits are usually written)."""
    if n < 1000:
        return f"{n}B"
    for unit, scale in (("K", 1e3), ("M", 1e6), ("G", 1e9)):
        v = n / scale
        if v < 999.5 or unit == "G":
            return f"{v:.1f}{unit}" if v < 99.95 else f"{v:.0f}{unit}"
    raise AssertionError("unreachable")


def _seconds(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}"


def outcome_runs(turns: Sequence[TurnSummary]) -> Text:
    """Per-turn outcomes, consecutive equal ones folded: `1-3 ok · 4 in_flight`."""
    text = Text()
    runs: list[tuple[int, int, Outcome]] = []
    for t in turns:
        if runs and runs[-1][2] is t.outcome and runs[-1][1] == t.turn - 1:
            runs[-1] = (runs[-1][0], t.turn, t.outcome)
        else:
            runs.append((t.turn, t.turn, t.outcome))
    for i, (a, b, outcome) in enumerate(runs):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{a}" if a == b else f"{a}-{b}", style="dim")
        text.append(" ")
        text.append(outcome.value, style=_STYLE.get(outcome, "red"))
    return text


def sessions_table(sessions: Sequence[SessionSummary], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("session", no_wrap=True)
    table.add_column("dialect", no_wrap=True)
    table.add_column("turns", justify="right")
    table.add_column("request bytes per turn")
    table.add_column("think s")
    table.add_column("outcome per turn")
    for s in sessions:
        table.add_row(
            s.id,
            s.dialect or "-",
            str(len(s.turns)),
            " ".join(human_bytes(t.request_bytes) for t in s.turns),
            " ".join(_seconds(t.think_time) for t in s.turns[1:]) or "-",
            outcome_runs(s.turns),
        )
    return table


def problem_lines(sessions: Iterable[SessionSummary]) -> list[Text]:
    """One line per turn that did not complete normally, with what the recording shows."""
    lines = []
    for s in sessions:
        for t in s.turns:
            if t.outcome is Outcome.OK:
                continue
            line = Text(f"{s.id} turn {t.turn}: ")
            line.append(t.outcome.value, style=_STYLE.get(t.outcome, "red"))
            line.append(f" ({human_bytes(t.request_bytes)} request)")
            if t.detail:
                line.append(f" — {t.detail}")
            lines.append(line)
    return lines


def turns_table(session: SessionSummary) -> Table:
    """Every turn of one session: what was sent, when, and what came back."""
    table = Table(title=f"session {session.id} (grouped by {session.grouped_by})", title_justify="left")
    for name, justify in [
        ("turn", "right"), ("exchange", "right"), ("request", "right"), ("msgs", "right"),
        ("think s", "right"), ("status", "right"), ("ttft s", "right"), ("total s", "right"),
        ("events", "right"), ("finish", "left"), ("tool calls", "left"), ("outcome", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in session.turns:
        table.add_row(
            str(t.turn),
            str(t.xid),
            human_bytes(t.request_bytes),
            "-" if t.messages is None else str(t.messages),
            _seconds(t.think_time),
            "-" if t.status is None else str(t.status),
            "-" if t.ttft is None else f"{t.ttft:.2f}",
            _seconds(t.duration),
            str(t.events),
            t.finish_reason or "-",
            ", ".join(t.tool_calls) or "-",
            Text(t.outcome.value, style=_STYLE.get(t.outcome, "red")),
        )
    return table


def sessions_view(directory: str, sessions: Sequence[SessionSummary], turns: bool = False) -> RenderableType:
    exchanges = sum(len(s.turns) for s in sessions)
    title = f"{directory}: {len(sessions)} session(s), {exchanges} exchange(s)"
    parts: list[RenderableType] = [sessions_table(sessions, title)]
    if turns:
        parts.extend(turns_table(s) for s in sessions)
    problems = problem_lines(sessions)
    if problems:
        parts.append(Text("Turns that did not complete:", style="bold"))
        parts.extend(problems)
    return Group(*parts)
