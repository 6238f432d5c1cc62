"""How long the recorded client would have waited: the patience a replay judges silence by.

A replay stands in for a real client. A silence that client would have sat through (a long
prefill on a real engine, a tool call's arguments being generated) is a slow answer, not a
failure, and a verdict built on a failure the replay's own watchdog made blames a healthy server.
So a silence fails only at the client's patience (`Watchdogs.patience_*`), chosen here from what
the recording shows, in this order:

1. **The client giving up** (`RecordedOutcome.client_waited`): it closed a silent exchange itself
   after a wait, at least `MIN_CLIENT_WAIT` and five times the longest gap any recorded exchange
   had (not a person cancelling). That wait is its patience, for the phase it gave up in (before
   the headers, or after them); the longest such wait is taken.
2. **A harness known by its user agent** (`KNOWN_CLIENTS`): Claude Code gives up on a stream
   idle for 180 s (its stream idle watchdog, unless CLAUDE_STREAM_IDLE_TIMEOUT_MS says
   otherwise), Codex after 300 s (`stream_idle_timeout_ms`). A harness's own watchdog goes before
   the read timeout its SDK sends, which is longer.
3. **The client saying it**: the OpenAI and Anthropic SDKs send their read timeout with every
   request (`x-stainless-read-timeout`, else `x-stainless-timeout`, in seconds); an SDK that does
   not is patient for its default, 600 s.
4. **Nothing said**: `ASSUMED` (600 s, the SDKs' default), said as assumed, with the flag that
   states it (`--patience S`).

Whatever it comes from (but a user's statement), the patience is well past every silence the
recording shows the client sitting through without giving up (`sat_through`: a long prefill, a
gap, or the silence a hop cut while the client still waited): at least `WELL_PAST` times the
longest. The longest of several clients' patience is taken (one patience per replay): a replay
never gives up before any of its clients would have.

Pure: the planned sessions in, `Patience` out.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from proxycheck.core.exchange.watchdogs import MIN_CLIENT_WAIT, Watchdogs

ASSUMED = 600.0  # a client that says nothing: the OpenAI and Anthropic SDKs' default read timeout
WELL_PAST = 2.0  # the patience is at least this many times any silence the client sat through

# User agents of clients whose patience is known: (pattern, seconds, what it is). First match wins.
KNOWN_CLIENTS: tuple[tuple[re.Pattern[str], float, str], ...] = (
    (re.compile(r"^claude-cli/", re.I), 180.0,
     "Claude Code's stream idle watchdog (CLAUDE_STREAM_IDLE_TIMEOUT_MS, 180 s by default)"),
    (re.compile(r"^codex", re.I), 300.0, "Codex's stream_idle_timeout_ms (300 s by default)"),
    (re.compile(r"^(Async)?(OpenAI|Anthropic)/(Python|JS)\b", re.I), 600.0,
     "the SDK's default read timeout (600 s)"),
)  # fmt: skip
# The SDKs themselves: the read timeout they send (`STATED_HEADERS`) goes before their default.
SDKS = re.compile(r"^(Async)?(OpenAI|Anthropic)/", re.I)
STATED_HEADERS = ("x-stainless-read-timeout", "x-stainless-timeout")  # the SDKs' own timeout, seconds


@dataclass(frozen=True, slots=True)
class Patience:
    """How long the client waits through a silence before the response headers (`headers`) and
    after them (`stall`), and what that comes from (`source`, words for a report)."""

    headers: float
    stall: float
    source: str

    def apply(self, watchdogs: Watchdogs) -> Watchdogs:
        """`watchdogs` with this patience: a silence longer than a watchdog and shorter than the
        patience is a slow answer, never a failure."""
        return watchdogs.with_patience(self.headers, self.stall, self.source)


@dataclass(frozen=True, slots=True)
class RecordedClient:
    """What one recorded exchange says about its client (see `client_patience`).

    `user_agent` and `stated` (an SDK's own read timeout header, seconds) from the request; `gave_up`
    the wait after which the client closed a silent exchange itself (None: it did not),
    `gave_up_before_headers` whether the headers had come then; `sat_through` the longest silence
    it waited through without giving up; `longest_gap` its longest gap between content events."""

    user_agent: str = ""
    stated: float | None = None
    gave_up: float | None = None
    gave_up_before_headers: bool = False
    sat_through: float = 0.0
    longest_gap: float = 0.0


def client_patience(exchanges: Sequence[RecordedClient]) -> Patience:
    """The patience of the recorded client (see the module docstring for the order)."""
    sat = max((x.sat_through for x in exchanges), default=0.0)
    floor = WELL_PAST * sat
    patient = max(MIN_CLIENT_WAIT, 5 * max((x.longest_gap for x in exchanges), default=0.0))
    before = [x.gave_up for x in exchanges if x.gave_up is not None and x.gave_up_before_headers and x.gave_up >= patient]
    after = [x.gave_up for x in exchanges if x.gave_up is not None and not x.gave_up_before_headers and x.gave_up >= patient]
    said, seconds = _said(exchanges)
    if before or after:
        headers = max(before, default=seconds)
        stall = max(after, default=seconds)
        gave = ", ".join(f"{what} {max(waits):.1f} s" for what, waits in (("before the headers", before),
                                                                            ("after them", after)) if waits)  # fmt: skip
        source = f"the recorded client gave up on a silence ({gave})"
        if not before or not after:
            source += f"; otherwise {said}"
        return _floored(Patience(headers, stall, source), floor, sat)
    return _floored(Patience(seconds, seconds, said), floor, sat)


def _said(exchanges: Iterable[RecordedClient]) -> tuple[str, float]:
    """The patience the clients say or are known for: the longest, in words."""
    best: tuple[float, str] | None = None
    for x in exchanges:
        known = known_client(x.user_agent)
        harness = known is not None and not SDKS.search(x.user_agent.strip())
        if known is not None and (harness or x.stated is None):  # a harness's own watchdog before its SDK's header
            found = (known[0], f"{known[1]}, {_agent(x.user_agent)}")
        elif x.stated is not None:
            found = (x.stated, f"the client's own read timeout ({x.stated:g} s, sent as x-stainless-read-timeout)")
        else:
            found = (ASSUMED, f"assumed {ASSUMED:g} s: the recording does not say how long its client waits "
                              "(--patience S states it)")  # fmt: skip
        if best is None or found[0] > best[0]:
            best = found
    if best is None:
        return (f"assumed {ASSUMED:g} s: the recording does not say how long its client waits "
                "(--patience S states it)"), ASSUMED  # fmt: skip
    return best[1], best[0]


def _floored(p: Patience, floor: float, sat: float) -> Patience:
    if floor <= min(p.headers, p.stall):
        return p
    return Patience(max(p.headers, floor), max(p.stall, floor),
                    f"{p.source}; at least {floor:.1f} s, {WELL_PAST:g} x the {sat:.1f} s of silence the recorded "
                    "client sat through")  # fmt: skip


def known_client(user_agent: str) -> tuple[float, str] | None:
    """The patience of a client known by its user agent, and what it is; None for others."""
    for pattern, seconds, what in KNOWN_CLIENTS:
        if pattern.search(user_agent.strip()):
            return seconds, what
    return None


def stated_timeout(headers: Iterable[tuple[str, str]]) -> float | None:
    """An SDK's read timeout as it sends it (`STATED_HEADERS`), in seconds; None when absent or
    not a positive number."""
    found = {name.lower(): value for name, value in headers}
    for name in STATED_HEADERS:
        value = found.get(name)
        if value is None:
            continue
        try:
            seconds = float(str(value).strip())
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds > 0:
            return seconds
    return None


def _agent(user_agent: str) -> str:
    return f"the recorded client is {user_agent.split()[0][:60]}"


# --------------------------------------------------------------------------------------------
# Work a replay abandoned

SETTLE_CAP = 120.0  # the longest a check waits for an engine to finish what a replay abandoned, s


def still_busy(abandoned: Iterable[tuple[str, float, float | None]]) -> float:
    """How long the engine may still be working on exchanges a replay's route gave up on (proxycheck
    at its patience, or a hop that hung up or answered an error of its own), each given as (its
    session, seconds since it was sent, how long the same exchange took where it was answered:
    None when it never was).

    An engine goes on with a request whose client left (vLLM finishes the prefill it started): the
    next replay must not queue behind that work, which would be a consequence of the cut, not
    evidence. A session's abandoned exchanges add up, since the replay sent each while the one
    before it was still being worked on, so they queued behind each other: the session is busy for
    the sum of their times since its first was sent. Sessions side by side are batched together,
    so the busiest of them counts. An unknown duration adds nothing (an exchange never answered
    anywhere is a wedge that waiting does not clear); at most `SETTLE_CAP`."""
    took: dict[str, float] = {}
    sent: dict[str, float] = {}
    for session, since_sent, duration in abandoned:
        if duration is None:
            continue
        took[session] = took.get(session, 0.0) + duration
        sent[session] = max(sent.get(session, 0.0), since_sent)
    busy = max((took[s] - sent[s] for s in took), default=0.0)
    return min(max(busy, 0.0), SETTLE_CAP)
