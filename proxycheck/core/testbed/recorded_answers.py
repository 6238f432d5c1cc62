"""Replaying a recording as an engine: which recorded exchange answers a request, and the
timeline on which its response is played back (`proxycheck engine --replay DIR`).

This module owns two pure decisions; the aiohttp server in `proxycheck.io.engine` only carries
them out.

**Matching** (`ReplayMatcher.match`). Candidates are the recorded exchanges of the same *route*:
the same method and the same endpoint, where the endpoint is the dialect when the path names one
(so `/openai/v1/chat/completions` and `/v1/chat/completions` are one route: hops add and strip
API prefixes) and otherwise the path itself. Rules, first hit wins:

1. ``session`` — the request is placed in a recorded session and answered by that session's
   turn. A session key (the headers and body fields of `proxycheck.core.recording.sessions`) that the
   recording knows restricts the search to that session. Placement is by continuity, on the
   message ids of the history (`proxycheck.core.recording.bodies.split_body`), or on the prompt text for
   prompt-string APIs: the longest recorded history that the request's history starts with
   decides. Equal to turn k's history: it is turn k (a hop may have rewritten other fields).
   A proper prefix: the request continues turn k, so it is turn k+1 — which is also what a
   *chained* replay sends, whose assistant messages are re-serialized and so have other ids.
   When the request continues the last recorded turn, no recorded turn answers it here.
   With a known key but no continuity, a turn of that session with the same body digest.
2. ``digest`` — a recorded request with the same body digest (bodies without a history: SGLang
   `input_ids`, embeddings-like shapes). Body digests here are of the canonical JSON
   (`proxycheck.core.protocol.requestparts.canonical_sha256`), so a hop that re-serializes a body (key
   order, spacing, escapes) leaves its digest alone; a body that is not JSON has the digest of its
   bytes.
3. ``prefix`` — the recorded request sharing the longest prefix with this one: message ids for
   chat bodies (at least one shared message), else the prompt text, else the raw bytes (sharing at
   least half of this request: less says only that both are JSON of the same API). Ties go to the
   recorded request whose length is closest.

Among equal candidates, one with the same body digest wins; identical candidates (a harness that
retried a wedged turn with the same body) are served in turn, so a replayed retry gets what the
recorded retry got. That counter is the matcher's only state.

**Playback** (`plan_replay`). A `ReplayPlan` says what to send and when, in seconds after the
request was read: the recorded status and headers (hop-by-hop ones dropped), then a streamed body
chunk by chunk at the recorded offsets, or a whole body after the recorded delay, and how it ends:
complete, aborted (the recorded reset) or held open and silent (the recorded wedge: an exchange
still in flight when the recorder stopped). Times are divided by the replay speed (0: no waiting).
Engine faults (`proxycheck.core.testbed.faultspec`) that make sense for a recorded answer are applied
here: delay_headers, stall/close after K recorded chunks, drop_terminal (the last SSE event).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence, TypeVar

from proxycheck.core.protocol.dialects import detect
from proxycheck.core.protocol.requestparts import canonical_sha256
from proxycheck.core.protocol.sse import SSEEvent, parse
from proxycheck.core.recording.bodies import join_body, prefix_digests, split_body
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.redact import REDACTED, HeaderValue
from proxycheck.core.recording.sessions import DEFAULT_SESSION_FIELDS, DEFAULT_SESSION_HEADERS
from proxycheck.core.recording.summary import SessionSummary, explicit_key, is_streamed, summarize_sessions
from proxycheck.core.testbed.faultspec import ActiveFaults

RULE_SESSION, RULE_DIGEST, RULE_PREFIX = "session", "digest", "prefix"
COMPLETE, ABORT, HOLD = "complete", "abort", "hold"

# Prompt-string APIs (completions, SGLang /generate): the member holding the prompt.
_PROMPT_KEYS = ("prompt", "text")
# A byte or prompt prefix must cover this share of the request to count as "the same request,
# altered": JSON bodies of one API always share their first few bytes.
_MIN_SHARED = 0.5
# Response headers that describe one connection, not the answer (RFC 9110, 7.6.1); the server
# that replays sets its own framing.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
     "content-length"}
)

RouteKey = tuple[str, str]
_T = TypeVar("_T")


# --------------------------------------------------------------------------------------------
# Matching


@dataclass(frozen=True, slots=True)
class Match:
    """The recorded exchange that answers a request, and why (`rule`, `detail`)."""

    rule: str
    exchange: RecordedExchange
    session: str | None
    turn: int | None
    detail: str

    @property
    def header(self) -> str:
        """The value of the engine's `x-proxycheck-replay-match` header."""
        return f"{self.rule} xid={self.exchange.xid}"


