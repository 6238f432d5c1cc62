"""What every dialect shares: the `Accumulator` base class and its helpers.

The event-kind aliases and wire constants, the `_Bad` error for an event of the wrong shape,
small type-coercion helpers (`_int`, `_dict`, `_str`, `_first_int`), usage building
(`_make_usage`, `_openai_usage`), error parsing (`_error`) and the per-choice and per-tool-call
assembly (`_ChoiceAcc`, `_ToolAcc`). Pure core: standard library only, no I/O, no clock.
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Iterable, Mapping
from typing import Any

from proxycheck.core.protocol.result import Choice, EventKind, Result, StreamError, ToolCall, Usage

# Module-level aliases: attribute lookups on the enum cost time on the hot path.
_CONTENT = EventKind.CONTENT
_META = EventKind.META
_TERMINAL = EventKind.TERMINAL
_ERROR = EventKind.ERROR
_MALFORMED = EventKind.MALFORMED

_scan_json = json.scanner.make_scanner(json.JSONDecoder())


def _loads(text: str) -> Any:
    """`json.loads` for one SSE data field, without its per-call decoder plumbing (this runs once
    per streamed event). Same result and the same error type as `json.loads`."""
    try:
        obj, end = _scan_json(text, 0)
    except StopIteration:
        return json.loads(text)  # leading whitespace, or not JSON: json.loads says which
    if end != len(text) and text[end:].strip(" \t\n\r"):
        return json.loads(text)  # extra data after the value: json.loads raises with the position
    return obj


_DONE = "[DONE]"
_MAX_DETAILS = 5  # malformed events described in Result.malformed_details (the count is exact)
_SNIPPET = 80  # characters of a malformed event's data quoted in its description


class _Bad(Exception):
    """An event whose JSON is valid but whose shape is not the dialect's."""


# --------------------------------------------------------------------------------------------
# shared helpers: numbers, usage, errors, tool-call assembly
# --------------------------------------------------------------------------------------------


def _int(value: object) -> int | None:
    # bool is an int subclass; a token count of `true` is not a count.
    return value if type(value) is int else None


def _dict(value: object) -> dict[str, Any]:
    return value if type(value) is dict else {}


def _str(value: object, what: str) -> str:
    if type(value) is not str:
        raise _Bad(f"{what} is not a string")
    return value


def _first_int(*values: object) -> int | None:
    for value in values:
        if type(value) is int:
            return value
    return None


def _make_usage(
    prompt: int | None,
    completion: int | None,
    total: int | None,
    reasoning: int | None,
    cached: int | None,
) -> Usage | None:
    if (
        prompt is None
        and completion is None
        and total is None
        and reasoning is None
        and cached is None
    ):
        return None
    if total is None and prompt is not None and completion is not None:
        total = prompt + completion
    return Usage(prompt, completion, total, reasoning, cached)


def _openai_usage(raw: object) -> Usage | None:
    """Usage of the OpenAI family: chat/completions (`prompt_tokens`...) or Responses
    (`input_tokens`...), with the details objects or SGLang's flat `reasoning_tokens`."""
    u = _dict(raw)
    if not u:
        return None
    out_details = _dict(u.get("completion_tokens_details")) or _dict(u.get("output_tokens_details"))
    in_details = _dict(u.get("prompt_tokens_details")) or _dict(u.get("input_tokens_details"))
    return _make_usage(
        _first_int(u.get("prompt_tokens"), u.get("input_tokens")),
        _first_int(u.get("completion_tokens"), u.get("output_tokens")),
        _int(u.get("total_tokens")),
        _first_int(out_details.get("reasoning_tokens"), u.get("reasoning_tokens")),
        _first_int(in_details.get("cached_tokens"), u.get("cached_tokens")),
    )

def _error(raw: object) -> StreamError:
    """A StreamError from whatever error payload a server sent: `{"type","message","code"}`,
    the same nested under `"error"`, or a bare string. With no usable `type` (the Responses
    API's `response.error` has only a code) the code stands in for it."""
    if type(raw) is dict and type(raw.get("error")) in (dict, str):
        raw = raw["error"]
    if type(raw) is dict:
        etype = raw.get("type")
        code = raw.get("code")
        message = raw.get("message")
        if message is None:
            message = raw.get("detail", "")
        if type(etype) is not str or etype == "error":
            etype = code if type(code) is str else None
        return StreamError(
            etype,
            message if type(message) is str else json.dumps(message),
            None if code is None else str(code),
        )
    if type(raw) is str:
        return StreamError(None, raw)
    return StreamError(None, json.dumps(raw))


class _ToolAcc:
    """One tool call being assembled: id and name arrive once, argument text in fragments.

    `fallback` is the argument text to use when no fragment (or only empty ones) came: the
    JSON of an Anthropic tool_use block's start `input`."""

    __slots__ = ("index", "id", "name", "parts", "fallback")

    def __init__(self, index: int) -> None:
        self.index = index
        self.id: str | None = None
        self.name: str | None = None
        self.parts: list[str] = []
        self.fallback: str | None = None

    def set_id(self, value: object) -> None:
        if value and self.id is None:
            self.id = _str(value, "tool call id")

    def add_name(self, value: object) -> bool:
        """Record a name; True when that is progress (a new name, or a further fragment)."""
        if not value:
            return False
        value = _str(value, "tool name")
        if not self.name:
            self.name = value
            return True
        if value == self.name:  # some servers repeat the name on every delta
            return False
        self.name += value  # fragmented names, as OpenAI's own SDK assembles them
        return True

    def add_arguments(self, value: object) -> bool:
        if not value:
            return False
        self.parts.append(_str(value, "tool arguments"))
        return True

    def build(self) -> ToolCall:
        arguments = "".join(self.parts)
        if not arguments and self.fallback is not None:
            arguments = self.fallback
        return ToolCall.build(self.index, self.id, self.name, arguments)


