"""What the synthetic agent is asked to do and what it reports: its options, each turn as it saw it,
its sessions and the whole run (the agent's loop is `proxycheck.io.agent`'s, the rendering
`proxycheck.report.agent_view`'s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proxycheck.core.exchange.outcomes import Outcome


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """Everything `proxycheck agent` takes (validated by the command)."""

    base_url: str
    sessions: int = 1
    turns: int = 4
    dialect: str = "openai_chat"
    model: str = "proxycheck-agent"
    proxy: str | None = None
    think: float = 1.0
    read_timeout: float = 60.0
    connect_timeout: float = 10.0
    max_tokens: int = 256
    tool_result_bytes: int = 2000
    session_id_header: str | None = None
    on_fail: Literal["stop", "continue"] = "stop"
    seed: int = 0
    tools: bool = True  # off (--no-tools): offer none, paste test outputs instead (core.testbed.conversation)


@dataclass(frozen=True, slots=True)
class TurnReport:
    """One turn as the agent saw it; times in seconds from the turn's request start, except
    `start`, which is from the start of the run."""

    session: str
    turn: int
    start: float
    request_bytes: int
    messages: int
    outcome: Outcome
    detail: str = ""
    status: int | None = None
    connection: int | None = None  # 1 for the session's first TCP connection, 2 for the next...
    ttft: float | None = None
    duration: float | None = None
    events: int = 0
    content_events: int = 0
    comments: int = 0  # SSE comments (keep-alives)
    response_bytes: int = 0
    finish_reason: str | None = None
    tool_calls: tuple[str, ...] = ()
    completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class SessionReport:
    id: str
    turns: tuple[TurnReport, ...]

    @property
    def ok(self) -> bool:
        return all(t.outcome is Outcome.OK for t in self.turns)


@dataclass(frozen=True, slots=True)
class AgentRun:
    options: AgentOptions
    url: str
    started: float  # wall-clock time (epoch seconds) the run started
    duration: float
    sessions: tuple[SessionReport, ...]

    @property
    def ok(self) -> bool:
        """Every requested turn of every session was made and came back ok."""
        return all(s.ok and len(s.turns) == self.options.turns for s in self.sessions)
