"""Sample verdicts for the report tests, built by hand from the verdict types: a `proxy` verdict
whose evidence is a mid-stream stall behind hop edge, a `healthy` one, a `server` one, a
`not-reproduced` one and an `incomplete` one (their statistics shaped as the localizer gives them,
their advice made by `proxycheck.core.diagnose.advice` from the exchanges they name)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from samples import FLOOR, STALL, STALL_ADVICE, STALL_DETAIL, SUMMARY, complete_stream, ladder, stalled_stream

from proxycheck.core.diagnose.advice import advise
from proxycheck.core.diagnose.verdict import (
    CUT_SHORT,
    ENGINE,
    HEALTHY,
    INCOMPLETE,
    NOT_REPLAYED,
    NOT_REPRODUCED,
    PROXY,
    SERVER,
    Evidence,
    Finding,
    Judged,
    MissingRoute,
    SoFar,
    Verdict,
)
from proxycheck.core.exchange.outcomes import Outcome


@pytest.fixture
def proxy_verdict() -> Verdict:
    findings = tuple(
        Finding("via:edge", rep, "s1", 4, "stall_mid_stream", STALL_DETAIL, STALL_ADVICE) for rep in range(1, 11)
    )
    return Verdict(
        verdict=PROXY,
        culprit="edge",
        summary=SUMMARY,
        routes=ladder({"ok": 30, "stall_mid_stream": 10}),
        findings=findings,
        advice=(STALL,),
        floor=FLOOR,
        statistics={
            "method": "fisher_exact",
            "p_value": 0.0003,
            "alpha": 0.01,
            "failing_route": "via:edge",
            "failing": [10, 40],
            "failing_repetitions": 10,
            "clean_route": "via:gateway",
            "clean": [0, 40],
            "clean_repetitions": 10,
        },  # fmt: skip
        first_turn=4,
        evidence=Evidence(failing=stalled_stream(), reference=complete_stream()),
        run="runs/example",
    )


@pytest.fixture
def healthy_verdict() -> Verdict:
    return Verdict(verdict=HEALTHY, culprit=None, summary="all 3 routes clean in 10/10 runs", routes=ladder({"ok": 40}),
                   floor=FLOOR)  # fmt: skip


@pytest.fixture
def server_verdict() -> Verdict:
    reset = "Server disconnected without sending a response; 7 event(s), 6 with content, 900 bytes"
    cut = replace(complete_stream("direct", 2, 1, "s2"), outcome=Outcome.RESET, detail=reset)
    engine = advise(None, [Judged(cut, Outcome.RESET, reset, None)])
    findings = (Finding("direct", 1, "s2", 2, "reset", reset, engine.text),)
    return Verdict(
        verdict=SERVER,
        culprit=ENGINE,
        summary="the engine resets streams from turn 2 on, on every route (direct 8/40 failed)",
        routes=ladder({"ok": 32, "reset": 8}, direct={"ok": 32, "reset": 8}),
        findings=findings,
        advice=(engine,),
        statistics={"method": "direct", "failing_route": "direct", "failing": [8, 40]},
        first_turn=2,
    )


@pytest.fixture
def not_reproduced_verdict() -> Verdict:
    return Verdict(
        verdict=NOT_REPRODUCED,
        culprit=None,
        summary="the recording shows 1 wedged turn; no route reproduces it in 10 runs",
        routes=ladder({"ok": 40}),
        differences=(
            "think time: the recording waited 6.0 s before turn 4, the replay 0.0 s (--pace fast)",
            "client stack: the recording's client was node undici, the replay's httpx",
        ),
    )


INCOMPLETE_SUMMARY = ("the run was interrupted: via:edge cut short (repetition 1: 2 of 40 exchanges), via:corp not "
                      "replayed; so far no finished route fails: direct 40/40, via:gateway 40/40")  # fmt: skip


@pytest.fixture
def incomplete_verdict() -> Verdict:
    """A check interrupted in via:edge, the route that fails; via:corp (outward) not begun."""
    return Verdict(
        verdict=INCOMPLETE,
        culprit=None,
        summary=INCOMPLETE_SUMMARY,
        routes=ladder({"ok": 40})[:2],
        floor=FLOOR,
        missing=(MissingRoute("via:edge", CUT_SHORT, 1, 2, 40), MissingRoute("via:corp", NOT_REPLAYED, 1, 0, 40)),
        so_far=SoFar(HEALTHY, None, "so far no finished route fails: direct 40/40, via:gateway 40/40"),
        run_status="interrupted",
        run="runs/example",
    )
