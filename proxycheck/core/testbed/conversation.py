"""The conversation of one synthetic coding agent: what it sends each turn, and how it grows.

`proxycheck agent` drives an engine (directly or through hops) the way a coding harness does: a
system prompt, three tools (read_file, run_tests, write_file), a user task, and then a loop in
which every tool call the model makes is answered with a tool result and every text answer with a
new user message. The request body therefore grows turn by turn, which is what wedges some
proxies (body size limits, buffering, idle keep-alive) after a few rounds. Without tools (`tools`
off, for an engine that serves a model without tool calls), the requests offer none, and every
follow-up user message pastes a synthetic test output of the tool result's size instead, so the
context still grows by about the same bytes a turn.

This module owns that logic, for the ``openai_chat`` and ``anthropic_messages`` dialects: the
request body of the next turn (`Conversation.request_body`), folding a reply into the history
(`add_reply`, `add_interrupted`), and the synthetic tool output. It is pure core: no I/O, no
clock, and deterministic: the same configuration and the same replies give byte-identical
bodies (randomness comes from `random.Random` seeded with strings, which does not depend on
PYTHONHASHSEED).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxycheck.core.protocol.result import ToolCall

DIALECTS: tuple[str, ...] = ("openai_chat", "anthropic_messages")

# The path each dialect posts to, under the base URL's /v1.
ENDPOINTS: dict[str, str] = {"openai_chat": "chat/completions", "anthropic_messages": "messages"}

SYSTEM_PROMPT = (
    "You are a coding agent working in a Python repository. Work in small steps: read the files "
    "you need with read_file, change them with write_file, and run the tests with run_tests "
    "before you claim that something works. Keep answers short; when the task is done, say what "
    "you changed and why."
)

# (name, description, JSON schema of the parameters): the tools every session offers.
_TOOLS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "read_file",
        "Read a file of the repository and return its contents.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "path relative to the repository root"},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["path"],
        },
    ),
    (
        "run_tests",
        "Run the test suite (or part of it) with pytest and return its output.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "a test file or directory"},
                "keyword": {"type": "string", "description": "pytest -k expression"},
            },
        },
    ),
    (
        "write_file",
        "Replace the contents of a file of the repository.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"},
            },
            "required": ["path", "content"],
        },
    ),
)

_TASKS = (
    "test_parse_header fails on CI but passes locally. Find out why and fix it.",
    "Add a --dry-run flag to the sync command that prints what would change.",
    "The cache in storage/lru.py leaks entries when a key is overwritten. Fix it and add a test.",
    "Rename the config option `timeout` to `read_timeout`, keeping the old name as an alias.",
    "Requests with a body over 1 MB are rejected with 413. Find where the limit is set.",
    "Make the retry loop in client/http.py back off exponentially with jitter.",
    "The CSV exporter writes dates in local time. Make it write UTC in ISO 8601.",
    "Speed up test_integration.py: it takes four minutes and most of it is setup.",
)

_FOLLOW_UPS = (
    "Thanks. Now run the whole test suite and tell me if anything else broke.",
    "Good. Please also update the docstring and the changelog entry for this.",
    "That is not quite it: the failure also happens on Python 3.11. Look again.",
    "Can you add a regression test that fails without your change?",
    "OK. Check the other callers of that function for the same problem.",
)

_FILES = ("src/app/core.py", "src/app/http.py", "src/app/storage/lru.py", "src/app/cli.py", "tests/test_core.py")
_WORDS = ("value", "count", "header", "entry", "limit", "config", "stream", "buffer", "token", "result")


@dataclass(frozen=True, slots=True)
class ConversationConfig:
    """What shapes one session's requests; `session` makes its bodies unique among sessions."""

    dialect: str
    session: str
    model: str = "proxycheck-agent"
    max_tokens: int = 256
    tool_result_bytes: int = 2000
    seed: int = 0
    tools: bool = True  # off: no tools offered; each follow-up pastes a test output instead

    def __post_init__(self) -> None:
        if self.dialect not in DIALECTS:
            raise ValueError(f"unsupported dialect {self.dialect!r} (supported: {', '.join(DIALECTS)})")