@dataclass(frozen=True, slots=True)
class NoMatch:
    """No recorded exchange answers the request; `reason` says why, for the 404 body."""

    reason: str


@dataclass(frozen=True, slots=True)
class _Item:
    """One recorded exchange with what matching compares."""

    exchange: RecordedExchange
    session: str | None
    turn: int | None
    history: tuple[str, ...] | None
    prompt: str | None
    raw: bytes | None  # the request body, kept only when there is no history (byte prefixes)
    sha: str  # the body's digest (`body_digest`)


@dataclass(frozen=True, slots=True)
class _Request:
    """An incoming request, cut like a recorded one."""

    route: RouteKey
    sha: str
    history: tuple[str, ...] | None
    prompt: str | None
    raw: bytes
    key: str | None


# (session id, position among that session's turns on this route)
_Entry = tuple[str, int]


class _Route:
    """The indexes of the recorded exchanges of one route."""

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.by_sha: dict[str, list[_Item]] = {}
        self.turns: dict[str, list[_Item]] = {}  # session -> its turns on this route, in order
        self.tips: dict[bytes, list[_Entry]] = {}  # digest of a turn's whole history
        self.prompts: dict[int, dict[str, list[_Entry]]] = {}  # prompt length -> prompt -> turns

    def add(self, item: _Item) -> None:
        self.items.append(item)
        if item.sha:
            self.by_sha.setdefault(item.sha, []).append(item)
        if item.session is None:
            return
        seq = self.turns.setdefault(item.session, [])
        entry = (item.session, len(seq))
        seq.append(item)
        # Empty histories and prompts would be a prefix of everything: they place nothing.
        if item.history:
            self.tips.setdefault(prefix_digests(item.history)[-1], []).append(entry)
        elif item.prompt:
            self.prompts.setdefault(len(item.prompt), {}).setdefault(item.prompt, []).append(entry)


def route_key(method: str, path: str) -> RouteKey:
    """The route of a request: its method and its dialect, or its path when that names none."""
    clean = path.split("?", 1)[0].split("#", 1)[0]
    return method.upper(), detect(clean) or (clean.rstrip("/") or "/")


