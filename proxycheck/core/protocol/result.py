"""The normalized result of one LLM exchange, whatever API dialect carried it.

A dialect (see `proxycheck.core.protocol.dialects`) turns a response (SSE events, or one JSON body) into a
`Result`: what the model said (text, reasoning, tool calls per choice), what the server reported
(usage, finish reason, in-stream errors) and whether the stream ended properly (terminal marker).
These types are what the differ compares across routes, so they hold values, not wire details.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Event(NamedTuple):
    """One SSE event or comment as a client saw it: when it completed (seconds from the start of
    its exchange), its size in bytes, and its kind (an `EventKind` value, or "comment")."""

    t: float
    size: int
    kind: str


class EventKind(enum.Enum):
    """What one event meant to the exchange, as a dialect sees it.

    CONTENT is progress a user would see (text, reasoning, tool-call arguments): the replayer's
    TTFT and stall watchdog count only these. META is bookkeeping (role chunk, usage, ping, block
    start/stop). TERMINAL is the end marker (`[DONE]`, `message_stop`, ...). ERROR is an error the
    server reported inside the stream. MALFORMED is an event the dialect could not read.
    """

    CONTENT = "content"
    META = "meta"
    TERMINAL = "terminal"
    ERROR = "error"
    MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool (function) call, assembled from its deltas.

    `arguments` is the text exactly as streamed; `parsed` is its JSON value when that text is
    valid JSON, and `arguments_valid` says whether it was (a valid `null` parses to None).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    arguments_valid: bool = False
    parsed: Any = None

    @staticmethod
    def build(index: int, id: str | None, name: str | None, arguments: str) -> "ToolCall":
        """A ToolCall whose `parsed` / `arguments_valid` are derived from `arguments`."""
        try:
            parsed, valid = json.loads(arguments), True
        except ValueError:
            parsed, valid = None, False
        return ToolCall(index, id, name, arguments, valid, parsed)


@dataclass(frozen=True, slots=True)
class Choice:
    """One completion choice (OpenAI `n` > 1 streams interleave several)."""

    index: int = 0
    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts as the server reported them (None where it did not)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class StreamError:
    """An error the server reported inside a response (after a 2xx status, or in a JSON body)."""

    type: str | None
    message: str
    code: str | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """Everything a dialect read from one response.

    `terminal` is True when the dialect's end marker came (`[DONE]`, `message_stop`, SGLang's
    final `meta_info.finish_reason`, `response.completed`; for a non-streamed body, a complete
    JSON document). `malformed` counts events that were not valid for the dialect; the first few
    are described in `malformed_details`.
    """

    dialect: str
    choices: tuple[Choice, ...] = ()
    usage: Usage | None = None
    terminal: bool = False
    errors: tuple[StreamError, ...] = ()
    malformed: int = 0
    malformed_details: tuple[str, ...] = ()
    model: str | None = None
    response_id: str | None = None
    content_events: int = 0
    extra: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def first(self) -> Choice:
        return self.choices[0] if self.choices else Choice()

    @property
    def text(self) -> str:
        return self.first.text

    @property
    def reasoning(self) -> str:
        return self.first.reasoning

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.first.tool_calls

    @property
    def finish_reason(self) -> str | None:
        return self.first.finish_reason
