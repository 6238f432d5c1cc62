"""Sessions of a recording as a user reads them: turns, sizes, think times, what each turn got.

A turn the client retried (`proxycheck.core.recording.sessions.retries`) is listed once per attempt, each
with the same `turn`, its `attempt` of `attempts` and the `backoff` before it; the turn's outcome
is its last attempt's, and the failed attempts stay listed as the evidence they are.

This joins the pieces of the core: the dialect of each exchange (from its path and body), the
analysis of its recorded response, its outcome, and session grouping. `proxycheck sessions`
renders the result as a table or JSON (`to_json`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from proxycheck.core.exchange.outcomes import Outcome, classify_recorded
from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.analysis import ResponseAnalysis, analyze_body, analyze_stream
from proxycheck.core.protocol.encoding import decode_body, decode_chunks
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.redact import REDACTED
from proxycheck.core.recording.sessions import (
    DEFAULT_SESSION_FIELDS,
    DEFAULT_SESSION_HEADERS,
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


def is_streamed(exchange: RecordedExchange) -> bool:
    if exchange.streamed is not None:
        return exchange.streamed
    ctype = exchange.response_header("content-type")
    if isinstance(ctype, str) and "event-stream" in ctype.lower():
        return True
    return bool(exchange.body.fields.get("stream"))


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
            except (ValueError, UnicodeDecodeError):
                return None
            return decoded if isinstance(decoded, str) else None
    return None


def summarize_sessions(
    exchanges: Sequence[RecordedExchange],
    resolve: Callable[[str], bytes],
    *,
    session_headers: Sequence[str] = DEFAULT_SESSION_HEADERS,
    session_fields: Sequence[str] = DEFAULT_SESSION_FIELDS,
) -> list[SessionSummary]:
    """Group exchanges into sessions and describe every turn."""
    facts: dict[int, tuple[RecordedExchange, str | None, ResponseAnalysis | None, Any]] = {}
    inputs = []
    for ex in exchanges:
        dialect = dialect_of(ex)
        analysis = analyze_exchange(ex, dialect)
        classified = classify_recorded(
            finished=ex.finished,
            error=ex.error,
            interrupted=ex.interrupted,
            status=ex.status,
            analysis=analysis,
            ended_at=ex.t_error if ex.error is not None else ex.t_end,
        )
        facts[ex.xid] = (ex, dialect, analysis, classified)
        key = explicit_key(ex, session_headers, session_fields)
        inputs.append(
            TurnInput(
                xid=ex.xid,
                t_start=ex.t_request,
                t_end=ex.t_end if ex.t_end is not None else ex.t_error,
                explicit_key=key[0] if key else None,
                key_source=key[1] if key else None,
                history=ex.body.messages,
                prompt=_prompt(ex, resolve) if ex.body.messages is None else None,
                client=ex.conn.client_id if ex.conn else None,
                route=f"{ex.method} {ex.path}",
                failed=classified.outcome is not Outcome.OK,
                retry_count=retry_count(ex),
                digest=ex.body.sha256,
            )
        )
    out = []
    for session in group(inputs):
        turns = []
        for i, xid in enumerate(session.xids):
            ex, dialect, analysis, classified = facts[xid]
            turn = session.turn_numbers[i]
            turns.append(_turn(turn, ex, dialect, analysis, classified, session.think_times[i], session.attempt_numbers[i],
                               session.attempts(turn), session.backoffs[i]))  # fmt: skip
        common = Counter(t.dialect for t in turns if t.dialect).most_common(1)
        dialect = common[0][0] if common else None
        out.append(SessionSummary(session.id, session.grouped_by, dialect, tuple(turns), session.label, session.key))
    return out


def _turn(n: int, ex: RecordedExchange, dialect: str | None, analysis: ResponseAnalysis | None, classified: Any,
          think: float | None, attempt: int = 1, attempts: int = 1, backoff: float | None = None) -> TurnSummary:  # fmt: skip
    result = analysis.result if analysis else None
    end = ex.t_end if ex.t_end is not None else ex.t_error
    usage = result.usage if result else None
    return TurnSummary(
        turn=n,
        xid=ex.xid,
        method=ex.method,
        path=ex.path,
        dialect=dialect,
        request_bytes=ex.body.size,
        messages=len(ex.body.messages) if ex.body.messages is not None else None,
        t_start=ex.t_request,
        think_time=think,
        status=ex.status,
        streamed=is_streamed(ex) if ex.status is not None else None,
        outcome=classified.outcome,
        detail=classified.detail,
        ttft=None if not analysis or analysis.first_content is None else round(analysis.first_content - ex.t_request, 6),
        duration=None if end is None else round(end - ex.t_request, 6),
        events=analysis.events if analysis else 0,
        finish_reason=result.finish_reason if result else None,
        tool_calls=tuple(c.name or "?" for c in result.tool_calls) if result else (),
        completion_tokens=usage.completion_tokens if usage else None,
        attempt=attempt,
        attempts=attempts,
        backoff=backoff,
        retry_count=retry_count(ex),
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
            }
            for s in sessions
        ],
        "warnings": list(warnings),
    }