def tool_definitions(dialect: str) -> list[dict[str, Any]]:
    """The tools as the dialect declares them in a request."""
    if dialect == "openai_chat":
        return [
            {"type": "function", "function": {"name": n, "description": d, "parameters": p}} for n, d, p in _TOOLS
        ]
    return [{"name": n, "description": d, "input_schema": p} for n, d, p in _TOOLS]


def _rng(config: ConversationConfig, *parts: object) -> random.Random:
    # A string seed is hashed with SHA-512 by `random`, so it is stable across processes.
    return random.Random(":".join(str(p) for p in (config.seed, config.session, *parts)))


def synthetic_tool_output(config: ConversationConfig, turn: int, call: ToolCall) -> str:
    """A plausible tool result of exactly `config.tool_result_bytes` ASCII bytes.

    It depends only on the configuration, the turn, and the call's position, name and arguments,
    so replaying a session reproduces it."""
    size = config.tool_result_bytes
    rng = _rng(config, turn, call.index, call.name, call.arguments)
    line = {"read_file": _source_line, "run_tests": _test_line}.get(call.name or "", _write_line)
    header = _header(call)
    pieces = [header]
    length = len(header)
    number = 1
    while length < size:
        text = line(rng, number) + "\n"
        pieces.append(text)
        length += len(text)
        number += 1
    return "".join(pieces)[:size]


def _header(call: ToolCall) -> str:
    args = call.parsed if call.arguments_valid and isinstance(call.parsed, dict) else {}
    path = args.get("path") if isinstance(args.get("path"), str) else None
    if call.name == "read_file":
        return f"# {path or 'src/app/core.py'}\n"
    if call.name == "run_tests":
        return f"$ pytest {path or 'tests'} -q\n"
    if call.name == "write_file":
        return f"wrote {path or 'a file'}; diff follows\n"
    return f"error: unknown tool {call.name!r}; output of a no-op follows\n"


def _source_line(rng: random.Random, number: int) -> str:
    a, b = rng.sample(_WORDS, 2)
    return f"{number:4d}    {a}_{rng.randrange(100)} = self.{b}.get({a!r}, {rng.randrange(1000)})  # {b} {a}"


def _test_line(rng: random.Random, number: int) -> str:
    status = "FAILED" if rng.random() < 0.1 else "PASSED"
    a, b = rng.sample(_WORDS, 2)
    return f"tests/test_{a}.py::test_{b}_{number} {status} [{rng.randrange(100):3d}%]"


def _write_line(rng: random.Random, number: int) -> str:
    a, b = rng.sample(_WORDS, 2)
    return f"@@ -{number},3 +{number},4 @@ {'+' if rng.random() < 0.5 else '-'}    {a} = {b}({rng.randrange(100)})"


