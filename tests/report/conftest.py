"""Sample verdicts for the report tests, built by hand from the verdict types: a `proxy` verdict
whose evidence is a mid-stream stall behind hop edge, a `healthy` one, a `server` one and a
`not-reproduced` one (their statistics shaped as the localizer gives them)."""

from __future__ import annotations

import pytest
from samples import FLOOR, STALL_ADVICE, STALL_DETAIL, SUMMARY, complete_stream, ladder, stalled_stream

from proxycheck.core.observation import Observation
from proxycheck.core.outcomes import Outcome
from proxycheck.core.verdict import (
    ENGINE,
    HEALTHY,
    NOT_REPRODUCED,
    PROXY,
    SERVER,
    Evidence,
    Finding,
    Verdict,
    advice,
)


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
    reset_advice = advice(Outcome.RESET, Observation(t_start=0.0, outcome=Outcome.RESET))
    findings = (Finding("direct", 1, "s2", 2, "reset", reset, reset_advice),)
    return Verdict(
        verdict=SERVER,
        culprit=ENGINE,
        summary="the engine resets streams from turn 2 on, on every route (direct 8/40 failed)",
        routes=ladder({"ok": 32, "reset": 8}, direct={"ok": 32, "reset": 8}),
        findings=findings,
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