class ReplayMatcher:
    """Answers "which recorded exchange answers this request?" for one recording.

    `resolve(piece id)` gives request-body pieces (`Recording.piece`); it is used while building
    and not kept. `sessions` defaults to `summarize_sessions(exchanges, resolve)`.
    """

    def __init__(
        self,
        exchanges: Sequence[RecordedExchange],
        resolve: Callable[[str], bytes],
        *,
        sessions: Sequence[SessionSummary] | None = None,
        session_headers: Sequence[str] = DEFAULT_SESSION_HEADERS,
        session_fields: Sequence[str] = DEFAULT_SESSION_FIELDS,
    ) -> None:
        if sessions is None:
            sessions = summarize_sessions(exchanges, resolve, session_headers=session_headers, session_fields=session_fields)
        self._session_headers = tuple(session_headers)
        self._session_fields = tuple(session_fields)
        placed = {t.xid: (s.id, t.turn) for s in sessions for t in s.turns}
        self._routes: dict[RouteKey, _Route] = {}
        self._key_sessions: dict[str, set[str]] = {}
        self._served: dict[tuple[int, ...], int] = {}
        for ex in sorted(exchanges, key=lambda e: (e.t_request, e.xid)):
            session, turn = placed.get(ex.xid, (None, None))
            self._route(route_key(ex.method, ex.path)).add(_item(ex, session, turn, resolve))
            key = explicit_key(ex, self._session_headers, self._session_fields)
            if key is not None and session is not None:
                self._key_sessions.setdefault(key[0], set()).add(session)

    def _route(self, key: RouteKey) -> _Route:
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = _Route()
        return route

    def __len__(self) -> int:
        """The number of recorded exchanges that can answer."""
        return sum(len(r.items) for r in self._routes.values())

    def match(self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes) -> Match | NoMatch:
        """The recorded exchange that answers this request (see the module doc for the rules)."""
        req = self._request(method, path, headers, body)
        route = self._routes.get(req.route)
        if route is None:
            known = ", ".join(sorted(f"{m} {e}" for m, e in self._routes)[:6])
            return NoMatch(f"the recording has no {req.route[0]} {req.route[1]} exchange (it has: {known or 'none'})")
        found = self._by_session(route, req) or self._by_digest(route, req) or self._by_prefix(route, req)
        if found is not None:
            return found
        shared = "message" if req.history is not None else "prompt or body prefix"
        return NoMatch(
            f"no recorded {req.route[0]} {req.route[1]} exchange matches: the request is no turn of a recorded "
            f"session, no recorded body has its digest {req.sha[:16]}, and none shares a {shared} with it"
        )

    def _request(self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes) -> _Request:
        split = split_body(body).body
        # A stand-in exchange lets the recording's own session-key rule read the request.
        probe = RecordedExchange(0, 0.0, method, path, None, tuple(headers), split)
        key = explicit_key(probe, self._session_headers, self._session_fields)
        prompt = _prompt_of(body) if split.messages is None else None
        return _Request(route_key(method, path), body_digest(body), split.messages, prompt, body,
                        key[0] if key else None)  # fmt: skip

    # Rule 1: session and turn -----------------------------------------------------------------

    def _by_session(self, route: _Route, req: _Request) -> Match | None:
        within = self._key_sessions.get(req.key) if req.key is not None else None
        how = f"key {req.key!r}, " if within else ""
        placed = self._continuity(route, req, within)
        if placed is not None:
            candidates, detail = placed
            return self._answer(RULE_SESSION, candidates, req, how + detail)
        if within:
            same = [i for i in route.by_sha.get(req.sha, []) if i.session in within]
            if same:
                return self._answer(RULE_SESSION, same, req, how + "same body")
        return None

    def _continuity(self, route: _Route, req: _Request, within: set[str] | None) -> tuple[list[_Item], str] | None:
        """The turns this request is, from the longest recorded history (or prompt) it starts
        with; None when it starts with none, or continues a session's last recorded turn."""
        hit: tuple[list[_Entry], bool] | None = None
        if req.history:
            digests = prefix_digests(req.history)
            for k in range(len(req.history), 0, -1):
                entries = _within(route.tips.get(digests[k]), within)
                if entries:
                    hit = entries, k == len(req.history)
                    break
        elif req.prompt:
            for length in sorted((n for n in route.prompts if n <= len(req.prompt)), reverse=True):
                entries = _within(route.prompts[length].get(req.prompt[:length]), within)
                if entries:
                    hit = entries, length == len(req.prompt)
                    break
        if hit is None:
            return None
        entries, exact = hit
        step = 0 if exact else 1
        candidates = [route.turns[s][i + step] for s, i in entries if i + step < len(route.turns[s])]
        if not candidates:
            return None
        first = route.turns[entries[0][0]][entries[0][1]]
        detail = "same history" if exact else f"continues turn {first.turn}"
        return candidates, detail

    # Rule 2: body digest -----------------------------------------------------------------------

    def _by_digest(self, route: _Route, req: _Request) -> Match | None:
        same = route.by_sha.get(req.sha)
        return self._answer(RULE_DIGEST, same, req, "same body digest") if same else None

    # Rule 3: longest shared prefix -------------------------------------------------------------

    def _by_prefix(self, route: _Route, req: _Request) -> Match | None:
        best: list[_Item] = []
        best_score: tuple[int, int] | None = None
        for item in route.items:
            scored = _prefix_score(item, req)
            if scored is None:
                continue
            if best_score is None or scored > best_score:
                best, best_score = [item], scored
            elif scored == best_score:
                best.append(item)
        if best_score is None:
            return None
        unit = "message(s)" if req.history is not None else ("prompt characters" if req.prompt else "bytes")
        return self._answer(RULE_PREFIX, best, req, f"shares {best_score[0]} {unit}")

    # Choosing among candidates -----------------------------------------------------------------

    def _answer(self, rule: str, candidates: list[_Item], req: _Request, detail: str) -> Match:
        same = [c for c in candidates if c.sha == req.sha]
        pool = same or candidates
        chosen = pool[0]
        if len(pool) > 1:
            # Identical candidates are served in turn (a recorded retry gets the retry's answer).
            key = tuple(c.exchange.xid for c in pool)
            n = self._served.get(key, 0)
            self._served[key] = n + 1
            chosen = pool[n % len(pool)]
        return Match(rule, chosen.exchange, chosen.session, chosen.turn, detail)


