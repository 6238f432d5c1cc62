"""Sessions of a recording as a user reads them: turns, sizes, think times, what each turn got.

A turn the client retried (`proxycheck.core.recording.sessions.retries`) is listed once per attempt, each
with the same `turn`, its `attempt` of `attempts` and the `backoff` before it; the turn's outcome
is its last attempt's, and the failed attempts stay listed as the evidence they are.

This joins the pieces of the core: the dialect of each exchange (from its path and body), the
analysis of its recorded response, its outcome, and session grouping. `proxycheck sessions`
renders the result as a table or JSON (`to_json`).

Each exchange's response is parsed once (`analyze`, giving an `ExchangeAnalysis`), and the
analysis stays with its turn (`TurnSummary.analysis`) for the replay plan
(`proxycheck.core.replay.plan`), which asks it instead of parsing again. The rules every reader of
a recorded exchange shares live here: whether its response was a stream (`is_streamed`; whether
its request asked for one, `requests_stream`) and when it ended (`ended_at`). A growing recording
(`proxycheck record`'s live view) is summarized with a `SessionSummarizer` fed only the exchanges
that changed, so a refresh analyses what is new and nothing else.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from proxycheck.core.exchange.outcomes import CLIENT_LEFT_WORDS, Classified, Outcome, classify_recorded
from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.analysis import ResponseAnalysis, analyze_body, analyze_stream
from proxycheck.core.protocol.encoding import decode_body, decode_chunks
from proxycheck.core.recording.journal import NOT_RECORDED_PREFIX, RecordedExchange
from proxycheck.core.recording import websocket
from proxycheck.core.recording.redact import REDACTED
from proxycheck.core.recording.sessions import (
    DEFAULT_SESSION_FIELDS,
    DEFAULT_SESSION_HEADERS,
    CLIENT_SESSION_HEADERS,
    SessionName,
    TurnInput,
    group,
)

SCHEMA = "proxycheck.sessions/1"
# Prompt-string APIs: the member that holds the prompt, for continuity grouping.
_PROMPT_KEYS = ("prompt", "text")


@dataclass(frozen=True, slots=True)
class TurnSummary:
    turn: int
    xid: int
    method: str
    path: str
    dialect: str | None
    request_bytes: int
    messages: int | None
    t_start: float
    think_time: float | None
    status: int | None
    streamed: bool | None
    outcome: Outcome
    detail: str
    ttft: float | None
    duration: float | None
    events: int
    finish_reason: str | None
    tool_calls: tuple[str, ...]
    completion_tokens: int | None
    # A turn the client retried has one TurnSummary per attempt, all with its `turn`: `attempt`
    # of `attempts`; `think_time` is None for a retry, whose wait is its `backoff`.
    attempt: int = 1
    attempts: int = 1
    backoff: float | None = None
    retry_count: int | None = None  # the request's x-stainless-retry-count, when it had one
    # The parse of the recorded response the fields above come from, kept for the replay plan;
    # not part of what a summary says (equality, repr and JSON leave it out).
    analysis: "ExchangeAnalysis | None" = field(default=None, compare=False, repr=False)

    @property
    def last_attempt(self) -> bool:
        return self.attempt == self.attempts


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One session: `id` is what it was grouped by, `label` (s1, s2 ...) what people read,
    `key` its explicit key as people know it (`proxycheck.core.recording.sessions`)."""

    id: str
    grouped_by: str
    dialect: str | None
    turns: tuple[TurnSummary, ...]
    label: str = ""
    key: str | None = None
    # The refused WebSocket upgrades this conversation went on from over HTTP (their xids, also
    # among `turns`): it changed transport (`transport_change` says it).
    changed_transport: tuple[int, ...] = ()

    @property
    def transport_change(self) -> str | None:
        """"its WebSocket upgrade was refused (405, 405), then it went on over HTTP", or None."""
        if not self.changed_transport:
            return None
        statuses = [t.status for t in self.turns if t.xid in self.changed_transport]
        said = ", ".join("no answer" if status is None else str(status) for status in statuses)
        times = f" {len(statuses)} times" if len(statuses) > 1 else ""
        return f"its WebSocket upgrade was refused{times} ({said}), then it went on over HTTP"

    @property
    def outcomes(self) -> Counter[str]:
        """Turns by outcome; a retried turn's is its last attempt's."""
        return Counter(t.outcome.value for t in self.turns if t.last_attempt)

    @property
    def turn_count(self) -> int:
        """Conversation turns (`turns` has one entry per exchange, attempts included)."""
        return sum(1 for t in self.turns if t.attempt == 1)

    @property
    def retries(self) -> int:
        return sum(1 for t in self.turns if t.attempt > 1)

    @property
    def name(self) -> SessionName:
        attempts = tuple((t.xid, t.attempt, t.attempts) for t in self.turns if t.attempts > 1)
        return SessionName(self.id, self.label or self.id, self.key, self.grouped_by, attempts)


