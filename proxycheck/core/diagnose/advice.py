"""What to do about a kind of finding at one hop: the advice of `check`'s reports.

Advice is given once per hop and kind of finding, for every exchange it covers, not once per
exchange. A kind (`kind_of`) is the outcome, told apart where the setting behind it differs: an
HTTP 413 is a body size limit, a 400 about headers a header size limit, a 5xx on a connection
idle for long a stale keep-alive, an error the reference engine itself answered (its digest
header came back) is no error of the hop's, a cut before the first token is not one between
tokens. An `Advice` says three things apart:

- `seen`: what the exchanges show, with their figures (the largest request body that passed a
  route and the smallest it refused, the hop's own error body and how long after the request it
  came, the seconds of silence before a cut, after how many events);
- `likely`: the causes those figures point to, named as likely, never as found (a cut after a
  silence: a read timeout; cuts at one time after the request while data still flowed, where the
  direct route ran longer: a cap on the response's duration, `_Group.duration_cap`; WebSockets
  ended at one time after they opened, idle or not, where direct kept them longer: a cap on a
  socket's life, `_Group.socket_life_cap`);
- `fix`: the settings to change.

Nothing is said that the observations do not show: a figure comes from them, and where they
cannot tell (no other exchange of the route to compare with, a cut soon after data), the words
say so. When nothing specific is known, the advice says what is (the outcome, when, after how
many events) and where to look: no finding is left without advice.

Pure: observations in, words out. Items are judged exchanges (`proxycheck.core.diagnose.verdict.Judged`:
anything with `obs`, `outcome`, `detail` and `reference`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.websocket import IDLE_END, NOT_SENT, WAITING_END, idle_when_ended
from proxycheck.core.exchange.socks import REPLIES, Refusal, reply_in

ENGINE_ADVICE = ("the engine fails with no proxy in the way: look at the server (its logs, timeouts, "
                 "limits such as max model length or request size), not at the chain")  # fmt: skip
ENGINE_DIGEST = "x-proxycheck-request-sha256"  # the reference engine's header: the engine answered
QUOTE = 100  # characters of an error body or message quoted
QUIET_CUT = 0.5  # seconds without data before a cut above which a read timeout is the likely cause
# Cuts count as coming "at the same time" (a cap on the response's duration) when their times
# spread by no more than CAP_SPREAD s or CAP_SHARE of the time, whichever is larger. A real cap's
# cuts scatter by its timer's and the host's scheduling (milliseconds), by the upload of the
# request before the hop starts counting, and, in hops that check it only when they write (Varnish's
# send_timeout), by up to one gap between tokens (10-100 ms on an engine that streams): 0.25 s holds
# those. Cuts that come a token gap or a second apart are not equal, however long the cap: the 5 %
# only lets a cap of minutes (Cloudflare's 100 s) scatter by the seconds a busy path adds.
CAP_SPREAD = 0.25
CAP_SHARE = 0.05

_TIMEOUT_WORDS = ("timeout", "timed out", "time-out", "time out")
_READ_TIMEOUTS = "nginx proxy_read_timeout, HAProxy timeout server, Squid read_timeout"
_GATEWAY_TIMEOUTS = "LiteLLM timeout / stream_timeout, " + _READ_TIMEOUTS
_NO_BUFFERING = "proxy_buffering off / X-Accel-Buffering: no (nginx), option http-no-delay (HAProxy)"
_DURATION_CAPS = ("Cloudflare's 100 s (now 125 s), a GCP load balancer's backend timeout (30 s for serverless "
                  "backends), Envoy's route timeout (15 s by default), Varnish send_timeout, Traffic Server "
                  "transaction_active_timeout, an AWS ALB's in some set-ups")  # fmt: skip


class Item(Protocol):
    """One judged exchange: what was observed, its outcome, and the same exchange on direct."""

    @property
    def obs(self) -> Observation: ...
    @property
    def outcome(self) -> Outcome: ...
    @property
    def detail(self) -> str: ...
    @property
    def reference(self) -> Observation | None: ...


@dataclass(frozen=True, slots=True)
class Advice:
    """The advice for one kind of finding at one hop, and what it covers. `hop` is the hop's
    name, "" for a hop not named, None for the engine (failures of the direct route); `about`
    names in words what the advice is about ("hop edge", "the engine", or a route whose hops
    could not be told apart: "via:corp (its hops corp → edge)")."""

    hop: str | None
    outcome: str
    kind: str
    seen: str
    likely: str = ""
    fix: str = ""
    exchanges: int = 0  # the judged exchanges it covers (every repetition)
    routes: tuple[str, ...] = ()
    about: str = ""

    @property
    def text(self) -> str:
        """"<seen>; likely: <likely>; fix: <fix>"."""
        parts = [self.seen] + [f"{name}: {v}" for name, v in (("likely", self.likely), ("fix", self.fix)) if v]
        return "; ".join(p for p in parts if p)

    def covers(self, route: str, outcome: str, kind: str) -> bool:
        return route in self.routes and outcome == self.outcome and kind == self.kind

    def to_json(self) -> dict[str, Any]:
        return {
            "hop": self.hop,
            "about": self.about,
            "outcome": self.outcome,
            "kind": self.kind,
            "exchanges": self.exchanges,
            "routes": list(self.routes),
            "seen": self.seen,
            "likely": self.likely,
            "fix": self.fix,
            "text": self.text,
        }


Key = tuple[str | None, str, str]  # hop, outcome, kind


def kind_of(outcome: Outcome, obs: Observation, socks: bool = False) -> str:
    """The kind of a finding: its outcome, told apart where the setting behind it differs.
    `socks`: the hop it is about is a SOCKS5 proxy (its cuts have settings of their own)."""
    found = _socks_kind(outcome, obs, socks)
    if found:
        return found
    found = _socket_kind(outcome, obs)
    if found:
        return found
    idle = obs.reused is True and obs.idle is not None and obs.idle >= 1.0
    if outcome is Outcome.HTTP_ERROR:
        status = obs.status or 0
        if obs.response_header(ENGINE_DIGEST) is not None:
            return f"engine_http_{status}"  # the engine answered it, through the hop
        if status == 413:
            return "body_limit"
        text = obs.detail.lower()
        header_too_large = "header" in text and any(w in text for w in ("too large", "too long", "size"))
        if status in (431, 494) or (status == 400 and header_too_large):
            return "header_limit"
        if status in (502, 503, 504) and idle:
            return "idle_upstream"
        return f"http_{status}"
    # A response that had begun (headers came) shows the reused connection was alive: not a stale one.
    if outcome in (Outcome.RESET, Outcome.CONNECT_ERROR, Outcome.STALL_BEFORE_HEADERS) and idle and obs.headers is None:
        return "idle_connection"
    if outcome is Outcome.RESET:
        if obs.headers is None:
            return "reset_before_headers"
        return "reset_mid_stream" if obs.content_events else "reset_before_first_event"
    if outcome is Outcome.TRUNCATED:
        return "truncated_mid_stream" if obs.content_events else "truncated_before_first_event"
    if outcome is Outcome.STREAM_ERROR:
        return "stream_error_timeout" if _timeoutish(obs.detail) else "stream_error"
    if outcome is Outcome.HELD_OPEN:
        return "held_open_after_finish" if "finish reason" in obs.detail else "held_open_after_end"
    if outcome is Outcome.BUFFERED and _encoding(obs):
        return "buffered_compressed"
    return outcome.value


def _socket_kind(outcome: Outcome, obs: Observation) -> str | None:
    """A WebSocket turn's finding whose setting is the socket's own (`proxycheck.io.ws_replay`'s
    words): the upgrade refused or never answered, the socket cut while it sat idle, a turn not
    sent because the socket had ended."""
    if obs.transport != "websocket":
        return None
    if outcome is Outcome.HTTP_ERROR and obs.response_header(ENGINE_DIGEST) is None:
        return "ws_upgrade_refused"
    if outcome is Outcome.STALL_BEFORE_HEADERS and obs.headers is None:
        return "ws_upgrade_unanswered"
    if outcome is Outcome.RESET and (IDLE_END in obs.detail or WAITING_END in obs.detail):
        return "ws_idle_cut"
    if outcome is Outcome.RESET and obs.detail.startswith(NOT_SENT):
        return "ws_not_sent"
    return None


def key_of(hop: str | None, item: Item, socks: frozenset[str] = frozenset()) -> Key:
    return (hop, item.outcome.value, kind_of(item.outcome, item.obs, hop in socks))


def group(entries: Iterable[tuple[str | None, Item]], context: Mapping[str, Sequence[Item]] | None = None,
          names: Mapping[str, str] | None = None, socks: frozenset[str] = frozenset()) -> dict[Key, Advice]:  # fmt: skip
    """The advice for each (hop, outcome, kind) of `entries` (the hop a finding is about, and the
    finding), in order of first appearance; `context` holds every judged exchange of each route
    (what passed as well as what failed), for the figures that need both; `names` says how to
    name a hop that is not known to be the one at fault (see `advise`); `socks` names the hops
    that are SOCKS5 proxies."""
    members: dict[Key, list[Item]] = {}
    for hop, item in entries:
        members.setdefault(key_of(hop, item, socks), []).append(item)
    return {key: advise(key[0], items, context, (names or {}).get(key[0] or ""), key[0] in socks)
            for key, items in members.items()}  # fmt: skip


def advise(hop: str | None, items: Sequence[Item], context: Mapping[str, Sequence[Item]] | None = None,
           name: str | None = None, socks: bool = False) -> Advice:  # fmt: skip
    """The advice about `items`, exchanges of one outcome and kind, at `hop` ("" for a hop not
    named, None for the engine). A route missing from `context` is one nothing else is known of.
    `name` names the hop in the words, when "hop NAME" would say more than is known (a route of
    several hops, none of them found at fault). `socks`: the hop is a SOCKS5 proxy."""
    if not items:
        raise ValueError("advice needs at least one exchange")
    first = items[0]
    kind = kind_of(first.outcome, first.obs, socks)
    routes = tuple(dict.fromkeys(i.obs.route for i in items))
    if hop is None:
        if first.outcome is Outcome.SLOW:
            return Advice(None, first.outcome.value, kind, *_engine_slow(items), len(items), routes, "the engine")
        return Advice(None, first.outcome.value, kind, ENGINE_ADVICE, "", "", len(items), routes, "the engine")
    about = name or (f"hop {hop}" if hop else "the hop")
    seen, likely, fix = _words_of(kind)(_Group(about, first.outcome, items, context or {}))
    return Advice(hop, first.outcome.value, kind, seen, likely, fix, len(items), routes, about)


def _engine_slow(items: Sequence[Item]) -> Words:
    """The engine went silent past a watchdog and went on within the client's patience: slow,
    never a failure (`proxycheck.core.exchange.outcomes`, "patience")."""
    silences = [i.obs.waited for i in items if i.obs.waited is not None]
    longest = f" for up to {max(silences):.1f} s" if silences else ""
    return (f"the engine went silent{longest} in {len(items)} exchange(s) with no proxy in the way, then answered "
            "in full, within the client's patience: slow answers, not failures",
            "a long prefill (a long context, prefix caching off, requests queued behind others) or a long "
            "generation before the first content",
            "nothing in the chain; if the answers are too slow for the user, look at the engine's load and settings "
            "(prefix caching, batch size, max concurrency)")  # fmt: skip


def advice(outcome: Outcome, obs: Observation, hop: str | None = None) -> str:
    """The advice about one exchange, with nothing else known (no other exchange of its route):
    the words a report gives when it has no verdict's advice to show."""
    return advise(hop or "", [_One(obs, outcome, obs.detail, None)], None).text


