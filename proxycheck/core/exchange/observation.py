"""One observed exchange of a run: what was sent, what came back and when, and its outcome.

An `Observation` is the replayer's unit of evidence (docs/design.md, "run"): one exchange of a
recorded session, sent over one route in one repetition. It holds values only (no wire objects),
so the differ can compare the same exchange across routes and runs: timings, the shape of the
stream (one `Event` per SSE event or comment), the status and a few telling response headers,
digests and sizes of both bodies, a summary of what the model said (`ResultSummary`: digests and
lengths, not the text, which stays in the recording), the connection it rode, and the outcome.

Times: `t_start` is the offset from the run's start (stored once, as wall-clock time, in the run)
at which the request was sent; every other time is an offset from `t_start`. The metrics follow
docs/design.md: TTFT = first content event, ITL = gaps between content events, E2E = terminal event,
TPOT = (E2E - TTFT) / (output tokens - 1).

`encode` / `decode` turn an observation into a JSON-friendly dict and back, exactly (floats
survive JSON unchanged; the observer rounds times to microseconds before they get here). `decode`
raises ValueError naming the field for anything malformed, so a loader can report the line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, NamedTuple, TypeVar

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol.result import Event, Result  # Event: defined with the model, re-exported here

# What one item of a response stream was. "comment" is an SSE comment (a keep-alive); the others
# are `EventKind` values ("malformed" also marks an event cut off by the end of the stream).
EVENT_KINDS = ("content", "meta", "comment", "terminal", "error", "malformed")

# Response headers worth keeping: who answered (Via, Server), what it is (Content-Type,
# Content-Encoding), whether a hop was told not to buffer (X-Accel-Buffering), and the reference
# engine's digest of the request it received.
KEPT_HEADERS = (
    "via",
    "server",
    "content-type",
    "content-encoding",
    "x-accel-buffering",
    "x-proxycheck-request-sha256",
    "x-proxycheck-request-bytes",
)


class ToolCallSummary(NamedTuple):
    name: str | None
    arguments_sha256: str
    arguments_valid: bool


@dataclass(frozen=True, slots=True)
class ResultSummary:
    """What the model said, as digests and sizes: enough to tell two answers apart, no text.

    Lengths are in characters. Tokens are as the server reported them (None if it did not)."""

    text_sha256: str
    text_len: int
    reasoning_len: int = 0
    tool_calls: tuple[ToolCallSummary, ...] = ()
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    terminal: bool = False

    @classmethod
    def of(cls, result: Result) -> "ResultSummary":
        usage = result.usage
        calls = tuple(ToolCallSummary(c.name, _sha256(c.arguments), c.arguments_valid) for c in result.tool_calls)
        return cls(
            text_sha256=_sha256(result.text),
            text_len=len(result.text),
            reasoning_len=len(result.reasoning),
            tool_calls=calls,
            finish_reason=result.finish_reason,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            terminal=result.terminal,
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One exchange as observed; see the module docstring for the time base."""

    # Run-level keys: which exchange of the recording, over which route, in which repetition.
    # An observer leaves them blank; the replayer sets them (`with_keys`).
    route: str = ""
    repetition: int = 0
    session: str = ""
    turn: int = 0
    xid: int | None = None

    # When (t_start from the run's start; the rest from t_start).
    t_start: float
    connect: float | None = None  # the new connection was ready; None when one was reused
    headers: float | None = None  # response headers came
    first_event: float | None = None
    first_content: float | None = None
    end: float | None = None  # the exchange was over: ended, failed, or cut by a watchdog
    events: tuple[Event, ...] = ()

    # What.
    streamed: bool = True
    status: int | None = None
    response_headers: tuple[tuple[str, str], ...] = ()  # KEPT_HEADERS only, names in lower case
    request_bytes: int = 0
    request_sha256: str = ""
    response_bytes: int = 0  # body bytes received, after content decoding
    result: ResultSummary | None = None

    # The connection it rode: `connection` numbers a session's connections 1, 2, ... in order
    # of appearance; `idle` is how long that connection had been idle when this request went.
    reused: bool | None = None
    idle: float | None = None
    http_version: str | None = None
    connection: int | None = None

    outcome: Outcome
    detail: str = ""
    error: str = ""  # the client stack's exception, when one ended the exchange
    # The longest silence (s) that went past its watchdog and that the client's patience waited
    # out (`proxycheck.core.exchange.watchdogs`); None when none did.
    waited: float | None = None
    # "http", or "websocket": a turn of a WebSocket session (one `response.create` and its answer
    # on a socket), whose "headers" are its first answer's start (`proxycheck.io.ws_replay`).
    transport: str = "http"

    def with_keys(self, *, route: str, repetition: int, session: str, turn: int, xid: int | None) -> "Observation":
        return replace(self, route=route, repetition=repetition, session=session, turn=turn, xid=xid)

    @property
    def key(self) -> tuple[str, int, str, int, int | None]:
        return (self.route, self.repetition, self.session, self.turn, self.xid)

    def response_header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.response_headers if k == name), None)

    # Metrics ---------------------------------------------------------------------------------

    @property
    def ttft(self) -> float | None:
        return self.first_content

    @property
    def e2e(self) -> float | None:
        """Time to the terminal event: the first `terminal` event of a stream, or the end of a
        complete non-streamed body. None when no terminal marker came."""
        terminal = next((e.t for e in self.events if e.kind == "terminal"), None)
        if terminal is not None:
            return terminal
        if not self.streamed and self.result is not None and self.result.terminal:
            return self.end
        return None

    @property
    def content_times(self) -> tuple[float, ...]:
        return tuple(e.t for e in self.events if e.kind == "content")

    @property
    def itl(self) -> tuple[float, ...]:
        """Gaps between successive content events."""
        times = self.content_times
        return tuple(b - a for a, b in zip(times, times[1:]))

    @property
    def output_tokens(self) -> int | None:
        return self.result.completion_tokens if self.result else None

    @property
    def tpot(self) -> float | None:
        """(E2E - TTFT) / (output tokens - 1), when all three are known and there are 2+ tokens."""
        tokens, e2e, ttft = self.output_tokens, self.e2e, self.ttft
        if tokens is None or tokens < 2 or e2e is None or ttft is None:
            return None
        return (e2e - ttft) / (tokens - 1)

    @property
    def content_events(self) -> int:
        return sum(1 for e in self.events if e.kind == "content")

    @property
    def comments(self) -> int:
        return sum(1 for e in self.events if e.kind == "comment")


