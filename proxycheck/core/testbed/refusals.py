"""What a real engine refuses before it generates, as the reference engine can be told to refuse it
(`proxycheck engine --served-model NAME --max-model-len N --no-tool-parser`): vLLM's checks, in
vLLM's order and its error bodies, so that a recording made against vLLM replays against the
reference engine with the same refusals, and a test on the reference engine sees the answers a
user of vLLM sees.

- **the model name** (`--served-model`): a request naming another model is a 404, "The model `X`
  does not exist. Valid aliases: NAME."; a request naming none (or "") is served. SGLang's
  `/generate` names no model and is never refused.
- **tools without a tool parser** (`--no-tool-parser`, vLLM started without
  `--enable-auto-tool-choice --tool-call-parser`): a chat request offering tools is a 400 unless its
  `tool_choice` is "none" (absent is "auto"), an Anthropic request too (`{"type": "none"}` is
  served).
- **the context window** (`--max-model-len N`): a prompt of more than N tokens (the engine's own
  estimate, `synth.prompt_tokens_of`) is a 400, "This model's maximum context length is N tokens.
  However, your prompt contains at least N+1 input tokens, ..." (vLLM tokenizes up to N+1 and
  says "at least"). A prompt within the window whose `max_tokens` reaches past it is served:
  vLLM shortens the answer instead.

The bodies: the OpenAI shape `{"error": {"message", "type", "param", "code"}}` on every path but
`/v1/messages`, which vLLM answers in the Anthropic shape `{"type": "error", "error": {"type",
"message"}}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Limits:
    """What the engine refuses (the defaults: nothing, as the reference engine always did)."""

    served_model: str | None = None  # None: any model name is served
    max_model_len: int | None = None  # None: no context window
    tool_parser: bool = True  # False: tools refused as vLLM without a tool parser refuses them

    @property
    def any(self) -> bool:
        return self.served_model is not None or self.max_model_len is not None or not self.tool_parser


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer instead of a generation: its status and JSON body."""

    status: int
    body: dict[str, Any]

    @property
    def message(self) -> str:
        return str(self.body["error"]["message"])


def refusal(dialect: str, req: Mapping[str, Any], prompt_tokens: int, limits: Limits) -> Refusal | None:
    """The refusal `limits` make of the request `req` (parsed, of `dialect`, whose prompt is
    `prompt_tokens` by the engine's estimate), or None when it is served."""
    model = req.get("model")
    if limits.served_model is not None and dialect != "sglang_generate" and model and model != limits.served_model:
        message = f"The model `{model}` does not exist. Valid aliases: {limits.served_model}."
        return _error(dialect, 404, "NotFoundError", message, "model")
    if not limits.tool_parser:
        refused = _tool_refusal(dialect, req)
        if refused is not None:
            return _error(dialect, 400, "BadRequestError", refused, None)
    window = limits.max_model_len
    if window is not None and prompt_tokens > window:
        message = (f"This model's maximum context length is {window} tokens. However, your prompt contains at least "
                   f"{window + 1} input tokens, which exceeds this limit even without any output tokens. Please "
                   f"reduce the length of the input prompt. (parameter=input_tokens, value={window + 1})")  # fmt: skip
        return _error(dialect, 400, "BadRequestError", message, "input_tokens")
    return None


def _tool_refusal(dialect: str, req: Mapping[str, Any]) -> str | None:
    """vLLM's message refusing the tools of a request when it has no tool parser, or None."""
    tools = req.get("tools")
    if not isinstance(tools, list) or not tools:
        return None
    choice = req.get("tool_choice")
    if dialect == "anthropic_messages" and isinstance(choice, Mapping):
        # vLLM maps an Anthropic choice to the chat one: auto is auto, any is required, a named
        # tool is a named function.
        kind = choice.get("type")
        choice = {"auto": "auto", "any": "required", "none": "none"}.get(str(kind)) or {
            "function": {"name": choice.get("name")}}
    elif dialect not in ("openai_chat", "anthropic_messages"):
        return None
    if choice is None:
        choice = "auto"  # what vLLM defaults to when tools are offered
    if choice == "none":
        return None
    if choice == "auto":
        return '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    if isinstance(choice, Mapping):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else None
        return f'tool_choice=function "{name}" requires --tool-call-parser to be set'
    return f'tool_choice="{choice}" requires --tool-call-parser to be set'


def _error(dialect: str, status: int, kind: str, message: str, param: str | None) -> Refusal:
    if dialect == "anthropic_messages":
        return Refusal(status, {"type": "error", "error": {"type": kind, "message": message}})
    return Refusal(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})
