"""A WebSocket session as a recording holds it: its messages, how it ended, and its turns.

The Responses API's WebSocket mode (Codex CLI's default transport; the OpenAI SDKs'
`responses.connect()`) runs a whole conversation over one socket: `GET /v1/responses` with
`Upgrade: websocket`, then per turn a client text message `{"type": "response.create", ...}`
(the Responses create body) and the server's events, one per text message, the same events an
SSE stream carries, up to a terminal one (`response.completed`, `response.failed`,
`response.incomplete`) or an `error` event. Later turns send only the new input, with
`previous_response_id`, which the server keeps in the socket's memory.

The recording keeps the socket as one exchange: its handshake is the exchange's request and
response (101, or the status that refused the upgrade), and two record kinds of the journal
(`proxycheck.core.recording.journal`) follow it, between its `resp` and its `end` or `error`:

    {"k":"ws","x":N,"t":T,"c":true,"v":TEXT}     a message, `c` true from the client; its text
                                                  ("b64" instead of "v" for a binary message)
    {"k":"wsclose","x":N,"t":T,"by":"client","code":1000,"reason":""}
                                                  how the socket ended: the side that sent the
                                                  close frame and its code and reason; "by":
                                                  null and code 1006 when no close frame came
                                                  (the connection was cut)

A message is written when it has passed whole, with the time it did: nothing is held back or
changed on the way (the recorder), and a client message has the credentials of its JSON redacted
as a request body's are.

`turns` splits a socket's messages into its turns (pure: messages in, turns out): a client
`response.create` starts one, and the server's messages up to its terminal event are its answer.
Parallel streams on one socket (`stream_id`) are kept apart. A turn's answer can be read by the
SSE machinery as it is (`as_sse`): each event becomes the SSE event a stream would have carried.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

UPGRADE = "websocket"
CREATE = "response.create"  # the client message that starts a turn
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
ABNORMAL = 1006  # RFC 6455: closed without a close frame (never sent on the wire)
# How a replayed socket's ends are said in an observation's detail (`proxycheck.io.ws_replay`), and
# read back by the advice (`proxycheck.core.diagnose.advice`): one wording, written once.
IDLE_END = "while it sat idle"  # the chain ended the socket after its last turn
WAITING_END = "into the wait before this turn"  # ... while the next turn's think time ran
NOT_SENT = "not sent: "  # a turn left on a socket that had ended
_BY = ("client", "server")
_AFTER_LAST = "after the last turn ended, "
_IDLE_FOR = re.compile(r"(\d+(?:\.\d+)?) s (?:" + re.escape(_AFTER_LAST + IDLE_END) + "|" + re.escape(WAITING_END) + ")")


def ended_idle(how: str, idle: float, waiting: bool) -> str:
    """The words of a replayed socket the chain ended `how` ("the socket was cut ...") after
    `idle` seconds of silence since its last turn ended: while the next turn waited its think
    time (`waiting`), or after the last turn."""
    return f"{how} {idle:.1f} s {WAITING_END if waiting else _AFTER_LAST + IDLE_END}"


def idle_when_ended(detail: str) -> float | None:
    """How long a replayed socket had sat idle when the chain ended it, read back from the words
    `ended_idle` wrote; None for any other detail."""
    found = _IDLE_FOR.search(detail)
    return float(found.group(1)) if found else None


@dataclass(frozen=True, slots=True)
class WsMessage:
    """One whole message: when it passed (seconds from the recording's start), which way, its
    bytes, and whether it was a text message."""

    t: float
    from_client: bool
    data: bytes
    text: bool = True

    def json(self) -> Mapping[str, Any] | None:
        """The message as a JSON object, None when it is not one."""
        if not self.text:
            return None
        try:
            doc = json.loads(self.data)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
        return doc if isinstance(doc, dict) else None

    @property
    def type(self) -> str | None:
        doc = self.json()
        kind = doc.get("type") if doc is not None else None
        return kind if isinstance(kind, str) else None


@dataclass(frozen=True, slots=True)
class WsClose:
    """How a socket ended: `by` the side that sent the close frame (None: no close frame came,
    the connection was cut), its `code` and `reason`."""

    t: float
    by: str | None
    code: int | None
    reason: str = ""

    @property
    def clean(self) -> bool:
        """A close frame came (a side closed it on purpose)."""
        return self.by is not None and self.code not in (None, ABNORMAL)

    def describe(self) -> str:
        if not self.clean:
            return f"cut without a close frame ({ABNORMAL})"
        said = f": {self.reason}" if self.reason else ""
        return f"closed by the {self.by} ({self.code}{said})"


def is_upgrade(headers: Iterable[tuple[str, Any]]) -> bool:
    """A request (or response) asking for (or agreeing to) a WebSocket upgrade."""
    return any(str(n).lower() == "upgrade" and isinstance(v, str) and v.strip().lower() == UPGRADE for n, v in headers)


# ------------------------------------------------------------------------------------------------
# Records


def message_record(xid: int, t: float, from_client: bool, data: bytes, text: bool) -> dict[str, Any]:
    rec: dict[str, Any] = {"k": "ws", "x": xid, "t": round(t, 6), "c": bool(from_client)}
    if text:
        try:
            rec["v"] = data.decode("utf-8")
            return rec
        except UnicodeDecodeError:
            pass
    rec["b64"] = base64.b64encode(data).decode("ascii")
    return rec


def close_record(xid: int, t: float, by: str | None, code: int | None, reason: str) -> dict[str, Any]:
    if by is not None and by not in _BY:
        raise ValueError(f"by must be client, server or None, not {by!r}")
    return {"k": "wsclose", "x": xid, "t": round(t, 6), "by": by, "code": code, "reason": reason}


def decode_message(rec: Mapping[str, Any], t: float) -> WsMessage:
    """A `ws` record's message (ValueError for one that is not one)."""
    from_client = rec.get("c")
    if not isinstance(from_client, bool):
        raise ValueError("c is not true or false")
    if "v" in rec:
        value = rec["v"]
        if not isinstance(value, str):
            raise ValueError("v is not text")
        return WsMessage(t, from_client, value.encode("utf-8", "surrogatepass"), True)
    value = rec.get("b64")
    if not isinstance(value, str):
        raise ValueError("neither v nor b64")
    try:
        data = base64.b64decode(value, validate=True)
    except (ValueError, TypeError):
        raise ValueError("b64 is not base64") from None
    return WsMessage(t, from_client, data, False)


def decode_close(rec: Mapping[str, Any], t: float) -> WsClose:
    """A `wsclose` record (ValueError for one that is not one)."""
    by, code, reason = rec.get("by"), rec.get("code"), rec.get("reason", "")
    if by is not None and by not in _BY:
        raise ValueError("by is not client, server or null")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 9999):
        raise ValueError("code is not a close code")
    if not isinstance(reason, str):
        raise ValueError("reason is not text")
    return WsClose(t, by, code, reason)


