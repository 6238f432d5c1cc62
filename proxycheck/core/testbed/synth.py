"""What the reference engine answers: a deterministic plan of tokens, tool calls and timing.

The reference engine stands in for SGLang/vLLM in tests and demos, so its answers must be
reproducible: the same request always gets the same plan, and its length is exactly the
requested maximum (like `ignore_eos`), so replays through different routes can be compared
event for event; up to a cap (`plan(max_answer_tokens=N)`, `proxycheck engine
--max-answer-tokens`): a harness that asks for 128,000 tokens as its ceiling gets N and the
finish reason of an answer that ended on its own (`stop`, `end_turn`), while a request with
`ignore_eos` (benchmarks, `proxycheck probe`: "exactly this many") is never capped. "The same request" means the same content, as a real engine at temperature 0
answers the same meaning the same way: the seed is the digest of what the model sees
(`proxycheck.core.protocol.requestparts`: the canonical JSON of the messages, system prompt, tools and
sampling parameters; not the model name, `stream`, `stream_options` or the member order and
spacing a gateway re-serializes), and the prompt tokens are counted on it too. When the request offers tools, some turns
answer with tool calls so agent loops can be simulated; after two tool rounds in a row the
engine answers with text, so every loop ends.

An Anthropic request asking for extended thinking (`thinking`: `with_thinking`) gets a short
thinking first, out of its `max_tokens`, with a signature derived from the seed.

A sampling engine (`proxycheck engine --sampling`, for tests of the differ's noise floor): a
request that `samples` (temperature above 0 or absent, no seed) gets a random draw mixed into its
seed, so its words, whether it calls a tool and its finish reason vary from request to request
as a real engine's do at temperature 1; at temperature 0, or with a seed, it is answered as
above, the same way every time.

The timing extension: a request body may carry `"proxycheck": {"ttft": S, "token_interval": S}`
(either key, seconds, 0 to `EXTENSION_MAX_SECONDS`): `ttft` replaces the whole time to the first
token (the per-KiB model included) and `token_interval` the time between tokens, for that request
only. Only the reference engine honours it; `proxycheck probe` uses it to ask for slow streams
(gaps between tokens that test a hop's read timeout) and for big bodies answered at once. It is
not what the model sees, so it does not change the seed; it is part of the body, so the engine's
answer cache, keyed by the body's raw digest, keeps requests with different timings apart. A
malformed extension is refused (`timing_extension` raises ValueError).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from proxycheck.core.protocol.requestparts import Parts, parts_of
from proxycheck.core.testbed import toolargs

DEFAULT_MAX_TOKENS = 16
# The engine's default cap on a text answer: a harness asking for its ceiling (Claude Code: up to
# 128,000) gets an answer of about 5 s at the default 0.02 s a token, not of 43 minutes; every
# length the project's own tools ask for without `ignore_eos` is below it.
DEFAULT_MAX_ANSWER_TOKENS = 256
EXTENSION = "proxycheck"  # the request body member of the timing extension
EXTENSION_MAX_SECONDS = 3600.0
# Consecutive tool rounds after which the engine answers with text, so agent loops end.
MAX_TOOL_ROUNDS = 2
# The most thinking tokens an answer with extended thinking spends (a short, fast thought).
THINKING_TOKENS = 12

_WORDS = (
    "the", "stream", "proxy", "engine", "token", "event", "session", "turn", "buffer", "timeout",
    "connection", "header", "chunk", "reply", "context", "request", "latency", "route", "hop",
    "server", "client", "keep-alive", "record", "replay", "verdict", "noise", "floor", "wedge",
    "parse", "frame", "bytes", "idle", "retry", "gateway", "cache", "prefill", "decode", "batch",
)


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """A tool call the engine will make; `fragments` are its arguments as streamed."""

    id: str
    name: str
    fragments: tuple[str, ...]

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)


@dataclass(frozen=True, slots=True)
class Plan:
    """One answer: either text tokens or tool calls, with token counts and timing."""

    seed: int
    tokens: tuple[str, ...]
    tool_calls: tuple[PlannedCall, ...]
    finish_reason: str
    prompt_tokens: int
    ttft: float
    interval: float
    # Extended thinking (Anthropic `thinking`, see `with_thinking`): its tokens come first and
    # count as output; `thinking_shown` False is `display: "omitted"` (the tokens are spent, the
    # text is not sent, the signature is).
    thinking: tuple[str, ...] = ()
    thinking_shown: bool = True

    @property
    def completion_tokens(self) -> int:
        if self.tool_calls:
            return len(self.thinking) + sum(len(c.fragments) for c in self.tool_calls)
        return len(self.thinking) + len(self.tokens)

    @property
    def thinking_text(self) -> str:
        """The thinking as the client sees it ("" when omitted)."""
        return "".join(self.thinking) if self.thinking_shown else ""

    @property
    def signature(self) -> str:
        """The thinking block's signature: opaque base64, deterministic per request (derived from
        the seed and the thinking), as long as a real one."""
        digest = hashlib.sha256(f"thinking:{self.seed}:{''.join(self.thinking)}".encode()).digest()
        blob = b"".join(hashlib.sha256(digest + bytes([i])).digest() for i in range(6))
        return base64.b64encode(blob).decode()

    @property
    def text(self) -> str:
        return "".join(self.tokens)


@dataclass(frozen=True, slots=True)
class Timing:
    """The engine's timing model: TTFT = base + per_kb x prompt KiB, then one token per interval."""

    ttft_base: float = 0.05
    ttft_per_kb: float = 0.002
    interval: float = 0.02

    def ttft(self, body_bytes: int) -> float:
        return self.ttft_base + self.ttft_per_kb * body_bytes / 1024.0