@dataclass(frozen=True, slots=True)
class _One:
    obs: Observation
    outcome: Outcome
    detail: str
    reference: Observation | None


# -- the figures of a group ---------------------------------------------------------------------


class _Group:
    """The exchanges one advice covers, and the figures the words are made of."""

    def __init__(self, where: str, outcome: Outcome, items: Sequence[Item], context: Mapping[str, Sequence[Item]]):
        self.where = where
        self.outcome = outcome
        self.items = items
        self.obs = [i.obs for i in items]
        self.context = context
        self.routes = list(dict.fromkeys(o.route for o in self.obs))
        self._socket_index: dict[tuple[str, int, str], list[Item]] | None = None

    def details(self) -> list[str]:
        """The distinct details, most common first."""
        counts: dict[str, int] = {}
        for i in self.items:
            d = i.detail or i.obs.detail
            if d:
                counts[d] = counts.get(d, 0) + 1
        return sorted(counts, key=lambda d: -counts[d])

    def quote(self) -> str:
        """` 'the start of the error body'` (the most common), or "" when there is none."""
        bodies = [b for b in (_body_of(i.obs.detail) for i in self.items) if b]
        if not bodies:
            return ""
        common = max(dict.fromkeys(bodies), key=bodies.count)
        return f" '{common}'"

    def turns(self) -> str:
        """"turn 4", "turns 2-4" or "turns 2, 5"."""
        turns = sorted({o.turn for o in self.obs})
        if len(turns) == 1:
            return f"turn {turns[0]}"
        if turns == list(range(turns[0], turns[-1] + 1)):
            return f"turns {turns[0]}-{turns[-1]}"
        return "turns " + ", ".join(map(str, turns))

    def status(self) -> int | None:
        return self.obs[0].status

    def answered(self) -> list[float]:
        """Seconds from each request to its answer (the response headers; else its end)."""
        return [t for t in (o.headers if o.headers is not None else o.end for o in self.obs) if t is not None]

    def ends(self) -> list[float]:
        return [o.end for o in self.obs if o.end is not None]

    def quiet(self, content_only: bool = False) -> list[float]:
        """Seconds from the last data (events, or the headers; else the request) to the end of each
        exchange."""
        return [max(o.end - _last_data(o, content_only), 0.0) for o in self.obs if o.end is not None]

    def content_events(self) -> list[int]:
        return [o.content_events for o in self.obs]

    def reference_ttft(self) -> float | None:
        """The longest time to the first token of these exchanges on the reference route."""
        times = [r.first_content if r.first_content is not None else r.headers
                 for r in (i.reference for i in self.items) if r is not None]  # fmt: skip
        return max((t for t in times if t is not None), default=None)

    def reference_gap(self) -> float | None:
        """The longest gap between tokens of these exchanges on the reference route."""
        gaps = [g for r in (i.reference for i in self.items) if r is not None for g in r.itl]
        return max(gaps, default=None)

    def direct_ok(self) -> bool:
        return all(i.reference is not None and i.reference.outcome.answered for i in self.items)

    def duration_cap(self) -> "_Cap | None":
        """The figures of a cap on the response's duration, when the cuts show one; else None.

        A cap cuts every response at one time after its request (or after its response headers),
        however much data still flows. So: two cuts or more, the response begun (headers came) and
        data still flowing at each (less than QUIET_CUT s before it: after a silence, a read timeout
        is the likelier cause), at the same time (`_alike`) after the request or after the headers,
        but not all at one moment of one replay (a restart of the hop cuts what is in flight then,
        whenever it began; one that recurs at that time in every repetition is no restart);
        and the same exchanges on the direct route ran to their end and longer than that (when they
        were shorter, the duration was not what was cut), and no exchange of the route that passed
        ran longer (a cap would have cut it too)."""
        obs, refs = self.obs, [i.reference for i in self.items]
        if len(obs) < 2 or any(o.end is None or o.headers is None for o in obs):
            return None
        quiet = self.quiet()
        if max(quiet) >= QUIET_CUT or _one_moment(obs):
            return None
        if any(r is None or not r.outcome.answered or r.end is None for r in refs):
            return None  # what the direct route does with these exchanges is not known
        for after in ("the request", "the response headers"):
            times = [_lasted(o, after) for o in obs]
            if _alike(times):
                break
        else:
            return None
        direct = [_lasted(r, after) for r in refs if r is not None]
        passed = [_lasted(i.obs, after) for route in self.routes for i in self.context.get(route, ())
                  if not i.outcome.is_failure and i.obs.e2e is not None]  # fmt: skip
        if min(direct) <= max(times) or max(passed, default=0.0) > max(times) + _tolerance(times):
            return None
        alike = len({len(o.events) for o in obs}) == 1  # as many events each time: a size limit fits too
        return _Cap(after, tuple(times), tuple(quiet), tuple(direct), alike)

    def _sockets(self) -> dict[tuple[str, int, str], list[Item]]:
        """The WebSocket turns of every route in `context`, by socket (`_socket_of`), indexed once."""
        if self._socket_index is None:
            self._socket_index = {}
            for items in self.context.values():
                for i in items:
                    if i.obs.transport == "websocket":
                        self._socket_index.setdefault(_socket_of(i.obs), []).append(i)
        return self._socket_index

    def idle_ends(self) -> list[float]:
        """The seconds each socket had sat idle when the chain ended it (`ended_idle`'s words)."""
        return [t for t in (idle_when_ended(i.detail or i.obs.detail) for i in self.items) if t is not None]

    def socket_life_cap(self) -> "_Lives | None":
        """The figures of a cap on a WebSocket's life, when the cuts show one; else None.

        A cap on a connection's life ends every socket at one time after it opened, whatever it
        is doing; an idle timeout ends it at one time after its last message. So: two cuts or
        more of sockets (mid-answer, or while idle between turns), not all at one moment of one
        replay (a restart of the hop), each at the same time (`_alike`) after its socket opened
        (its first turn's start); when they were cut idle, idle for different times (an idle
        timeout explains cuts after equal silences as well, and is the likelier); when cut
        mid-answer, while data still flowed. And the same sockets on the direct route stayed open
        longer than that, and no socket of the route that ran to its end lived longer."""
        obs = self.obs
        if len(obs) < 2 or any(o.transport != "websocket" or o.end is None for o in obs) or _one_moment(obs):
            return None
        sockets = self._sockets()
        cuts = [_socket_cut(o, sockets.get(_socket_of(o), [])) for o in obs]
        lives = [c for c in cuts if c is not None]
        if len(lives) < len(obs) or not _alike(lives):
            return None
        idle = self.idle_ends()
        if idle and (len(idle) < len(obs) or _alike(idle)):
            return None  # cut after equal silences: an idle timeout fits them as well
        if not idle and max(self.quiet()) >= QUIET_CUT:
            return None  # a silence before each cut mid-answer: a read timeout is likelier
        direct = [_socket_life([j.obs for j in sockets.get(_socket_of(r), [])] or [r])
                  for r in (i.reference for i in self.items) if r is not None]  # fmt: skip
        if len(direct) < len(obs) or min(direct) <= max(lives) + _tolerance(lives):
            return None  # what the direct route's sockets do for as long is not known, or they ended sooner
        passed = [_socket_life([j.obs for j in turns]) for key, turns in sockets.items()
                  if key[0] in self.routes and not any(j.outcome.is_failure for j in turns)]  # fmt: skip
        if max(passed, default=0.0) > max(lives) + _tolerance(lives):
            return None
        return _Lives(tuple(lives), tuple(idle), tuple(direct))

    def cut_as_first_token_came(self) -> tuple[list[float], list[float]] | None:
        """(each cut, the same exchange's first token on the direct route), from the request, when
        every cut before the first token came no sooner than that token did on the direct route,
        and at different times: a hop that checks a cap on the duration only when it writes
        (Varnish's send_timeout) cuts a long prefill as its first token comes. A read timeout cuts
        sooner than the token, at one time after the headers. None otherwise."""
        obs, refs = self.obs, [i.reference for i in self.items]
        if len(obs) < 2 or any(o.end is None or o.headers is None or o.content_events for o in obs):
            return None
        firsts = [r.first_content if r is not None and r.outcome.answered else None for r in refs]
        if any(t is None for t in firsts):
            return None
        cuts = [o.end or 0.0 for o in obs]
        heard = [f for f in firsts if f is not None]
        if any(c < f - _tolerance(heard) for c, f in zip(cuts, heard)):
            return None  # a cut before the token was due: what a read timeout does
        if _alike(cuts) or _alike([_lasted(o, "the response headers") for o in obs]):
            return None  # cuts at one time fit a read timeout as well
        return cuts, heard


