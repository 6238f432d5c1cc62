"""What a fault-injecting hop forwards of a streamed response, and the small decisions around it.

This module owns the sans-IO part of the fault hop (`proxycheck.hops.faults`): `SSEFilter` is a
state machine that is fed the response body in chunks of any size and returns, for each chunk,
the bytes to forward. It frames SSE on the reassembled stream with `SSEParser`'s byte offsets,
so where the upstream (or an earlier proxy) cut its chunks never changes what is forwarded.
It can

* pass everything;
* pass the first K events and withhold the rest (a stall, or the point of a reset), optionally
  sending one `: keep-alive` comment per withheld chunk instead;
* drop the terminal marker (`data: [DONE]`, Anthropic `message_stop`, Responses
  `response.completed`) and pass the rest;

and it says when the K-th event has been passed. The helpers next to it read a request body
(`turn_number`), rewrite one (`truncate_messages`) and draw the seeded per-flow coin
(`coin`). Pure core: standard library and `proxycheck.core` only, no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque

from proxycheck.core.protocol.sse import SSEComment, SSEEvent, SSEItem, SSEParser
from proxycheck.core.recording import sessions

__all__ = [
    "KEEPALIVE",
    "SSEFilter",
    "coin",
    "draw",
    "is_terminal",
    "truncate_messages",
    "turn_number",
]

KEEPALIVE = b": keep-alive\n\n"

# Event types that end a stream, per dialect: Anthropic Messages, OpenAI Responses.
_TERMINAL_TYPES = frozenset({"message_stop", "response.completed"})
# Roles a hop keeps at the head of a truncated history (OpenAI's newer name for system first).
_SYSTEM_ROLES = frozenset({"system", "developer"})


def is_terminal(event: SSEEvent) -> bool:
    """True for an event that marks the end of a stream: `[DONE]` (OpenAI, vLLM, SGLang),
    `message_stop` (Anthropic) or `response.completed` (Responses), named by the `event:` field
    or, for servers that leave that out, by the JSON `type` of the data."""
    if event.type in _TERMINAL_TYPES:
        return True
    data = event.data
    if data.strip() == "[DONE]":
        return True
    if event.type != "message" or not any(t in data for t in _TERMINAL_TYPES):
        return False  # the substring test keeps json.loads off the hot path
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return type(doc) is dict and doc.get("type") in _TERMINAL_TYPES


class SSEFilter:
    """Decides, chunk by chunk, which bytes of an SSE body a hop forwards.

    `cut_after=K` forwards the stream up to the end of its K-th event (comments count for
    nothing, K=0 cuts before the first byte) and withholds everything after it; with
    `keepalive`, each chunk that had withheld bytes is answered by one `KEEPALIVE` comment, so
    bytes keep flowing while content does not. `drop_terminal` leaves out terminal events
    (`is_terminal`) and passes the rest. Without either, every byte passes as it comes.

    `feed(chunk)` returns the bytes to forward now; `close()` those left at the end of the
    stream (an unterminated last event is forwarded unless it is dropped or after the cut).
    Bytes before the cut are forwarded as soon as they arrive, except with `drop_terminal`:
    then an event is held until it is complete, since only then is it known to be a terminal.
    """

    __slots__ = (
        "_parser",
        "_cut_after",
        "_drop_terminal",
        "_keepalive",
        "_cut",
        "_sent",
        "_buf",
        "_skips",
        "_closed",
        "events",
        "terminals_dropped",
        "withheld_bytes",
        "keepalives_sent",
    )

    def __init__(
        self, *, cut_after: int | None = None, drop_terminal: bool = False, keepalive: bool = False
    ) -> None:
        if cut_after is not None and cut_after < 0:
            raise ValueError(f"cut_after must be >= 0 or None, not {cut_after}")
        if keepalive and cut_after is None:
            raise ValueError("keepalive needs cut_after: keep-alives replace withheld content")
        self._parser = SSEParser()
        self._cut_after = cut_after
        self._drop_terminal = drop_terminal
        self._keepalive = keepalive
        # Stream offset just past the K-th event, once known; nothing from there on is forwarded.
        self._cut: int | None = 0 if cut_after == 0 else None
        self._sent = 0  # stream offset up to which bytes are decided (forwarded or dropped)
        self._buf = bytearray()  # the undecided bytes: stream[_sent : bytes fed so far]
        self._skips: deque[tuple[int, int]] = deque()  # (start, end) of terminals to drop
        self._closed = False
        self.events = 0  # events seen upstream (forwarded or not)
        self.terminals_dropped = 0
        self.withheld_bytes = 0  # upstream bytes after the cut
        self.keepalives_sent = 0

    @property
    def cut_passed(self) -> bool:
        """True once the K-th event has been forwarded (at once for K=0): the stream is cut."""
        return self._cut is not None and self._sent >= self._cut

    def feed(self, chunk: bytes) -> bytes:
        """The next bytes of the upstream body; returns what to forward now."""
        if self._closed:
            raise ValueError("SSEFilter.feed() called after close()")
        if not chunk:
            return b""
        self._take(self._parser.feed(chunk, 0.0))
        if self._cut is None and not self._drop_terminal:
            self._sent += len(chunk)  # the common case: nothing to decide, pass the chunk as is
            return chunk
        withheld_before = self.withheld_bytes
        self._buf += chunk
        out = self._emit(self._frontier())
        if self._keepalive and self.withheld_bytes > withheld_before:
            self.keepalives_sent += 1
            out += KEEPALIVE
        return out

    def close(self) -> bytes:
        """End of the upstream body; returns the last bytes to forward."""
        if self._closed:
            return b""
        self._take(self._parser.close(0.0))
        self._closed = True
        return self._emit(self._parser.offset)

    def _frontier(self) -> int:
        """Offset up to which bytes may be decided now."""
        parser = self._parser
        if self._drop_terminal:
            # Only settled bytes: the open event may still turn out to be a terminal.
            return parser.offset - parser.pending
        return parser.offset

    def _take(self, items: list[SSEItem]) -> None:
        """Count the completed events, note the cut and the terminals to drop."""
        for item in items:
            if isinstance(item, SSEComment):
                continue
            self.events += 1
            if self._cut is None and self.events == self._cut_after:
                self._cut = item.end
            elif self._cut is not None and item.start >= self._cut:
                continue  # after the cut: withheld anyway
            if self._drop_terminal and is_terminal(item):
                self._skips.append((item.start, item.end))

    def _emit(self, frontier: int) -> bytes:
        """Decide stream[_sent:frontier] (less after the cut): forward it minus the dropped
        terminals; bytes after the cut are withheld and forgotten."""
        limit = frontier if self._cut is None else min(frontier, self._cut)
        base = self._sent
        n = max(limit - base, 0)
        buf = self._buf
        pieces: list[bytes] = []
        pos = base
        while self._skips and self._skips[0][0] < base + n:
            start, end = self._skips.popleft()
            if start > pos:
                pieces.append(bytes(buf[pos - base : start - base]))
            pos = max(pos, min(end, base + n))
            self.terminals_dropped += 1
        if pos < base + n:
            pieces.append(bytes(buf[pos - base : n]))
        del buf[:n]
        self._sent = base + n
        if self._cut is not None and self._sent >= self._cut and buf:
            self.withheld_bytes += len(buf)
            buf.clear()
        return b"".join(pieces)


# --------------------------------------------------------------------------------------------
# request bodies


def _json_object(body: bytes | str | dict | None) -> dict | None:
    """The body as a JSON object, or None when it is missing, not JSON or not an object.
    An already parsed object is taken as is."""
    if body is None or type(body) is dict:
        return body
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc if type(doc) is dict else None


def turn_number(body: bytes | str | dict | None) -> int:
    """The turn of a request body, raw or parsed (see `proxycheck.core.recording.sessions.turn_number`)."""
    return sessions.turn_number(_json_object(body))


def truncate_messages(body: bytes | str, keep: int) -> bytes | None:
    """The body with its `messages` cut to the last `keep` ones, leading system (and developer)
    messages kept in front, as compact UTF-8 JSON; None when there is nothing to cut (not a
    JSON object with a `messages` list, or no more than `keep` messages after the system ones).
    This is what a context-trimming gateway does behind the client's back."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, not {keep}")
    doc = _json_object(body)
    messages = doc.get("messages") if doc is not None else None
    if doc is None or type(messages) is not list:
        return None
    lead = 0
    while lead < len(messages) and _is_system(messages[lead]):
        lead += 1
    rest = messages[lead:]
    if len(rest) <= keep:
        return None
    doc["messages"] = messages[:lead] + rest[-keep:]
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _is_system(message: object) -> bool:
    return type(message) is dict and message.get("role") in _SYSTEM_ROLES


# --------------------------------------------------------------------------------------------
# the per-flow coin


def draw(seed: int, index: int) -> float:
    """A number in [0, 1) fixed by (seed, index): the `index`-th flow's draw for `seed`.

    SHA-256 rather than `random`, so the sequence is the same on every Python version and
    platform and needs no state: a flaky fault fires on the same flows in every run."""
    digest = hashlib.sha256(f"proxycheck-fault:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def coin(probability: float, seed: int, index: int) -> bool:
    """Whether the faults of the `index`-th flow fire, given their probability and the seed."""
    if probability >= 1.0:
        return True
    if probability <= 0.0:
        return False
    return draw(seed, index) < probability