def prompt_tokens_of(parts: Parts) -> int:
    """The engine's estimate of a request's input tokens: about four characters of what the
    model sees (`Parts.view_size`) a token."""
    return max(1, parts.view_size // 4)


def thinking_asked(dialect: str, req: Mapping[str, Any]) -> tuple[int, bool] | None:
    """(budget in tokens, shown) of the extended thinking an Anthropic request asks for, None when
    it asks for none. `{"type": "enabled", "budget_tokens": N}` spends at most N; `{"type":
    "adaptive"}` lets the model choose (here: `THINKING_TOKENS`); `display: "omitted"` hides
    the text. Anything else (absent, `disabled`, malformed) is no thinking: the engine is lenient."""
    config = req.get("thinking") if dialect == "anthropic_messages" else None
    if not isinstance(config, Mapping):
        return None
    shown = config.get("display") != "omitted"
    if config.get("type") == "adaptive":
        return THINKING_TOKENS, shown
    budget = config.get("budget_tokens")
    if config.get("type") != "enabled" or isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        return None
    return budget, shown


def with_thinking(dialect: str, req: Mapping[str, Any], answer: Plan) -> Plan:
    """`answer` with the extended thinking the request asks for (`thinking_asked`), if any: up to
    `THINKING_TOKENS` words (and the budget), drawn from the answer's seed on a stream of their own.
    `max_tokens` bounds thinking and text together, as the API's does: a text answer gives its
    last tokens to the thinking (keeping one at least), so `output_tokens` stays what it was."""
    asked = thinking_asked(dialect, req)
    if asked is None:
        return answer
    budget, shown = asked
    rnd = random.Random(answer.seed ^ 0x7468696E6B)  # "think": the answer's own draws are unchanged
    n = max(1, min(THINKING_TOKENS, budget, len(answer.tokens) - 1 if answer.tokens else THINKING_TOKENS))
    thinking = tuple(("" if i else "Thinking: ") + rnd.choice(_WORDS) + ("." if i == n - 1 else " ") for i in range(n))
    tokens = answer.tokens[: len(answer.tokens) - n] if len(answer.tokens) > n else answer.tokens
    return replace(answer, tokens=tokens, thinking=thinking, thinking_shown=shown)


def seed_of(body: bytes, extra: int = 0) -> int:
    """A seed from raw bytes (the engine's per-request fault draws)."""
    return int.from_bytes(hashlib.sha256(body).digest()[:8], "big") ^ extra


def timing_extension(req: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(ttft, token_interval) the request asks for with the timing extension (None: the engine's
    own). ValueError, with a message for the client, when the extension is malformed."""
    ext = req.get(EXTENSION)
    if ext is None:
        return None, None
    if not isinstance(ext, Mapping):
        raise ValueError(f"{EXTENSION} must be an object, e.g. {{\"token_interval\": 2.0}}")
    unknown = sorted(set(ext) - {"ttft", "token_interval"})
    if unknown:
        raise ValueError(f"{EXTENSION}: unknown key(s) {', '.join(unknown)} (known: ttft, token_interval)")
    values = []
    for key in ("ttft", "token_interval"):
        value = ext.get(key)
        ok = value is None or (
            isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= EXTENSION_MAX_SECONDS
        )
        if not ok:
            raise ValueError(f"{EXTENSION}.{key} must be a number of seconds from 0 to {EXTENSION_MAX_SECONDS:g}")
        values.append(None if value is None else float(value))
    return values[0], values[1]


def max_tokens_of(dialect: str, req: Mapping[str, Any]) -> int:
    """The requested output length, per dialect (the engine's default when absent)."""
    if dialect == "sglang_generate":
        params = req.get("sampling_params")
        value = params.get("max_new_tokens") if isinstance(params, Mapping) else None
    elif dialect == "openai_chat":
        value = req.get("max_completion_tokens", req.get("max_tokens"))
    elif dialect == "openai_responses":
        value = req.get("max_output_tokens")
    else:
        value = req.get("max_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return DEFAULT_MAX_TOKENS
    return value


def offered_tools(dialect: str, req: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, JSON schema of the arguments) of the tools the request offers, unless it forbids them."""
    tools = req.get("tools")
    if dialect not in ("openai_chat", "anthropic_messages", "openai_responses") or not isinstance(tools, list) or not tools:
        return []  # prompt-string APIs have no tool calls
    choice = req.get("tool_choice")
    if choice == "none" or (isinstance(choice, Mapping) and choice.get("type") == "none"):
        return []
    out = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        if dialect == "anthropic_messages":
            name, schema = tool.get("name"), tool.get("input_schema")
        elif dialect == "openai_responses":
            # Responses tools are flat ({"type": "function", "name", "parameters"}); hosted tools
            # (web_search, file_search ...) run on the server and are never called by the model here.
            if tool.get("type") != "function":
                continue
            name, schema = tool.get("name"), tool.get("parameters")
        else:
            fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
            name, schema = fn.get("name"), fn.get("parameters")
        if isinstance(name, str) and name:
            out.append((name, schema if isinstance(schema, Mapping) else {}))
    return out


def tool_rounds_since_user(dialect: str, messages: Sequence[Any]) -> int:
    """How many assistant tool-call turns came since the last message a person wrote."""
    rounds = 0
    for msg in reversed(messages):
        if not isinstance(msg, Mapping):
            continue
        role = msg.get("role")
        content = msg.get("content")
        if role == "assistant":
            if msg.get("tool_calls") or _has_block(content, "tool_use"):
                rounds += 1
        elif role == "user" and not _only_blocks(content, "tool_result"):
            break
    return rounds


def conversation_of(dialect: str, req: Mapping[str, Any]) -> list[Any]:
    """The request's conversation as chat-style messages (role, content, tool_calls).

    A Responses `input` is a string (one user message) or a list of items: messages (`type`
    "message" or absent, with a role), `function_call` items (consecutive ones are one assistant
    turn, joined to the assistant message right before them) and `function_call_output` items (a
    tool result, role "tool"); other items (reasoning ...) are left out."""
    if dialect != "openai_responses":
        messages = req.get("messages")
        return messages if isinstance(messages, list) else []
    items = req.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return []
    out: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, str):
            out.append({"role": "user", "content": item})
            continue
        if not isinstance(item, Mapping):
            continue
        kind = item.get("type", "message")
        if kind == "message" or (kind is None and "role" in item):
            out.append({"role": item.get("role"), "content": item.get("content")})
        elif kind in ("function_call", "custom_tool_call"):
            call = {"id": item.get("call_id"), "name": item.get("name")}
            if out and out[-1].get("role") == "assistant":
                out[-1] = {**out[-1], "tool_calls": [*(out[-1].get("tool_calls") or ()), call]}
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append({"role": "tool", "content": item.get("output")})
    return out


def assistant_turns(messages: Sequence[Any]) -> int:
    """The assistant messages of a conversation (`conversation_of`): the turns already answered."""
    return sum(1 for m in messages if isinstance(m, Mapping) and m.get("role") == "assistant")


def _has_block(content: Any, kind: str) -> bool:
    return isinstance(content, list) and any(isinstance(b, Mapping) and b.get("type") == kind for b in content)


def _only_blocks(content: Any, kind: str) -> bool:
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(b, Mapping) and b.get("type") == kind for b in content)
    )


def plan(
    dialect: str,
    req: Mapping[str, Any],
    body: bytes,
    timing: Timing,
    *,
    tool_call_rate: float = 0.5,
    seed: int = 0,
    parts: Parts | None = None,
    draw: int | None = None,
    max_answer_tokens: int | None = None,
    tool_command: str | None = None,
) -> Plan:
    """The deterministic answer to a request: parsed `req`, its `parts` (`parts_of(req)` when not
    given) for the seed and the prompt tokens, the raw `body` for the time to the first token.
    `draw`: a sampling engine's random draw for this request (see `samples`), mixed into the
    seed; a text answer may then also stop on its own before `max_tokens`. `max_answer_tokens`:
    the longest text answer (None: no cap); a request for more, without `ignore_eos`, is answered
    with that many tokens, finishing as an answer that ended on its own. `tool_command`: a shell is
    called when offered, with this command (`toolargs`; None: the safest tool, `ls`).
    RecursionError for a body nested deeper than the interpreter allows."""
    parts = parts if parts is not None else parts_of(req)
    s = parts.seed ^ seed ^ (draw or 0)
    rnd = random.Random(s)
    n = max_tokens_of(dialect, req)
    prompt_tokens = prompt_tokens_of(parts)
    ttft_asked, interval_asked = timing_extension(req)
    ttft = timing.ttft(len(body)) if ttft_asked is None else ttft_asked
    interval = timing.interval if interval_asked is None else interval_asked
    tools = offered_tools(dialect, req)
    messages = conversation_of(dialect, req)
    wants_tool = (
        tools
        and rnd.random() < tool_call_rate
        and tool_rounds_since_user(dialect, messages) < MAX_TOOL_ROUNDS  # type: ignore[arg-type]
    )
    if wants_tool:
        # A tool a harness can run here without harm, with arguments valid against its schema.
        name, schema = toolargs.choose_tool(tools, rnd, runs=tool_command is not None)
        arguments = json.dumps(toolargs.arguments_for(name, schema, rnd, command=tool_command))
        # Split the arguments the way engines stream them: a few characters a token, mid-word.
        fragments = tuple(arguments[i : i + 5] for i in range(0, len(arguments), 5))
        call = PlannedCall(f"call_{s & 0xFFFFFFFFFFFF:012x}", name, fragments)
        finish = "tool_use" if dialect == "anthropic_messages" else "tool_calls"
        return with_thinking(dialect, req, Plan(s, (), (call,), finish, prompt_tokens, ttft, interval))
    ignore_eos = req.get("ignore_eos") is True or (
        isinstance(req.get("sampling_params"), Mapping) and req["sampling_params"].get("ignore_eos") is True
    )
    stopped = not ignore_eos  # the answer ends on its own at n tokens
    capped = max_answer_tokens is not None and not ignore_eos and n > max_answer_tokens
    if capped:
        n = max(1, max_answer_tokens or 1)  # it ends on its own, before max_tokens
    if draw is not None and not ignore_eos:
        # Sampled: half the answers reach the length limit, the others stop on their own after
        # half of it or more (a length within 2x: the finish reason varies, the length class less).
        stopped = n > 1 and rnd.random() < 0.5
        n = rnd.randint(max(1, n // 2), n - 1) if stopped else n
        stopped = stopped or capped  # a capped answer never reaches max_tokens
    tokens = tuple((" " if i else "") + rnd.choice(_WORDS) for i in range(n))
    if dialect == "anthropic_messages":
        finish = "end_turn" if stopped else "max_tokens"
    else:
        finish = "stop" if stopped else "length"
    return with_thinking(dialect, req, Plan(s, tokens, (), finish, prompt_tokens, ttft, interval))


# Mixed into a warm-up's seed, so its response id is never that of an answer to the same request.
_WARMUP_SALT = 0x5741524D5550  # "WARMUP"


def warmup(answer: Plan) -> Plan:
    """The answer to a request that asks for no generation (the Responses API's `generate:
    false`, which a WebSocket client sends to warm the socket up): nothing generated, no output
    tokens, an id of its own; only the prompt is read (its TTFT)."""
    return replace(answer, seed=answer.seed ^ _WARMUP_SALT, tokens=(), tool_calls=(), finish_reason="stop",
                   thinking=())  # fmt: skip


def samples(dialect: str, req: Mapping[str, Any]) -> bool:
    """Whether a sampling engine answers this request differently each time: its temperature is
    above 0, or absent (engines default to 1), and it names no seed (vLLM and SGLang make a
    seeded request's sampling reproducible). At temperature 0 an engine decodes greedily."""
    params: Any = req
    seed_name = "seed"
    if dialect == "sglang_generate":
        params = req.get("sampling_params")
        params = params if isinstance(params, Mapping) else {}
        seed_name = "sampling_seed"
    temperature = params.get("temperature")
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature <= 0:
        return False
    seed = params.get(seed_name) if dialect != "anthropic_messages" else None
    return not (isinstance(seed, int) and not isinstance(seed, bool))