@dataclass(frozen=True, slots=True)
class _Cap:
    """Cuts at the same time after `after` ("the request" or "the response headers") while data
    still flowed: each cut's time from there, the silence before it, the same exchanges' duration
    on the direct route, and whether every cut came after as many events."""

    after: str
    times: tuple[float, ...]
    quiet: tuple[float, ...]
    direct: tuple[float, ...]
    alike: bool


@dataclass(frozen=True, slots=True)
class _Lives:
    """Sockets ended at one time after they opened: how long each had lived, how long it had sat
    idle when cut (empty when cut mid-answer), and how long the same sockets lived on direct."""

    lives: tuple[float, ...]
    idle: tuple[float, ...]
    direct: tuple[float, ...]


def _socket_of(o: Observation) -> tuple[str, int, str]:
    """The socket a turn is on: one session of one replay of a route."""
    return (o.route, o.repetition, o.session)


def _socket_cut(o: Observation, turns: Sequence[Item]) -> float | None:
    """Seconds from the opening of `o`'s socket (its first turn's start; `turns`: the socket's) to
    the chain ending it: mid-answer, the turn's end; idle, the silence it had sat through since its
    last turn ended."""
    if not turns:
        return None
    opened = min(t.obs.t_start for t in turns)
    idle = idle_when_ended(o.detail)
    if idle is None:
        return o.t_start + (o.end or 0.0) - opened
    before = [t.obs.t_start + t.obs.end for t in turns
              if t.obs.end is not None and t.obs.turn < o.turn and t.obs.outcome.answered]  # fmt: skip
    return max(before) + idle - opened if before else None


