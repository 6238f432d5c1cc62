"""What `check` concludes about a chain, and the JSON document made of it (DESIGN.md, "Contract").

The types here are shared by the differ (`proxycheck.core.differ`: the noise floor, and each
observed exchange judged against the reference route), the localizer
(`proxycheck.core.localize`: which hop, or the server) and the reports (terminal, JSON, JUnit,
HTML), so they hold values only.

Verdicts: `healthy` (no route fails), `proxy` (the culprit is the hop whose entry first turns a
clean route into a failing one), `server` (the reference route, straight to the engine, fails),
`not-reproduced` (the recording shows failures, no route reproduces them) and `inconclusive`
(failures were seen, but no route can be told apart from the next one inward with confidence).

`advice` names the setting most likely behind a finding, so a report says what to do next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxycheck.core.observation import Observation
from proxycheck.core.outcomes import Outcome

SCHEMA = "proxycheck.verdict/1"
HEALTHY, PROXY, SERVER, NOT_REPRODUCED, INCONCLUSIVE = "healthy", "proxy", "server", "not-reproduced", "inconclusive"
VERDICTS = (HEALTHY, PROXY, SERVER, NOT_REPRODUCED, INCONCLUSIVE)
ENGINE = "engine"  # the culprit of a `server` verdict
ENGINE_ADVICE = ("the engine fails with no proxy in the way: look at the server (its logs, timeouts, "
                 "limits such as max model length or request size), not at the chain")  # fmt: skip


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """How much the reference route differs from itself between repetitions: differences
    within the floor are noise. Times in seconds; `burst` is a ratio of burstiness (>= 1.0)."""

    reference: str  # the route measured (normally "direct")
    pairs: int  # exchanges seen in two or more repetitions (what the floor is made of)
    deterministic: bool  # every such exchange gave the same text and tool calls each time
    ttft: float = 0.0  # p95 of |TTFT difference| between repetitions of the same exchange
    e2e: float = 0.0  # the same for the time to the terminal event
    burst: float = 1.0  # the largest ratio of burstiness between repetitions of one exchange
    tokens: int = 0  # the largest |completion tokens difference|

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "pairs": self.pairs,
            "deterministic": self.deterministic,
            "ttft": round(self.ttft, 6),
            "e2e": round(self.e2e, 6),
            "burst": round(self.burst, 3),
            "tokens": self.tokens,
        }


@dataclass(frozen=True, slots=True)
class Judged:
    """One observed exchange after the differ: the observer's outcome when it failed, otherwise
    what comparing it with the same exchange on the reference route found (`content_mismatch`,
    `buffered`, `slow`, or `ok`). `reference` is the reference observation it was compared with."""

    obs: Observation
    outcome: Outcome
    detail: str = ""
    reference: Observation | None = None

    @property
    def failed(self) -> bool:
        return self.outcome.is_failure

    @property
    def degraded(self) -> bool:
        return self.outcome.is_degradation


@dataclass(frozen=True, slots=True)
class Finding:
    """One exchange worth reporting: a failure (or degradation) on one route, with advice."""

    route: str
    repetition: int
    session: str
    turn: int
    outcome: str
    detail: str
    advice: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "repetition": self.repetition,
            "session": self.session,
            "turn": self.turn,
            "outcome": self.outcome,
            "detail": self.detail,
            "advice": self.advice,
        }


@dataclass(frozen=True, slots=True)
class RouteReport:
    """One route's judged exchanges, all repetitions together."""

    route: str
    hops: tuple[str, ...]  # the hops it passes, from its entry inward (empty for direct)
    repetitions: int
    exchanges: int
    outcomes: dict[str, int]  # judged outcome -> count
    failures: int
    ttft_p50: float | None = None
    added_latency: float | None = None  # TTFT p50 minus the next route inward's

    @property
    def state(self) -> str:
        """"failing", "degraded" or "clean"."""
        if self.failures:
            return "failing"
        if any(Outcome(o).is_degradation for o in self.outcomes):
            return "degraded"
        return "clean"

    def to_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "hops": list(self.hops),
            "repetitions": self.repetitions,
            "exchanges": self.exchanges,
            "outcomes": dict(self.outcomes),
            "failures": self.failures,
            "state": self.state,
            "ttft_p50": _opt_round(self.ttft_p50),
            "added_latency": _opt_round(self.added_latency),
        }


@dataclass(frozen=True, slots=True)
class Evidence:
    """The first failing exchange and the same exchange on the reference route (for timelines)."""

    failing: Observation
    reference: Observation | None


@dataclass(frozen=True, slots=True)
class Verdict:
    verdict: str
    culprit: str | None  # a hop name, ENGINE for `server`, None otherwise
    summary: str
    routes: tuple[RouteReport, ...]
    findings: tuple[Finding, ...] = ()
    floor: NoiseFloor | None = None
    statistics: dict[str, Any] = field(default_factory=dict)  # the test that decided, and its figures
    strategy: str = "ladder"
    first_turn: int | None = None  # the turn where failures start on the culprit's route
    evidence: Evidence | None = None
    differences: tuple[str, ...] = ()  # not-reproduced: what differed from the recording
    run: str = ""  # the run directory the verdict was made from

    @property
    def fault_found(self) -> bool:
        """Exit status 1: a failing route was found (whether or not it could be localized)."""
        return self.verdict in (PROXY, SERVER, INCONCLUSIVE)

    def to_json(self) -> dict[str, Any]:
        """The `check --json` document (schema proxycheck.verdict/1; fields may be added, none
        may change meaning)."""
        return {
            "schema": SCHEMA,
            "verdict": self.verdict,
            "culprit": self.culprit,
            "summary": self.summary,
            "strategy": self.strategy,
            "first_turn": self.first_turn,
            "routes": [r.to_json() for r in self.routes],
            "findings": [f.to_json() for f in self.findings],
            "statistics": self.statistics,
            "noise_floor": self.floor.to_json() if self.floor else None,
            "differences": list(self.differences),
            "run": self.run,
        }


