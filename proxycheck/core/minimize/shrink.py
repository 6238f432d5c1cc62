"""Shrinking a request body, for `minimize`: the same request, with less in it.

Two moves, each keeping the body a request a real server would accept.

Cutting text: `text_fields` finds the text a dialect's request carries (chat and Anthropic
message contents, text parts, tool results, system prompts, a completion's prompt, SGLang's
text) and `shrink_to` cuts the largest of them so that the whole body is at most a given size, keeping it
valid JSON of the same shape: a body-size trigger can then be searched for (the smallest body
that still fails) without changing what kind of request it is.

Dropping messages: `message_units` splits a request's message list (`messages`, or a list
`input`) into the units that can be dropped (ddmin runs over them), and `drop_units` removes
some. A unit is one message, or messages that stand or fall together: an assistant message with
tool calls and the tool results answering them (OpenAI `tool` messages by `tool_call_id`; the
Anthropic user message carrying the matching `tool_result` blocks, with whatever else it holds;
Responses items sharing a `call_id`, and a `reasoning` item with the output items after it).
Leading system/developer messages are never droppable, nor is the last message with everything
tied to it (the turn's question, or the tool result the model must answer now and its call).

The body is serialized again with the separators it used (`", "`/`": "` or compact) and with
non-ASCII text kept as UTF-8 when it was, so the untouched fields read as they did (JSON
re-serialized may still differ in a number's spelling or an escape). Pure: bytes in, bytes out.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Iterable

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
    doc = _load(body)
    if doc is None:
        return None
    ascii_only = body.isascii()
    dump = _dumper(body)
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


def _load(body: bytes) -> Any:
    """The parsed body, or None when it is not JSON."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _dumper(body: bytes) -> Callable[[Any], bytes]:
    """Serializes a document the way `body` was: its separators, and UTF-8 or ASCII escapes."""
    compact = b'": ' not in body and b'", "' not in body
    separators = (",", ":") if compact else (", ", ": ")
    ascii_only = body.isascii()
    return lambda doc: json.dumps(doc, separators=separators, ensure_ascii=ascii_only).encode()


# ------------------------------------------------------------------------- dropping messages

_SYSTEM_ROLES = ("system", "developer")
_INPUT_SIDE_ROLES = ("user", "system", "developer")  # Responses items a client writes, not the model


def _message_list(doc: Any) -> tuple[str, list[Any]] | None:
    if not isinstance(doc, dict):
        return None
    for key in ("messages", "input"):
        if isinstance(doc.get(key), list):
            return key, doc[key]
    return None


def _role(item: Any) -> Any:
    return item.get("role") if isinstance(item, dict) else None


def _blocks(item: Any, kind: str) -> list[dict[str, Any]]:
    content = item.get("content") if isinstance(item, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def _id(value: Any) -> str | int | None:
    """A tool call's id, when it can be one (a string or a number, not a list or an object)."""
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _ties(items: list[Any]) -> list[tuple[int, int]]:
    """Pairs of indices whose messages must be dropped together."""
    ties: list[tuple[int, int]] = []
    calls: dict[str | int, int] = {}  # a tool call's id -> index of the message making the call
    reasoning: int | None = None  # a Responses reasoning item, tied to the output items after it
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            reasoning = None
            continue
        role, kind = item.get("role"), item.get("type")
        # Calls: OpenAI chat tool_calls, Anthropic tool_use blocks, Responses *_call items.
        if role == "assistant" and isinstance(item.get("tool_calls"), list):
            for call in item["tool_calls"]:
                if isinstance(call, dict) and _id(call.get("id")) is not None:
                    calls.setdefault(call["id"], i)
        if role == "assistant":
            for block in _blocks(item, "tool_use"):
                if _id(block.get("id")) is not None:
                    calls.setdefault(block["id"], i)
        # Answers: OpenAI chat tool messages, Anthropic tool_result blocks, Responses *_output items.
        answers: list[str | int | None] = []
        if role == "tool":
            answers.append(_id(item.get("tool_call_id")))
        if role == "user":
            answers += [_id(b.get("tool_use_id")) for b in _blocks(item, "tool_result")]
        if role is None and _id(item.get("call_id")) is not None:
            if item["call_id"] in calls:
                answers.append(item["call_id"])  # an output, or a second item of the same call
            else:
                calls[item["call_id"]] = i
        ties += [(calls[a], i) for a in answers if a is not None and a in calls]
        # Responses: a reasoning item goes with the output items following it (the API refuses
        # one without the other), up to the next reasoning item or client-side item.
        input_side = role in _INPUT_SIDE_ROLES or (isinstance(kind, str) and kind.endswith("_output"))
        if kind == "reasoning" and role is None:
            reasoning = i
        elif reasoning is not None and not input_side:
            ties.append((reasoning, i))
        else:
            reasoning = None
    return ties


def message_units(body: bytes) -> list[tuple[int, ...]]:
    """The droppable units of the request's message list: each a sorted tuple of indices into
    `messages` (or a list `input`) to drop together, in order of their first index. Leading
    system/developer messages and the last message with everything tied to it are in none.
    [] when the body is not JSON or has no such list."""
    found = _message_list(_load(body))
    if found is None:
        return []
    items = found[1]
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in _ties(items):
        parent[max(root(a), root(b))] = min(root(a), root(b))
    groups: dict[int, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(root(i), []).append(i)
    lead = 0
    while lead < len(items) and _role(items[lead]) in _SYSTEM_ROLES:
        lead += 1
    last = root(len(items) - 1) if items else None
    units = [tuple(g) for r, g in groups.items() if r != last and g[0] >= lead]
    return sorted(units)


def drop_units(body: bytes, units: Iterable[tuple[int, ...]]) -> bytes | None:
    """`body` without the messages of `units` (from `message_units`), serialized as it was; None
    when it is not JSON, or when what is left is no valid request: no message but system ones,
    or, in an Anthropic-style body (only user/assistant messages), a first message not the
    user's. No units: the body as it was. Raises ValueError for an index not in the list."""
    doc = _load(body)
    if doc is None:
        return None
    drop = {i for unit in units for i in unit}
    if not drop:
        return _dumper(body)(doc)
    found = _message_list(doc)
    if found is None or not all(isinstance(i, int) and 0 <= i < len(found[1]) for i in drop):
        raise ValueError(f"no such messages to drop: {sorted(drop)}")
    key, items = found
    kept = [item for i, item in enumerate(items) if i not in drop]
    if all(_role(item) in _SYSTEM_ROLES for item in kept):
        return None
    anthropic_style = key == "messages" and all(_role(item) in ("user", "assistant") for item in items)
    if anthropic_style and _role(kept[0]) != "user":
        return None
    doc[key] = kept
    return _dumper(body)(doc)
