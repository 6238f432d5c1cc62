"""The ``sglang_generate`` dialect: SGLang's native ``/generate`` (cumulative or incremental
``text`` per event, ``meta_info`` with the finish reason and token counts)."""

from __future__ import annotations

from typing import Any

from proxycheck.core.protocol.dialects.base import (
    _CONTENT,
    _DONE,
    _ERROR,
    _META,
    _TERMINAL,
    Accumulator,
    _Bad,
    _choice_index,
    _error,
    _int,
    _loads,
    _make_usage,
    _str,
)
from proxycheck.core.protocol.result import Choice, EventKind, StreamError, Usage


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
                self._finished = True
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