# ------------------------------------------------------------------------------------------------
# Turns


@dataclass(frozen=True, slots=True)
class WsTurn:
    """One turn of a socket: the client's `response.create` (`request`, sent at `t_request`) and
    the server's messages that answered it, up to its terminal event (`answer`); `terminal` the
    type of that event, None when none came (the socket ended, or the recording did, first).
    `stream` is the turn's `stream_id` (None on a socket without parallel streams)."""

    index: int
    t_request: float
    request: WsMessage
    answer: tuple[WsMessage, ...]
    terminal: str | None
    stream: str | None = None

    @property
    def t_end(self) -> float | None:
        """When its terminal event came (None: never)."""
        return self.answer[-1].t if self.terminal is not None and self.answer else None

    @property
    def body(self) -> bytes:
        """What the client sent for it: the `response.create` message's bytes."""
        return self.request.data


def turns(messages: Sequence[WsMessage]) -> list[WsTurn]:
    """The turns of a socket's messages, in the order they began (see the module docstring).

    A server message belongs to the open turn of its `stream_id` (one without a stream id: to
    the oldest open turn); one that comes when no turn is open (a session event, an error about a
    message that was not a `response.create`) belongs to no turn. A client message other than
    `response.create` starts no turn."""
    found: list[dict[str, Any]] = []
    open_: list[dict[str, Any]] = []
    for msg in messages:
        doc = msg.json()
        kind = doc.get("type") if doc is not None else None
        stream = _stream_of(doc)
        if msg.from_client:
            if kind == CREATE:
                turn = {"t": msg.t, "request": msg, "answer": [], "terminal": None, "stream": stream}
                found.append(turn)
                open_.append(turn)
            continue
        owner = next((t for t in open_ if stream is not None and t["stream"] == stream), None)
        if owner is None:
            owner = next((t for t in open_ if stream is None or t["stream"] is None), None)
        if owner is None:
            continue
        owner["answer"].append(msg)
        if kind in TERMINAL:
            owner["terminal"] = kind
            open_.remove(owner)
    return [WsTurn(i, t["t"], t["request"], tuple(t["answer"]), t["terminal"], t["stream"])
            for i, t in enumerate(found, start=1)]  # fmt: skip


def _stream_of(doc: Mapping[str, Any] | None) -> str | None:
    if doc is None:
        return None
    stream = doc.get("stream_id")
    if stream is None and isinstance(doc.get("response"), dict):
        stream = doc["response"].get("stream_id")
    return str(stream) if isinstance(stream, (str, int)) and not isinstance(stream, bool) else None


def sse_event(data: bytes) -> bytes:
    """One message as the SSE event that carries it: its bytes as the event's data (a line of
    its own per line of the message). The event's type is in its JSON (`type`), which is where
    the Responses API dialect reads it, as it does from a stream."""
    if b"\n" in data or b"\r" in data:
        data = data.replace(b"\r", b"").replace(b"\n", b"\ndata: ")
    return b"data: " + data + b"\n\n"


def as_sse(answer: Iterable[WsMessage]) -> list[tuple[float, bytes]]:
    """A turn's answer as the SSE stream that carries the same events (`sse_event` for each
    message, at the time it came), so the Responses API dialect reads it as it reads a stream."""
    return [(msg.t, sse_event(msg.data)) for msg in answer]