def dialect_of(exchange: RecordedExchange) -> str | None:
    body = exchange.body
    pseudo: dict[str, Any] = {k: True for k in body.keys}
    pseudo.update({k: v for k, v in body.fields.items() if "." not in k})
    headers = {n.lower(): v for n, v in exchange.request_headers if isinstance(v, str)}
    return dialects.detect(exchange.path, pseudo or None, headers)


def requests_stream(exchange: RecordedExchange) -> bool:
    """Whether the request asked for a streamed response (`"stream": true`)."""
    return exchange.body.fields.get("stream") is True


def is_streamed(exchange: RecordedExchange) -> bool:
    """Whether the recorded response was a stream: as the recorder saw it, else by its
    content type (an event stream), else by what the request asked for."""
    if exchange.streamed is not None:
        return exchange.streamed
    ctype = exchange.response_header("content-type")
    if isinstance(ctype, str) and "event-stream" in ctype.lower():
        return True
    return requests_stream(exchange)


def ended_at(exchange: RecordedExchange) -> float | None:
    """When the exchange ended: its end, else its error (None while it is in flight)."""
    return exchange.t_end if exchange.t_end is not None else exchange.t_error


def analyze_exchange(exchange: RecordedExchange, dialect: str | None) -> ResponseAnalysis | None:
    if exchange.status is None:
        return None
    # What the client read: the body with its content coding undone (a hop gzipping a stream).
    coding = exchange.response_header("content-encoding")
    if is_streamed(exchange):
        chunks, _ = decode_chunks(coding, exchange.timed_chunks())
        end = exchange.t_end if exchange.t_end is not None else None
        return analyze_stream(dialect, chunks, end)
    if exchange.t_end is None:
        return ResponseAnalysis(dialect, None, False, bytes=len(exchange.response_body))
    body, _ = decode_body(coding, exchange.response_body)
    return analyze_body(dialect, body, exchange.t_end)


def explicit_key(
    exchange: RecordedExchange, headers: Sequence[str], fields: Sequence[str]
) -> tuple[str, str] | None:
    """(value, source) of the first session key the exchange carries."""
    for name in headers:
        value = exchange.request_header(name)
        if isinstance(value, str) and value and value is not REDACTED:
            return value, f"header:{name.lower()}"
    for name in fields:
        value = exchange.body.fields.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value), f"field:{name}"
    return None


def _response_id(analysis: "ExchangeAnalysis") -> str | None:
    """The `id` the recorded response carried (the Responses API's for `previous_response_id`)."""
    result = analysis.response.result if analysis.response is not None else None
    return result.response_id if result is not None and result.response_id else None


def _text_field(exchange: RecordedExchange, name: str) -> str | None:
    value = exchange.body.fields.get(name)
    return value if isinstance(value, str) and value else None


def _prompt(exchange: RecordedExchange, resolve: Callable[[str], bytes]) -> str | None:
    body = exchange.body
    for key in _PROMPT_KEYS:
        value = body.fields.get(key)
        if isinstance(value, str):
            return value
        pid = body.named.get(key)
        if pid is not None:
            try:
                decoded = json.loads(resolve(pid))
            except (ValueError, UnicodeDecodeError, RecursionError):
                return None
            return decoded if isinstance(decoded, str) else None
    return None


@dataclass(frozen=True, slots=True)
class ExchangeAnalysis:
    """One recorded exchange worked out once: its dialect, whether its response was a stream
    (`is_streamed`), the parse of that response (None before headers), its outcome, and when it
    ended (`ended_at`)."""

    dialect: str | None
    streamed: bool
    response: ResponseAnalysis | None
    classified: Classified
    ended_at: float | None
    socket: tuple["SocketTurn", ...] = ()  # a WebSocket session's turns, each judged (`socket_turns`)