def _socket_life(turns: Sequence[Observation]) -> float:
    """How long a socket stayed open as far as its turns show: from its first turn's start to the
    last turn's end."""
    return max(t.t_start + (t.end or 0.0) for t in turns) - min(t.t_start for t in turns)


def _one_moment(obs: Sequence[Observation]) -> bool:
    """All in one replay (a route's repetition: `t_start` counts from its start) and ended
    together."""
    return len({(o.route, o.repetition) for o in obs}) == 1 and _alike([o.t_start + (o.end or 0.0) for o in obs])


def _lasted(o: Observation, after: str) -> float:
    """How long an exchange ran until its end, from its request or from its response headers."""
    start = o.headers if after == "the response headers" and o.headers is not None else 0.0
    return (o.end or 0.0) - start


def _tolerance(values: Sequence[float]) -> float:
    return max(CAP_SPREAD, CAP_SHARE * max(values))


def _alike(values: Sequence[float]) -> bool:
    """Times equal within what a real cap's timing scatters by (CAP_SPREAD, CAP_SHARE)."""
    return max(values) - min(values) <= _tolerance(values)


def _last_data(o: Observation, content_only: bool) -> float:
    """When the last data of an exchange came (events, or the headers), from its request; with
    `content_only`, the last content event. 0.0 (the request) when none came."""
    times = [e.t for e in o.events if e.kind == "content" or not content_only]
    if not content_only and o.headers is not None:
        times.append(o.headers)
    return max(times, default=0.0)


def _secs(v: float) -> str:
    return f"{v:.2f} s" if v < 0.1 else f"{v:.1f} s" if v < 100 else f"{v:.0f} s"


def _span(values: Sequence[float]) -> str:
    """"1.5 s", or "1.5-1.6 s" when the values differ as shown."""
    lo, hi = _secs(min(values)), _secs(max(values))
    return lo if lo == hi else f"{lo[:-2]}-{hi}"


def _events(counts: Sequence[int], what: str = "content event") -> str:
    lo, hi = min(counts), max(counts)
    n = f"{lo}" if lo == hi else f"{lo}-{hi}"
    return f"{n} {what}{'' if hi == 1 else 's'}"


def _timeoutish(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in _TIMEOUT_WORDS)


def _encoding(obs: Observation) -> str | None:
    value = obs.response_header("content-encoding")
    return None if value in (None, "", "identity") else value


_JSON_MESSAGE = re.compile(r'"message"\s*:\s*"((?:[^"\\]|\\.)*)')
_TITLE = re.compile(r"<title>(.*?)</title>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")


def _body_of(detail: str) -> str:
    """The start of an error body quoted in a detail ("HTTP 504: <body>"), readable: a JSON
    error's message, an HTML page's title, else the text."""
    m = re.match(r"HTTP \d+: (.*)", detail, re.S)
    if not m:
        return ""
    return _short(_readable(m.group(1)))


def _readable(body: str) -> str:
    message = _JSON_MESSAGE.search(body)
    if message:
        try:
            return str(json.loads(f'"{message.group(1)}"'))
        except ValueError:  # an escape cut off where the quote ends
            return message.group(1)
    title = _TITLE.search(body)
    if title:
        return title.group(1)
    return _TAG.sub(" ", body)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE else text[: QUOTE - 1].rstrip() + "…"


# -- the words, per kind ------------------------------------------------------------------------

Words = tuple[str, str, str]  # seen, likely, fix


def _body_limit(g: _Group) -> Words:
    said = []
    for route in g.routes:
        refused = min(o.request_bytes for o in g.obs if o.route == route)
        if route not in g.context:
            said.append(f"a request of {refused:,} B was refused on {route}")
            continue
        # A request the engine answered (2xx) went through the hop whole: its body passed.
        passed = [i.obs.request_bytes for i in g.context[route] if _answered_2xx(i.obs)]
        if not passed:
            said.append(f"no request passed {route}; the smallest refused was {refused:,} B")
        elif max(passed) < refused:
            said.append(f"requests up to {max(passed):,} B passed {route}, the smallest refused was "
                        f"{refused:,} B: the limit lies between")  # fmt: skip
        else:
            said.append(f"on {route} a request of {max(passed):,} B passed and one of {refused:,} B was refused: "
                        "not a limit on the body size alone (it may count more than the body, or change)")  # fmt: skip
    sizes = [i.obs.request_bytes for r in g.routes for i in g.context.get(r, ())] + [o.request_bytes for o in g.obs]
    largest = max(sizes)
    whole = all(r in g.context for r in g.routes)
    fix = (f"raise it above the largest request body the sessions send ({largest:,} B in this run)" if whole
           else f"raise it above the largest request body the sessions send (at least {largest:,} B)")  # fmt: skip
    return (f"{g.where} refused request bodies with HTTP 413{g.quote()}: " + "; ".join(said),
            "its request body size limit (nginx client_max_body_size, 1 MB by default; HAProxy and Squid "
            "body limits; a gateway's maximum request size)", fix)  # fmt: skip


def _answered_2xx(o: Observation) -> bool:
    return o.status is not None and 200 <= o.status < 300


def _header_limit(g: _Group) -> Words:
    return (f"{g.where} answered HTTP {g.status()}{g.quote()}: the request headers are too large for it",
            "its request header size limit (nginx large_client_header_buffers, HAProxy tune.bufsize, Squid "
            "request_header_max_size), against a long bearer token or cookies",
            "raise it above the largest header the route sends")  # fmt: skip


def _idle_upstream(g: _Group) -> Words:
    idle = [o.idle for o in g.obs if o.idle is not None]
    return (f"{g.where} answered HTTP {g.status()}{g.quote()} to requests sent on a kept-alive connection idle "
            f"for {_span(idle)}",
            "it reused an idle upstream connection the engine had already closed",
            "make its upstream keep-alive timeout shorter than the engine's, or let it retry on a closed "
            "connection")  # fmt: skip


def _idle_connection(g: _Group) -> Words:
    idle = [o.idle for o in g.obs if o.idle is not None]
    what = {Outcome.RESET: "was closed", Outcome.CONNECT_ERROR: "failed to connect",
            Outcome.STALL_BEFORE_HEADERS: "got no response headers"}.get(g.outcome, "failed")  # fmt: skip
    return (f"requests sent on a kept-alive connection idle for {_span(idle)} {what} through {g.where}, "
            "before any response",
            f"{g.where} (or the engine behind it) closes idle keep-alive connections sooner than the client "
            "reuses them, or no longer answers on them",
            "an idle timeout in the hop longer than the client's pauses between turns, and upstream keep-alive "
            "shorter than the engine's")  # fmt: skip