def select_headers(headers: Any) -> tuple[tuple[str, str], ...]:
    """The KEPT_HEADERS of an iterable of (name, value) pairs, in order, names lower-cased."""
    return tuple((k.lower(), v) for k, v in headers if k.lower() in KEPT_HEADERS)


# ------------------------------------------------------------------------------------------------
# encode / decode


def encode(obs: Observation) -> dict[str, Any]:
    """A JSON-friendly dict (lists for tuples, plain strings for enums)."""
    return {
        "route": obs.route,
        "repetition": obs.repetition,
        "session": obs.session,
        "turn": obs.turn,
        "xid": obs.xid,
        "t_start": obs.t_start,
        "connect": obs.connect,
        "headers": obs.headers,
        "first_event": obs.first_event,
        "first_content": obs.first_content,
        "end": obs.end,
        "events": [[e.t, e.size, e.kind] for e in obs.events],
        "streamed": obs.streamed,
        "status": obs.status,
        "response_headers": [[k, v] for k, v in obs.response_headers],
        "request_bytes": obs.request_bytes,
        "request_sha256": obs.request_sha256,
        "response_bytes": obs.response_bytes,
        "result": _encode_result(obs.result) if obs.result else None,
        "reused": obs.reused,
        "idle": obs.idle,
        "http_version": obs.http_version,
        "connection": obs.connection,
        "outcome": obs.outcome.value,
        "detail": obs.detail,
        "error": obs.error,
        **({"waited": obs.waited} if obs.waited is not None else {}),
        **({"transport": obs.transport} if obs.transport != "http" else {}),
    }


def _encode_result(r: ResultSummary) -> dict[str, Any]:
    return {
        "text_sha256": r.text_sha256,
        "text_len": r.text_len,
        "reasoning_len": r.reasoning_len,
        "tool_calls": [list(c) for c in r.tool_calls],
        "finish_reason": r.finish_reason,
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "terminal": r.terminal,
    }


