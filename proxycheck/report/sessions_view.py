"""Terminal rendering with rich: the sessions of a recording.

Sessions are shown by their labels (s1, s2 ...); a keyed session's key, which can be a JSON
object of 150 characters, is said once, on a line of its own under the table.
Functions here build rich renderables from core summaries and never print by themselves, so tests
render them on a Console of fixed width and compare text.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import attempt_text
from proxycheck.core.recording.summary import SessionSummary, TurnSummary

_STYLE = {Outcome.OK: "green", Outcome.IN_FLIGHT: "bold red", Outcome.BUFFERED: "yellow", Outcome.SLOW: "yellow",
          Outcome.NOT_RECORDED: "yellow"}  # not recorded to the end (a full disk): no failure


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


def _by_turn(turns: Sequence[TurnSummary]) -> list[list[TurnSummary]]:
    """The attempts of each conversation turn, turns in order."""
    out: dict[int, list[TurnSummary]] = {}
    for t in turns:
        out.setdefault(t.turn, []).append(t)
    return [out[n] for n in sorted(out)]


def outcome_runs(turns: Sequence[TurnSummary]) -> Text:
    """Per-turn outcomes (a retried turn's is its last attempt's), consecutive equal ones folded:
    `1-3 ok · 4 in_flight`; a retried turn stands alone with its attempts: `2 ok (3 attempts)`."""
    text = Text()
    runs: list[tuple[int, int, Outcome, int]] = []
    for attempts in _by_turn(turns):
        last = attempts[-1]
        n = len(attempts)
        if runs and n == 1 and runs[-1][3] == 1 and runs[-1][2] is last.outcome and runs[-1][1] == last.turn - 1:
            runs[-1] = (runs[-1][0], last.turn, last.outcome, 1)
        else:
            runs.append((last.turn, last.turn, last.outcome, n))
    for i, (a, b, outcome, n) in enumerate(runs):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{a}" if a == b else f"{a}-{b}", style="dim")
        text.append(" ")
        text.append(outcome.value, style=_STYLE.get(outcome, "red"))
        if n > 1:
            text.append(f" ({n} attempts)", style="dim")
    return text


def _sizes(attempts: Sequence[TurnSummary]) -> str:
    """A turn's request size; a retried turn's `4.2K×3`, or `26.0K/12.1K` when they differ."""
    sizes = [human_bytes(t.request_bytes) for t in attempts]
    if len(set(sizes)) == 1:
        return sizes[0] if len(sizes) == 1 else f"{sizes[0]}×{len(sizes)}"
    return "/".join(sizes)


def sessions_table(sessions: Sequence[SessionSummary], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("session", no_wrap=True)
    table.add_column("dialect", no_wrap=True)
    table.add_column("turns", justify="right")
    table.add_column("request bytes per turn")
    table.add_column("think s")
    table.add_column("outcome per turn")
    for s in sessions:
        turns = _by_turn(s.turns)
        table.add_row(
            Text(s.label or s.id),
            s.dialect or "-",
            str(s.turn_count),
            " ".join(_sizes(attempts) for attempts in turns),
            " ".join(_seconds(attempts[0].think_time) for attempts in turns[1:]) or "-",
            outcome_runs(s.turns),
        )
    return table


def problem_lines(sessions: Iterable[SessionSummary]) -> list[Text]:
    """One line per exchange that did not complete normally, with what the recording shows; a
    failed attempt of a turn retried to success says so."""
    lines = []
    for s in sessions:
        final = {t.turn: t for t in s.turns if t.last_attempt}
        for t in s.turns:
            if t.outcome is Outcome.OK:
                continue
            line = Text(f"{s.label or s.id} {attempt_text(t.turn, t.attempt, t.attempts)}: ")
            line.append(t.outcome.value, style=_STYLE.get(t.outcome, "red"))
            line.append(f" ({human_bytes(t.request_bytes)} request)")
            if t.detail:
                line.append(f" — {t.detail}")
            last = final.get(t.turn)
            if not t.last_attempt and last is not None:
                line.append(f"; retried: {last.outcome.value} on attempt {last.attempt}", style="dim")
            lines.append(line)
    return lines


def turns_table(session: SessionSummary) -> Table:
    """Every turn of one session (every attempt of a retried one): what was sent, when, and what
    came back."""
    table = Table(title=Text(f"session {session.label or session.id} (grouped by {session.grouped_by})"),
                  title_justify="left")
    retried = session.retries > 0
    columns = [
        ("turn", "right"), ("exchange", "right"), ("request", "right"), ("msgs", "right"),
        ("think s", "right"), ("status", "right"), ("ttft s", "right"), ("total s", "right"),
        ("events", "right"), ("finish", "left"), ("tool calls", "left"), ("outcome", "left"),
    ]  # fmt: skip
    if retried:
        columns[1:1] = [("attempt", "right"), ("backoff s", "right")]
    for name, justify in columns:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in session.turns:
        cells: list[str | Text] = [str(t.turn)]
        if retried:
            cells += [f"{t.attempt}/{t.attempts}" if t.attempts > 1 else "", _seconds(t.backoff) if t.attempt > 1 else ""]
        cells += [
            str(t.xid),
            human_bytes(t.request_bytes),
            "-" if t.messages is None else str(t.messages),
            _seconds(t.think_time) if t.attempt == 1 else "",
            "-" if t.status is None else str(t.status),
            "-" if t.ttft is None else f"{t.ttft:.2f}",
            _seconds(t.duration),
            str(t.events),
            t.finish_reason or "-",
            ", ".join(t.tool_calls) or "-",
            Text(t.outcome.value, style=_STYLE.get(t.outcome, "red")),
        ]
        table.add_row(*cells)
    return table


def key_lines(sessions: Iterable[SessionSummary]) -> list[Text]:
    """One line per keyed session: which label is which session key (`s1 = session 5c3e…`); one
    per session that changed transport (`s1 changed transport: its WebSocket upgrade ...`)."""
    lines = [Text(line, style="dim") for line in (s.name.key_line() for s in sessions) if line]
    return lines + [Text(f"{s.label or s.id} changed transport: {s.transport_change}")
                    for s in sessions if s.transport_change]  # fmt: skip


def sessions_view(directory: str, sessions: Sequence[SessionSummary], turns: bool = False) -> RenderableType:
    exchanges = sum(len(s.turns) for s in sessions)  # every attempt is an exchange
    retries = sum(s.retries for s in sessions)
    title = f"{directory}: {len(sessions)} session(s), {exchanges} exchange(s)" + (
        f" ({retries} of them retries)" if retries else "")  # fmt: skip
    parts: list[RenderableType] = [sessions_table(sessions, title), *key_lines(sessions)]
    if turns:
        parts.extend(turns_table(s) for s in sessions)
    problems = problem_lines(sessions)
    if problems:
        parts.append(Text("Turns that did not complete:", style="bold"))
        parts.extend(problems)
    return Group(*parts)
