"""What a replay sends, decided before it sends a byte.

The replayer (`proxycheck.io`) carries out a plan made here; this module owns every decision that
needs no network and no clock:

* **Sessions and turns** (`plan_sessions`). Each session of a recording becomes a
  `PlannedSession`: its recorded start (offset from the recording's first request) and its turns,
  in order. A `PlannedTurn` holds the request to send (method, recorded URL, HTTP version, the
  headers left once hop-by-hop, redacted, forwarding and proxycheck's own headers are dropped, the exact body
  bytes), the think time before it, whether it opens a new connection or reuses the session's
  current one, and what the recording saw (`RecordedOutcome`: outcome, time to headers, TTFT,
  duration, gaps between content events, the parsed reply) for the differ to compare against.
  A turn the client retried is planned once per attempt, each after its recorded backoff: the
  retries a hop saw are part of what it saw, and each attempt is judged on its own.
* **Pacing** (`think_delay`, `start_delay`, `parse_pace`): recorded think times and session
  starts, scaled by the pace (`recorded`, `fast` = no waiting, or a factor).
* **Watchdogs** (`derive_watchdogs`, `Watchdogs`): the timeouts that turn a wedge into an
  outcome, derived from what the recording shows a healthy exchange takes.
* **Chained mode** (`ChainedSession`): the next turn's history carries the reply that was
  actually replayed instead of the recorded one, and a Responses API turn names the live
  response (`previous_response_id`) instead of the recorded one.

Closed-loop concurrency, the run id, the route's own headers (`Route.url_for` and the chain file)
and all timing of the live replay belong to the replayer. Pure core: standard library and
`proxycheck.core` only.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Sequence

from proxycheck.core.errors import BadInput
from proxycheck.core.exchange.outcomes import CLIENT_LEFT_WORDS, Outcome
from proxycheck.core.exchange.watchdogs import DEFAULT_CONNECT, MIN_HEADERS, MIN_STALL, MIN_TOTAL, Watchdogs
from proxycheck.core.protocol.result import Result, ToolCall
from proxycheck.core.recording.bodies import join_body, prefix_digests
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.redact import Headers, Redacted
from proxycheck.core.recording.sessions import SessionName, think_time
from proxycheck.core.recording.websocket import is_upgrade
from proxycheck.core.replay.patience import RecordedClient, client_patience, stated_timeout
from proxycheck.core.recording.summary import (
    WS_DIALECT,
    ExchangeAnalysis,
    SessionSummary,
    TurnSummary,
    analyze,
    ended_at,
    requests_stream,
)

# --------------------------------------------------------------------------------------------
# Request headers

# Headers that describe one connection or one hop, not the request (RFC 9110 7.6.1, plus Host
# and Content-Length, which the replayer's client sets for the route and the body it sends, and
# Proxy-Authorization, which belongs to the recorded client's proxy, never to a route).
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "content-length",
        "proxy-authorization",
    }
)
# proxycheck's own headers (`x-proxycheck-replay: RUN_ID`, ...): a replay adds its own, and a
# recorded one would make the recorder skip the request as a replay of itself.
PROXYCHECK_PREFIX = "x-proxycheck-"
# Headers a hop adds about the client and the hops it came through: they belong to the recorded
# path, not to the request, and a route's hops can route, authorize or rate-limit on them (a
# recorded client address, a recorded `https` proto) or see a forwarding loop in a recorded Via.
# Not replayed as recorded: each hop of the route adds its own. The plan lists those it left out.
FORWARDING = frozenset(
    {
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-port",
        "x-forwarded-server",
        "x-forwarded-prefix",
        "x-original-forwarded-for",
        "x-real-ip",
        "x-client-ip",
        "x-cluster-client-ip",
        "true-client-ip",
        "cf-connecting-ip",
        "via",
    }
)


def replay_headers(headers: Headers) -> tuple[tuple[str, str], ...]:
    """The recorded request headers an exact replay sends, in recorded order.

    Dropped: hop-by-hop headers (`HOP_BY_HOP` and every header a Connection header names),
    headers whose value was redacted (the route supplies its own credentials), the forwarding
    headers a recorded hop added (`FORWARDING`: `forwarding_left_out` names them), recorded
    `x-proxycheck-*` headers, and HTTP/2 pseudo-headers (`:authority` ...: some imports list
    them, and the client derives them from the URL)."""
    named: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection" and isinstance(value, str):
            named.update(token.strip().lower() for token in value.split(","))
    out: list[tuple[str, str]] = []
    for name, value in headers:
        low = name.lower()
        if isinstance(value, Redacted) or low in HOP_BY_HOP or low in named or low in FORWARDING:
            continue
        if low.startswith(PROXYCHECK_PREFIX) or low.startswith(":"):
            continue
        out.append((name, value))
    return tuple(out)


def forwarding_left_out(headers: Headers) -> tuple[str, ...]:
    """The recorded forwarding headers (`FORWARDING`) a replay leaves out, lower case, once each."""
    return tuple(dict.fromkeys(name.lower() for name, _ in headers if name.lower() in FORWARDING))


# --------------------------------------------------------------------------------------------
# The plan


@dataclass(frozen=True, slots=True)
class RecordedOutcome:
    """What the recording saw for one turn, for comparison with its replays.

    Times are seconds from the recorded request: `headers_time` to the response headers, `ttft`
    to the first content event, `duration` to the end (or the error). `gaps` are the intervals
    between successive content events (keep-alive comments are not content); they are empty when
    the recording has no real chunk arrival times (`chunk_timing` False: imported from a format
    that kept none). `result` is the parsed reply (None when nothing parseable came)."""

    outcome: Outcome
    detail: str = ""
    status: int | None = None
    headers_time: float | None = None
    ttft: float | None = None
    duration: float | None = None
    gaps: tuple[float, ...] = ()
    chunk_timing: bool = True
    result: Result | None = None
    # A failed exchange the recorded client closed itself ("Client disconnected."): how long it had
    # waited since the last progress (the response headers, or its last content event), and
    # whether the headers had come. What `derive_watchdogs` may take as the client's patience.
    client_waited: float | None = None
    client_waited_for_headers: bool = False
    # The longest silence the recorded client waited through without giving up (before the
    # headers, before the first event, between events, or until a hop cut the exchange while it
    # still waited): what its patience is at least (`proxycheck.core.replay.patience`).
    sat_through: float = 0.0


@dataclass(frozen=True, slots=True)
class PlannedTurn:
    """One request of a session, ready to send.

    `turn` is the turn number of the recording's session listing (`proxycheck sessions`), so
    findings name the turn a user already knows; skipped non-LLM exchanges leave gaps in it.
    `url` is the recorded URL: the replayer maps it onto a route with `Route.url_for`, and adds
    the route's headers to `headers` (the route's win on the same name). `think_time` is the
    recorded gap between the end of the previous planned turn and this request (None for the
    first turn, or when the previous one never ended). `new_connection` says to open a fresh
    connection for this turn instead of reusing the session's current one. `redacted` lists what
    the recorder removed (`header:authorization`, `body:...`), so the replayer can say which
    credentials the chain file must supply; `left_out` the recorded forwarding headers not sent
    (`x-forwarded-for`, ...: they belong to the recorded hops). `recorded_at` is when the