def _item(ex: RecordedExchange, session: str | None, turn: int | None, resolve: Callable[[str], bytes]) -> _Item:
    raw = join_body(ex.body, resolve)
    sha = body_digest(raw) if ex.body.sha256 else ""  # no digest recorded: it matches no digest
    if ex.body.messages is not None:
        return _Item(ex, session, turn, ex.body.messages, None, None, sha)
    return _Item(ex, session, turn, None, _prompt_of(raw), raw, sha)


def body_digest(body: bytes) -> str:
    """The digest bodies are matched on: SHA-256 of the canonical JSON when the body is JSON (a
    re-serialized body has the same), else of the bytes."""
    return canonical_sha256(body) or hashlib.sha256(body).hexdigest()


def _prompt_of(body: bytes) -> str | None:
    """The prompt of a prompt-string API request, None for other bodies."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if isinstance(doc, dict):
        for key in _PROMPT_KEYS:
            if isinstance(doc.get(key), str):
                return doc[key]
    return None


def _within(entries: list[_Entry] | None, sessions: set[str] | None) -> list[_Entry]:
    if not entries:
        return []
    return entries if sessions is None else [e for e in entries if e[0] in sessions]


def _prefix_score(item: _Item, req: _Request) -> tuple[int, int] | None:
    """(shared length, -length difference) when `item` shares enough of a prefix, else None."""
    if req.history is not None:
        if item.history is None:
            return None
        shared = common_prefix(item.history, req.history)
        return (shared, -abs(len(item.history) - len(req.history))) if shared else None
    mine: str | bytes | None
    if req.prompt is not None and item.prompt is not None:
        mine, theirs = item.prompt, req.prompt
    elif req.prompt is None and item.prompt is None and item.raw is not None:
        mine, theirs = item.raw, req.raw
    else:
        return None
    shared = common_prefix(mine, theirs)
    if shared == 0 or shared < _MIN_SHARED * len(theirs):
        return None
    return shared, -abs(len(mine) - len(theirs))


def common_prefix(a: Sequence[_T], b: Sequence[_T]) -> int:
    """The length of the longest common prefix of two sequences (bytes, text, tuples)."""
    # Binary search on slice equality: log(n) comparisons that run in C, not n in Python.
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --------------------------------------------------------------------------------------------
# Playback


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """What to send for one matched exchange; times are seconds after the request was read.

    `status` None: no response headers were recorded, so none are sent. `streamed` False: one
    whole body (the single write) at `headers_at`. `ending` says what follows the last write, at
    `end_at`: COMPLETE (end the body), ABORT (drop the connection: the recorded reset) or HOLD
    (keep the connection open and silent for `hold_for` seconds, None = until the client goes
    away, then drop it: the recorded wedge).
    """

    status: int | None
    reason: str | None
    headers: tuple[tuple[str, str], ...]
    streamed: bool
    headers_at: float
    writes: tuple[tuple[float, bytes], ...]
    ending: str
    end_at: float
    hold_for: float | None = None


def plan_replay(exchange: RecordedExchange, speed: float, faults: ActiveFaults | None = None) -> ReplayPlan:
    """The playback of a recorded exchange at `speed` (2 = twice as fast, 0 = no waiting)."""
    t0 = exchange.t_request

    def at(t: float | None) -> float:
        if t is None or speed == 0:
            return 0.0
        return max(t - t0, 0.0) / speed

    if exchange.status is None:
        # No headers were recorded: nothing is sent, then the recorded reset or the wedge.
        if exchange.error is not None:
            return _delayed(ReplayPlan(None, None, (), True, 0.0, (), ABORT, at(exchange.t_error)), faults)
        return _delayed(ReplayPlan(None, None, (), True, 0.0, (), HOLD, 0.0), faults)

    headers_at = at(exchange.t_response)
    writes = tuple((max(headers_at, at(t)), data) for t, data in exchange.timed_chunks())
    last = writes[-1][0] if writes else headers_at
    headers = response_headers(exchange.response_headers)
    reason = _clean_reason(exchange.reason)
    if exchange.error is not None:
        plan = ReplayPlan(exchange.status, reason, headers, True, headers_at, writes, ABORT,
                          max(last, at(exchange.t_error)))
    elif exchange.t_end is None:
        plan = ReplayPlan(exchange.status, reason, headers, True, headers_at, writes, HOLD, last)
    elif not is_streamed(exchange):
        # A whole body, after the recorded time to its end.
        done = max(last, at(exchange.t_end))
        whole = ((done, exchange.response_body),)
        plan = ReplayPlan(exchange.status, reason, headers, False, done, whole, COMPLETE, done)
    else:
        plan = ReplayPlan(exchange.status, reason, headers, True, headers_at, writes, COMPLETE,
                          max(last, at(exchange.t_end)))
    return _delayed(_with_faults(plan, faults), faults)


def response_headers(recorded: Iterable[tuple[str, HeaderValue]]) -> tuple[tuple[str, str], ...]:
    """The recorded response headers a replay sends: hop-by-hop ones (and those a `Connection`
    header names), redacted ones and values that cannot be sent again are dropped."""
    recorded = tuple(recorded)
    named = {
        token.strip().lower()
        for n, v in recorded
        if n.lower() == "connection" and isinstance(v, str)
        for token in v.split(",")
    }
    drop = HOP_BY_HOP | named
    return tuple(
        (n, v)
        for n, v in recorded
        if isinstance(v, str) and v is not REDACTED and n.lower() not in drop and not _unsafe(n + v)
    )


def _unsafe(text: str) -> bool:
    return any(c in text for c in "\r\n\0")


def _clean_reason(reason: str | None) -> str | None:
    # HTTP/2 has no reason phrase (recorded as ""); the server then uses the standard one.
    if not reason or _unsafe(reason) or not reason.isprintable():
        return None
    return reason


def _with_faults(plan: ReplayPlan, faults: ActiveFaults | None) -> ReplayPlan:
    """drop_terminal, a pause after K recorded chunks, then stall/close after K recorded chunks
    (streamed bodies only, as in the engine's synthetic mode)."""
    if faults is None or not plan.streamed:
        return plan
    writes = plan.writes
    if faults.drop_terminal and plan.ending == COMPLETE:
        writes = _drop_last_event(writes)
    if faults.pause_after is not None and faults.pause_after < len(writes):
        k, d = faults.pause_after, faults.pause_seconds
        writes = writes[:k] + tuple((t + d, b) for t, b in writes[k:])
        plan = replace(plan, end_at=plan.end_at + d)
    plan = replace(plan, writes=writes)
    cuts = [(k, kind) for k, kind in ((faults.stall_after, HOLD), (faults.close_after, ABORT)) if k is not None]
    # The fault that fires first wins; at the same K the stall, as in synthetic mode.
    for k, kind in sorted(cuts, key=lambda c: (c[0], c[1] != HOLD)):
        if k < len(writes):
            kept = writes[:k]
            end = kept[-1][0] if kept else plan.headers_at
            return replace(plan, writes=kept, ending=kind, end_at=end,
                            hold_for=faults.stall_seconds if kind == HOLD else None)
    return plan


def _drop_last_event(writes: tuple[tuple[float, bytes], ...]) -> tuple[tuple[float, bytes], ...]:
    """The writes up to the start of the last SSE event (every dialect ends with its terminal
    marker), re-cut at the same times."""
    events = [i for i in parse(b"".join(d for _, d in writes)) if isinstance(i, SSEEvent)]
    if not events:
        return writes
    keep, out = events[-1].start, []
    for t, data in writes:
        if keep <= 0:
            break
        out.append((t, data[:keep]))
        keep -= len(data)
    return tuple(out)


def _delayed(plan: ReplayPlan, faults: ActiveFaults | None) -> ReplayPlan:
    """Everything `delay_headers` later (the fault delays the answer; it does not rush it)."""
    d = faults.delay_headers if faults is not None else 0.0
    if not d:
        return plan
    return replace(plan, headers_at=plan.headers_at + d, writes=tuple((t + d, b) for t, b in plan.writes),
                    end_at=plan.end_at + d)


