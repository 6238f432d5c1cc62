"""Shrinking a request body's text, for `minimize`: the same request, with less in it.

`text_fields` finds the text a dialect's request carries (chat and Anthropic message contents,
text parts, tool results, system prompts, a completion's prompt, SGLang's text) and
`shrink_to` cuts the largest of them so that the whole body is at most a given size, keeping it
valid JSON of the same shape: a body-size trigger can then be searched for (the smallest body
that still fails) without changing what kind of request it is.

The body is serialized again with the separators it used (`", "`/`": "` or compact) and with
non-ASCII text kept as UTF-8 when it was, so the untouched fields read as they did (JSON
re-serialized may still differ in a number's spelling or an escape). Pure: bytes in, bytes out.
"""

from __future__ import annotations

import json
import math
from typing import Any

Path = tuple[Any, ...]  # keys and indices from the document's root to a text value


def text_fields(doc: Any) -> list[tuple[Path, str]]:
    """Every text value worth cutting: message contents, text parts, tool results, system
    prompts, prompts. Role names, model names, tool names and ids are never text here."""
    found: list[tuple[Path, str]] = []
    if not isinstance(doc, dict):
        return found
    for key in ("prompt", "text", "system", "instructions", "input"):
        _collect(doc.get(key), (key,), found)
    for i, message in enumerate(doc.get("messages") or ()):
        if isinstance(message, dict):
            _collect(message.get("content"), ("messages", i, "content"), found)
    return found


def _collect(value: Any, path: Path, found: list[tuple[Path, str]]) -> None:
    if isinstance(value, str):
        found.append((path, value))
    elif isinstance(value, list):
        for i, part in enumerate(value):
            if isinstance(part, str):
                found.append(((*path, i), part))
            elif isinstance(part, dict):
                for key in ("text", "content", "input_text"):
                    _collect(part.get(key), (*path, i, key), found)


def shrink_to(body: bytes, size: int) -> bytes | None:
    """`body` with its largest text cut so that it is at most `size` bytes, or None when it is
    not JSON with text in it, or cutting all of that text cannot get it so small."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    compact = b'": ' not in body and b'", "' not in body
    ascii_only = body.isascii()

    def dump(d: Any) -> bytes:
        separators = (",", ":") if compact else (", ", ": ")
        return json.dumps(d, separators=separators, ensure_ascii=ascii_only).encode()

    current = dump(doc)
    # Each pass cuts the largest text by the excess: a field emptied before the target is reached
    # hands over to the next largest, and escapes or UTF-8 may need a second pass.
    for _ in range(len(text_fields(doc)) + 8):
        if len(current) <= size:
            return current
        fields = [(p, t) for p, t in text_fields(doc) if t]
        if not fields:
            return None
        path, text = max(fields, key=lambda f: len(f[1]))
        # Characters cost bytes as serialized (UTF-8, or \uXXXX escapes in an ASCII body).
        per_char = (len(json.dumps(text, ensure_ascii=ascii_only).encode()) - 2) / len(text)
        cut = math.ceil((len(current) - size) / per_char)
        _set(doc, path, text[: max(len(text) - cut, 0)])
        current = dump(doc)
    return current if len(current) <= size else None


def _set(doc: Any, path: Path, value: str) -> None:
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