request was recorded, in seconds from the recording's first request (None for a plan made
elsewhere): what tells which sessions were in flight together.

    A turn the client retried is planned once per attempt, each with the same `turn`: `attempt`
    of `attempts`. A retry's `think_time` is None and its `backoff` is the recorded gap between
    the end of the attempt before and its request, which the replay waits as it does a think
    time (the retries a hop saw, and when, are part of what it saw)."""

    session: str
    turn: int
    xid: int
    method: str
    url: str
    dialect: str | None
    streamed: bool
    http_version: str | None
    headers: tuple[tuple[str, str], ...]
    body: bytes = field(repr=False)
    think_time: float | None
    new_connection: bool
    client_id: str | None
    recorded: RecordedOutcome
    redacted: tuple[str, ...] = ()
    attempt: int = 1
    attempts: int = 1
    backoff: float | None = None
    left_out: tuple[str, ...] = ()
    recorded_at: float | None = None  # the request's offset from the recording's first request
    # A WebSocket session's recorded end while it sat idle after its last turn, closed or cut by the
    # chain (not the client): nothing is sent; the replay watches the socket that long
    # (`think_time`) for the same end (`plan_socket`).
    socket_end: bool = False
    # A WebSocket upgrade with no turn on its socket (refused, never answered): only the handshake
    # is replayed, and judged (`plan_socket`).
    handshake: bool = False


@dataclass(frozen=True, slots=True)
class PlannedSession:
    """A session to replay: `start` is its first turn's recorded offset from the recording's
    first request; its turns are in recorded order. `label` and `key` are the names of
    `proxycheck sessions` (`SessionSummary`); observations carry `id`."""

    id: str
    grouped_by: str
    dialect: str | None
    start: float
    turns: tuple[PlannedTurn, ...]
    label: str = ""
    key: str | None = None
    # "http", or "websocket": the turns are messages on one socket (the Responses API's WebSocket
    # mode), whose handshake is the first turn's url and headers (`plan_socket`).
    transport: str = "http"

    @property
    def name(self) -> SessionName:
        attempts = tuple((t.xid, t.attempt, t.attempts) for t in self.turns if t.attempts > 1)
        return SessionName(self.id, self.label or self.id, self.key, self.grouped_by, attempts)


def plan_sessions(
    recording_exchanges: Sequence[RecordedExchange],
    resolve: Callable[[str], bytes],
    sessions: Sequence[SessionSummary],
    *,
    include_non_llm: bool = False,
) -> list[PlannedSession]:
    """The sessions to replay (from `summarize_sessions` on the same exchanges), in recorded start order.

    Exchanges that are not LLM requests (dialect None: model lists, health checks, embeddings)
    are skipped unless `include_non_llm`; a WebSocket session (`is_websocket_session`) is planned
    as a socket of its own (`plan_socket`), never as an HTTP request, which would judge a transport
    the client never used; a session left without turns is dropped. BadInput when
    a joined body does not match its recorded digest (a damaged piece would otherwise be sent
    silently); ValueError when a session names an exchange that is not in `recording_exchanges`.

    Each turn's recorded outcome comes from the analysis its summary carries
    (`TurnSummary.analysis`): the responses are not parsed again."""
    by_xid = {x.xid: x for x in recording_exchanges}
    if not by_xid:
        return []
    origin = min(x.t_request for x in recording_exchanges)
    out: list[PlannedSession] = []
    for summary in sessions:
        turns: list[PlannedTurn] = []
        prev: tuple[PlannedTurn, RecordedExchange] | None = None
        kept = []
        for ts in summary.turns:
            ex = by_xid.get(ts.xid)
            if ex is None:
                raise ValueError(f"session {summary.id} names exchange {ts.xid}, which is not in the recording")
            if ts.dialect is not None or include_non_llm:
                kept.append((ts, ex))
        sockets = sum(1 for _, ex in kept if is_websocket_session(ex))
        # A session of more than one socket (a client that dialled again), or of sockets and HTTP
        # turns (a refused upgrade, then the conversation over HTTP), replays each socket as a
        # part of its own (`socket_part`): its turns are numbered on their socket.
        parts = sockets > 1 or sockets < len(kept)
        part = 0
        for ts, ex in kept:
            if is_websocket_session(ex):
                part += 1
                out.append(plan_socket(summary, ex, origin, ts.analysis, part=part if parts else 0))
                continue  # never sent as an HTTP request: a WebSocket session goes over its own transport
            planned = _plan_turn(summary.id, ts, ex, resolve, prev, origin)
            turns.append(planned)
            prev = (planned, ex)
        if turns:
            start = round(by_xid[turns[0].xid].t_request - origin, 6)
            out.append(PlannedSession(summary.id, summary.grouped_by, summary.dialect, start, tuple(turns),
                                      summary.label or summary.id, summary.key))  # fmt: skip
    out.sort(key=lambda s: (s.start, s.turns[0].xid))
    return out


def is_websocket_session(ex: RecordedExchange) -> bool:
    """A WebSocket session, agreed to or refused (its request asked for the upgrade)."""
    return ex.websocket or is_upgrade(ex.request_headers)


def socket_part(name: str, part: int) -> str:
    """The name (id or label) of the `part`-th socket of a session holding more than one part
    ("s1.ws2"); 0: the session is that one socket (its name)."""
    return f"{name}.ws{part}" if part else name


def plan_socket(summary: SessionSummary, ex: RecordedExchange, origin: float,
                analysis: ExchangeAnalysis | None = None, *, part: int = 0) -> PlannedSession:  # fmt: skip
    """A recorded WebSocket session as a replay sends it: one socket, its handshake the recorded
    one (`url`, the headers kept as for any request), a turn per `response.create` message, sent
    exactly as recorded but for `previous_response_id`, which the replayer maps to the ids its
    engine gives (`proxycheck.core.replay.socket`); each after the recorded think time since the
    turn before ended. What the recording saw of each turn is the summary's judgement of it
    (`analysis`, `ExchangeAnalysis.socket`; made here only for a summary made elsewhere). `part`:
    the socket's number in a session of several parts (`socket_part`), 0 when it is the session."""
    analysis = analysis if analysis is not None else analyze(ex)
    sid = socket_part(summary.id, part)
    state = analysis.classified
    headers = replay_headers(ex.request_headers)
    client = ex.conn.client_id if ex.conn else None
    close = ex.ws_close
    # The client itself left (a close frame of its own, or its connection cut from its side).
    client_left = (close is not None and close.by == "client") or CLIENT_LEFT_WORDS in (ex.error or "").lower()

    def planned(number: int, body: bytes, recorded: RecordedOutcome, at: float, think: float | None,
                **kind: bool) -> PlannedTurn:  # fmt: skip
        return PlannedTurn(
            session=sid, turn=number, xid=ex.xid, method="WS", url=ex.url, dialect=WS_DIALECT, streamed=True,
            http_version=ex.http_version, headers=headers, body=body, think_time=think, new_connection=number == 1,
            client_id=client, recorded=recorded, redacted=ex.redacted, recorded_at=round(at - origin, 6), **kind,
        )  # fmt: skip

    turns: list[PlannedTurn] = []
    if not analysis.socket:
        # No turn on it: the upgrade refused, never answered, or a socket never used. The
        # handshake is what the recorded client met: replayed alone (`PlannedTurn.handshake`); a
        # client that gave up on an unanswered upgrade waited that long: its patience.
        waited = round(ex.t_error - ex.t_request, 6) if client_left and ex.t_response is None and ex.t_error else None
        end = ended_at(ex)
        recorded = RecordedOutcome(outcome=state.outcome, detail=state.detail, status=ex.status,
                                   duration=None if end is None else round(end - ex.t_request, 6),
                                   client_waited=waited, client_waited_for_headers=waited is not None)  # fmt: skip
        turns.append(planned(1, b"", recorded, ex.t_request, None, handshake=True))
    prev_end: float | None = None
    for one in analysis.socket:
        turn, answer = one.turn, one.analysis
        times, t0 = answer.content_times, turn.t_request
        waited = None
        if one.classified.outcome.is_failure and turn.terminal is None and client_left and one.ended_at is not None:
            waited = round(one.ended_at - max(t0, answer.last_content or t0), 6)
        marks = sorted([t0, *(m.t for m in turn.answer), *([one.ended_at] if one.ended_at is not None and not waited else [])])
        recorded = RecordedOutcome(
            outcome=one.classified.outcome, detail=one.classified.detail, status=200, headers_time=0.0,
            ttft=None if answer.first_content is None else round(answer.first_content - t0, 6),
            duration=None if one.ended_at is None else round(one.ended_at - t0, 6),
            gaps=tuple(round(b - a, 6) for a, b in zip(times, times[1:])), result=answer.result,
            client_waited=waited, client_waited_for_headers=False,
            sat_through=round(max((b - a for a, b in zip(marks, marks[1:])), default=0.0), 6),
        )  # fmt: skip
        turns.append(planned(turn.index, turn.body, recorded, t0, None if prev_end is None else think_time(prev_end, t0)))
        prev_end = one.ended_at if one.ended_at is not None else marks[-1]
    if close is not None and not client_left and prev_end is not None and analysis.socket[-1].turn.terminal is not None:
        # The chain ended the socket while it sat idle after its last turn: what the hop did then
        # is part of what it did (an idle timeout), watched for as a last "turn" of the socket.
        recorded = RecordedOutcome(outcome=state.outcome, detail=state.detail, duration=0.0)
        turns.append(planned(turns[-1].turn + 1, b"", recorded, prev_end, think_time(prev_end, close.t),
                             socket_end=True))  # fmt: skip
    return PlannedSession(sid, summary.grouped_by, WS_DIALECT, round(ex.t_request - origin, 6), tuple(turns),
                          socket_part(summary.label or summary.id, part), summary.key, transport="websocket")  # fmt: skip