def _hop_error(g: _Group) -> Words:
    status = g.status()
    answered = g.answered()
    after = f" {_span(answered)} after the request" if answered else ""
    seen = f"{g.where} answered HTTP {status}{g.quote()}{after}"
    if g.direct_ok():
        seen += ", where the direct route answers 2xx"
    ttft = g.reference_ttft()
    first = f" (the first token came after up to {_secs(ttft)} on the direct route)" if ttft is not None else ""
    bodies = " ".join(i.obs.detail for i in g.items)
    if status in (408, 504) or _timeoutish(bodies):
        fix = f"raise it above the longest time to first token (a long prefill): {_GATEWAY_TIMEOUTS}"
        if answered and ttft is not None and min(answered) > max(1.5 * ttft, ttft + QUIET_CUT):
            # The hop waited far longer than the engine takes to answer: not one wait for the engine
            # cut by one timeout. Several tries each cut sooner (a gateway's retries), or a wait on
            # something else than the engine; the figures cannot tell which.
            return (seen, f"the hop waited longer than the engine takes{first}: either it tried more than once (a "
                          "gateway's retries; LiteLLM retries twice by default), each try cut by a timeout shorter "
                          "than the prefill, or the request never reached the engine through it (a stale upstream "
                          f"connection, a queue) until a timeout of about {_span(answered)}",
                    fix + "; if the engine never got the request, the hop's upstream connections")  # fmt: skip
        about = f" of about {_span(answered)}" if answered else ""
        return (seen, f"a timeout{about} in the hop (less, if it retried upstream first) while it waited on the "
                      f"engine{first}", fix)  # fmt: skip
    if status in (502, 503):
        if answered and max(answered) < QUIET_CUT:
            likely = ("the hop got no usable answer from its upstream (a connection refused, reset or closed "
                      "early), not a timeout: it answered without waiting")  # fmt: skip
        else:
            likely = ("its upstream refused or closed the connection, or a timeout in the hop "
                      f"({_READ_TIMEOUTS}) cut a long prefill{first}")  # fmt: skip
        return seen, likely, "its error log for that time says which; a timeout: raise it above the longest prefill"
    if status in (401, 403, 407):
        return (seen, "the hop wants credentials the route does not send (recordings redact Authorization)",
                'give the hop\'s route its key in the chain file: headers = { Authorization = "Bearer ${KEY}" }')
    if status == 429:
        return (seen, "a rate or concurrency limit in the hop",
                "raise the hop's limit, or replay with less concurrency (--concurrency)")  # fmt: skip
    if status in (404, 405):
        return (seen, "the hop does not route this path or method (or this model name) to the engine",
                "check the hop's routes and model names")  # fmt: skip
    return (seen, "an error of the hop's own: its body says which",
            "look at the hop's error log for those requests")  # fmt: skip


def _engine_error(g: _Group) -> Words:
    status = g.status() or 0
    seen = f"the engine itself answered HTTP {status}{g.quote()} to what {g.where} forwarded (its digest came back)"
    if g.direct_ok():
        seen += ", where it answers 2xx on the direct route"
    if status < 500 and status != 429:
        return (seen, f"{g.where} changes the request on the way (its body, headers or path) so that the "
                      "engine refuses it",
                "compare what the hop forwards with what the client sends")  # fmt: skip
    return (seen, f"{g.where} sends the engine more at once than the direct route does, or changes the request",
            "look at the engine's log for those requests, and at the hop's concurrency towards it")  # fmt: skip


def _reset(g: _Group) -> Words:
    kind = kind_of(g.outcome, g.obs[0])
    quiet = g.quiet()
    mid = kind == "reset_mid_stream"
    if kind == "reset_before_headers":
        ends = g.ends()
        seen = f"{g.where} closed the connection before any response headers" + (
            f", {_span(ends)} after the request" if ends else "")  # fmt: skip
    elif not mid:
        seen = f"{g.where} closed the connection after the response headers, before the first token" + (
            f", {_span(quiet)} after them" if quiet else "")  # fmt: skip
    else:
        seen = f"{g.where} closed the connection mid-stream after {_events(g.content_events())}" + (
            f", {_span(quiet)} after the last data" if quiet else "")  # fmt: skip
    # What the hop waited on when it cut: the prefill (no token yet), or a gap between tokens.
    wait, longest = ("gaps between tokens", "gap between tokens") if mid else ("prefill", "prefill")
    ref = g.reference_gap() if mid else g.reference_ttft()
    fact = ""
    if ref is not None:
        fact = f" (the longest gap on the direct route: {_secs(ref)})" if mid else \
            f" (the first token came after up to {_secs(ref)} on the direct route)"  # fmt: skip
    lives = g.socket_life_cap()
    if lives is not None:
        return (seen, *_life_capped(lives))
    cap = g.duration_cap()
    if cap is not None:
        return (seen, *_capped(g, cap))
    at_token = None if mid else g.cut_as_first_token_came()
    if at_token is not None:
        cuts, firsts = at_token
        direct = max(i.reference.end or 0.0 for i in g.items if i.reference is not None)
        return (seen, f"not a read timeout: each cut came as the stream's first token did on the direct route "
                      f"({_span(firsts)} after the request), at different times ({_span(cuts)}), where a read "
                      f"timeout cuts sooner, at one time: a cap on the response's duration that {g.where} checks "
                      "only when it writes (Varnish send_timeout), shorter than the prefill; or a filter that gives "
                      "up on the first event",
                f"raise the cap above the longest answer ({_secs(direct)} on the direct route here); a filter: "
                "exempt text/event-stream")  # fmt: skip
    if quiet and min(quiet) >= QUIET_CUT:
        return (seen, f"a read timeout of about {_span(quiet)} in the hop ({_READ_TIMEOUTS}, LiteLLM "
                      f"stream_timeout), shorter than the engine's {wait}{fact}",
                f"raise it above the longest {longest}")  # fmt: skip
    if quiet and max(quiet) < QUIET_CUT:
        return (seen, f"not a read timeout (data came until {_span(quiet)} before the cut): a connection "
                      "limit, a restart of the hop, or a filter that gives up on the stream",
                "look at the hop's error log for that time")  # fmt: skip
    return (seen, f"a read timeout in the hop ({_READ_TIMEOUTS}) shorter than the engine's {wait}{fact}, "
                  "or a connection limit",
            f"its error log for that time says which; a timeout: raise it above the longest {longest}")  # fmt: skip


def _truncated(g: _Group) -> Words:
    mid = kind_of(g.outcome, g.obs[0]) == "truncated_mid_stream"
    quiet = g.quiet()
    after = f", {_span(quiet)} after the last data" if quiet else ""
    what = f"after {_events(g.content_events())}" if mid else "before the first token"
    wait = "gaps between tokens" if mid else "prefill"
    seen = f"the stream through {g.where} ended cleanly {what}, without its terminal event{after}"
    cap = g.duration_cap()
    if cap is not None:
        return (seen, *_capped(g, cap))
    return (seen,
            f"a response or read timeout in the hop that ends the body instead of cutting it ({_READ_TIMEOUTS}), "
            f"shorter than the engine's {wait}; or a filter that does not understand SSE and ends it early",
            f"raise that timeout above the longest {'gap between tokens' if mid else 'prefill'}; exempt "
            "text/event-stream from filters")  # fmt: skip


