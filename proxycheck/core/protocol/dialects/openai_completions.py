"""The ``openai_completions`` dialect: legacy ``/v1/completions`` text completions."""

from __future__ import annotations

from typing import Any

from proxycheck.core.protocol.dialects.base import (
    _CONTENT,
    _DONE,
    _ERROR,
    _META,
    _TERMINAL,
    _Bad,
    _error,
    _loads,
    _str,
)
from proxycheck.core.protocol.dialects.openai_common import _OpenAIBase
from proxycheck.core.protocol.result import EventKind


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
                self._finished = True
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