def _plan_turn(
    session: str,
    ts: TurnSummary,
    ex: RecordedExchange,
    resolve: Callable[[str], bytes],
    prev: tuple[PlannedTurn, RecordedExchange] | None,
    origin: float,
) -> PlannedTurn:
    client = ex.conn.client_id if ex.conn else None
    # Measured from the previous *planned* turn, so a skipped exchange in between counts as
    # think time and the session keeps its recorded timeline.
    wait = think_time(ended_at(prev[1]), ex.t_request) if prev else None
    retry = ts.attempt > 1
    # A summary made elsewhere may lack its analysis; then (only then) the response is parsed here.
    analysis = ts.analysis if ts.analysis is not None else analyze(ex)
    return PlannedTurn(
        session=session,
        turn=ts.turn,
        xid=ex.xid,
        method=ex.method,
        url=ex.url,
        dialect=ts.dialect,
        # What the request asks for decides how the replayer reads the reply; the recorded
        # response says it too when the request did not (SGLang streams on a field of its own).
        streamed=requests_stream(ex) or analysis.streamed,
        http_version=ex.http_version or (ex.conn.http_version if ex.conn else None),
        headers=replay_headers(ex.request_headers),
        body=_exact_body(ex, resolve),
        think_time=None if retry else wait,
        new_connection=_new_connection(prev[0] if prev else None, client),
        client_id=client,
        recorded=_recorded(ts, ex, analysis),
        redacted=ex.redacted,
        attempt=ts.attempt,
        attempts=ts.attempts,
        backoff=wait if retry else None,
        left_out=forwarding_left_out(ex.request_headers),
        recorded_at=round(ex.t_request - origin, 6),
    )


