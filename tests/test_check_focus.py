"""`check` replays what decides first (docs/design.md, "Focus"): the failing sessions up to their
first failure and a clean sample, think times shortened to 1 s except a failure's own idle, which
is kept when the failure needs it; a recording without failures replayed whole, its think times
shortened. (Widening to the whole recording, `--full`, `--max-think` and `--parallel-routes`:
tests/test_check_widening.py.)

The recordings hold minutes of think time (written in the recorder's format at chosen times,
tests/timed_recordings.py); the engine and the hops are real processes. What is asserted is what
a user sees: the verdict, what the report says was replayed, what the run holds, and the waits
actually sent (never how long anything took)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from focus_checks import Parts, check, long_recording, sent_thinks, start_parts
from processes import EngineFactory, MitmdumpFactory
from timed_recordings import Session, Turn, write

from proxycheck import cli
from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def parts(module_engines: EngineFactory, module_mitmdumps: MitmdumpFactory) -> Parts:
    return start_parts(module_engines, module_mitmdumps, "gateway", "edge", "idler", "clean")


def test_a_wedge_is_found_on_the_focus_with_think_times_shortened(parts: Parts, tmp_path: Path) -> None:
    recording = long_recording(tmp_path, parts.engine)
    status, doc, out = check(tmp_path, recording, parts.chain(tmp_path, "edge", "gateway"))
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "gateway", doc["summary"]
    assert doc["first_turn"] == 3
    scope = doc["scope"]
    assert scope["replayed"] == "focus" and scope["of_sessions"] == 12
    assert scope["sessions"] == 4 and scope["turns"] == 3 + 3 * 3  # wedged to turn 3, three clean to turn 3
    # Shortened to 1 s, the wedge came back at its own turn: the pass keeping its idle is not needed.
    assert [p["name"] for p in scope["passes"]] == ["focus"]
    assert any("the 1 failing session up to its first failed turn (s1 turn 3)" in line
               and "--full replays everything" in line for line in scope["said"])  # fmt: skip
    # What the run holds is the focus: four sessions, waits of about a second (recorded: 20-40 s).
    assert len({o.session for o in load_run(out).observations}) == 4
    assert all(w < 5 for waits in sent_thinks(out).values() for w in waits)
    assert scope["think"]["shortened"] > 0 and scope["think"]["failures_kept"] is True
    # The watchdog waited as long as the recorded client did on the silent stream (3 s), not 10 s.
    assert json.loads((out / "run.json").read_text())["options"]["watchdogs"]["stall"] == pytest.approx(3.0, abs=0.1)


def test_a_wedge_that_needs_its_idle_is_found_when_the_idle_is_kept(parts: Parts, tmp_path: Path) -> None:
    # The idler never answers a request on a connection idle for over 2 s; the recorded session
    # failed on its kept-alive connection after 6 s of think time (longer than httpx keeps an idle
    # connection by itself), the client giving up 2 s later.
    failing = Session(start=0, turns=[Turn(), Turn(think=0.5), Turn(think=6, fails=True, waited=2, before_headers=True)],
                      name="idle")  # fmt: skip
    clean = [Session(start=60 + 30 * i, turns=[Turn(), Turn(think=10), Turn(think=10)], new_connections=True)
             for i in range(4)]  # fmt: skip
    recording = write(tmp_path / "rec", parts.engine.url, [failing, *clean])
    status, doc, out = check(tmp_path, recording, parts.chain(tmp_path, "idler"))
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "idler", doc["summary"]
    passes = doc["scope"]["passes"]
    # Shortened to 1 s, the idle no longer trips the hop: that pass cannot stand, the next keeps it.
    assert [p["name"] for p in passes] == ["focus", "focus, idle kept"]
    assert passes[0]["verdict"] == "not-reproduced" and passes[0]["run"] == "passes/1-focus"
    assert passes[1]["run"] == "."
    assert load_run(out / "passes" / "1-focus").observations  # the earlier pass is kept, a run of its own
    finding = doc["findings"][0]
    assert (finding["label"], finding["turn"], finding["outcome"]) == ("s1", 3, "stall_before_headers")
    assert sent_thinks(out)[finding["session"]][-1] >= 6  # the failure's idle, as recorded, on the same connection
    # The headers watchdog: as long as the recorded client waited for them.
    assert json.loads((out / "run.json").read_text())["options"]["watchdogs"]["headers"] == pytest.approx(2.0, abs=0.1)
    # diff of the run judges what the verdict was made of.
    assert cli.main(["diff", str(out), "--json", str(tmp_path / "d.json")]) == 1
    assert json.loads((tmp_path / "d.json").read_text())["culprit"] == "idler"


def test_a_recording_without_failures_is_replayed_whole_with_short_think_times(parts: Parts, tmp_path: Path) -> None:
    sessions = [Session(start=30 * i, turns=[Turn(), Turn(think=30), Turn(think=45)]) for i in range(3)]
    recording = write(tmp_path / "rec", parts.engine.url, sessions)
    status, doc, out = check(tmp_path, recording, parts.chain(tmp_path, "clean"))
    assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
    assert doc["scope"]["replayed"] == "whole" and "shows no failure" in doc["scope"]["why"]
    assert doc["scope"]["think"]["shortened"] == 6
    assert all(w < 5 for waits in sent_thinks(out).values() for w in waits)
    assert len({o.session for o in load_run(out).observations}) == 3
