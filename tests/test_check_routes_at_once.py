"""`check --parallel-routes` replays the routes at once; a route found failing is confirmed by
itself, so that the added load never names a hop (docs/design.md, "Focus"). Real engine and hops,
recordings at chosen times (tests/timed_recordings.py); what is asserted is what a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from focus_checks import Parts, check, long_recording, start_parts
from processes import EngineFactory, MitmdumpFactory

from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def parts(module_engines: EngineFactory, module_mitmdumps: MitmdumpFactory) -> Parts:
    return start_parts(module_engines, module_mitmdumps, "gateway", "edge", "limit", "wedger")


def test_routes_at_once_confirm_the_culprit_by_itself(parts: Parts, tmp_path: Path) -> None:
    recording = long_recording(tmp_path, parts.engine, sessions=5)
    status, doc, out = check(tmp_path, recording, parts.chain(tmp_path, "edge", "gateway"), "--parallel-routes")
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "gateway", doc["summary"]
    names = [p["name"] for p in doc["scope"]["passes"]]
    assert names == ["focus", "focus: via:gateway alone"]
    alone = doc["scope"]["passes"][1]
    assert alone["verdict"] == "proxy" and "replayed by itself fails in the same 1 turn(s)" in alone["summary"]
    assert alone["run"] == "passes/1-alone-via-gateway" and load_run(out / alone["run"]).routes == ["via:gateway"]
    assert doc["scope"]["passes"][0]["routes_at_once"] is True
    # Every route of the ladder was replayed at once: the run holds all of them.
    assert {o.route for o in load_run(out).observations} == {"direct", "via:gateway", "via:edge"}


def test_the_load_of_routes_at_once_never_blames_a_hop(parts: Parts, tmp_path: Path) -> None:
    # `limit` answers 429 beyond 4 requests in flight: the 4 sessions in flight together pass it
    # one route at a time, but not with two routes through it at once. The wedge is `wedger`'s.
    recording = long_recording(tmp_path, parts.engine, sessions=5, cluster=4, words=150)
    status, doc, _ = check(tmp_path, recording, parts.chain(tmp_path, "wedger", "limit"), "--parallel-routes")
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "wedger", doc["summary"]
    assert doc["first_turn"] == 3
    assert all(f["outcome"] == "stall_mid_stream" for f in doc["findings"]), doc["findings"]
    passes = {p["name"]: p for p in doc["scope"]["passes"]}
    for name in ("focus: via:limit alone", "focus: via:wedger alone"):
        if name in passes and passes[name]["verdict"] == "not-confirmed":  # the load at once was seen through
            assert "focus, routes one at a time" in passes