def _exact_body(ex: RecordedExchange, resolve: Callable[[str], bytes]) -> bytes:
    data = join_body(ex.body, resolve)
    if hashlib.sha256(data).hexdigest() != ex.body.sha256:
        raise BadInput(f"exchange {ex.xid}", "request body does not match its recorded SHA-256 (a damaged piece?)")
    return data


def _new_connection(prev: PlannedTurn | None, client: str | None) -> bool:
    if prev is None:
        return True  # a session starts on a connection of its own
    if prev.client_id is not None and client is not None:
        return prev.client_id != client
    # No connection facts: assume the client kept its connection unless the last turn failed,
    # after which clients (httpx, aiohttp, the SDKs) discard it and dial again.
    return prev.recorded.outcome.is_failure


def _recorded(ts: TurnSummary, ex: RecordedExchange, facts: ExchangeAnalysis) -> RecordedOutcome:
    analysis = facts.response
    times = analysis.content_times if analysis is not None and ex.chunk_timing else ()
    waited = None
    if ts.outcome.is_failure and ex.t_error is not None and CLIENT_LEFT_WORDS in (ex.error or "").lower():
        progress = [t for t in (ex.t_request, ex.t_response, analysis.last_content if analysis else None) if t is not None]
        waited = round(ex.t_error - max(progress), 6)
    return RecordedOutcome(
        outcome=ts.outcome,
        detail=ts.detail,
        status=ex.status,
        headers_time=None if ex.t_response is None else round(ex.t_response - ex.t_request, 6),
        ttft=ts.ttft,
        duration=ts.duration,
        gaps=tuple(round(b - a, 6) for a, b in zip(times, times[1:])),
        chunk_timing=ex.chunk_timing,
        result=analysis.result if analysis is not None else None,
        client_waited=waited if ex.chunk_timing else None,
        client_waited_for_headers=ex.t_response is None,
        sat_through=_sat_through(ex, times, client_left=waited is not None),
    )


