"""API dialects: streamed events (or one JSON body) in, one normalized `Result` out.

This module owns the knowledge of what each LLM API puts on the wire, and nothing else:

* `detect` names the dialect of a request from its URL path, its JSON body and its headers;
* an `Accumulator` (one per response, from `accumulator(dialect)`) is fed the SSE events of a
  streamed response one by one, says what each event meant (`EventKind`) and assembles the
  text, reasoning, tool calls, usage, finish reasons, errors and terminal marker into a
  `proxycheck.core.model.Result`;
* `parse_body` does the same for a non-streamed JSON body.

Dialects (their names are part of the recording format):

``openai_chat``         ``/v1/chat/completions`` (OpenAI, vLLM, SGLang, llama.cpp, gateways)
``openai_completions``  ``/v1/completions`` (legacy text completions)
``openai_responses``    ``/v1/responses`` (OpenAI Responses API; no ``[DONE]``)
``anthropic_messages``  ``/v1/messages`` (Anthropic Messages)
``sglang_generate``     SGLang's native ``/generate`` (cumulative ``text`` per event)

Pure core: standard library only, no I/O, no clock. Framing the byte stream into events is the
SSE parser's job; an accumulator only ever sees ``(event_type, data)`` pairs.

Rules shared by every dialect:

* ``feed`` never raises. Bad JSON, or JSON of a shape the dialect does not expect, is counted in
  `Result.malformed` (the first few described in `malformed_details`) and returns MALFORMED. An
  event that turns out malformed half-way may already have contributed what was read before the
  bad part.
* A well-formed event of a type the dialect does not know (Anthropic and the Responses API both
  announce that they add event types) is META, not MALFORMED.
* Events after the terminal marker are parsed normally (some gateways send trailing usage);
  `terminal` stays True.
* Errors the server reports inside a response go to `Result.errors`; an error repeated verbatim
  (the Responses API sends an ``error`` event and then the same error in ``response.failed``) is
  recorded once.
* Text and reasoning are kept as lists of pieces and joined only in ``result()``, so feeding
  costs about one ``json.loads`` per event and ``result()`` is linear in the text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from proxycheck.core.model import Choice, EventKind, Result, StreamError, ToolCall, Usage

__all__ = [
    "DIALECTS",
    "Accumulator",
    "accumulator",
    "detect",
    "is_streaming_request",
    "parse_body",
    "parse_events",
]

DIALECTS: tuple[str, ...] = (
    "openai_chat",
    "openai_completions",
    "openai_responses",
    "anthropic_messages",
    "sglang_generate",
)

# Module-level aliases: attribute lookups on the enum cost time on the hot path.
_CONTENT = EventKind.CONTENT
_META = EventKind.META
_TERMINAL = EventKind.TERMINAL
_ERROR = EventKind.ERROR
_MALFORMED = EventKind.MALFORMED

_loads = json.loads
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


def _anthropic_usage(u: Mapping[str, Any]) -> Usage | None:
    """Anthropic counts cache reads and writes apart from `input_tokens`; the normalized
    `prompt_tokens` is their sum, as OpenAI's `prompt_tokens` includes cached tokens."""
    if not u:
        return None
    inputs = [
        _int(u.get(k))
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    known = [n for n in inputs if n is not None]
    return _make_usage(
        sum(known) if known else None,
        _int(u.get("output_tokens")),
        None,
        None,
        inputs[2],
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


# --------------------------------------------------------------------------------------------
# OpenAI chat completions and legacy completions
# --------------------------------------------------------------------------------------------


class _OpenAIBase(Accumulator):
    """What chat and legacy completions share: `[DONE]`, choices by index, usage (absent, null
    on every chunk, cumulative on every chunk or on a final `choices: []` chunk: the last
    non-null one wins), `{"error": ...}` chunks and vLLM's bare `{"object": "error"}`."""

    __slots__ = ("_choices",)

    def __init__(self) -> None:
        super().__init__()
        self._choices: dict[int, _ChoiceAcc] = {}

    def _new_choice(self, index: object) -> _ChoiceAcc:
        acc = _ChoiceAcc(_choice_index(index))
        self._choices[acc.index] = acc
        return acc

    def _other(self, obj: dict[str, Any], choices: object) -> EventKind:
        """A chunk with no choices: usage-only, an error, or something else (malformed)."""
        if choices is not None and choices != []:
            raise _Bad("choices is not a list")
        usage = obj.get("usage")
        error = obj.get("error")
        if error is not None:
            self._add_error(_error(error))
        elif obj.get("object") == "error":  # vLLM before it wrapped errors in {"error": ...}
            self._add_error(_error(obj))
            error = obj
        elif choices is None and usage is None:
            raise _Bad("no choices, usage or error")
        if usage is not None:
            if type(usage) is not dict:
                raise _Bad("usage is not an object")
            self._usage = usage
        self._set_ids(obj)
        return _ERROR if error is not None else _META

    def _choices_result(self) -> tuple[Choice, ...]:
        return tuple(self._choices[i].build() for i in sorted(self._choices))

    def _extra(self) -> tuple[tuple[str, Any], ...]:
        return _refusals(self._choices[i] for i in sorted(self._choices))

    def _body_common(self, obj: Any) -> list[Any] | None:
        """Checks a non-streamed body; returns its choices, or None for an error body."""
        if type(obj) is not dict:
            raise _Bad("body is not a JSON object")
        if obj.get("error") is not None or obj.get("object") == "error":
            self._add_error(_error(obj))
            return None
        choices = obj.get("choices")
        if type(choices) is not list:
            raise _Bad("body has no choices list")
        self._set_ids(obj)
        usage = obj.get("usage")
        if type(usage) is dict:
            self._usage = usage
        return choices


class _OpenAIChat(_OpenAIBase):
    dialect = "openai_chat"
    __slots__ = ()

    def feed(self, event_type: str, data: str) -> EventKind:
        # The replayer's hot path: the base class's feed/_event split is inlined here, and the
        # common chunk (one choice, one content delta) costs one json.loads and a few dict gets.
        if data == _DONE:
            self._terminal = True
            return _TERMINAL
        try:
            obj = _loads(data)
            choices = obj.get("choices")  # AttributeError for a non-object: malformed
            if not choices:
                return self._other(obj, choices)
            if self._model is None:
                self._set_ids(obj)
            kind = _META
            table = self._choices
            for ch in choices:
                index = ch.get("index", 0)
                st = table.get(index)
                if st is None:
                    st = self._new_choice(index)
                delta = ch.get("delta")
                if delta:
                    piece = delta.get("content")
                    if piece:
                        if piece.__class__ is not str:
                            raise _Bad("delta content is not a string")
                        st.text.append(piece)
                        kind = _CONTENT
                    # vLLM renamed reasoning_content to reasoning; take one, never both.
                    piece = delta.get("reasoning_content") or delta.get("reasoning")
                    if piece:
                        if piece.__class__ is not str:
                            raise _Bad("delta reasoning is not a string")
                        st.reasoning.append(piece)
                        kind = _CONTENT
                    calls = delta.get("tool_calls")
                    if calls and _tool_deltas(st, calls):
                        kind = _CONTENT
                    piece = delta.get("refusal")
                    if piece:
                        st.refusal.append(_str(piece, "refusal"))
                        kind = _CONTENT
                reason = ch.get("finish_reason")
                if reason is not None:
                    st.finish_reason = _str(reason, "finish_reason")
            usage = obj.get("usage")
            if usage is not None:
                if usage.__class__ is not dict:
                    raise _Bad("usage is not an object")
                self._usage = usage
            error = obj.get("error")
            if error is not None:
                self._add_error(_error(error))
                kind = _ERROR
        except Exception as exc:  # never raise: a bad event is an outcome, not a crash
            return self._bad(exc, data)
        if kind is _CONTENT:
            self._content += 1
        return kind

    def _body(self, obj: Any) -> None:
        choices = self._body_common(obj)
        if choices is None:
            return
        for position, ch in enumerate(choices):
            st = self._new_choice(ch.get("index", position))
            message = _dict(ch.get("message"))
            st.text.append(_message_text(message.get("content")))
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if reasoning:
                st.reasoning.append(_str(reasoning, "reasoning"))
            if message.get("refusal"):
                st.refusal.append(_str(message["refusal"], "refusal"))
            for i, call in enumerate(message.get("tool_calls") or ()):
                acc = st.tool(_choice_index(call.get("index", i)))
                acc.set_id(call.get("id"))
                fn = _dict(call.get("function"))
                acc.add_name(fn.get("name"))
                acc.parts.append(_arguments_text(fn.get("arguments")))
            reason = ch.get("finish_reason")
            st.finish_reason = None if reason is None else _str(reason, "finish_reason")
        self._terminal = True


def _message_text(content: object) -> str:
    """A non-streamed message's content: a string, null, or a list of text parts."""
    if content is None:
        return ""
    if type(content) is str:
        return content
    if type(content) is list:
        return "".join(p["text"] for p in content if type(p) is dict and type(p.get("text")) is str)
    raise _Bad("message content is neither a string nor a list of parts")


def _tool_deltas(st: _ChoiceAcc, calls: object) -> bool:
    """Fold one chunk's `tool_calls` deltas into the choice; True if any made progress.

    Calls are keyed by `index`. id/type/name arrive once (with or without an `arguments` key);
    argument fragments concatenate. A server that omits `index` gets the lenient reading: a
    delta with a new id starts a new call, anything else continues the last one."""
    if type(calls) is not list:
        raise _Bad("tool_calls is not a list")
    progressed = False
    for call in calls:
        index = call.get("index")
        if index is None:
            call_id = call.get("id")
            last = st.last_tool
            if last is None or (call_id and call_id != last.id):
                index = max(st.tools, default=-1) + 1
            else:
                index = last.index
        elif type(index) is not int:
            raise _Bad("tool call index is not an integer")
        acc = st.tool(index)
        acc.set_id(call.get("id"))
        fn = call.get("function")
        if fn:
            if acc.add_name(fn.get("name")):
                progressed = True
            if acc.add_arguments(fn.get("arguments")):
                progressed = True
    return progressed


class _OpenAICompletions(_OpenAIBase):
    dialect = "openai_completions"
    __slots__ = ()

    def _event(self, event_type: str, data: str) -> EventKind:
        if data == _DONE:
            self._terminal = True
            return _TERMINAL
        obj = _loads(data)
        choices = obj.get("choices")
        if not choices:
            return self._other(obj, choices)
        if self._model is None:
            self._set_ids(obj)
        kind = _META
        for ch in choices:
            index = ch.get("index", 0)
            st = self._choices.get(index) or self._new_choice(index)
            piece = ch.get("text")
            if piece:
                st.text.append(_str(piece, "text"))
                kind = _CONTENT
            reason = ch.get("finish_reason")
            if reason is not None:
                st.finish_reason = _str(reason, "finish_reason")
        usage = obj.get("usage")
        if usage is not None:
            if type(usage) is not dict:
                raise _Bad("usage is not an object")
            self._usage = usage
        if obj.get("error") is not None:
            self._add_error(_error(obj["error"]))
            kind = _ERROR
        return kind

    def _body(self, obj: Any) -> None:
        choices = self._body_common(obj)
        if choices is None:
            return
        for position, ch in enumerate(choices):
            st = self._new_choice(ch.get("index", position))
            text = ch.get("text")
            if text is not None:
                st.text.append(_str(text, "text"))
            reason = ch.get("finish_reason")
            st.finish_reason = None if reason is None else _str(reason, "finish_reason")
        self._terminal = True


# --------------------------------------------------------------------------------------------
# OpenAI Responses API
# --------------------------------------------------------------------------------------------

_TOOL_ITEMS = frozenset({"function_call", "custom_tool_call"})


class _OpenAIResponses(Accumulator):
    """The Responses API: typed events, one output (a single Choice), no `[DONE]`.

    The terminal events are `response.completed`, `response.failed` and `response.incomplete`;
    the finish reason is the response status (`completed`, `failed`), or for an incomplete
    response its `incomplete_details.reason` (e.g. `max_output_tokens`). Function calls are
    keyed by item id (or output index) and numbered in the order they were added; their
    `ToolCall.id` is the `call_id` a client answers with. `.done` events fill in text or
    arguments whose deltas never came, and are otherwise bookkeeping."""

    dialect = "openai_responses"
    __slots__ = ("_st", "_by_item", "_by_output", "_text_items", "_reasoning_items")

    def __init__(self) -> None:
        super().__init__()
        self._st = _ChoiceAcc(0)
        self._by_item: dict[str, _ToolAcc] = {}
        self._by_output: dict[int, _ToolAcc] = {}
        self._text_items: set[object] = set()
        self._reasoning_items: set[object] = set()

    def _event(self, event_type: str, data: str) -> EventKind:
        obj = _loads(data)
        if type(obj) is not dict:
            raise _Bad("event is not a JSON object")
        etype = obj.get("type", event_type)
        if type(etype) is not str:
            raise _Bad("event type is not a string")
        st = self._st
        if etype == "response.output_text.delta":
            self._text_items.add(obj.get("item_id"))
            return self._piece(st.text, obj.get("delta"))
        if etype in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            self._reasoning_items.add(obj.get("item_id"))
            return self._piece(st.reasoning, obj.get("delta"))
        if etype in (
            "response.function_call_arguments.delta",
            "response.custom_tool_call_input.delta",
        ):
            return (
                _CONTENT
                if self._tool(obj.get("item_id"), obj.get("output_index")).add_arguments(
                    obj.get("delta")
                )
                else _META
            )
        if etype == "response.refusal.delta":
            return self._piece(st.refusal, obj.get("delta"))
        if etype == "response.output_item.added":
            return self._item(_dict(obj.get("item")), obj.get("output_index"))
        if etype == "response.output_item.done":
            return self._item(_dict(obj.get("item")), obj.get("output_index"))
        if etype in (
            "response.function_call_arguments.done",
            "response.custom_tool_call_input.done",
        ):
            acc = self._tool(obj.get("item_id"), obj.get("output_index"))
            progressed = acc.add_name(obj.get("name"))
            if not acc.parts and acc.add_arguments(obj.get("arguments", obj.get("input"))):
                progressed = True  # the deltas never came: the full text is the progress
            return _CONTENT if progressed else _META
        if etype == "response.output_text.done":
            return self._done_text(obj, self._text_items, st.text)
        if etype in ("response.reasoning_text.done", "response.reasoning_summary_text.done"):
            return self._done_text(obj, self._reasoning_items, st.reasoning)
        if etype in ("response.completed", "response.failed", "response.incomplete"):
            self._response(_dict(obj.get("response")), etype)
            self._terminal = True
            return _TERMINAL
        if etype == "error":
            self._add_error(_error(obj))
            return _ERROR
        if etype in ("response.created", "response.in_progress", "response.queued"):
            self._set_ids(_dict(obj.get("response")))
        # Any other well-formed event (annotations, part added/done, hosted tool progress,
        # event types added after this was written) is bookkeeping.
        return _META

    @staticmethod
    def _piece(parts: list[str], delta: object) -> EventKind:
        if delta:
            parts.append(_str(delta, "delta"))
            return _CONTENT
        return _META

    def _tool(self, item_id: object, output_index: object) -> _ToolAcc:
        """The call an event refers to (by item id, else output index); a call never announced
        by `output_item.added` (e.g. a stream joined mid-way) is created on first mention."""
        acc = self._by_item.get(item_id) if type(item_id) is str else None
        if acc is None and type(output_index) is int:
            acc = self._by_output.get(output_index)
        if acc is None:
            acc = self._st.tool(len(self._st.tools))
        if type(item_id) is str:
            self._by_item[item_id] = acc
        if type(output_index) is int:
            self._by_output[output_index] = acc
        return acc

    def _item(self, item: Mapping[str, Any], output_index: object) -> EventKind:
        if item.get("type") not in _TOOL_ITEMS:
            return _META
        acc = self._tool(item.get("id"), output_index)
        acc.set_id(item.get("call_id"))
        progressed = acc.add_name(item.get("name"))
        # Arguments present when the item is announced, or only in its `.done` form (their
        # deltas never came), are the call's arguments; otherwise the deltas are.
        if not acc.parts and acc.add_arguments(item.get("arguments", item.get("input"))):
            progressed = True
        return _CONTENT if progressed else _META

    @staticmethod
    def _done_text(obj: Mapping[str, Any], seen: set[object], parts: list[str]) -> EventKind:
        if obj.get("item_id") in seen:
            return _META
        text = obj.get("text")
        seen.add(obj.get("item_id"))
        if text:
            parts.append(_str(text, "text"))
            return _CONTENT
        return _META

    def _response(self, response: Mapping[str, Any], etype: str) -> None:
        self._set_ids(response)
        if response.get("usage") is not None:
            self._usage = response.get("usage")
        status = response.get("status")
        if etype == "response.incomplete" or status == "incomplete":
            reason = _dict(response.get("incomplete_details")).get("reason")
            self._st.finish_reason = reason if type(reason) is str else "incomplete"
        elif type(status) is str:
            self._st.finish_reason = status
        else:
            self._st.finish_reason = etype.rpartition(".")[2]
        if response.get("error") is not None:
            self._add_error(_error(response["error"]))

    def _choices_result(self) -> tuple[Choice, ...]:
        st = self._st
        if not (st.text or st.reasoning or st.tools or st.finish_reason or st.refusal):
            return ()
        return (st.build(),)

    def _extra(self) -> tuple[tuple[str, Any], ...]:
        return _refusals((self._st,))

    def _body(self, obj: Any) -> None:
        if type(obj) is not dict:
            raise _Bad("body is not a JSON object")
        output = obj.get("output")
        if type(output) is not list:
            if obj.get("error") is not None:  # an API error body: {"error": {...}}
                self._add_error(_error(obj["error"]))
                return
            raise _Bad("body has no output list")
        st = self._st
        for item in output:
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or ():
                    if part.get("type") == "output_text":
                        st.text.append(_str(part.get("text", ""), "text"))
                    elif part.get("type") == "refusal":
                        st.refusal.append(_str(part.get("refusal", ""), "refusal"))
            elif kind == "reasoning":
                # Raw reasoning text when the server gives it (vLLM, gpt-oss), else the summary.
                parts = item.get("content") or item.get("summary") or ()
                st.reasoning.extend(_str(p.get("text", ""), "reasoning") for p in parts)
            elif kind in _TOOL_ITEMS:
                acc = st.tool(len(st.tools))
                acc.set_id(item.get("call_id"))
                acc.add_name(item.get("name"))
                acc.parts.append(_arguments_text(item.get("arguments", item.get("input"))))
        self._response(obj, "response.completed")
        self._terminal = True


# --------------------------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------------------------

_ANTHROPIC_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


class _AnthropicMessages(Accumulator):
    """Anthropic Messages: typed events (type read from the JSON, which may carry whitespace
    padding, so never compared as a string), one Choice.

    Text blocks make the text and thinking blocks the reasoning, each in arrival order. Tool-use
    blocks become tool calls numbered 0, 1, ... in the order they start. Their arguments are the
    concatenated `input_json_delta.partial_json`; when no non-empty fragment came (a tool with
    no parameters streams `input: {}` and at most an empty fragment), the arguments are
    `json.dumps` of the start block's `input`, so a parameterless call reads `"{}"`, exactly
    what the non-streamed form gives. A tool_use block start is CONTENT (it carries the tool's
    name, as OpenAI's name chunk does); other block starts and stops, signatures, pings,
    message_start and message_delta are META. `prompt_tokens` sums input and cache tokens."""

    dialect = "anthropic_messages"
    __slots__ = ("_st", "_blocks", "_redacted")

    def __init__(self) -> None:
        super().__init__()
        self._st = _ChoiceAcc(0)
        self._blocks: dict[int, _ToolAcc] = {}  # content block index -> its tool call
        self._redacted = 0
        self._usage: dict[str, Any] = {}

    def _event(self, event_type: str, data: str) -> EventKind:
        obj = _loads(data)
        if type(obj) is not dict:
            raise _Bad("event is not a JSON object")
        etype = obj.get("type", event_type)
        st = self._st
        if etype == "content_block_delta":
            delta = obj["delta"]
            dtype = delta.get("type")
            if dtype == "text_delta":
                return self._piece(st.text, delta.get("text"))
            if dtype == "thinking_delta":
                return self._piece(st.reasoning, delta.get("thinking"))
            if dtype == "input_json_delta":
                return (
                    _CONTENT
                    if self._block_tool(obj.get("index")).add_arguments(delta.get("partial_json"))
                    else _META
                )
            return _META  # signature_delta, citations_delta, newer delta types
        if etype == "content_block_start":
            return self._block_start(obj.get("index"), obj["content_block"])
        if etype in ("content_block_stop", "ping"):
            return _META
        if etype == "message_start":
            message = obj["message"]
            self._set_ids(message)
            self._merge_usage(message.get("usage"))
            return _META
        if etype == "message_delta":
            reason = _dict(obj.get("delta")).get("stop_reason")
            if reason is not None:
                st.finish_reason = _str(reason, "stop_reason")
            self._merge_usage(obj.get("usage"))
            return _META
        if etype == "message_stop":
            self._terminal = True
            return _TERMINAL
        if etype == "error":
            self._add_error(_error(obj))
            return _ERROR
        if type(etype) is not str:
            raise _Bad("event has no type")
        return _META  # an event type added after this was written

    @staticmethod
    def _piece(parts: list[str], text: object) -> EventKind:
        if text:
            parts.append(_str(text, "delta text"))
            return _CONTENT
        return _META

    def _block_tool(self, index: object) -> _ToolAcc:
        """The tool call of a content block; a fragment that starts mid-block gets one too."""
        if type(index) is not int:
            raise _Bad("content block index is not an integer")
        acc = self._blocks.get(index)
        if acc is None:
            acc = self._blocks[index] = self._st.tool(len(self._st.tools))
        return acc

    def _block_start(self, index: object, block: Any) -> EventKind:
        btype = block.get("type")
        if btype == "text":
            return self._piece(self._st.text, block.get("text"))
        if btype == "thinking":
            return self._piece(self._st.reasoning, block.get("thinking"))
        if btype == "redacted_thinking":
            self._redacted += 1
            return _META
        if btype in _ANTHROPIC_TOOL_BLOCKS:
            acc = self._block_tool(index)
            acc.set_id(block.get("id"))
            if "input" in block:
                acc.fallback = json.dumps(block["input"])
            return _CONTENT if acc.add_name(block.get("name")) else _META
        return _META  # tool results and other server-side blocks

    def _merge_usage(self, usage: object) -> None:
        # message_delta repeats (cumulative) counts; later values replace earlier ones.
        if usage is None:
            return
        if type(usage) is not dict:
            raise _Bad("usage is not an object")
        self._usage.update((k, v) for k, v in usage.items() if v is not None)

    def _usage_result(self) -> Usage | None:
        return _anthropic_usage(self._usage)

    def _choices_result(self) -> tuple[Choice, ...]:
        st = self._st
        if not (st.text or st.reasoning or st.tools or st.finish_reason):
            return ()
        return (st.build(),)

    def _extra(self) -> tuple[tuple[str, Any], ...]:
        return (("redacted_thinking_blocks", self._redacted),) if self._redacted else ()

    def _body(self, obj: Any) -> None:
        if type(obj) is not dict:
            raise _Bad("body is not a JSON object")
        if obj.get("type") == "error" or (obj.get("error") is not None and "content" not in obj):
            self._add_error(_error(obj))
            return
        content = obj.get("content")
        if type(content) is not list:
            raise _Bad("body has no content list")
        self._set_ids(obj)
        st = self._st
        for block in content:
            btype = block.get("type")
            if btype == "text":
                st.text.append(_str(block.get("text", ""), "text"))
            elif btype == "thinking":
                st.reasoning.append(_str(block.get("thinking", ""), "thinking"))
            elif btype == "redacted_thinking":
                self._redacted += 1
            elif btype in _ANTHROPIC_TOOL_BLOCKS:
                acc = st.tool(len(st.tools))
                acc.set_id(block.get("id"))
                acc.add_name(block.get("name"))
                acc.parts.append(_arguments_text(block.get("input", {})))
        reason = obj.get("stop_reason")
        st.finish_reason = None if reason is None else _str(reason, "stop_reason")
        self._merge_usage(obj.get("usage"))
        self._terminal = True


# --------------------------------------------------------------------------------------------
# SGLang native /generate
# --------------------------------------------------------------------------------------------


class _SGLangChoice:
    """One output of /generate. By default each event's `text` is the whole text so far;
    with SGLang's incremental streaming option it is only the new part. An event whose text
    does not extend the text so far switches this choice to incremental mode for good, so a
    later delta that happens to start with the text so far is still appended."""

    __slots__ = ("index", "text", "pieces", "incremental", "finish_reason", "meta")

    def __init__(self, index: int) -> None:
        self.index = index
        self.text = ""  # the cumulative text (cumulative mode)
        self.pieces: list[str] = []  # the text in pieces (incremental mode)
        self.incremental = False
        self.finish_reason: str | None = None
        self.meta: dict[str, Any] = {}

    def update(self, text: str) -> bool:
        if self.incremental:
            if text:
                self.pieces.append(text)
                return True
            return False
        if text.startswith(self.text):
            grew = len(text) > len(self.text)
            self.text = text
            return grew
        self.incremental = True
        self.pieces = [self.text, text]
        return bool(text)

    def build(self) -> Choice:
        text = "".join(self.pieces) if self.incremental else self.text
        return Choice(self.index, text, "", (), self.finish_reason)


class _SGLangGenerate(Accumulator):
    """SGLang `/generate`: `{"text", "output_ids", "meta_info", "index"}` events, then `[DONE]`.

    The finish reason is `meta_info.finish_reason.type` (`stop`, `length`, `abort`); an abort
    is also recorded as an error (its message says why). Usage sums `meta_info` counts over
    the choices. As `model.Result` documents, the stream counts as terminal at `[DONE]` or once
    every choice has its final `finish_reason` (feed returns TERMINAL only for `[DONE]`)."""

    dialect = "sglang_generate"
    __slots__ = ("_choices",)

    def __init__(self) -> None:
        super().__init__()
        self._choices: dict[int, _SGLangChoice] = {}

    def _event(self, event_type: str, data: str) -> EventKind:
        if data == _DONE:
            self._terminal = True
            return _TERMINAL
        obj = _loads(data)
        if type(obj) is not dict:
            raise _Bad("event is not a JSON object")
        if obj.get("error") is not None or obj.get("object") == "error":
            self._add_error(_error(obj))
            return _ERROR
        return self._output(obj)

    def _output(self, obj: dict[str, Any]) -> EventKind:
        if "text" not in obj and "meta_info" not in obj and "output_ids" not in obj:
            raise _Bad("no text, output_ids or meta_info")
        index = _choice_index(obj.get("index", 0))
        st = self._choices.get(index)
        if st is None:
            st = self._choices[index] = _SGLangChoice(index)
        kind = _META
        text = obj.get("text")
        if text is not None and st.update(_str(text, "text")):
            kind = _CONTENT
        meta = obj.get("meta_info")
        if meta is not None:
            if type(meta) is not dict:
                raise _Bad("meta_info is not an object")
            st.meta = meta
            if self._id is None:
                self._id = meta.get("id")
            reason = meta.get("finish_reason")
            if reason is not None:
                if type(reason) is str:  # some versions and forks send a bare string
                    reason = {"type": reason}
                rtype = _str(reason.get("type"), "finish_reason.type")
                st.finish_reason = rtype
                if rtype == "abort":
                    message = reason.get("message")
                    code = reason.get("status_code")
                    self._add_error(
                        StreamError(
                            "abort",
                            message if type(message) is str else "aborted",
                            None if code is None else str(code),
                        )
                    )
                    kind = _ERROR
                if all(c.finish_reason is not None for c in self._choices.values()):
                    self._terminal = True
        return kind

    def _usage_result(self) -> Usage | None:
        metas = [c.meta for c in self._choices.values() if c.meta]
        if not metas:
            return None

        def total(key: str) -> int | None:
            values = [_int(m.get(key)) for m in metas]
            return None if None in values else sum(values)  # type: ignore[arg-type]

        return _make_usage(
            total("prompt_tokens"),
            total("completion_tokens"),
            None,
            total("reasoning_tokens"),
            total("cached_tokens"),
        )

    def _choices_result(self) -> tuple[Choice, ...]:
        return tuple(self._choices[i].build() for i in sorted(self._choices))

    def _body(self, obj: Any) -> None:
        items = obj if type(obj) is list else [obj]
        outputs = 0
        for position, item in enumerate(items):
            if type(item) is not dict:
                raise _Bad("body item is not a JSON object")
            if item.get("error") is not None or item.get("object") == "error":
                self._add_error(_error(item))
                continue
            item.setdefault("index", position)
            self._output(item)
            outputs += 1
        self._terminal = outputs > 0 and outputs == len(items)


# --------------------------------------------------------------------------------------------
# public functions
# --------------------------------------------------------------------------------------------

_CLASSES: dict[str, type[Accumulator]] = {
    cls.dialect: cls
    for cls in (
        _OpenAIChat,
        _OpenAICompletions,
        _OpenAIResponses,
        _AnthropicMessages,
        _SGLangGenerate,
    )
}


def accumulator(dialect: str) -> Accumulator:
    """A fresh accumulator for one response; ValueError for an unknown dialect name."""
    try:
        return _CLASSES[dialect]()
    except KeyError:
        raise ValueError(f"unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})") from None


def parse_events(dialect: str, events: Iterable[tuple[str, str]]) -> Result:
    """Feed all (event_type, data) pairs to a fresh accumulator and return its Result."""
    acc = accumulator(dialect)
    feed = acc.feed
    for event_type, data in events:
        feed(event_type, data)
    return acc.result()


def parse_body(dialect: str, body: bytes | str) -> Result:
    """The Result of a non-streamed response body.

    `terminal` is True iff the body is a complete JSON document of the dialect's response shape.
    An error body (`{"error": ...}`, Anthropic `{"type": "error"}`) puts its error in `errors`
    and is not terminal, as no response was produced. A body that is not JSON, or JSON of
    another shape, gives `malformed=1`. `content_events` is 1 when the body carried content."""
    acc = accumulator(dialect)
    text = body
    try:
        if isinstance(body, (bytes, bytearray, memoryview)):
            text = bytes(body).decode("utf-8")
        acc._load_body(_loads(text))
    except UnicodeDecodeError as exc:
        acc._bad(f"body is not UTF-8 ({exc.reason} at byte {exc.start})", repr(body))
    except Exception as exc:
        acc._bad(exc, text if isinstance(text, str) else repr(text))
    return acc.result()


def is_streaming_request(body: object | None) -> bool:
    """True when the request body asks for a streamed response (`"stream": true`, SGLang too)."""
    body = _json_body(body)
    return type(body) is dict and body.get("stream") is True


# Path endings, longest first so '/chat/completions' wins over '/completions'.
_PATH_ENDINGS: tuple[tuple[str, str], ...] = (
    ("/chat/completions", "openai_chat"),
    ("/completions", "openai_completions"),
    ("/responses", "openai_responses"),
    ("/messages", "anthropic_messages"),
    ("/generate", "sglang_generate"),
)

# Last path segments of endpoints that are not generation: their bodies may look like one
# (count_tokens takes `messages`, embeddings take `input`), so body detection must not run.
_NOT_LLM = frozenset(
    {
        "count_tokens",
        "embeddings",
        "embed",
        "models",
        "tokenize",
        "detokenize",
        "health",
        "metrics",
        "moderations",
        "rerank",
        "score",
        "classify",
        "batches",
        "files",
        "encode",
        "speech",
        "transcriptions",
        "translations",
        "generations",
        "edits",
        "variations",
        "get_model_info",
        "get_server_info",
        "flush_cache",
        "version",
    }
)

_SGLANG_INPUTS = ("text", "input_ids", "input_embeds", "sampling_params")


def detect(
    path: str, body: object | None = None, headers: Mapping[str, str] | None = None
) -> str | None:
    """Dialect of a request from its URL path (query ignored, any prefix such as /openai/v1 or
    /api allowed: the path's end decides), then, when the path says nothing (e.g. Cloudflare's
    /ai/run/@cf/...), from the JSON body's keys and the `anthropic-version` header. None when
    it is not an LLM generation request."""
    clean = path.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    if "://" in clean:  # an absolute URL (forward-proxy request line): keep only its path
        clean = "/" + clean.split("://", 1)[1].partition("/")[2]
    data = _json_body(body)
    obj = data if type(data) is dict else None
    lower = clean.lower()
    for ending, dialect in _PATH_ENDINGS:
        if lower.endswith(ending):
            if dialect == "anthropic_messages" and "/threads/" in lower:
                return None  # OpenAI Assistants: /v1/threads/{id}/messages
            if (
                dialect == "sglang_generate"
                and obj is not None
                and not any(k in obj for k in _SGLANG_INPUTS)
            ):
                return None  # another engine's /generate (Ollama's /api/generate takes `prompt`)
            return dialect
    if lower.rpartition("/")[2] in _NOT_LLM or obj is None:
        return None
    if "messages" in obj:
        if _anthropic_hint(obj, headers):
            return "anthropic_messages"
        return "openai_chat"
    if "input" in obj:
        return "openai_responses"
    if "prompt" in obj:
        return "openai_completions"
    if any(k in obj for k in _SGLANG_INPUTS):
        return "sglang_generate"
    return None


def _anthropic_hint(body: Mapping[str, Any], headers: Mapping[str, str] | None) -> bool:
    # Bedrock and Vertex carry the version in the body; a top-level `system` or
    # `stop_sequences` exists only in Anthropic's request shape.
    if any(k in body for k in ("anthropic_version", "system", "stop_sequences")):
        return True
    if headers:
        return any(k.lower() == "anthropic-version" for k in headers)
    return False


def _json_body(body: object | None) -> object | None:
    """A parsed body as given, or bytes/str parsed leniently (None when not JSON)."""
    if isinstance(body, (bytes, bytearray, str)):
        try:
            return _loads(body)
        except (ValueError, RecursionError):
            return None
    return body
