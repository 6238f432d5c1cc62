"""A pass of `check` whose think times the recording does not back (all shortened) stands only on a
recorded failure failing again at its own turn (docs/design.md, "Focus"). Real engine and hop,
recording at chosen times (tests/timed_recordings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from focus_checks import BIG, Parts, check, start_parts
from processes import EngineFactory, MitmdumpFactory
from timed_recordings import Session, Turn, write

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def parts(module_engines: EngineFactory, module_mitmdumps: MitmdumpFactory) -> Parts:
    return start_parts(module_engines, module_mitmdumps, "gateway")


def test_a_pass_with_shortened_think_times_stands_only_on_the_recorded_failure(parts: Parts, tmp_path: Path) -> None:
    # The recording shows s1 failing at turn 3; the gateway (changed since) stalls another
    # session at its turn 3 instead. Shortened think times are not backed by the recording, so
    # that pass may not decide on a failure the recording does not show; the next one, with the
    # recorded idle, is a replay as faithful as the whole recording's and may.
    s1 = Session(start=0, turns=[Turn(), Turn(think=2), Turn(think=3, fails=True), Turn(think=1)])
    picked = Session(start=30, turns=[Turn(), Turn(think=1), Turn(think=1), Turn(think=1)], system=BIG)
    others = [Session(start=60 + 30 * i, turns=[Turn(), Turn(think=1), Turn(think=1), Turn(think=1)]) for i in range(2)]
    recording = write(tmp_path / "rec", parts.engine.url, [s1, picked, *others])
    status, doc, _ = check(tmp_path, recording, parts.chain(tmp_path, "gateway"))
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "gateway", doc["summary"]
    first, second = doc["scope"]["passes"]
    assert first["name"] == "focus" and first["verdict"] == "proxy"
    assert first["summary"].endswith("next pass: the recorded failures did not fail again at their own turns")
    assert second["name"] == "focus, idle kept" and second["run"] == "."