def _capped(g: _Group, cap: _Cap) -> tuple[str, str]:
    """Likely and fix of cuts that a cap on the response's duration explains. When every cut came
    after as many events, a limit on the response's size explains them as well: both are said."""
    what = f"a cap on the response's duration of about {_span(cap.times)} from {cap.after}"
    size = fix = ""
    if cap.alike:
        what += f", or on its size (every cut came after {_events([len(o.events) for o in g.obs], 'event')})"
        size = "; cuts of other exchanges, after other counts of events, would tell the two apart"
        fix = "; a size limit: raise it above the largest answer"
    return (f"{what}, not a read timeout: every cut came then while data still flowed ({_span(cap.quiet)} after "
            f"the last), and the same exchanges ran {_span(cap.direct)} on the direct route (such caps: "
            f"{_DURATION_CAPS}){size}",
            f"raise the cap above the longest answer ({_secs(max(cap.direct))} on the direct route here), or keep "
            f"answers under {_secs(min(cap.times))} (fewer tokens per turn){fix}")  # fmt: skip


def _stall_before_headers(g: _Group) -> Words:
    ends = g.ends()
    within = f" within {_span(ends)} of the request" if ends else ""
    ttft = g.reference_ttft()
    first = f" (the first token came after up to {_secs(ttft)} on the direct route)" if ttft is not None else ""
    return (f"no response headers came through {g.where}{within}, when the client gave up",
            "the hop holds the response headers back: it buffers the whole response, or waits on the engine "
            f"longer than the client does (a long prefill){first}",
            "do not buffer text/event-stream (nginx proxy_buffering off, X-Accel-Buffering: no); a client "
            "header timeout above the longest prefill")  # fmt: skip


def _stall_before_first_event(g: _Group) -> Words:
    quiet = g.quiet()
    silence = f"then no content event for {_span(quiet)}" if quiet else "then no content event"
    ttft = g.reference_ttft()
    first = f"; the first token came after up to {_secs(ttft)} on the direct route" if ttft is not None else ""
    before = _events([len(o.events) for o in g.obs], "event")
    return (f"{g.where} passed the response headers, {silence} ({before} before it, none with content), when "
            "the client gave up",
            "response buffering in the hop (it holds events until its buffer fills or the response ends), or "
            f"a read timeout shorter than the engine's prefill after which it neither answers nor closes{first}",
            f"{_NO_BUFFERING}, or raise the hop's read timeout ({_READ_TIMEOUTS}) above the longest prefill")


def _stall_mid_stream(g: _Group) -> Words:
    quiet = g.quiet(content_only=True)
    silence = f"then none for {_span(quiet)}" if quiet else "then none"
    comments = any(e.kind == "comment" and e.t > _last_data(o, True) for o in g.obs for e in o.events)
    kept = " (keep-alive comments still came)" if comments else ""
    gap = g.reference_gap()
    here = f"{_span(quiet)} of silence here" if quiet else "the silence here"
    if gap is not None:
        here += f"; the longest gap on the direct route: {_secs(gap)}"
    return (f"content flowed through {g.where} ({_events(g.content_events())}), {silence}{kept}, when the "
            "client gave up",
            f"response buffering in the hop, or a read timeout shorter than the gaps between tokens ({here})",
            f"{_NO_BUFFERING}, or raise the hop's read timeout ({_READ_TIMEOUTS}) above the longest gap")


def _held_open_after_end(g: _Group) -> Words:
    waits = [o.end - t for o in g.obs if o.end is not None for t in [_terminal_at(o)] if t is not None]
    if waits:
        seen = (f"{g.where} passed the whole stream, its terminal event too, then held the body open for "
                f"{_span(waits)} more, until the client gave up")  # fmt: skip
    else:  # the events were not kept: only the outcome says the answer had come
        seen = f"{g.where} held the stream open after its answer had come, until the client gave up"
    return (seen,
            "a gateway or filter that does not end the chunked body when the upstream's ends: a client that "
            "reads to the end of the body waits, and so does the next request on that kept-alive connection",
            "the hop must close the response when the upstream's ends (a newer version, or another setting "
            "for streamed responses)")  # fmt: skip


def _held_open_after_finish(g: _Group) -> Words:
    return (f"{g.where} passed the finish reason but never the stream's terminator ([DONE]), and held the "
            "stream open until the client gave up",
            "a gateway that drops or re-frames the last events: clients that read to the terminator (the OpenAI "
            "SDK) hang until their timeout",
            "forward the upstream's stream to its end")  # fmt: skip


def _terminal_at(o: Observation) -> float | None:
    return next((e.t for e in o.events if e.kind == "terminal"), None)


def _stream_error(g: _Group) -> Words:
    gaps, at = [], []
    for o in g.obs:
        err = next((e.t for e in o.events if e.kind == "error"), o.end)
        if err is None:
            continue
        at.append(err)
        before = [e.t for e in o.events if e.t < err and e.kind != "error"]
        before += [o.headers] if o.headers is not None else []
        if before:
            gaps.append(max(err - max(before), 0.0))
    message = _short(g.details()[0]) if g.details() else ""
    quoted = f" '{message}'" if message else ""
    when = f", {_span(at)} after the request" if at else ""
    after = f", {_span(gaps)} after the last data" if gaps else ""
    content = g.content_events()
    seen = f"{g.where} sent an error inside the stream{quoted} after {_events(content)}{after}{when}"
    if kind_of(g.outcome, g.obs[0]) == "stream_error_timeout":
        mid = min(content) > 0
        wait = "gaps between tokens" if mid else "time to first token"
        ref = g.reference_gap() if mid else g.reference_ttft()
        fact = f" (up to {_secs(ref)} on the direct route)" if ref is not None else ""
        about = f" of about {_span(gaps)}" if gaps else ""
        return (seen,
                f"a timeout{about} in the hop while it waited on the engine (LiteLLM stream_timeout, or timeout "
                f"when that is not set), shorter than the engine's {wait}{fact}",
                f"raise it above the longest {'gap between tokens' if mid else 'time to first token'}")  # fmt: skip
    return (seen, "an error of the hop's own in a stream the engine completes on the direct route: the message "
                  "says which",
            "look at the hop's error log for that time")  # fmt: skip


def _connect_error(g: _Group) -> Words:
    detail = g.details()[0] if g.details() else ""
    return (f"{g.where} could not be connected to" + (f": {_short(detail)}" if detail else ""),
            "a wrong address or port for the hop, the hop not running, or its TLS certificate not trusted",
            "check the hop's url or proxy in the chain file, and its verify setting")  # fmt: skip


def _malformed(g: _Group) -> Words:
    detail = g.details()[0] if g.details() else ""
    return (f"{g.where} passed a stream that is not valid for the API" + (f": {_short(detail)}" if detail else ""),
            "compression or a rewrite of text/event-stream (a filter, a body rewrite, another Content-Type)",
            "exempt text/event-stream from compression and rewriting")  # fmt: skip


def _request_mutated(g: _Group) -> Words:
    details = g.details()
    shown = "; ".join(_short(d) for d in details[:2])
    if len(details) > 2:
        shown += f" (and {len(details) - 2} other changes)"
    return (f"what the model sees differs through {g.where}" + (f": {shown}" if shown else ""),
            "a gateway trimming the context or rewriting the request (messages, system prompt, tools or sampling "
            "parameters)",
            "turn the rewrite off for this route, or raise the gateway's context limit")  # fmt: skip


