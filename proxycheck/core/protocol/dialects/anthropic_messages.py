"""The ``anthropic_messages`` dialect: Anthropic Messages (``/v1/messages``), typed events,
content blocks (text, thinking, tool use), usage with cache tokens."""

from __future__ import annotations

import json
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
    _int,
    _loads,
    _make_usage,
    _str,
    _ToolAcc,
)
from proxycheck.core.protocol.result import Choice, EventKind, Usage

_ANTHROPIC_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})

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
                self._finished = True
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
