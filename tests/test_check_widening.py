"""`check` widens to the whole recording when its focus does not decide; `--full` replays all of it
as recorded, and `--max-think` caps every think time (docs/design.md, "Focus"; `--parallel-routes`:
tests/test_check_routes_at_once.py). Real engine and hops, recordings at chosen times
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
    return start_parts(module_engines, module_mitmdumps, "clean")


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