def _content_mismatch(g: _Group) -> Words:
    details = g.details()
    shown = f": {_short(details[0])}" if details else ""
    return (f"through {g.where} the model answered otherwise than on the direct route{shown}",
            "the hop changes what the model sees or says (context trimming, a rewrite of the request or of the "
            "answer)",
            "compare the bodies the hop forwards with what the client sends")  # fmt: skip


def _buffered(g: _Group) -> Words:
    return (f"{g.where} delivers streams in bursts the direct route does not show",
            "response buffering in the hop (nginx proxy_buffering on, its default, or an HTTP/1.0 upstream), or "
            "small writes held back (HAProxy without option http-no-delay holds them up to 200 ms)",
            "proxy_buffering off or X-Accel-Buffering: no (nginx), proxy_http_version 1.1; option "
            "http-no-delay (HAProxy)")  # fmt: skip


def _buffered_compressed(g: _Group) -> Words:
    encoding = next((e for e in (_encoding(o) for o in g.obs) if e), "")
    return (f"{g.where} compresses text/event-stream (Content-Encoding: {encoding}) and delivers it in bursts",
            "compression with buffering on: the compressor holds events back until its buffer fills",
            "exclude text/event-stream from compression (nginx gzip_types), and do not buffer it "
            "(proxy_buffering off, X-Accel-Buffering: no)")  # fmt: skip


def _slow(g: _Group) -> Words:
    ttfts = [o.ttft for o in g.obs if o.ttft is not None]
    ref = g.reference_ttft()
    figures = f" (TTFT up to {_secs(max(ttfts))}" + (f", {_secs(ref)} on the direct route)" if ref is not None else ")")
    return (f"{g.where} adds latency beyond the noise floor" + (figures if ttfts else ""),
            "queueing in the hop, its connection limits, or a new connection or TLS set-up per request",
            "raise the hop's connection limits, and let it keep upstream connections alive")  # fmt: skip


def _known(g: _Group) -> Words:
    """When nothing specific is known: what is (the outcome, when, after how many events)."""
    ends = g.ends()
    when = f", {_span(ends)} after the request" if ends else ""
    return (f"{g.where}: {g.outcome.value} at {g.turns()}{when}, after {_events(g.content_events())}",
            "", "look at the hop's log for those requests (the findings list each one)")


# -- SOCKS5 hops ---------------------------------------------------------------------------------
# A SOCKS5 proxy relays bytes: it has no read timeout of its own and no HTTP to answer with, so
# what it does to a stream is to refuse the connection (a reply code: `core/exchange/socks`) or
# to close it, mostly after it carried nothing for its idle timeout.

_SOCKS_IDLE = "Dante timeout.io, ssh ClientAliveInterval x ClientAliveCountMax (ServerAliveInterval on the client side)"


def _socks_kind(outcome: Outcome, obs: Observation, socks: bool) -> str | None:
    """A SOCKS5 hop's own kinds: its refusals (read from the detail, which only a SOCKS
    connector writes so), and its cuts when the hop is known to be one."""
    if outcome is Outcome.CONNECT_ERROR:
        refusal = reply_in(obs.detail) or reply_in(obs.error)
        if refusal is None:
            return None
        if refusal.code is None:
            return "socks_auth"
        # A name the proxy was to resolve, and a reply that says the host could not be had:
        # resolving it is the likely part, never said as found (the reply does not tell).
        return "socks_unresolved" if refusal.by_name and refusal.code in (1, 4) else "socks_refused"
    if socks and outcome is Outcome.RESET:
        return "socks_cut"
    return None


def _socks_refusal(g: _Group) -> Refusal | None:
    return next((r for r in (reply_in(o.detail) or reply_in(o.error) for o in g.obs) if r), None)


_SOCKS_WHY = {
    1: ("a failure inside the proxy while it connected (its log says which)",
        "look at the proxy's log for those connections"),
    2: ("the proxy's rules do not let this client reach that address and port (Dante: no `socks pass` rule "
        "for it; ssh -D: PermitOpen or AllowTcpForwarding on the server)",
        "allow the engine's address and port in the proxy's rules"),
    3: ("the proxy has no route to that network (another network, a firewall on its side)",
        "give the engine's address as the proxy reaches it, or open the path from the proxy to it"),
    4: ("the proxy cannot reach that host (down, another network, a firewall on its side)",
        "give the engine's address as the proxy reaches it, or open the path from the proxy to it"),
    5: ("nothing listens at that address and port as the proxy sees it: the engine's port, or an address "
        "that means another machine from the proxy's side (127.0.0.1 is the proxy's own)",
        "give the engine (or next hop) in the chain file by the address the proxy reaches it at"),
}


def _socks_refused(g: _Group) -> Words:
    refusal = _socks_refusal(g)
    if refusal is None or refusal.code is None:
        return _connect_error(g)
    likely, fix = _SOCKS_WHY.get(refusal.code, ("the proxy does not relay this kind of connection",
                                                "look at the proxy's log for those connections"))  # fmt: skip
    return (f"{g.where}, a SOCKS5 proxy, would not connect to {refusal.target}: reply {refusal.code} "
            f"({REPLIES.get(refusal.code, 'unknown reply')})", likely, fix)


def _socks_unresolved(g: _Group) -> Words:
    refusal = _socks_refusal(g)
    assert refusal is not None and refusal.code is not None
    return (f"{g.where}, a SOCKS5 proxy given the name {refusal.target_host} to resolve (socks5h://), would not "
            f"connect to {refusal.target}: reply {refusal.code} ({REPLIES[refusal.code]})",
            f"the proxy cannot resolve {refusal.target_host} (a name only this machine knows: /etc/hosts, a "
            "split or local DNS), or cannot reach the host it resolves to",
            f"give the engine by an address the proxy reaches, or proxy = \"socks5://...\" to resolve "
            f"{refusal.target_host} on this machine, or make the name known to the proxy's resolver")  # fmt: skip


def _socks_auth(g: _Group) -> Words:
    detail = g.details()[0] if g.details() else ""
    return (f"{g.where}, a SOCKS5 proxy, refused the authentication" + (f": {_short(detail)}" if detail else ""),
            "a wrong user or password, or the proxy wants another method (none, or user and password)",
            "give the user and password in the hop's proxy URL, from the environment: "
            "proxy = \"socks5://${USER}:${PASSWORD}@HOST:PORT\"")  # fmt: skip


