"""The base class OpenAI chat completions and legacy completions share (`_OpenAIBase`)."""

from __future__ import annotations

from typing import Any

from proxycheck.core.protocol.dialects.base import (
    _ERROR,
    _META,
    Accumulator,
    _Bad,
    _choice_index,
    _ChoiceAcc,
    _error,
    _refusals,
)
from proxycheck.core.protocol.result import Choice, EventKind


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