def _arguments_text(value: object) -> str:
    """Arguments of a complete (non-streamed) call: the string as sent, or the JSON of an
    object (Anthropic `input`, and servers that send OpenAI arguments as an object)."""
    if value is None:
        return ""
    if type(value) is str:
        return value
    return json.dumps(value)


class _ChoiceAcc:
    """One choice being assembled (OpenAI `n` > 1 interleaves several)."""

    __slots__ = ("index", "text", "reasoning", "refusal", "tools", "last_tool", "finish_reason")

    def __init__(self, index: int) -> None:
        self.index = index
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.tools: dict[int, _ToolAcc] = {}
        self.last_tool: _ToolAcc | None = None
        self.finish_reason: str | None = None

    def tool(self, index: int) -> _ToolAcc:
        acc = self.tools.get(index)
        if acc is None:
            acc = self.tools[index] = _ToolAcc(index)
        self.last_tool = acc
        return acc

    def build(self) -> Choice:
        tools = tuple(self.tools[i].build() for i in sorted(self.tools))
        return Choice(
            self.index, "".join(self.text), "".join(self.reasoning), tools, self.finish_reason
        )


def _choice_index(value: object) -> int:
    if type(value) is not int:
        raise _Bad("choice index is not an integer")
    return value


def _refusals(choices: Iterable[_ChoiceAcc]) -> tuple[tuple[str, Any], ...]:
    # Refusal text is what the user sees instead of an answer; Choice has no field for it, so
    # it travels in Result.extra as ("refusals", ((choice index, text), ...)).
    found = tuple((c.index, "".join(c.refusal)) for c in choices if c.refusal)
    return (("refusals", found),) if found else ()


# --------------------------------------------------------------------------------------------
# the accumulator base
# --------------------------------------------------------------------------------------------


class Accumulator:
    """Assembles one response of one dialect from its events. Create with `accumulator()`.

    Subclasses implement `_event` (one parsed event -> EventKind, raising on a bad shape),
    `_body` (a whole non-streamed JSON document) and `_choices_result`."""

    dialect: str = ""

    __slots__ = (
        "_terminal",
        "_finished",
        "_errors",
        "_malformed",
        "_details",
        "_model",
        "_id",
        "_content",
        "_usage",
    )

    def __init__(self) -> None:
        self._terminal = False
        # A finish reason came in an event (the answer is complete, whether or not the stream's
        # terminator follows): the stream tracker notes when, for the held-open rule.
        self._finished = False
        self._errors: list[StreamError] = []
        self._malformed = 0
        self._details: list[str] = []
        self._model: object = None
        self._id: object = None
        self._content = 0
        self._usage: object = None  # the dialect's raw usage, converted only in result()

    # -- public ------------------------------------------------------------------------------

    def feed(self, event_type: str, data: str) -> EventKind:
        """One SSE event: its `event` field ('message' by default) and its data."""
        try:
            kind = self._event(event_type, data)
        except Exception as exc:  # never raise: a bad event is an outcome, not a crash
            return self._bad(exc, data)
        if kind is _CONTENT:
            self._content += 1
        return kind

    def result(self) -> Result:
        """The Result so far (callable at any time, mid-stream too)."""
        return Result(
            dialect=self.dialect,
            choices=self._choices_result(),
            usage=self._usage_result(),
            terminal=self._terminal,
            errors=tuple(self._errors),
            malformed=self._malformed,
            malformed_details=tuple(self._details),
            model=self._model if type(self._model) is str else None,
            response_id=self._id if type(self._id) is str else None,
            content_events=self._content,
            extra=self._extra(),
        )

    @property
    def finish_seen(self) -> bool:
        """A finish reason (or the terminal marker) has come in the events fed so far."""
        return self._finished or self._terminal

    # -- for subclasses ----------------------------------------------------------------------

    def _event(self, event_type: str, data: str) -> EventKind:
        raise NotImplementedError

    def _body(self, obj: Any) -> None:
        raise NotImplementedError

    def _choices_result(self) -> tuple[Choice, ...]:
        raise NotImplementedError

    def _usage_result(self) -> Usage | None:
        return _openai_usage(self._usage)

    def _extra(self) -> tuple[tuple[str, Any], ...]:
        return ()

    def _bad(self, exc: BaseException | str, data: str) -> EventKind:
        self._malformed += 1
        if len(self._details) < _MAX_DETAILS:
            if isinstance(exc, str):
                reason = exc
            elif isinstance(exc, _Bad):
                reason = str(exc)
            elif isinstance(exc, json.JSONDecodeError):
                reason = f"invalid JSON ({exc.msg} at {exc.pos})"
            else:
                reason = f"unexpected shape ({type(exc).__name__}: {exc})"
            snippet = data[:_SNIPPET] if isinstance(data, str) else repr(data)[:_SNIPPET]
            self._details.append(f"{reason}: {snippet!r}")
        return _MALFORMED

    def _add_error(self, err: StreamError) -> None:
        for seen in self._errors:
            if seen.message == err.message and seen.code == err.code:
                return
        self._errors.append(err)

    def _set_ids(self, obj: Mapping[str, Any]) -> None:
        if self._model is None:
            self._model = obj.get("model")
        if self._id is None:
            self._id = obj.get("id")

    def _load_body(self, obj: Any) -> None:
        """Fill in from a non-streamed body; content_events is 1 when it carried content."""
        self._body(obj)
        first = self._choices_result()
        if any(c.text or c.reasoning or c.tool_calls for c in first):
            self._content = 1
