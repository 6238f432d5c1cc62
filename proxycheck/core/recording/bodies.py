"""Request bodies as a recording stores them: cut into content-addressed pieces.

An agent re-sends its whole history every turn, so a session of N turns would cost O(N^2) if
bodies were stored whole. A JSON body is cut into its top-level members; each element of
`messages` / `input` / `contents` (and each large value such as `tools` or `system`) becomes a
*piece*, stored once under the hash of its bytes. A `Body` lists the literal text between pieces
and references to them; joining the parts gives back the original bytes exactly, so replays send
what the client sent.

A `Body` also keeps what grouping and display need without joining anything: `messages` (the
piece ids of the message list, compared by session grouping), `fields` (small top-level scalars:
model, stream, user, session ids ...), `keys` (the top-level member names) and `named` (which
top-level member a non-history piece holds, e.g. a long `prompt`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

# Top-level JSON members whose array elements become one piece each: the conversation history.
_HISTORY_KEYS = frozenset({"messages", "input", "contents"})
# Other top-level values become a piece when at least this long (tools, system prompt, prompt).
_PIECE_MIN = 256
# Scalars kept in BODY.fields for grouping and display; longer strings are not kept.
_FIELD_STR_MAX = 200

_WS = re.compile(r"[ \t\n\r]*")
# What `piece_id` gives; a reference that is not one is damage (and must never name another
# file than a piece in blobs/).
_PIECE_ID = re.compile(r"[0-9a-f]{32}")
_DECODER = json.JSONDecoder()


def is_text(v: Any) -> bool:
    """A string a writer could have written: no lone surrogate, which JSON's escapes allow but
    UTF-8 (the journal's, the terminal's, every output file's) cannot hold."""
    if not isinstance(v, str):
        return False
    if v.isascii():
        return True
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def piece_id(data: bytes) -> str:
    """The id of a piece: the first 128 bits of its SHA-256, in hex."""
    return hashlib.sha256(data).hexdigest()[:32]


# --------------------------------------------------------------------------------------------
# Request bodies


@dataclass(frozen=True, slots=True)
class PieceRef:
    """A reference from a body to a stored piece."""

    id: str


@dataclass(frozen=True, slots=True)
class HistoryRun:
    """Stands for the whole history (`Body.messages`), its elements joined by `sep`.

    Turn k+1 re-sends turn k's messages; storing them as one run lets the journal say "the
    history of exchange j, plus these new ids" instead of listing every id again, which would
    grow quadratically over a long session.
    """

    sep: str


BodyPart = str | PieceRef | HistoryRun


@dataclass(frozen=True, slots=True)
class Body:
    """A request body as stored: parts to join, plus what grouping needs without joining them.

    `kind` is "json" (parts are text, piece references and at most one history run), "text"
    (one text part), "bytes" (one piece holding raw bytes) or "empty". `messages` is the ordered
    piece ids of the history (`messages`, `input` or `contents`), None when there is none.
    """

    kind: str
    size: int
    sha256: str
    parts: tuple[BodyPart, ...] = ()
    messages: tuple[str, ...] | None = None
    fields: Mapping[str, Any] = field(default_factory=dict)
    keys: tuple[str, ...] = ()
    named: Mapping[str, str] = field(default_factory=dict)

    @property
    def piece_ids(self) -> tuple[str, ...]:
        ids = [p.id for p in self.parts if isinstance(p, PieceRef)]
        if any(isinstance(p, HistoryRun) for p in self.parts):
            ids.extend(self.messages or ())
        return tuple(ids)


@dataclass(frozen=True, slots=True)
class SplitBody:
    """A body cut into parts, with the new pieces it needs (id -> bytes)."""

    body: Body
    pieces: dict[str, bytes]


def split_body(data: bytes) -> SplitBody:
    """Cut a request body into literal parts and content-addressed pieces (see module doc)."""
    sha = hashlib.sha256(data).hexdigest()
    if not data:
        return SplitBody(Body("empty", 0, sha), {})
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _whole_piece(data, sha)
    members = _object_members(text)
    if members is None:
        if len(data) >= _PIECE_MIN:
            return _whole_piece(data, sha)
        return SplitBody(Body("text", len(data), sha, (text,)), {})

    parts: list[BodyPart] = []
    pieces: dict[str, bytes] = {}
    messages: list[str] | None = None
    fields: dict[str, Any] = {}
    named: dict[str, str] = {}
    cursor = 0

    def cut(start: int, end: int) -> str:
        nonlocal cursor
        if start > cursor:
            _append_literal(parts, text[cursor:start])
        raw = text[start:end].encode("utf-8")
        pid = piece_id(raw)
        pieces[pid] = raw
        parts.append(PieceRef(pid))
        cursor = end
        return pid

    arrays = [m[0] for m in members if m[0] in _HISTORY_KEYS and m[4] is not None]
    history_key = "messages" if "messages" in arrays else (arrays[0] if arrays else None)
    for key, value, start, end, elements in members:
        _collect_field(fields, key, value)
        if key == history_key and elements is not None and messages is None:
            messages = []
            for s, e in elements:
                raw = text[s:e].encode("utf-8")
                pid = piece_id(raw)
                pieces[pid] = raw
                messages.append(pid)
            seps = {text[e:s] for (_, e), (s, _) in zip(elements, elements[1:])}
            if len(seps) <= 1 and elements:
                # The usual case: one separator throughout, so the history is one run.
                if elements[0][0] > cursor:
                    _append_literal(parts, text[cursor : elements[0][0]])
                parts.append(HistoryRun(seps.pop() if seps else ","))
                cursor = elements[-1][1]
            else:
                for s, e in elements:
                    cut(s, e)
        elif key in _HISTORY_KEYS and elements is not None:
            for s, e in elements:
                cut(s, e)
        elif end - start >= _PIECE_MIN:
            named[key] = cut(start, end)
    if cursor < len(text):
        _append_literal(parts, text[cursor:])
    return SplitBody(
        Body(
            "json",
            len(data),
            sha,
            tuple(parts),
            tuple(messages) if messages is not None else None,
            fields,
            tuple(m[0] for m in members),
            named,
        ),
        pieces,
    )


def _whole_piece(data: bytes, sha: str) -> SplitBody:
    pid = piece_id(data)
    return SplitBody(Body("bytes", len(data), sha, (PieceRef(pid),)), {pid: data})


def _append_literal(parts: list[BodyPart], text: str) -> None:
    if parts and isinstance(parts[-1], str):
        parts[-1] += text
    else:
        parts.append(text)


def _collect_field(fields: dict[str, Any], key: str, value: Any) -> None:
    if _is_small_scalar(value):
        fields[key] = value
    elif isinstance(value, dict) and len(value) <= 32:
        for sub, v in value.items():
            if _is_small_scalar(v):
                fields[f"{key}.{sub}"] = v


def _is_small_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= _FIELD_STR_MAX
    return value is None or isinstance(value, (bool, int, float))


Member = tuple[str, Any, int, int, "list[tuple[int, int]] | None"]


def _object_members(text: str) -> list[Member] | None:
    """The top-level members of a JSON object with their character spans, or None.

    Each member is (key, value, start, end, elements): `elements` lists the spans of the
    elements when the value is an array. None when the text is not exactly one JSON object.
    """
    ws = _WS.match
    try:
        i = ws(text, 0).end()
        if text[i] != "{":
            return None
        i = ws(text, i + 1).end()
        members: list[Member] = []
        if text[i] == "}":
            return members if ws(text, i + 1).end() == len(text) else None
        while True:
            if text[i] != '"':
                return None
            key, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
            i = ws(text, i).end()
            if text[i] != ":":
                return None
            start = ws(text, i + 1).end()
            elements: list[tuple[int, int]] | None = None
            if text[start] == "[":
                value, end, elements = _array_elements(text, start)
            else:
                value, end = _DECODER.raw_decode(text, start)
            members.append((key, value, start, end, elements))
            i = ws(text, end).end()
            if text[i] == ",":
                i = ws(text, i + 1).end()
                continue
            if text[i] == "}":
                return members if ws(text, i + 1).end() == len(text) else None
            return None
    except (ValueError, IndexError, RecursionError):
        # RecursionError: a member nested deeper than the parser goes. Such a body is kept whole,
        # as text that is not one JSON object is.
        return None


def _array_elements(text: str, start: int) -> tuple[list[Any], int, list[tuple[int, int]]]:
    ws = _WS.match
    values: list[Any] = []
    spans: list[tuple[int, int]] = []
    i = ws(text, start + 1).end()
    if text[i] == "]":
        return values, i + 1, spans
    while True:
        value, end = _DECODER.raw_decode(text, i)
        values.append(value)
        spans.append((i, end))
        i = ws(text, end).end()
        if text[i] == ",":
            i = ws(text, i + 1).end()
        elif text[i] == "]":
            return values, i + 1, spans
        else:
            raise ValueError("bad array")


def join_body(body: Body, resolve: Callable[[str], bytes]) -> bytes:
    """The original body bytes, with pieces fetched through `resolve(id)`."""
    out = bytearray()
    for part in body.parts:
        if isinstance(part, str):
            out += part.encode("utf-8")
        elif isinstance(part, PieceRef):
            out += resolve(part.id)
        else:
            out += part.sep.encode("utf-8").join(resolve(pid) for pid in body.messages or ())
    return bytes(out)


class MissingPiece(Exception):
    """`unrebuildable`'s resolver found no piece with this id."""

    def __init__(self, pid: str, detail: str = "") -> None:
        super().__init__(pid)
        self.pid = pid
        self.detail = detail


def unrebuildable(body: Body, blocks_of: Callable[[str], Iterable[bytes]]) -> str | None:
    """Why `body` cannot be joined back to the bytes it was recorded from, or None when it can.

    `blocks_of(id)` gives a piece's bytes (in blocks, so a large piece need not be held whole)
    or raises `MissingPiece`. The joined bytes must hash to the recorded SHA-256: a damaged
    request line (its literal text, its history, its digest) is caught here, before a replay
    sends what the client never sent."""
    digest = hashlib.sha256()
    try:
        for block in _joined_blocks(body, blocks_of):
            digest.update(block)
    except MissingPiece as missing:
        return f"piece {missing.pid} is missing{missing.detail}"
    except UnicodeEncodeError:
        return "its literal text is not UTF-8"
    if digest.hexdigest() != body.sha256:
        return "the joined body does not match its recorded SHA-256 (the request line or a piece is damaged)"
    return None


def _joined_blocks(body: Body, blocks_of: Callable[[str], Iterable[bytes]]) -> Iterator[bytes]:
    for part in body.parts:
        if isinstance(part, str):
            yield part.encode("utf-8")
        elif isinstance(part, PieceRef):
            yield from blocks_of(part.id)
        else:
            sep = part.sep.encode("utf-8")
            for i, pid in enumerate(body.messages or ()):
                if i:
                    yield sep
                yield from blocks_of(pid)


def prefix_digests(ids: Sequence[str]) -> list[bytes]:
    """digests[k] identifies ids[:k] (k = 0 .. len): equal digests, equal prefixes."""
    out = [b""]
    h = b""
    for pid in ids:
        h = hashlib.blake2b(h + pid.encode(), digest_size=16).digest()
        out.append(h)
    return out


def encode_body(body: Body, base: tuple[int, int] | None = None) -> dict[str, Any]:
    """The BODY of a `req` record. `base` = (exchange, n) says that the history starts with the
    first n ids of that earlier exchange's history, which are then not listed again."""
    rec: dict[str, Any] = {"kind": body.kind, "size": body.size, "sha256": body.sha256}
    rec["parts"] = [_encode_part(p) for p in body.parts]
    if body.messages is not None:
        if base is not None and base[1] > 0:
            rec["history"] = {"base": base[0], "keep": base[1], "add": list(body.messages[base[1] :])}
        else:
            rec["history"] = {"add": list(body.messages)}
    if body.fields:
        rec["fields"] = dict(body.fields)
    if body.keys:
        rec["keys"] = list(body.keys)
    if body.named:
        rec["named"] = dict(body.named)
    return rec


def _encode_part(part: BodyPart) -> Any:
    if isinstance(part, str):
        return part
    if isinstance(part, PieceRef):
        return {"p": part.id}
    return {"h": part.sep}


def decode_body(rec: Any, history_of: Callable[[int], tuple[str, ...] | None]) -> Body:
    """A BODY record back to a Body; `history_of(x)` gives an earlier exchange's history."""
    if not isinstance(rec, dict):
        raise ValueError("body is not an object")
    parts: list[BodyPart] = []
    raw_parts = rec.get("parts", [])
    if not isinstance(raw_parts, list):
        raise ValueError("parts is not a list")
    for p in raw_parts:
        if isinstance(p, str):
            parts.append(p)
        elif isinstance(p, dict) and isinstance(p.get("p"), str):
            parts.append(PieceRef(_checked_id(p["p"])))
        elif isinstance(p, dict) and isinstance(p.get("h"), str):
            parts.append(HistoryRun(p["h"]))
        else:
            raise ValueError("bad body part")
    fields = rec.get("fields") or {}
    keys = rec.get("keys") or []
    named = rec.get("named") or {}
    if not isinstance(fields, dict) or not isinstance(keys, list) or not isinstance(named, dict):
        raise ValueError("bad fields, keys or named")
    # What a writer puts there is small scalars, names and piece ids; anything else is damage
    # (and a nested value would travel on into every report that shows the fields).
    if not all(_is_small_scalar(v) and (is_text(v) or not isinstance(v, str)) for v in fields.values()):
        raise ValueError("a body field is not a small scalar")
    if not all(is_text(k) for k in fields):
        raise ValueError("a body field's name is not text")
    refs = {p.id for p in parts if isinstance(p, PieceRef)}
    if not all(is_text(k) for k in keys) or not all(v in refs for v in named.values()):
        raise ValueError("bad keys or named (a named piece is not one of the body's)")
    kind, sha = rec.get("kind", "json"), rec.get("sha256", "")
    if not isinstance(kind, str) or not isinstance(sha, str):
        raise ValueError("kind or sha256 is not text")
    return Body(
        kind,
        _size(rec.get("size")),
        sha,
        tuple(parts),
        _decode_history(rec.get("history"), history_of),
        fields,
        tuple(keys),
        dict(named),
    )


def _decode_history(rec: Any, history_of: Callable[[int], tuple[str, ...] | None]) -> tuple[str, ...] | None:
    if rec is None:
        return None
    add = rec.get("add") if isinstance(rec, dict) else None
    if not (isinstance(add, list) and all(isinstance(i, str) and _PIECE_ID.fullmatch(i) for i in add)):
        raise ValueError("bad history")
    if "base" not in rec:
        return tuple(add)
    base, keep = rec.get("base"), rec.get("keep")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in (base, keep)) or keep < 0:
        raise ValueError("bad history base")
    earlier = history_of(base)
    if earlier is None or len(earlier) < keep:
        raise ValueError(f"its history builds on exchange {base}, which is missing or damaged")
    return earlier[:keep] + tuple(add)


def _checked_id(pid: str) -> str:
    if not _PIECE_ID.fullmatch(pid):
        raise ValueError("a piece reference is not a piece id")
    return pid


def _size(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError("size is not a byte count")
    return v
