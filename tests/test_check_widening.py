"""`check` widens to the whole recording when its focus does not decide; `--full` replays all of it
as recorded, `--max-think` caps every think time, and `--parallel-routes` replays the routes at
once, a route found failing confirmed by itself so that the added load never names a hop
(docs/design.md, "Focus"). Real engine and hops, recordings at chosen times
(tests/timed_recordings.py); what is asserted is what a user sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from focus_checks import Parts, check, long_recording, sent_thinks, start_parts
from processes import EngineFactory, MitmdumpFactory
from timed_recordings import Session, Turn, write

from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def parts(module_engines: EngineFactory, module_mitmdumps: MitmdumpFactory) -> Parts:
    return start_parts(module_engines, module_mitmdumps, "gateway", "edge", "clean", "limit", "wedger")


def test_a_failure_that_does_not_reproduce_widens_to_the_whole_recording(parts: Parts, tmp_path: Path) -> None:
    recording = long_recording(tmp_path, parts.engine, sessions=4)
    status, doc, out = check(tmp_path, recording, parts.chain(tmp_path, "clean"), "--max-think", "0.3")
    assert status == 0 and doc["verdict"] == "not-reproduced", doc["summary"]
    scope = doc["scope"]
    assert scope["replayed"] == "whole" and scope["sessions"] == 4 and scope["of_turns"] == scope["turns"]
    # A cap given caps the failure's idle too: one focus pass, then the whole recording.
    assert [p["name"] for p in scope["passes"]] == ["focus", "whole recording"]
    assert [p["run"] for p in scope["passes"]] == ["passes/1-focus", "."]
    assert "next pass: it did not decide (not-reproduced)" in scope["passes"][0]["summary"]
    assert len({o.session for o in load_run(out).observations}) == 4
    focus = load_run(out / "passes" / "1-focus").observations
    assert len({o.session for o in focus}) == 4 and len({(o.session, o.turn) for o in focus}) == 3 * 4
    assert scope["think"]["max_think"] == 0.3 and scope["think"]["failures_kept"] is False
    # Said among the differences: the replay did not wait as the recording did.
    assert any("shortened to 0.3 s" in d for d in doc["differences"])


def test_full_keeps_the_recorded_think_times_and_max_think_caps_them(parts: Parts, tmp_path: Path) -> None:
    sessions = [Session(start=0, turns=[Turn(), Turn(think=2.5), Turn(think=2.5, fails=True)]),
                Session(start=1, turns=[Turn(), Turn(think=2.5), Turn(think=2.5)])]  # fmt: skip
    recording = write(tmp_path / "rec", parts.engine.url, sessions)
    status, doc, out = check(tmp_path, recording, parts.chain(tmp_path, "clean"), "--full")
    assert status == 0 and doc["verdict"] == "not-reproduced", doc["summary"]
    assert doc["scope"]["replayed"] == "whole" and doc["scope"]["why"] == "--full"
    assert [p["name"] for p in doc["scope"]["passes"]] == ["whole recording"]
    waits = [w for ws in sent_thinks(out).values() for w in ws]
    assert len(waits) == 4 and all(w >= 2.5 for w in waits)  # the replayer waits at least as recorded
    status, doc, out = check(tmp_path, recording, parts.chain(tmp_path, "clean"), "--full", "--max-think", "0.5")
    assert all(w < 2.5 for ws in sent_thinks(out).values() for w in ws)
    assert doc["scope"]["think"] == {"max_think": 0.5, "shortened": 4, "saved": 8.0, "kept": 0, "longest_kept": 0.0,
                                     "failures_kept": False}  # fmt: skip


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