def analyze(ex: RecordedExchange) -> ExchangeAnalysis:
    """The analysis of one exchange (its response parsed once)."""
    if ex.websocket:
        return _analyze_socket(ex)
    dialect = dialect_of(ex)
    analysis = analyze_exchange(ex, dialect)
    if ex.not_recorded is not None and not ex.finished:
        # The recorder stopped writing while it ran: how it ended is unknown, not a wedge.
        events = analysis.events if analysis is not None else 0
        got = f"{events} event(s) recorded" if ex.status is not None else "no response headers recorded"
        classified = Classified(Outcome.NOT_RECORDED, f"{ex.not_recorded}; {got}")
    else:
        classified = classify_recorded(
            finished=ex.finished,
            error=ex.error,
            interrupted=ex.interrupted,
            status=ex.status,
            analysis=analysis,
            ended_at=ex.t_error if ex.error is not None else ex.t_end,
        )
        if ex.lost_line is not None and classified.outcome.is_failure:
            # What it lacks may be a damaged line, not the traffic: no recorded failure of it.
            classified = Classified(Outcome.NOT_RECORDED, f"{NOT_RECORDED_PREFIX}{ex.lost_line}; as loaded: "
                                                          f"{classified.outcome}, {classified.detail}")  # fmt: skip
    return ExchangeAnalysis(dialect, is_streamed(ex), analysis, classified, ended_at(ex))


WS_DIALECT = "openai_responses"  # the Responses API's WebSocket mode: the events its SSE stream carries


@dataclass(frozen=True, slots=True)
class SocketTurn:
    """One turn of a recorded WebSocket session judged: the turn, its answer parsed, its outcome,
    and when it ended (its terminal event, else the socket's end)."""

    turn: websocket.WsTurn
    analysis: ResponseAnalysis
    classified: Classified
    ended_at: float | None


def socket_turns(ex: RecordedExchange) -> list[SocketTurn]:
    """The turns of a WebSocket session (`proxycheck.core.recording.websocket`), each judged by
    the rules every recorded stream is judged by: its answer read as the SSE stream that carries
    the same events; a turn the socket ended before its terminal event ended as the socket did
    (its cut, or its close, as the error); one still open when the recording ended, in flight."""
    close = ex.ws_close
    ended = close.t if close is not None else (ex.t_error if ex.error is not None else ex.t_end)
    how = close.describe() if close is not None else (ex.error or "")
    finished = ex.finished or close is not None
    out = []
    for turn in websocket.turns(ex.ws):
        end = turn.t_end if turn.t_end is not None else ended
        analysis = analyze_stream(WS_DIALECT, websocket.as_sse(turn.answer), end)
        if turn.terminal is not None:
            classified = classify_recorded(finished=True, error=None, interrupted=False, status=200, analysis=analysis,
                                           ended_at=end)  # fmt: skip
        else:
            words = ex.error if ex.error is not None else (how or None)
            classified = classify_recorded(finished=finished, error=words if finished else None,
                                           interrupted=ex.interrupted, status=200, analysis=analysis, ended_at=end)  # fmt: skip
        out.append(SocketTurn(turn, analysis, classified, end))
    return out