class Conversation:
    """The growing history of one session, in its dialect's message shapes.

    The turn of the next request is the number of assistant messages in the history + 1 (the
    definition the fault addon uses), so every turn, failed or not, adds exactly one assistant
    message."""

    def __init__(self, config: ConversationConfig) -> None:
        self.config = config
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": self._task()}]
        self._tools = tool_definitions(config.dialect) if config.tools else []

    @property
    def turn(self) -> int:
        """The number of the turn the next request makes."""
        return sum(1 for m in self.messages if m["role"] == "assistant") + 1

    @property
    def message_count(self) -> int:
        """Messages in the next request (OpenAI's system message counts, Anthropic's `system` not)."""
        return len(self.messages) + (1 if self.config.dialect == "openai_chat" else 0)

    def request_body(self) -> dict[str, Any]:
        """The streamed request of the next turn (a fresh structure the caller may keep)."""
        c = self.config
        messages = json.loads(json.dumps(self.messages))  # a deep copy: the history keeps growing
        body: dict[str, Any] = {"model": c.model, "max_tokens": c.max_tokens, "stream": True}
        if c.dialect == "openai_chat":
            body["messages"] = [{"role": "system", "content": SYSTEM_PROMPT}, *messages]
            if self._tools:
                body["tools"] = self._tools
                body["tool_choice"] = "auto"
            body["stream_options"] = {"include_usage": True}
        else:
            body["system"] = SYSTEM_PROMPT
            body["messages"] = messages
            if self._tools:
                body["tools"] = self._tools
        return body

    def encode(self) -> bytes:
        """The next request's body as sent (compact JSON, UTF-8)."""
        return json.dumps(self.request_body(), separators=(",", ":"), ensure_ascii=False).encode()

    def add_reply(self, text: str, tool_calls: Sequence[ToolCall]) -> None:
        """Fold a complete reply in: tool calls get their results, a text answer a new user turn."""
        turn = self.turn
        calls = [_with_id(call, self.config, turn, i) for i, call in enumerate(tool_calls)]
        if self.config.dialect == "openai_chat":
            self._openai_reply(turn, text, calls)
        else:
            self._anthropic_reply(turn, text, calls)

    def add_interrupted(self, text: str, why: str) -> None:
        """Fold in a turn that failed (`--on-fail continue`): whatever text arrived, then a user
        message saying the reply was cut off. Partial tool calls are dropped: a harness cannot
        run a call whose arguments it may not have received in full."""
        self.messages.append({"role": "assistant", "content": text or "(no reply)"})
        self.messages.append({"role": "user", "content": f"Your last reply was cut off ({why}). Please continue."})

    # -- dialect shapes -----------------------------------------------------------------------

    def _openai_reply(self, turn: int, text: str, calls: list[ToolCall]) -> None:
        if not calls:
            self.messages.append({"role": "assistant", "content": text})
            self.messages.append({"role": "user", "content": self._follow_up(turn)})
            return
        self.messages.append(
            {
                "role": "assistant",
                "content": text or None,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name or "", "arguments": c.arguments}}
                    for c in calls
                ],
            }
        )
        for c in calls:
            self.messages.append(
                {"role": "tool", "tool_call_id": c.id, "content": synthetic_tool_output(self.config, turn, c)}
            )

    def _anthropic_reply(self, turn: int, text: str, calls: list[ToolCall]) -> None:
        if not calls:
            self.messages.append({"role": "assistant", "content": text})
            self.messages.append({"role": "user", "content": self._follow_up(turn)})
            return
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks.extend(
            {"type": "tool_use", "id": c.id, "name": c.name or "", "input": _input_object(c)} for c in calls
        )
        self.messages.append({"role": "assistant", "content": blocks})
        self.messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": synthetic_tool_output(self.config, turn, c)}
                    for c in calls
                ],
            }
        )

    def _task(self) -> str:
        rng = _rng(self.config, "task")
        return f"{rng.choice(_TASKS)} (workspace /work/{self.config.session}, ticket #{rng.randrange(1000, 10000)})"

    def _follow_up(self, turn: int) -> str:
        text = _rng(self.config, "follow-up", turn).choice(_FOLLOW_UPS)
        if self.config.tools:
            return text
        # No tools to fetch it with: the user pastes what run_tests would have returned.
        pasted = synthetic_tool_output(self.config, turn, ToolCall(0, None, "run_tests", "{}", True, {}))
        return f"{text} The test output:\n{pasted}"


def _with_id(call: ToolCall, config: ConversationConfig, turn: int, position: int) -> ToolCall:
    """The call with an id: a server that sent none still needs one to pair the result with."""
    if call.id:
        return call
    prefix = "call" if config.dialect == "openai_chat" else "toolu"
    fallback = f"{prefix}_{config.session}_{turn}_{position}"
    return ToolCall(call.index, fallback, call.name, call.arguments, call.arguments_valid, call.parsed)


def _input_object(call: ToolCall) -> dict[str, Any]:
    # Anthropic's tool_use input must be an object; arguments that were not one are sent as {}.
    return call.parsed if call.arguments_valid and isinstance(call.parsed, dict) else {}