def decode(doc: Mapping[str, Any]) -> Observation:
    """The Observation `encode` made; ValueError (naming the field) for anything else. Unknown
    fields are ignored: a newer writer may add some."""
    if not isinstance(doc, Mapping):
        raise ValueError("not a JSON object")
    get = _Fields(doc)
    return Observation(
        route=get.req("route", _str),
        repetition=get.req("repetition", _int),
        session=get.req("session", _str),
        turn=get.req("turn", _int),
        xid=get.opt("xid", _int),
        t_start=get.req("t_start", _float),
        connect=get.opt("connect", _float),
        headers=get.opt("headers", _float),
        first_event=get.opt("first_event", _float),
        first_content=get.opt("first_content", _float),
        end=get.opt("end", _float),
        events=get.req("events", _list_of(_event)),
        streamed=get.req("streamed", _bool),
        status=get.opt("status", _int),
        response_headers=get.req("response_headers", _list_of(_header)),
        request_bytes=get.req("request_bytes", _int),
        request_sha256=get.req("request_sha256", _str),
        response_bytes=get.req("response_bytes", _int),
        result=get.opt("result", _result),
        reused=get.opt("reused", _bool),
        idle=get.opt("idle", _float),
        http_version=get.opt("http_version", _str),
        connection=get.opt("connection", _int),
        outcome=get.req("outcome", _outcome),
        detail=get.req("detail", _str),
        error=get.req("error", _str),
        waited=get.opt("waited", _float),
        transport=get.opt("transport", _str) or "http",
    )


T = TypeVar("T")


class _Fields:
    """Typed access to a decoded dict; errors name the field."""

    def __init__(self, doc: Mapping[str, Any], prefix: str = "") -> None:
        self.doc = doc
        self.prefix = prefix

    def req(self, name: str, conv: Callable[[Any], T]) -> T:
        if name not in self.doc:
            raise ValueError(f"{self.prefix}{name}: missing")
        return self._conv(name, conv)

    def opt(self, name: str, conv: Callable[[Any], T]) -> T | None:
        if self.doc.get(name) is None:
            return None
        return self._conv(name, conv)

    def _conv(self, name: str, conv: Callable[[Any], T]) -> T:
        try:
            return conv(self.doc[name])
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{self.prefix}{name}: {exc}") from None


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected text, got {type(v).__name__}")
    return v


def _int(v: Any) -> int:
    # JSON true/false are bools, which Python counts as ints: not a number here.
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"expected an integer, got {type(v).__name__}")
    return v


def _float(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {type(v).__name__}")
    return float(v)


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"expected true or false, got {type(v).__name__}")
    return v


def _outcome(v: Any) -> Outcome:
    return Outcome(_str(v))  # ValueError for an unknown outcome


def _list_of(conv: Callable[[Any], T]) -> Callable[[Any], tuple[T, ...]]:
    def convert(v: Any) -> tuple[T, ...]:
        if not isinstance(v, list):
            raise ValueError(f"expected a list, got {type(v).__name__}")
        return tuple(conv(item) for item in v)

    return convert


def _items(v: Any, n: int) -> list[Any]:
    if not isinstance(v, list) or len(v) != n:
        raise ValueError(f"expected a list of {n}")
    return v


def _event(v: Any) -> Event:
    t, size, kind = _items(v, 3)
    if kind not in EVENT_KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    return Event(_float(t), _int(size), kind)


def _header(v: Any) -> tuple[str, str]:
    name, value = _items(v, 2)
    return (_str(name), _str(value))


def _tool_call(v: Any) -> ToolCallSummary:
    name, digest, valid = _items(v, 3)
    return ToolCallSummary(None if name is None else _str(name), _str(digest), _bool(valid))


def _result(v: Any) -> ResultSummary:
    if not isinstance(v, Mapping):
        raise ValueError("expected an object")
    get = _Fields(v, "result.")
    return ResultSummary(
        text_sha256=get.req("text_sha256", _str),
        text_len=get.req("text_len", _int),
        reasoning_len=get.req("reasoning_len", _int),
        tool_calls=get.req("tool_calls", _list_of(_tool_call)),
        finish_reason=get.opt("finish_reason", _str),
        prompt_tokens=get.opt("prompt_tokens", _int),
        completion_tokens=get.opt("completion_tokens", _int),
        terminal=get.req("terminal", _bool),
    )
