"""What `check` concludes about a chain, and the JSON document made of it (docs/design.md, "Contract").

The types here are shared by the differ (`proxycheck.core.diagnose.differ`: the noise floor, and each
observed exchange judged against the reference route), the localizer
(`proxycheck.core.diagnose.localize`: which hop, or the server) and the reports (terminal, JSON, JUnit,
HTML), so they hold values only.

Verdicts: `healthy` (no route fails), `proxy` (the culprit is the hop whose entry first turns a
clean route into a failing one), `server` (the reference route, straight to the engine, fails),
`not-reproduced` (the recording shows failures, no route reproduces them), `inconclusive`
(failures were seen, but no route can be told apart from the next one inward with confidence)
and `incomplete` (the run does not hold every route the localizer needed: it was interrupted,
killed or cut short; the routes missing are named, and what the finished ones show is said as
"so far", never as a verdict).

`advice` (`proxycheck.core.diagnose.advice`, re-exported here) says what to do next, once per hop and kind
of finding: what was seen, its likely causes and the fix, with the count of exchanges it covers
(every finding holds the words of the advice it falls under);
`suggestions` says how to replay for better evidence on content (`--greedy` when the engine
samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# ENGINE_ADVICE and advice are re-exported: the localizer and the reports take them from here.
from proxycheck.core.diagnose.advice import ENGINE_ADVICE as ENGINE_ADVICE
from proxycheck.core.diagnose.advice import Advice
from proxycheck.core.diagnose.advice import advice as advice
from proxycheck.core.diagnose.waits import Waits
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import SessionName, label_of

SCHEMA = "proxycheck.verdict/1"
HEALTHY, PROXY, SERVER, NOT_REPRODUCED, INCONCLUSIVE = "healthy", "proxy", "server", "not-reproduced", "inconclusive"
INCOMPLETE = "incomplete"
VERDICTS = (HEALTHY, PROXY, SERVER, NOT_REPRODUCED, INCONCLUSIVE, INCOMPLETE)
CUT_SHORT, NOT_REPLAYED = "cut_short", "not_replayed"  # how a route is missing from a run
ENGINE = "engine"  # the culprit of a `server` verdict


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
    # Later repetitions of an exchange that differ from its first in structure (tool calls,
    # finish reason, length class), of those compared: the rate a sampling engine's content is
    # judged against (`proxycheck.core.diagnose.differ`).
    content_differs: int = 0
    content_compared: int = 0

    @property
    def sampling(self) -> bool:
        """The floor shows the engine answering one request differently: it samples."""
        return self.pairs > 0 and not self.deterministic

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "pairs": self.pairs,
            "deterministic": self.deterministic,
            "sampling": self.sampling,
            "ttft": round(self.ttft, 6),
            "e2e": round(self.e2e, 6),
            "burst": round(self.burst, 3),
            "tokens": self.tokens,
            "content_differs": self.content_differs,
            "content_compared": self.content_compared,
        }


@dataclass(frozen=True, slots=True)
class Judged:
    """One observed exchange after the differ: the observer's outcome when it failed, otherwise
    what comparing it with the same exchange on the reference route found (`content_mismatch`,
    `buffered`, `slow`, or `ok`). `reference` is the reference observation it was compared with.
    `differs`, when the engine samples and content is judged by rate: what differs in structure
    from the reference exchange ("" nothing), whatever the route's rate test concluded; None
    when the exchange was not counted in a rate."""

    obs: Observation
    outcome: Outcome
    detail: str = ""
    reference: Observation | None = None
    differs: str | None = None

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
    xid: int | None = None  # the recorded exchange: attempts of one turn are exchanges of their own

    def to_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "repetition": self.repetition,
            "session": self.session,
            "turn": self.turn,
            "exchange": self.xid,
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
class MissingRoute:
    """A route an `incomplete` run lacks: one the run stopped in the middle of (`cut_short`: the
    exchanges of `repetition` it holds are no evidence, a part of a repetition is not a route
    replayed) or never began (`not_replayed`)."""

    route: str
    state: str  # CUT_SHORT or NOT_REPLAYED
    repetition: int | None = None  # the repetition that was cut short, or the first one missing
    observed: int = 0  # exchanges of that repetition the run holds (not judged)
    planned: int | None = None  # exchanges one repetition has, when the run says

    def to_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "state": self.state,
            "repetition": self.repetition,
            "observed": self.observed,
            "planned": self.planned,
        }


@dataclass(frozen=True, slots=True)
class SoFar:
    """What the finished routes of an `incomplete` run point to: the verdict they alone would
    give, kept apart from the verdict so nothing reads it as one."""

    points_to: str  # a verdict word
    culprit: str | None
    summary: str  # in words that say "so far"

    def to_json(self) -> dict[str, Any]:
        return {"points_to": self.points_to, "culprit": self.culprit, "summary": self.summary}


@dataclass(frozen=True, slots=True)
class ReplayedPass:
    """One replay a check made on its way to the verdict: what it replayed (`sessions`, `turns`),
    with which think times (`think`, in words), what it concluded, in how many seconds, and where
    its observations are (`run`: "." for the run directory itself, else a folder inside it)."""

    name: str
    sessions: int
    turns: int
    think: str
    verdict: str
    summary: str
    seconds: float
    run: str = "."
    routes_at_once: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sessions": self.sessions, "turns": self.turns, "think": self.think,
                "verdict": self.verdict, "summary": self.summary, "seconds": round(self.seconds, 3), "run": self.run,
                "routes_at_once": self.routes_at_once}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Scope:
    """What a check replayed to reach its verdict, and why (docs/design.md, "Focus"): `replayed`
    is "focus" (the failing sessions up to their first failure, with a clean sample) or "whole"
    (every session of the recording); the counts are the deciding pass's, of the recording's;
    `said` is the same in words, line by line, for the reports."""

    replayed: str
    why: str
    sessions: int
    of_sessions: int
    turns: int
    of_turns: int
    think: dict[str, Any] = field(default_factory=dict)
    passes: tuple[ReplayedPass, ...] = ()
    said: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"replayed": self.replayed, "why": self.why, "sessions": self.sessions,
                "of_sessions": self.of_sessions, "turns": self.turns, "of_turns": self.of_turns, "think": self.think,
                "passes": [p.to_json() for p in self.passes], "said": list(self.said)}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SeenWhileRecording:
    """`check --with`: recorded failures that did not fail again on replay, placed by recordings
    made at several points while they happened (`proxycheck.core.points.trace`): the segment
    between two points (`outer` None: inside the point `inner`), its hops when the chain file
    places both points, and a line per exchange saying what each point saw."""

    outer: str | None
    inner: str
    hops: tuple[str, ...] | None
    points: tuple[str, ...]  # the points traced, from the client inward
    exchanges: tuple[str, ...]

    def segment_json(self) -> dict[str, Any]:
        return {"outer": self.outer, "inner": self.inner, "hops": list(self.hops) if self.hops is not None else None}

    def to_json(self) -> dict[str, Any]:
        return {"points": list(self.points), "segment": self.segment_json(), "exchanges": list(self.exchanges)}


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
    missing: tuple[MissingRoute, ...] = ()  # incomplete: the routes the run lacks
    so_far: SoFar | None = None  # incomplete: what the finished routes point to
    run_status: str = ""  # incomplete: the run's status ("interrupted", "running" after a kill ...)
    sessions: tuple[SessionName, ...] = ()  # the labels and keys of the sessions observations name
    advice: tuple[Advice, ...] = ()  # once per hop and kind of finding, over every failing exchange
    suggestions: tuple[str, ...] = ()  # how to replay for better evidence (`suggestions`)
    scope: Scope | None = None  # what check replayed to decide, and why (None: a run judged as it is)
    seen_while_recording: SeenWhileRecording | None = None  # `check --with`: placed by the points, not the replay
    waits: Waits | None = None  # the watchdogs and the client's patience it was reached with, and what they decided

    def session_label(self, session: str) -> str:
        """The label (s1, s2 ...) of a session id, as `proxycheck sessions` shows it."""
        return label_of({n.id: n for n in self.sessions}, session)

    def attempt_of(self, session: str, xid: int | None) -> tuple[int, int]:
        """(attempt, attempts) of an exchange of a turn the client retried; (1, 1) otherwise."""
        name = next((n for n in self.sessions if n.id == session), None)
        return name.attempt_of(xid) if name is not None else (1, 1)

    def _finding_json(self, f: Finding) -> dict[str, Any]:
        attempt, attempts = self.attempt_of(f.session, f.xid)
        return {**f.to_json(), "label": self.session_label(f.session), "attempt": attempt, "attempts": attempts}

    @property
    def fault_found(self) -> bool:
        """A failing route was found (whether or not it could be localized)."""
        return self.verdict in (PROXY, SERVER, INCONCLUSIVE)

    @property
    def fails(self) -> bool:
        """Exit status 1: a fault was found, or the run is incomplete (no verdict to pass on)."""
        return self.fault_found or self.verdict == INCOMPLETE

    @property
    def missing_routes(self) -> list[str]:
        return [m.route for m in self.missing]

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
            "findings": [self._finding_json(f) for f in self.findings],
            "statistics": self.statistics,
            "noise_floor": self.floor.to_json() if self.floor else None,
            "differences": list(self.differences),
            "run": self.run,
            "missing_routes": self.missing_routes,
            "missing": [m.to_json() for m in self.missing],
            "so_far": self.so_far.to_json() if self.so_far else None,
            "run_status": self.run_status or None,
            "sessions": [n.to_json() for n in self.sessions],
            "suggestions": list(self.suggestions),
            "advice": [a.to_json() for a in self.advice],
            "scope": self.scope.to_json() if self.scope else None,
            "segment": self.seen_while_recording.segment_json() if self.seen_while_recording else None,
            "seen_while_recording": self.seen_while_recording.to_json() if self.seen_while_recording else None,
            "waits": self.waits.to_json() if self.waits else None,
        }


def suggestions(floor: NoiseFloor | None, greedy: bool, repetitions: int = 2) -> tuple[str, ...]:
    """What would make the evidence on content stronger, from the noise floor, whether the replay
    asked for greedy decoding (`--greedy`) and how often the reference route was replayed: a
    sampling engine is judged by rates only, and one repetition cannot judge content at all."""
    if floor is None or repetitions == 0:
        return ()
    if repetitions == 1:
        return (f"{floor.reference} was replayed once, so whether the engine samples is unknown and content was "
                f"not compared: replay {floor.reference} at least twice (--repeat 2)",)  # fmt: skip
    if not floor.sampling:
        return ()
    seen = (f"{floor.content_differs}/{floor.content_compared} exchanges differed in structure between "
            f"{floor.reference}'s own repetitions")  # fmt: skip
    if greedy:
        return (f"the engine answered differently between {floor.reference} replays even with --greedy ({seen}): "
                "it is not deterministic at temperature 0 (batching; SGLang --enable-deterministic-inference, "
                "vLLM batch-invariant kernels), so content was judged by rates only",)  # fmt: skip
    return (f"the engine answers one request differently each time ({seen}), so content was judged by rates "
            "only: replay with --greedy (temperature 0 and a fixed seed in every request, on every route) to "
            "compare it exchange by exchange",)  # fmt: skip


def _opt_round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)