def _analyze_socket(ex: RecordedExchange) -> ExchangeAnalysis:
    """A WebSocket session judged as a whole (`socket_turns`): its first failing turn's outcome,
    said with the turn; a socket the server (or a cut) ended between turns, while the client had
    not closed it, is a `reset` between turns, but a cut of the client's own connection then is the
    client leaving (Codex exits without a close frame); an open socket with every turn answered,
    no wedge. Its analysis is the deciding turn's (else the last)."""
    judged = tuple(socket_turns(ex))
    close = ex.ws_close
    ended = close.t if close is not None else (ex.t_error if ex.error is not None else ex.t_end)
    for one in judged:
        if one.classified.outcome is not Outcome.OK:
            said = Classified(one.classified.outcome,
                              f"WebSocket turn {one.turn.index} of {len(judged)}: {one.classified.detail}")  # fmt: skip
            return ExchangeAnalysis(WS_DIALECT, True, one.analysis, said, one.ended_at, judged)
    last = judged[-1].analysis if judged else None
    count = f"WebSocket: {len(judged)} turn(s)"
    if not ex.finished and close is None:
        # Every turn answered and none in flight: an open socket between turns is no wedge.
        open_ = f"{count}; the socket was still open when the recording ended"
        kind = Outcome.NOT_RECORDED if ex.not_recorded is not None else Outcome.OK
        return ExchangeAnalysis(WS_DIALECT, True, last, Classified(kind, open_), ended, judged)
    if close is not None and not close.clean and CLIENT_LEFT_WORDS in (ex.error or ""):
        # Every turn answered, then the client's connection closed: it left, as an HTTP client
        # that hangs up after its answer does (the recorder sees no further than its client).
        left = Classified(Outcome.OK, f"{count}; the client hung up without a close frame ({close.code})")
        return ExchangeAnalysis(WS_DIALECT, True, last, left, ended, judged)
    if close is not None and close.by != "client":
        since = judged[-1].ended_at if judged and judged[-1].ended_at is not None else ex.t_request
        state = Classified(Outcome.RESET, f"{count}; between turns the socket was {close.describe()}, "
                                          f"{max(close.t - since, 0.0):.1f} s after the last turn ended")  # fmt: skip
        return ExchangeAnalysis(WS_DIALECT, True, last, state, ended, judged)
    how = close.describe() if close is not None else (ex.error or "")
    ok = Classified(Outcome.OK, f"{count}; {how}" if how else count)
    return ExchangeAnalysis(WS_DIALECT, True, last, ok, ended, judged)


class SessionSummarizer:
    """Sessions of a set of exchanges that may grow: `add` analyses the exchanges given (new
    ones, or new versions of ones already added, as a journal being written changes them) and
    keeps every analysis; `summaries` and `session_count` group what was added so far."""

    def __init__(
        self,
        resolve: Callable[[str], bytes],
        *,
        session_headers: Sequence[str] = DEFAULT_SESSION_HEADERS,
        session_fields: Sequence[str] = DEFAULT_SESSION_FIELDS,
    ) -> None:
        self._resolve = resolve
        self._headers = tuple(session_headers)
        self._fields = tuple(session_fields)
        self._facts: dict[int, tuple[RecordedExchange, ExchangeAnalysis, TurnInput]] = {}

    def add(self, exchanges: Iterable[RecordedExchange]) -> None:
        for ex in exchanges:
            analysis = analyze(ex)
            self._facts[ex.xid] = (ex, analysis, self._turn_input(ex, analysis))

    def _turn_input(self, ex: RecordedExchange, analysis: ExchangeAnalysis) -> TurnInput:
        key = explicit_key(ex, self._headers, self._fields)
        return TurnInput(
            xid=ex.xid,
            t_start=ex.t_request,
            t_end=analysis.ended_at,
            explicit_key=key[0] if key else None,
            key_source=key[1] if key else None,
            history=ex.body.messages,
            prompt=_prompt(ex, self._resolve) if ex.body.messages is None else None,
            client=ex.conn.client_id if ex.conn else None,
            route=f"{ex.method} {ex.path}",
            # Not recorded to the end is no failure: a re-send after it is a new turn.
            failed=analysis.classified.outcome not in (Outcome.OK, Outcome.NOT_RECORDED),
            retry_count=retry_count(ex),
            digest=ex.body.sha256,
            response_id=_response_id(analysis),
            previous_response_id=_text_field(ex, "previous_response_id"),
            upgrade_refused=websocket.is_upgrade(ex.request_headers) and not ex.websocket,
            client_session=_header_text(ex, *CLIENT_SESSION_HEADERS),
            agent=_header_text(ex, "user-agent"),
        )

    def session_count(self) -> int:
        """How many sessions the exchanges added so far make."""
        return len(group([facts[2] for facts in self._facts.values()]))

    def summaries(self) -> list[SessionSummary]:
        """The sessions of the exchanges added so far, every turn described."""
        out = []
        for session in group([facts[2] for facts in self._facts.values()]):
            turns = []
            for i, xid in enumerate(session.xids):
                ex, analysis, _ = self._facts[xid]
                turn = session.turn_numbers[i]
                turns.append(_turn(turn, ex, analysis, session.think_times[i], session.attempt_numbers[i],
                                   session.attempts(turn), session.backoffs[i]))  # fmt: skip
            common = Counter(t.dialect for t in turns if t.dialect).most_common(1)
            dialect = common[0][0] if common else None
            out.append(SessionSummary(session.id, session.grouped_by, dialect, tuple(turns), session.label,
                                      session.key, session.changed_transport))  # fmt: skip
        return out


