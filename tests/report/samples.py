"""What the report tests are made of, built by hand from the verdict types: observations (a clean
stream, a stream stalled mid-way), route reports along the ladder direct, via:gateway, via:edge,
and the judged exchanges of a run. The sample verdicts themselves are fixtures (conftest.py)."""

from __future__ import annotations

from typing import Sequence

from proxycheck.core.diagnose.advice import advise
from proxycheck.core.diagnose.verdict import Judged, NoiseFloor, RouteReport
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol.result import Event

STALL_DETAIL = "no content for 10.0 s after event 12 (1.9 KB received)"
SUMMARY = "hop edge stalls mid-stream from turn 4 on; direct and via:gateway clean in 10/10"


def complete_stream(route: str = "direct", turn: int = 4, repetition: int = 1, session: str = "s1") -> Observation:
    """A clean stream: a role chunk, 24 content events 50 ms apart, the terminal marker."""
    events = [Event(0.05, 40, "meta")]
    events += [Event(round(0.06 + 0.05 * i, 3), 80, "content") for i in range(24)]
    events.append(Event(1.26, 14, "terminal"))
    return Observation(
        route=route, repetition=repetition, session=session, turn=turn, xid=turn, t_start=3.0,
        headers=0.04, first_event=0.05, first_content=0.06, end=1.26, events=tuple(events),
        status=200, outcome=Outcome.OK,
    )  # fmt: skip


def stalled_stream(route: str = "via:edge", turn: int = 4, repetition: int = 1, session: str = "s1") -> Observation:
    """12 content events, then only keep-alive comments until the watchdog cuts it at 10.65 s."""
    events = [Event(0.05, 40, "meta")]
    events += [Event(round(0.06 + 0.05 * i, 3), 80, "content") for i in range(12)]
    events += [Event(2.6 + 2.0 * i, 14, "comment") for i in range(5)]
    return Observation(
        route=route, repetition=repetition, session=session, turn=turn, xid=turn, t_start=3.0,
        headers=0.04, first_event=0.05, first_content=0.06, end=10.65, events=tuple(events),
        status=200, outcome=Outcome.STALL_MID_STREAM, detail=STALL_DETAIL,
    )  # fmt: skip


def stall_judged(repetition: int) -> Judged:
    return Judged(stalled_stream(repetition=repetition), Outcome.STALL_MID_STREAM, STALL_DETAIL,
                  complete_stream(repetition=repetition))  # fmt: skip


# The advice of the sample proxy verdict: s1 turn 4 stalled behind hop edge in each of 10 repetitions.
STALL = advise("edge", [stall_judged(rep) for rep in range(1, 11)])
STALL_ADVICE = STALL.text


def route(name: str, hops: Sequence[str], outcomes: dict[str, int], ttft: float, added: float | None) -> RouteReport:
    failures = sum(n for o, n in outcomes.items() if Outcome(o).is_failure)
    return RouteReport(name, tuple(hops), 10, sum(outcomes.values()), outcomes, failures, ttft, added)


def ladder(edge: dict[str, int], direct: dict[str, int] | None = None) -> tuple[RouteReport, ...]:
    return (
        route("direct", (), direct or {"ok": 40}, 0.061, None),
        route("via:gateway", ("gateway",), {"ok": 40}, 0.064, 0.003),
        route("via:edge", ("edge", "gateway"), edge, 0.068, 0.004),
    )


FLOOR = NoiseFloor("direct", pairs=20, deterministic=True, ttft=0.004, e2e=0.011, burst=1.1, tokens=0)


def judged_for(verdict_routes: Sequence[RouteReport]) -> dict[str, list[Judged]]:
    """Two sessions over every route, one repetition: on via:edge session s1 stalls at turn 4
    (two repetitions) and session s2 is buffered at turn 1 (a degradation)."""
    out: dict[str, list[Judged]] = {}
    for r in verdict_routes:
        judged = []
        for rep in (1, 2):
            for session, turns in (("s1", 4), ("s2", 2)):
                for turn in range(1, turns + 1):
                    if r.route == "via:edge" and session == "s1" and turn == 4:
                        judged.append(Judged(stalled_stream(r.route, turn, rep, session), Outcome.STALL_MID_STREAM,
                                             STALL_DETAIL, complete_stream("direct", turn, rep, session)))  # fmt: skip
                    elif r.route == "via:edge" and session == "s2" and turn == 1:
                        judged.append(Judged(complete_stream(r.route, turn, rep, session), Outcome.BUFFERED,
                                             "TTFT 1.20 s vs 0.06 s; 24 events in 1 burst"))  # fmt: skip
                    else:
                        judged.append(Judged(complete_stream(r.route, turn, rep, session), Outcome.OK))
        out[r.route] = judged
    return out