def _sat_through(ex: RecordedExchange, content_times: Sequence[float], *, client_left: bool) -> float:
    """The longest silence the recorded client waited through (see `RecordedOutcome.sat_through`):
    between the request, the response headers and each content event, and from the last of them
    to the end, unless the client itself ended it (that wait is its give-up, not patience shown)."""
    marks = [ex.t_request, *([ex.t_response] if ex.t_response is not None else []), *content_times]
    end = ex.t_error if ex.t_error is not None else ex.t_end
    if end is not None and not client_left:
        marks.append(end)
    marks.sort()
    return round(max((b - a for a, b in zip(marks, marks[1:])), default=0.0), 6)


# --------------------------------------------------------------------------------------------
# Pacing

Pace = Literal["recorded", "fast"] | float


def parse_pace(text: str) -> Pace:
    """`recorded`, `fast`, or a factor >= 0 applied to recorded times (0.5 = twice as fast)."""
    low = text.strip().lower()
    if low in ("recorded", "fast"):
        return low  # type: ignore[return-value]
    try:
        factor = float(low)
    except ValueError:
        raise ValueError(f"pace must be 'recorded', 'fast' or a number >= 0, not {text!r}") from None
    _check_factor(factor)
    return factor


def pace_factor(pace: Pace) -> float:
    """The factor recorded times are multiplied by: 1 for recorded, 0 for fast."""
    if pace == "recorded":
        return 1.0
    if pace == "fast":
        return 0.0
    if isinstance(pace, bool) or not isinstance(pace, (int, float)):
        raise ValueError(f"pace must be 'recorded', 'fast' or a number >= 0, not {pace!r}")
    _check_factor(float(pace))
    return float(pace)


def _check_factor(factor: float) -> None:
    if not math.isfinite(factor) or factor < 0:
        raise ValueError(f"pace factor must be a finite number >= 0, not {factor}")


def think_delay(turn: PlannedTurn, pace: Pace) -> float:
    """Seconds to wait after the previous turn ended before sending `turn`: its think time, or a
    retry's backoff. None recorded (first turn, previous turn never ended) waits nothing; a
    negative one (turns of one session that overlapped in the recording, e.g. grouped by an
    explicit key) is sent at once."""
    wait = turn.backoff if turn.attempt > 1 else turn.think_time
    if wait is None:
        return 0.0
    return max(0.0, wait) * pace_factor(pace)


def start_delay(session: PlannedSession, pace: Pace) -> float:
    """Seconds after the replay starts at which `session` starts (fast: all at once)."""
    return max(0.0, session.start) * pace_factor(pace)


# --------------------------------------------------------------------------------------------
# Watchdogs

def derive_watchdogs(sessions: Iterable[PlannedSession]) -> Watchdogs:
    """The default watchdogs for replaying these sessions (see `Watchdogs`), with the recorded
    client's patience (`proxycheck.core.replay.patience.client_patience`).

    The watchdogs come from what a healthy exchange of the recording takes: the headers watchdog
    from its times to the response headers, the stall watchdog from its gaps between content
    events and from its waits between the headers and the first event (an engine that sends its
    headers at once and the first byte after a long prefill). A silence longer than them is a slow
    answer; it fails at the patience. Where the recording shows its client giving up on a silence
    (`client_waited`), that wait is the patience, and no watchdog is longer than it."""
    turns = [turn for session in sessions for turn in session.turns]
    header_times: list[float] = []
    first_waits: list[float] = []
    durations: list[float] = []
    gaps: list[float] = []
    for turn in turns:
        rec = turn.recorded
        if rec.outcome.is_failure:
            continue
        if rec.headers_time is not None:
            header_times.append(rec.headers_time)
            if rec.ttft is not None and rec.chunk_timing:
                first_waits.append(rec.ttft - rec.headers_time)
        if rec.duration is not None:
            durations.append(rec.duration)
        gaps.extend(rec.gaps)
    patience = client_patience([_client_of(turn) for turn in turns])
    headers = min(max(MIN_HEADERS, 3 * max(header_times, default=0.0)), patience.headers)
    stall = min(max(MIN_STALL, 5 * p99(gaps), 3 * max(first_waits, default=0.0)), patience.stall)
    watchdogs = Watchdogs(connect=DEFAULT_CONNECT, headers=headers, stall=stall,
                          total=max(MIN_TOTAL, 3 * max(durations, default=0.0)))  # fmt: skip
    return patience.apply(watchdogs)


def _client_of(turn: PlannedTurn) -> RecordedClient:
    """What one planned turn's recording says about its client (`client_patience`)."""
    rec = turn.recorded
    agent = next((value for name, value in turn.headers if name.lower() == "user-agent"), "")
    return RecordedClient(
        user_agent=agent, stated=stated_timeout(turn.headers), gave_up=rec.client_waited,
        gave_up_before_headers=rec.client_waited_for_headers, sat_through=rec.sat_through,
        longest_gap=max(rec.gaps, default=0.0),
    )  # fmt: skip


