"""The ``openai_chat`` dialect: ``/v1/chat/completions`` (OpenAI, vLLM, SGLang, llama.cpp,
gateways), streamed chunks with content, reasoning, tool-call and refusal deltas, or one body."""

from __future__ import annotations

from typing import Any

from proxycheck.core.protocol.dialects.base import (
    _CONTENT,
    _DONE,
    _ERROR,
    _META,
    _TERMINAL,
    _arguments_text,
    _Bad,
    _choice_index,
    _ChoiceAcc,
    _dict,
    _error,
    _loads,
    _str,
)
from proxycheck.core.protocol.dialects.openai_common import _OpenAIBase
from proxycheck.core.protocol.result import EventKind


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
                    self._finished = True
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