def advice(outcome: Outcome, obs: Observation, hop: str | None = None) -> str:
    """The setting most likely behind a finding, in words a proxy's operator acts on."""
    where = f"hop {hop}" if hop else "the hop"
    idle = obs.reused and obs.idle is not None and obs.idle >= 1.0
    if outcome is Outcome.HTTP_ERROR and obs.status == 413:
        return (f"{where} limits the request body size (nginx client_max_body_size, HAProxy/Squid body limits): "
                f"raise it above the largest request ({obs.request_bytes:,} B here)")  # fmt: skip
    # An HTTP 400 whose quoted body says the headers were too large (nginx: "Request Header Or
    # Cookie Too Large"; elsewhere "header too long", "header size").
    text = obs.detail.lower()
    header_too_large = "header" in text and any(w in text for w in ("too large", "too long", "size"))
    if outcome is Outcome.HTTP_ERROR and (obs.status in (431, 494) or (obs.status == 400 and header_too_large)):
        return (f"{where} limits the request header size (nginx large_client_header_buffers, HAProxy "
                "tune.bufsize, Squid request_header_max_size): raise it above the largest header the "
                "route sends (a long bearer token, cookies)")  # fmt: skip
    if outcome is Outcome.HTTP_ERROR and obs.status in (502, 503, 504):
        if idle:
            return (f"{where} reused an idle upstream connection the engine had closed ({obs.idle:.1f} s idle): "
                    "make its upstream keep-alive timeout shorter than the engine's")  # fmt: skip
        return (f"{where} gave up on the engine (HTTP {obs.status}): its upstream read/connect timeout "
                "(nginx proxy_read_timeout, HAProxy timeout server) is shorter than a long prefill")  # fmt: skip
    if outcome is Outcome.HTTP_ERROR:
        return f"{where} answered HTTP {obs.status} where the engine answers 2xx: see its error log"
    # A response that had begun (headers came) shows the reused connection was alive: not a stale one.
    if outcome in (Outcome.RESET, Outcome.CONNECT_ERROR, Outcome.STALL_BEFORE_HEADERS) and idle and obs.headers is None:
        return (f"the request went on a connection idle for {obs.idle:.1f} s and failed: {where} (or the engine) "
                "closes idle keep-alive connections sooner than the client reuses them")  # fmt: skip
    if outcome is Outcome.RESET:
        text = f"{where} closed the connection mid-response: its response/read timeout or a connection limit"
        # How long nothing came before the cut (headers and events are timed from the request).
        last = max([t for t in (obs.headers, *(e.t for e in obs.events)) if t is not None], default=None)
        quiet = obs.end - last if obs.end is not None and last is not None else None
        if quiet is not None and quiet >= 0.5:
            text += (f"; it closed after {quiet:.1f} s without data, so most likely its read timeout (nginx "
                     "proxy_read_timeout, HAProxy timeout server, Squid read_timeout) is shorter than the "
                     "engine's prefill or its gaps between tokens")  # fmt: skip
        return text
    if outcome is Outcome.CONNECT_ERROR:
        return f"{where} cannot be reached (or its TLS is not trusted): check its address and certificate"
    if outcome is Outcome.STALL_BEFORE_HEADERS:
        return (f"{where} holds the response headers back: it buffers the response, or waits on the engine "
                "longer than the client does (a long prefill); do not buffer text/event-stream")  # fmt: skip
    if outcome in (Outcome.STALL_BEFORE_FIRST_EVENT, Outcome.STALL_MID_STREAM):
        return (f"{where} stops passing events on: response buffering (nginx proxy_buffering off, or "
                "X-Accel-Buffering: no), or a read timeout shorter than the gaps between tokens")  # fmt: skip
    if outcome is Outcome.TRUNCATED:
        return (f"{where} ends streams before their terminal event: its response timeout, "
                "or an SSE-unaware filter")  # fmt: skip
    if outcome is Outcome.MALFORMED_STREAM:
        return f"{where} alters the stream (compression or rewriting of text/event-stream): exempt SSE"
    if outcome is Outcome.REQUEST_MUTATED:
        return (f"{where} changes request bodies (a gateway trimming context, a body rewrite): "
                "the engine got other bytes")  # fmt: skip
    if outcome is Outcome.CONTENT_MISMATCH:
        return (f"{where} changes what the model sees or says (context trimming, a rewrite): "
                "compare the bodies it forwards")  # fmt: skip
    if outcome is Outcome.BUFFERED and obs.response_header("content-encoding") not in (None, "", "identity"):
        encoding = obs.response_header("content-encoding")
        return (f"{where} compresses text/event-stream (Content-Encoding: {encoding}) and delivers it in bursts: "
                "exclude text/event-stream from compression (nginx gzip_types), and do not buffer it "
                "(proxy_buffering off, X-Accel-Buffering: no)")  # fmt: skip
    if outcome is Outcome.BUFFERED:
        return (f"{where} buffers the stream and delivers it in bursts: proxy_buffering off, X-Accel-Buffering: "
                "no (nginx); option http-no-delay (HAProxy, which otherwise holds small writes back "
                "up to 200 ms)")  # fmt: skip
    if outcome is Outcome.SLOW:
        return f"{where} adds latency beyond the noise floor: its queueing, connection limits or TLS set-up"
    return ""


def _opt_round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