def p99(values: Sequence[float]) -> float:
    """The 99th percentile by nearest rank (0 for no values): a value that occurred, and with
    fewer than 100 values the largest, so a short recording errs on the tolerant side."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


# --------------------------------------------------------------------------------------------
# Chained mode

# Dialects whose requests carry a message history that chained mode can rewrite. Prompt-string
# APIs (openai_completions, SGLang /generate) fold the reply into one prompt string whose
# template proxycheck cannot know, and the Responses API's `input` items are not handled: those
# dialects are replayed exact-only (their bodies are sent as recorded, also in chained mode),
# except for the Responses API's `previous_response_id`, which chained mode maps to live ids.
CHAINED_DIALECTS = frozenset({"openai_chat", "anthropic_messages"})
_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


@dataclass(frozen=True, slots=True)
class _History:
    """A chainable turn's parsed body and the digests of its history's prefixes."""

    body: dict[str, Any]
    messages: list[Any]
    prefixes: list[bytes]


@dataclass(frozen=True, slots=True)
class _Slot:
    """Where the reply to the session's exchange number `turn` (its index in the plan: attempts
    of one turn are exchanges of their own) sits in later histories: message `position`, after a
    prefix whose digest is `prefix`."""

    turn: int
    position: int
    prefix: bytes


class ChainedSession:
    """Bodies for a chained replay of one session: each later turn carries the replayed replies.

    Exact mode sends the recorded bodies. In chained mode, turn k+1's recorded history is turn
    k's history + the recorded reply + new messages (tool results, the next user message); the
    recorded reply, in that turn and every later one, is replaced by a message built from what
    was replayed for turn k (`record_reply`), in the dialect's shape:

    * OpenAI chat: `content` and `tool_calls` (and `reasoning_content` / `reasoning` when the
      recorded message had them);
    * Anthropic: the text block and the tool_use blocks (thinking blocks stay as recorded: their
      signatures cannot be made for replayed text).

    The recorded message's other fields stay, and so do the RECORDED tool-call ids: the tool
    results that follow are recorded and refer to them. Replayed calls are paired with recorded
    ones by position; a replayed call with no recorded partner is dropped and a recorded call
    with no replayed partner is kept, since the recorded results need a call to answer. A reply
    with neither text nor a paired call has nothing to put in the slot, and a failed turn
    (`record_reply(turn, None)`, or a result without its terminal marker or with an in-stream
    error) has no reply to trust: both keep the recorded reply for later turns.

    A changed body is re-serialized (compact `json.dumps`, ASCII-escaped so any recorded string
    survives): chained bodies cannot be byte-exact. A body with nothing to change is sent as
    recorded, byte for byte. Turns of other dialects (`CHAINED_DIALECTS`) and bodies that are
    not a JSON object with a message list are exact-only.

    Later histories are matched to earlier ones on digests of their messages, not on bytes:
    harnesses move `cache_control` markers and strip old reasoning between turns, so assistant
    messages are compared by their tool-call ids only and other messages without
    `cache_control`. Each occurrence of a reply is rebuilt from that turn's own copy, keeping
    that turn's edits.

    The Responses API continues a conversation by naming the previous response
    (`previous_response_id`) instead of resending it, and an engine replayed against never saw
    the recorded ids. Every response a turn gets live is paired with the id its recorded response
    carried (`record_reply`, failed turns included: the server may have kept a response a hop cut
    short), and a later turn naming a recorded id is sent naming the live one instead
    (`previous_response_ids`). An id with no live partner (its turn got no id live) is sent as
    recorded: the engine's answer to it is a consequence of the replay, not of a hop.
    """

    def __init__(self, session: PlannedSession) -> None:
        self.session = session
        # Exchanges by their index in the plan: a retried turn's attempts are each their own.
        self._index = {t.xid: i for i, t in enumerate(session.turns)}
        self._last_attempt = {t.turn: i for i, t in enumerate(session.turns)}
        self._histories: dict[int, _History] = {}
        for i, t in enumerate(session.turns):
            history = _parse_history(t)
            if history is not None:
                self._histories[i] = history
        self._slots = self._find_slots()
        self._replies: dict[int, Result] = {}
        # Responses API: recorded response id -> the id the same turn's live response carried.
        self._live_ids: dict[str, str] = {}
        self._named = {i: _named_response(t) for i, t in enumerate(session.turns)}

    def chained(self, turn: "int | PlannedTurn") -> bool:
        """Whether this turn's body can carry replayed replies (False: always sent exact).
        `turn` is one of the session's planned turns, or a turn number (its last attempt)."""
        i = self._position(turn)
        return i in self._histories or self._named[i] is not None

    def record_reply(self, turn: "int | PlannedTurn", result: Result | None, *, failed: bool = False) -> None:
        """What was replayed for `turn`; None (or an incomplete result, or `failed`) for a failed
        turn, whose recorded reply later turns then keep. The id of a live response, failed or
        not, stands in for the recorded one in later `previous_response_id`s."""
        i = self._position(turn)
        if result is not None and not failed and result.terminal and not result.errors:
            self._replies[i] = result
        else:
            self._replies.pop(i, None)
        recorded = self.session.turns[i].recorded.result
        recorded_id = recorded.response_id if recorded is not None else None
        live_id = result.response_id if result is not None else None
        if recorded_id and live_id:
            self._live_ids[recorded_id] = live_id

    def previous_response_ids(self) -> dict[str, str]:
        """The recorded response ids mapped so far to the ids the replay's responses carried."""
        return dict(self._live_ids)

    def body_for(self, turn: "int | PlannedTurn") -> bytes:
        """The body to send for `turn`, given the replies recorded so far."""
        i = self._position(turn)
        planned = self.session.turns[i]
        named = self._named[i]
        if named is not None:
            return name_live_response(planned.body, named, self._live_ids)
        history = self._histories.get(i)
        if history is None:
            return planned.body
        messages = history.messages
        changed: list[Any] | None = None
        for slot in self._slots:
            result = self._replies.get(slot.turn)
            if slot.turn >= i or result is None or not _holds(history, slot):
                continue
            rebuilt = _rebuild(planned.dialect, messages[slot.position], result)
            if rebuilt is not None and rebuilt != messages[slot.position]:
                changed = changed if changed is not None else list(messages)
                changed[slot.position] = rebuilt
        if changed is None:
            return planned.body
        body = dict(history.body)
        body["messages"] = changed
        return json.dumps(body, separators=(",", ":")).encode("ascii")

    def _position(self, turn: "int | PlannedTurn") -> int:
        """The plan index of a planned turn of this session, or of a turn number's last attempt."""
        if isinstance(turn, PlannedTurn):
            i = self._index.get(turn.xid)
            if i is None:
                raise ValueError(f"session {self.session.id} has no such planned turn (turn {turn.turn})")
            return i
        i = self._last_attempt.get(turn)
        if i is None:
            raise ValueError(f"session {self.session.id} has no turn {turn}")
        return i

    def _find_slots(self) -> list[_Slot]:
        """For each turn, where its reply appears: right after its history, in the first later
        turn whose history extends it with an assistant message. A later turn with the same
        history (a retry) takes the slot over, as its reply is the one the harness went on with."""
        order = sorted(self._histories)
        slots = []
        for i, k in enumerate(order):
            mine = self._histories[k]
            n = len(mine.messages)
            for later in order[i + 1 :]:
                other = self._histories[later]
                if len(other.messages) < n or other.prefixes[n] != mine.prefixes[n]:
                    continue
                if len(other.messages) == n:
                    break  # a retry of this turn
                if _role(other.messages[n]) == "assistant":
                    slots.append(_Slot(k, n, mine.prefixes[n]))
                break
        return slots


