"""The ``openai_responses`` dialect: the OpenAI Responses API (``/v1/responses``), typed
events, one output, no ``[DONE]``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxycheck.core.protocol.dialects.base import (
    _CONTENT,
    _ERROR,
    _META,
    _TERMINAL,
    Accumulator,
    _arguments_text,
    _Bad,
    _ChoiceAcc,
    _dict,
    _error,
    _loads,
    _refusals,
    _str,
    _ToolAcc,
)
from proxycheck.core.protocol.result import Choice, EventKind

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
        self._finished = True
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
