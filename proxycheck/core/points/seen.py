"""What one point saw of one exchange: `Seen`, built from a recorded exchange and its analysis.

Times are on the point's own clock (seconds since its recording's `started_at`, a wall-clock
time); `wall(t)` puts them on the wall clock of that point's machine, which may be off from the
other points' by an unknown offset (`proxycheck.core.points.matching` estimates it).

The *key* of an exchange is what identifies it at every point without changing the traffic:
the digest of what the model sees (`requestparts.parts_of(...).view`: messages, system prompt,
tools and generation parameters, in canonical JSON), so that a hop that re-serializes the body,
adds members the model never sees (`stream_options`, `user`) or maps a model alias does not make
it another exchange; a body of no known shape is keyed by its canonical JSON, a body that is not
JSON by its bytes. The canonical digest and the raw digest are kept beside it, to say whether a
hop re-serialized or changed the body between two points.

A WebSocket session is seen as *parts* (`kind`; `proxycheck.core.points.recorded` makes them):
each of its turns, keyed by its `response.create` message as a request body is; its end while
it sat idle; its upgrade alone when no turn came. `ident` (the exchange and the part) tells the
parts of one socket apart.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol import requestparts
from proxycheck.core.protocol.analysis import ResponseAnalysis

HEAD = 4096  # response bytes kept per exchange to tell identical requests apart (`matching`)

# Stages of progress, in order: how far an exchange got at one point.
NOTHING, HEADERS, BYTES, COMPLETE = 0, 1, 2, 3
# What a `Seen` stands for: an HTTP exchange; a turn of a WebSocket session; the socket's end
# while it sat idle (after its last turn, or its upgrade); an upgrade with no turn (refused,
# never answered, or a socket never used).
EXCHANGE, SOCKET_TURN, SOCKET_END, UPGRADE = "exchange", "websocket turn", "websocket end", "websocket upgrade"


@dataclass(frozen=True, slots=True)
class RequestKey:
    """How one request body is known at every point (see the module docstring)."""

    view: str  # the key: what the model sees, else the canonical JSON, else the bytes
    canonical: str | None  # the canonical JSON's digest (None: not JSON)
    raw: str  # the bytes' digest


def request_key(body: bytes) -> RequestKey:
    raw = hashlib.sha256(body).hexdigest()
    ok, doc = requestparts.parse(body)
    if not ok:
        return RequestKey("raw:" + raw, None, raw)
    canonical = hashlib.sha256(requestparts.canonical_json(doc)).hexdigest()
    try:
        view = requestparts.parts_of(doc).view if isinstance(doc, dict) else "json:" + canonical
    except RecursionError:
        view = "json:" + canonical
    return RequestKey(view, canonical, raw)


@dataclass(frozen=True, slots=True)
class Seen:
    """One exchange at one point.

    `label`/`turn` name it as that point's own sessions do (the outermost point's names are the
    client's). `t_*` are on the point's clock; `last_progress` is the last response byte (or the
    headers, or the request when nothing came back). `complete` is the answer known complete: a
    recorded `ok` whose stream (if any) reached its terminal marker or finish reason.
    """

    xid: int
    label: str
    turn: int
    method: str
    path: str
    key: RequestKey
    t_request: float
    t_response: float | None
    t_ended: float | None  # its end or error; None while in flight (or interrupted)
    status: int | None
    streamed: bool
    events: int
    content_events: int
    bytes: int
    first_content: float | None
    last_byte: float | None
    terminal: bool  # the dialect's terminal marker ([DONE], message_stop ...) came
    finish: bool  # a finish reason or the terminal marker came
    outcome: Outcome
    detail: str
    content_times: tuple[float, ...] = ()
    error: str | None = None
    interrupted: bool = False  # still in flight when the recorder stopped
    head: bytes = b""  # the first HEAD bytes of the response as recorded: tells identical requests apart
    kind: str = EXCHANGE
    part: int = 0  # a socket's turn number (its end: the number after its last turn); 0: the exchange
    client_ended: bool = False  # its socket was ended by its client (a close frame, or its connection cut)
    ending: str = ""  # SOCKET_END: how the socket ended ("closed by the client (1000)", ...)

    @property
    def ident(self) -> tuple[int, int]:
        """What tells it apart from everything else its point saw: the exchange, and the part of it."""
        return (self.xid, self.part)

    @property
    def name(self) -> str:
        """How a line names it: "s1 turn 4", "s2 WebSocket turn 3", "s2 WebSocket end after turn 3"."""
        if self.kind == SOCKET_TURN:
            return f"{self.label} WebSocket turn {self.turn}"
        if self.kind == SOCKET_END:
            after = f"turn {self.turn - 1}" if self.turn > 1 else "the upgrade"
            return f"{self.label} WebSocket end after {after}"
        if self.kind == UPGRADE:
            return f"{self.label} WebSocket upgrade"
        return f"{self.label} turn {self.turn}"

    @property
    def stage(self) -> int:
        if self.complete:
            return COMPLETE
        if self.bytes > 0:
            return BYTES
        return HEADERS if self.status is not None else NOTHING

    @property
    def complete(self) -> bool:
        if self.outcome is Outcome.NOT_RECORDED or self.outcome.is_failure:
            return False
        return self.status is not None and (not self.streamed or self.finish)

    @property
    def failed(self) -> bool:
        return self.outcome.is_failure

    @property
    def known(self) -> bool:
        """Whether the recording knows how it went (not `not_recorded`)."""
        return self.outcome is not Outcome.NOT_RECORDED

    @property
    def last_progress(self) -> float:
        for t in (self.last_byte, self.t_response):
            if t is not None:
                return t
        return self.t_request

    @property
    def ttft(self) -> float | None:
        """Request to first content (or, unstreamed, to the response headers), on its own clock."""
        first = self.first_content if self.first_content is not None else self.t_response
        return None if first is None else first - self.t_request

    def part_json(self) -> dict[str, object]:
        """What the JSON documents add for a part of a WebSocket session: which part, its number."""
        if self.kind == EXCHANGE:
            return {}
        part = {SOCKET_TURN: "turn", SOCKET_END: "end", UPGRADE: "upgrade"}[self.kind]
        return {"websocket": part, "socket_turn": self.part}

    def progress_text(self) -> str:
        """What this point got, in a few words: "812 events, [DONE]", "40 events", "HTTP 502"."""
        if self.kind == SOCKET_END:
            return f"socket {self.ending}"
        if self.status is None:
            return "no response" + (f" ({self.error})" if self.error else "")
        parts = []
        if self.status >= 400:
            parts.append(f"HTTP {self.status}")
        if self.streamed:
            parts.append(f"{self.events} event{'s' if self.events != 1 else ''}")
        else:
            parts.append(f"{self.bytes} bytes")
        if self.terminal:
            parts.append("terminal event" if self.kind == SOCKET_TURN else "terminal marker")
        elif self.finish:
            parts.append("finish reason")
        if self.kind == SOCKET_TURN and self.error and not self.terminal:
            parts.append(f"then the socket {self.error}")
        return ", ".join(parts)


def seen_of(
    *,
    xid: int,
    label: str,
    turn: int,
    method: str,
    path: str,
    body: bytes,
    t_request: float,
    t_response: float | None,
    t_end: float | None,
    t_error: float | None,
    status: int | None,
    streamed: bool,
    analysis: ResponseAnalysis | None,
    outcome: Outcome,
    detail: str,
    error: str | None,
    interrupted: bool,
    last_byte: float | None,
    head: bytes = b"",
) -> Seen:
    """A `Seen` from a recorded exchange's facts and its parsed response (`last_byte`: when the
    last response bytes arrived, None when none did)."""
    a = analysis
    return Seen(
        xid=xid, label=label, turn=turn, method=method, path=path, key=request_key(body),
        t_request=t_request, t_response=t_response, t_ended=t_end if t_end is not None else t_error,
        status=status, streamed=streamed, events=a.events if a else 0, content_events=a.content_events if a else 0,
        bytes=a.bytes if a else 0, first_content=a.first_content if a else None, last_byte=last_byte,
        terminal=bool(a and a.terminal_at is not None), finish=bool(a and a.finish_at is not None),
        outcome=outcome, detail=detail, content_times=a.content_times if a else (), error=error,
        interrupted=interrupted, head=head[:HEAD],
    )  # fmt: skip