def _header_text(ex: RecordedExchange, *names: str) -> str | None:
    """The first of these request headers the exchange carries as text (a redacted one is not)."""
    return next((v for v in map(ex.request_header, names) if isinstance(v, str)), None)


def summarize_sessions(
    exchanges: Sequence[RecordedExchange],
    resolve: Callable[[str], bytes],
    *,
    session_headers: Sequence[str] = DEFAULT_SESSION_HEADERS,
    session_fields: Sequence[str] = DEFAULT_SESSION_FIELDS,
) -> list[SessionSummary]:
    """Group exchanges into sessions and describe every turn."""
    summarizer = SessionSummarizer(resolve, session_headers=session_headers, session_fields=session_fields)
    summarizer.add(exchanges)
    return summarizer.summaries()


def _turn(n: int, ex: RecordedExchange, analysis: ExchangeAnalysis, think: float | None, attempt: int = 1,
          attempts: int = 1, backoff: float | None = None) -> TurnSummary:  # fmt: skip
    response = analysis.response
    result = response.result if response else None
    t0, end = ex.t_request, analysis.ended_at
    usage = result.usage if result else None
    return TurnSummary(
        turn=n,
        xid=ex.xid,
        method=ex.method,
        path=ex.path,
        dialect=analysis.dialect,
        request_bytes=ex.body.size,
        messages=len(ex.body.messages) if ex.body.messages is not None else None,
        t_start=ex.t_request,
        think_time=think,
        status=ex.status,
        streamed=analysis.streamed if ex.status is not None else None,
        outcome=analysis.classified.outcome,
        detail=analysis.classified.detail,
        ttft=None if not response or response.first_content is None else round(response.first_content - t0, 6),
        duration=None if end is None else round(end - t0, 6),
        events=response.events if response else 0,
        finish_reason=result.finish_reason if result else None,
        tool_calls=tuple(c.name or "?" for c in result.tool_calls) if result else (),
        completion_tokens=usage.completion_tokens if usage else None,
        attempt=attempt,
        attempts=attempts,
        backoff=backoff,
        retry_count=retry_count(ex),
        analysis=analysis,
    )


RETRY_HEADER = "x-stainless-retry-count"


def retry_count(exchange: RecordedExchange) -> int | None:
    """The SDK's count of its retries of this request (`x-stainless-retry-count`), if it sent one."""
    value = exchange.request_header(RETRY_HEADER)
    if not isinstance(value, str) or not value.strip().isdigit():
        return None
    return int(value.strip())


def to_json(directory: str, sessions: Sequence[SessionSummary], warnings: Sequence[str]) -> dict[str, Any]:
    """The `sessions --json` document (schema proxycheck.sessions/1)."""
    return {
        "schema": SCHEMA,
        "recording": directory,
        "sessions": [
            {
                "id": s.id,
                "label": s.label or s.id,
                "key": s.key,
                "grouped_by": s.grouped_by,
                "dialect": s.dialect,
                "turns": [
                    {
                        "turn": t.turn,
                        "exchange": t.xid,
                        "method": t.method,
                        "path": t.path,
                        "dialect": t.dialect,
                        "request_bytes": t.request_bytes,
                        "messages": t.messages,
                        "start": t.t_start,
                        "think_time": t.think_time,
                        "status": t.status,
                        "streamed": t.streamed,
                        "outcome": t.outcome.value,
                        "detail": t.detail,
                        "ttft": t.ttft,
                        "duration": t.duration,
                        "events": t.events,
                        "finish_reason": t.finish_reason,
                        "tool_calls": list(t.tool_calls),
                        "completion_tokens": t.completion_tokens,
                        "attempt": t.attempt,
                        "attempts": t.attempts,
                        "backoff": t.backoff,
                        "retry_count": t.retry_count,
                    }
                    for t in s.turns
                ],
                "outcomes": dict(s.outcomes),
                "turn_count": s.turn_count,
                "retries": s.retries,
                "changed_transport": None if not s.changed_transport else {
                    "from": "websocket", "to": "http", "refused_upgrades": list(s.changed_transport),
                    "text": s.transport_change,
                },
            }
            for s in sessions
        ],
        "warnings": list(warnings),
    }