def turns_naming_responses(sessions: Iterable[PlannedSession]) -> int:
    """How many turns name, in `previous_response_id`, a response the recording saw: an exact
    replay sends those recorded ids to an engine that never gave them (a server that checks
    answers 400 `previous_response_not_found`); chained mode names the live responses instead.
    A WebSocket session's turns are not counted: its replay always names the live responses
    (`proxycheck.core.replay.socket`)."""
    planned = [t for s in sessions if s.transport != "websocket" for t in s.turns]
    seen = {t.recorded.result.response_id for t in planned if t.recorded.result is not None}
    return sum(1 for t in planned if (named := _named_response(t)) is not None and named in seen)


def responses_warning(sessions: Sequence[PlannedSession], mode: str) -> str | None:
    """The one line an exact replay of turns chained by `previous_response_id` gets (None: none)."""
    count = turns_naming_responses(sessions) if mode == "exact" else 0
    if not count:
        return None
    return (f"{count} turn(s) continue a recorded response by previous_response_id, which an exact replay sends as "
            "recorded (an engine that never gave it answers 400 previous_response_not_found): replay them with "
            "--mode chained against a server that keeps responses")  # fmt: skip


def _named_response(turn: PlannedTurn) -> str | None:
    """The `previous_response_id` a Responses API turn's body names (None: it names none)."""
    if turn.dialect != "openai_responses" or b"previous_response_id" not in turn.body:
        return None
    try:
        body = json.loads(turn.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    named = body.get("previous_response_id") if isinstance(body, dict) else None
    return named if isinstance(named, str) and named else None


def name_live_response(body: bytes, recorded_id: str, live_ids: dict[str, str]) -> bytes:
    """`body` naming the live response that stands for `recorded_id`; as recorded when none does.
    Only that member changes: the id's JSON string is replaced where it is the member's value,
    so the rest of the body stays byte for byte as recorded."""
    live = live_ids.get(recorded_id)
    if live is None or live == recorded_id:
        return body
    doc = json.loads(body)
    doc["previous_response_id"] = live
    pattern = re.compile(rb'("previous_response_id"\s*:\s*)' + re.escape(json.dumps(recorded_id).encode("ascii")))
    rewritten, count = pattern.subn(lambda m: m.group(1) + json.dumps(live).encode("ascii"), body, count=1)
    if count == 1 and json.loads(rewritten) == doc:
        return rewritten
    return json.dumps(doc, separators=(",", ":")).encode("ascii")


def _holds(history: _History, slot: _Slot) -> bool:
    pos = slot.position
    return (
        pos < len(history.messages)
        and history.prefixes[pos] == slot.prefix
        and _role(history.messages[pos]) == "assistant"
    )


def _parse_history(turn: PlannedTurn) -> _History | None:
    if turn.dialect not in CHAINED_DIALECTS:
        return None
    try:
        body = json.loads(turn.body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return None
    messages = body["messages"]
    return _History(body, messages, prefix_digests([_fingerprint(m) for m in messages]))


def _fingerprint(message: Any) -> str:
    """A digest of what identifies a message across turns (see `ChainedSession`)."""
    if _role(message) == "assistant":
        key: Any = ["assistant", _call_ids(message)]
    else:
        key = _without_cache_control(message)
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode("ascii"), digest_size=16).hexdigest()


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _call_ids(message: dict[str, Any]) -> list[Any]:
    calls = message.get("tool_calls")
    ids = [c.get("id") for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
    content = message.get("content")
    if isinstance(content, list):
        ids += [b.get("id") for b in content if isinstance(b, dict) and b.get("type") in _TOOL_BLOCKS]
    return ids


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _rebuild(dialect: str | None, recorded: dict[str, Any], result: Result) -> dict[str, Any] | None:
    if dialect == "openai_chat":
        return _openai_reply(recorded, result)
    return _anthropic_reply(recorded, result)


def _like(recorded: Any, text: str) -> Any:
    """Replayed text in the recorded field's style: an empty reply stays None where it was."""
    if text:
        return text
    return None if recorded is None else ""


def _openai_reply(recorded: dict[str, Any], result: Result) -> dict[str, Any] | None:
    text = result.text
    calls = recorded.get("tool_calls")
    recorded_calls = calls if isinstance(calls, list) else []
    replayed = result.tool_calls
    paired = min(len(recorded_calls), len(replayed))
    if not text and not paired:
        return None
    out = dict(recorded)
    if "content" in recorded or text:
        out["content"] = _openai_content(recorded.get("content"), text)
    if recorded_calls:
        out["tool_calls"] = [
            _openai_call(rc, replayed[i]) if i < paired else rc for i, rc in enumerate(recorded_calls)
        ]
    for key in ("reasoning_content", "reasoning"):
        # Only where the harness sent reasoning back: adding it would change its request shape.
        if key in recorded and (recorded[key] is None or isinstance(recorded[key], str)):
            out[key] = _like(recorded[key], result.reasoning)
    return out


def _openai_content(recorded: Any, text: str) -> Any:
    if not isinstance(recorded, list):
        return _like(recorded, text)
    # Content parts: the replayed text goes in the first text part (keeping its other fields);
    # other parts (a refusal) stay.
    parts: list[Any] = []
    placed = False
    for part in recorded:
        if isinstance(part, dict) and part.get("type") == "text":
            if text and not placed:
                parts.append({**part, "text": text})
                placed = True
            continue
        parts.append(part)
    if text and not placed:
        parts.insert(0, {"type": "text", "text": text})
    return parts or None


def _openai_call(recorded: Any, call: ToolCall) -> Any:
    if not isinstance(recorded, dict):
        return recorded
    function = recorded.get("function")
    fn = dict(function) if isinstance(function, dict) else {}
    fn["name"] = call.name or fn.get("name", "")
    fn["arguments"] = call.arguments
    return {**recorded, "function": fn}


def _anthropic_reply(recorded: dict[str, Any], result: Result) -> dict[str, Any] | None:
    text = result.text
    content = recorded.get("content")
    if not isinstance(content, list):
        # A plain-text reply has no tool_use ids for replayed calls to keep.
        return {**recorded, "content": text} if text else None
    replayed = result.tool_calls
    has_text = any(isinstance(b, dict) and b.get("type") == "text" for b in content)
    blocks: list[Any] = []
    placed = False
    calls = 0
    paired = 0
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            # All replayed text goes in the first text block; Anthropic rejects empty ones.
            if text and not placed:
                blocks.append({**block, "text": text})
                placed = True
            continue
        if kind in _TOOL_BLOCKS:
            if text and not placed and not has_text:
                blocks.append({"type": "text", "text": text})
                placed = True
            if calls < len(replayed):
                call = replayed[calls]
                blocks.append({**block, "name": call.name or block.get("name", ""), "input": _input_object(call)})
                paired += 1
            else:
                blocks.append(block)
            calls += 1
            continue
        blocks.append(block)
    if text and not placed:
        blocks.append({"type": "text", "text": text})
    if (not text and not paired) or not blocks:
        return None
    return {**recorded, "content": blocks}


def _input_object(call: ToolCall) -> Any:
    # tool_use input must be an object; arguments that were not one are sent as {} (as the
    # synthetic agent does, `proxycheck.core.testbed.conversation`).
    return call.parsed if call.arguments_valid and isinstance(call.parsed, dict) else {}