def _socks_cut(g: _Group) -> Words:
    idle = [o.idle for o in g.obs if o.reused and o.idle is not None and o.headers is None]
    if len(idle) == len(g.obs) and min(idle) >= 1.0:
        return (f"requests sent on a connection relayed by {g.where} (a SOCKS5 proxy) after it was idle for "
                f"{_span(idle)} were cut before any response",
                f"the proxy's idle timeout on relayed connections ({_SOCKS_IDLE}) is shorter than the client's "
                "pauses between turns: it closed the idle connection",
                "raise that timeout above the longest pause between turns (timeout.io: 0 in Dante waits for ever)")  # fmt: skip
    seen, _, _ = _reset(g)
    mid = kind_of(Outcome.RESET, g.obs[0]) == "reset_mid_stream"
    quiet = g.quiet()
    wait, longest = ("gaps between tokens", "gap between tokens") if mid else ("prefill", "prefill")
    ref = g.reference_gap() if mid else g.reference_ttft()
    fact = f" (up to {_secs(ref)} on the direct route)" if ref is not None else ""
    seen = seen.replace(g.where, f"{g.where} (a SOCKS5 proxy)", 1)
    if quiet and min(quiet) >= QUIET_CUT:
        return (seen, f"the proxy's idle timeout on relayed connections, about {_span(quiet)} ({_SOCKS_IDLE}, or "
                      f"a NAT or firewall on its path), shorter than the engine's {wait}{fact}: a relayed "
                      "connection that carries no byte that long is closed",
                f"raise it above the longest {longest} (timeout.io: 0 in Dante waits for ever)")  # fmt: skip
    if quiet and max(quiet) < QUIET_CUT:
        return (seen, f"not an idle timeout (data came until {_span(quiet)} before the cut): the proxy restarted, "
                      "a limit on its connections, or the path to it dropped the connection",
                "look at the proxy's log for that time (Dante logs each session's end and why)")  # fmt: skip
    return (seen, f"the proxy's idle timeout on relayed connections ({_SOCKS_IDLE}) shorter than the engine's "
                  f"{wait}{fact}, or the proxy dropped the connection",
            f"its log for that time says which; a timeout: raise it above the longest {longest}")  # fmt: skip


def _words_of(kind: str) -> Callable[[_Group], Words]:
    if kind.startswith("engine_http_"):
        return _engine_error
    if kind.startswith("http_"):
        return _hop_error
    return _WORDS.get(kind, _known)


# -- WebSocket sessions ---------------------------------------------------------------------------

_WS_IDLE = ("nginx proxy_read_timeout (it counts a socket's silence), HAProxy timeout tunnel, Squid "
            "read_timeout on a CONNECT tunnel, a load balancer's or CDN's idle timeout (Cloudflare 100 s, an AWS "
            "ALB's 60 s by default)")  # fmt: skip
_WS_LIFE_CAPS = ("a GCP load balancer's backend service timeout, which bounds a WebSocket's whole life; Envoy's "
                 "max_connection_duration or a route's max_stream_duration; AWS API Gateway's 2 hours; a hop "
                 "reloaded on a schedule")  # fmt: skip
_WS_FORWARDING = ('nginx forwards a WebSocket only with proxy_http_version 1.1; proxy_set_header Upgrade '
                  '$http_upgrade; proxy_set_header Connection "upgrade"; Squid only with http_upgrade_request_protocols '
                  'websocket allow all, the name in lower case as clients send it (it compares it as written)')  # fmt: skip


def _ws_upgrade_refused(g: _Group) -> Words:
    status = g.status() or 0
    seen = f"{g.where} answered the WebSocket upgrade with HTTP {status}{g.quote()} instead of 101"
    if g.direct_ok():
        seen += ", where the engine agrees to it on the direct route"
    return (seen,
            f"the hop does not pass WebSocket upgrades: it answered the GET itself ({_WS_FORWARDING}; a gateway "
            "that routes only POST /v1/responses answers 404 or 405; 426 asks the client to use another "
            "transport). A harness then falls back to HTTPS (Codex at once on 426, after its retries otherwise)",
            "forward the upgrade to the engine (the nginx lines above), or turn the client's WebSocket mode off "
            "(Codex: supports_websockets = false)")  # fmt: skip


def _ws_upgrade_unanswered(g: _Group) -> Words:
    ends = g.ends()
    within = f" within {_span(ends)}" if ends else ""
    return (f"{g.where} never answered the WebSocket upgrade{within}: no 101, no error",
            "a proxy that holds the upgrade request (a TLS-inspecting proxy that does not pass WebSockets, a hop "
            "waiting for a body that never comes): the client waits its connect timeout on every try (Codex "
            "websocket_connect_timeout_ms, then its reconnect retries)",
            "let the hop pass WebSocket upgrades, or turn the client's WebSocket mode off")  # fmt: skip


def _ws_idle_cut(g: _Group) -> Words:
    idle = g.idle_ends()
    after = f" after {_span(idle)} of silence" if idle else ""
    seen = f"{g.where} ended the WebSocket while it sat idle between turns{after}"
    if g.direct_ok():
        seen += "; the direct route kept it open as long"
    lives = g.socket_life_cap()
    if lives is not None:
        return (seen, *_life_capped(lives))
    return (seen,
            f"an idle timeout on WebSocket connections shorter than the think time between turns (a tool running): "
            f"{_WS_IDLE}",
            "raise it above the longest think time between turns, or have the client send pings while it waits")  # fmt: skip


def _life_capped(lives: _Lives) -> tuple[str, str]:
    """Likely and fix of sockets a cap on a connection's life ended."""
    when = f"after {_span(lives.idle)} of silence" if lives.idle else "while their answers still flowed"
    return (f"a cap on a WebSocket's life of about {_span(lives.lives)} from its opening, not an idle timeout: "
            f"every socket ended then, {when}, and the same sockets stayed open {_span(lives.direct)} on the "
            f"direct route (such caps: {_WS_LIFE_CAPS})",
            f"raise the cap above the longest session ({_secs(max(lives.direct))} on the direct route here), or "
            "keep sessions shorter than it")  # fmt: skip


def _ws_not_sent(g: _Group) -> Words:
    return (f"turns on {g.where} were not sent: the socket they continue had ended at an earlier turn "
            "(its memory of the conversation went with it)",
            "what ended the socket is the finding of the earlier turn on this route",
            "fix the earlier turn's cause")  # fmt: skip



_WORDS: dict[str, Callable[[_Group], Words]] = {
    "body_limit": _body_limit,
    "header_limit": _header_limit,
    "idle_upstream": _idle_upstream,
    "idle_connection": _idle_connection,
    "reset_before_headers": _reset,
    "reset_before_first_event": _reset,
    "reset_mid_stream": _reset,
    "truncated_before_first_event": _truncated,
    "truncated_mid_stream": _truncated,
    Outcome.STALL_BEFORE_HEADERS.value: _stall_before_headers,
    Outcome.STALL_BEFORE_FIRST_EVENT.value: _stall_before_first_event,
    Outcome.STALL_MID_STREAM.value: _stall_mid_stream,
    "held_open_after_end": _held_open_after_end,
    "held_open_after_finish": _held_open_after_finish,
    "stream_error": _stream_error,
    "stream_error_timeout": _stream_error,
    Outcome.CONNECT_ERROR.value: _connect_error,
    Outcome.MALFORMED_STREAM.value: _malformed,
    Outcome.REQUEST_MUTATED.value: _request_mutated,
    Outcome.CONTENT_MISMATCH.value: _content_mismatch,
    "buffered": _buffered,
    "buffered_compressed": _buffered_compressed,
    Outcome.SLOW.value: _slow,
    "socks_refused": _socks_refused,
    "socks_unresolved": _socks_unresolved,
    "socks_auth": _socks_auth,
    "socks_cut": _socks_cut,
    "ws_upgrade_refused": _ws_upgrade_refused,
    "ws_upgrade_unanswered": _ws_upgrade_unanswered,
    "ws_idle_cut": _ws_idle_cut,
    "ws_not_sent": _ws_not_sent,
}
