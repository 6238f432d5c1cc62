"""`proxycheck minimize --pace` and `--max-think` against real processes, and a minimize that
removed nothing saying so (exit 1, nothing written) instead of claiming a reproducer.

The recordings hold long think times written in the recorder's format at chosen times
(tests/timed_recordings.py), so a test does not wait for them; the engine and the fault hops are
real processes. What the replays waited is observed at a hop: with `idle_blackhole=I` it never
answers a request on a connection idle for more than I seconds and logs each time it does so (with
the idle it saw), so a hop log without such a line says no replay waited that long on a kept-alive
connection. Durations are never asserted, only which budget a search fits in.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_runner import main_status
from processes import EngineFactory, MitmdumpFactory
from test_minimize import Setup, minimize
from timed_recordings import Session, Turn, write

from proxycheck.io.procs import Managed
from proxycheck.io.recordings import open_recording

pytestmark = pytest.mark.timeout(180)

WEDGE_AT_3 = ("stall_after=2", "from_turn=3", "stall_seconds=30")  # stalls every turn 3 after 2 events
DETECTOR = 1.0  # the hops' idle_blackhole: a replay that waited longer than this on a connection trips it
BLACKHOLED = re.compile(r"proxycheck fault idle_blackhole: .*connection idle ([\d.]+) s")


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.003", "--ttft-per-kb", "0")


def chain(tmp: Path, engine: Managed, hop: Managed) -> Path:
    path = tmp / "chain.toml"
    path.write_text(f'engine = "{engine.url}"\n[[hop]]\nname = "F"\nurl = "{hop.url}"\n')
    return path


def wedged_after_idle(tmp: Path, engine: Managed, think: float) -> Path:
    """One session on one kept-alive connection, `think` seconds before turns 2 and 3; turn 3 failed
    mid-stream (the client gave up on a silent stream)."""
    turns = [Turn(), Turn(think=think), Turn(think=think, fails=True)]
    return write(tmp / "rec", engine.url, [Session(start=0, turns=turns)])


def idles(hop: Managed) -> list[float]:
    """The idle the hop saw before each request it blackholed."""
    return [float(v) for v in BLACKHOLED.findall(hop.log_path.read_text(errors="replace"))]


def run(engine: Managed, recording: Path, chain_file: Path, out: Path, *argv: str, route: str | None = "via:F",
        timeouts: tuple[str, str] = ("1", "2")) -> int:  # fmt: skip
    return minimize(Setup(engine, recording, {}), chain_file, out, *argv, recording=recording, route=route,
                    timeouts=timeouts)  # fmt: skip


def test_max_think_minimizes_a_recording_of_long_pauses_within_a_small_budget(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 60 s of think time: the baseline as recorded (3 replays) would spend the whole --time; capped at 0.2 s each
    # replay takes about a second. Without --route the route is located first, capped alike.
    recording = wedged_after_idle(tmp_path, engine, think=30)
    hop = mitmdumps.faults(engine, *WEDGE_AT_3, f"idle_blackhole={DETECTOR:g}")
    out = tmp_path / "min"
    assert run(engine, recording, chain(tmp_path, engine, hop), out, "--max-think", "0.2", "--time", "90", route=None) == 0
    captured = capsys.readouterr()
    assert idles(hop) == []  # no replay, locating ones included, waited a recorded 30 s (nor over 1 s)
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["route"] == "via:F" and doc["culprit"]["verdict"] == "proxy", doc["culprit"]
    assert doc["complete"] is True and doc["removed"] is True
    assert doc["pace"] == "recorded" and doc["max_think"] == 0.2
    assert doc["think_cut"]["shortened"] == 2 and doc["think_cut"]["saved"] == pytest.approx(59.6, abs=0.01)
    assert doc["matched"] == ["stall_mid_stream"]  # the blackhole never answered for the stall instead
    assert doc["turns"] == {"before": 3, "after": 1} and doc["trigger"]["turn"] == 3
    assert "think times over 0.2 s shortened to 0.2 s (2 turn(s), 60 s less), the failures' too" in captured.out
    assert "--max-think 0.2" in captured.out and "minimized recording:" in captured.out
    # The result is the recording as recorded, less what the search removed: the cap is the replays'.
    assert len(open_recording(str(out)).planned[0].turns) == 1


def test_pace_fast_waits_nothing_and_leaves_the_think_time_alone(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = wedged_after_idle(tmp_path, engine, think=30)
    hop = mitmdumps.faults(engine, *WEDGE_AT_3, f"idle_blackhole={DETECTOR:g}")
    out = tmp_path / "min"
    assert run(engine, recording, chain(tmp_path, engine, hop), out, "--pace", "fast", "--time", "60") == 0
    captured = capsys.readouterr()
    assert idles(hop) == []
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["complete"] is True and doc["removed"] is True
    assert doc["pace"] == "fast" and doc["max_think"] is None and doc["think"] is None
    assert doc["turns"]["after"] < doc["turns"]["before"]
    assert "replayed at pace fast: it fails replayed so (--pace fast)" in captured.out


IDLE = 0.6  # the idler never answers on a connection idle longer than this


def test_the_think_time_bisection_starts_from_the_cap(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Recorded: 30 s of think time, then a request that never got its headers. Capped at 1.5 s the
    # idle still trips the hop; the bisection goes from 1.5 s down to the hop's 0.6 s.
    turns = [Turn(), Turn(think=30, fails=True, waited=3, before_headers=True)]
    recording = write(tmp_path / "rec", engine.url, [Session(start=0, turns=turns)])
    hop = mitmdumps.faults(engine, f"idle_blackhole={IDLE:g}", "stall_seconds=30")
    out = tmp_path / "min"
    status = run(engine, recording, chain(tmp_path, engine, hop), out, "--max-think", "1.5", "--budget", "40",
                 "--time", "120", timeouts=("1", "1"))  # fmt: skip
    assert status == 0
    captured = capsys.readouterr()
    seen = idles(hop)
    assert seen and max(seen) < 5, seen  # what was sent: the cap at most, never the recorded 30 s
    doc = json.loads((out / "minimized.json").read_text())
    think = doc["think"]
    assert think["depends"] is True and think["from"] == 1.5 and think["recorded"] == pytest.approx(30, abs=0.5)
    assert think["passes_at"] < think["fails_from"] and abs(think["fails_from"] - IDLE) <= 0.1 * IDLE, think
    trigger = doc["trigger"]
    assert trigger["outcome"] == "stall_before_headers" and trigger["think_time"] == pytest.approx(think["fails_from"], abs=0.01)
    assert trigger["recorded_think_time"] == pytest.approx(30, abs=0.5)
    assert "bisected from the cap, 1.50 s; recorded 30." in captured.out
    # The result holds the think time found, not the recorded one.
    minimized = open_recording(str(out)).planned
    assert minimized[0].turns[-1].think_time == pytest.approx(think["fails_from"], abs=0.01)


def test_a_budget_spent_on_the_baseline_removes_nothing_and_says_so(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = wedged_after_idle(tmp_path, engine, think=3)
    hop = mitmdumps.faults(engine, *WEDGE_AT_3, f"idle_blackhole={DETECTOR:g}")
    chain_file = chain(tmp_path, engine, hop)
    # At pace 0.5 a replay waits 1.5 s before turns 2 and 3: the baseline spends the --time.
    out = tmp_path / "min"
    assert run(engine, recording, chain_file, out, "--pace", "0.5", "--time", "1") == 1
    captured = capsys.readouterr()
    assert idles(hop), "the hop saw the paced think times (1.5 s) and blackholed"  # what the detector detects
    said = [line for line in captured.err.splitlines() if "nothing removed" in line]
    assert len(said) == 1, captured.err
    assert re.search(r"nothing removed: the budget \(--time 1 s\) was spent on the baseline \(3 replays of [\d.]+ s each\); "
                     r"try --pace fast or a longer --time$", said[0]), said[0]  # fmt: skip
    assert "minimized" not in captured.out + captured.err
    assert not out.exists()  # nothing written: the same --out serves the next try
    # Out of replays, at pace fast: the budget is the only thing to change.
    assert run(engine, recording, chain_file, out, "--pace", "fast", "--budget", "3") == 1
    captured = capsys.readouterr()
    assert "nothing removed: the budget (--budget 3 replays) was spent on the baseline (3 replays of" in captured.err
    assert captured.err.rstrip().endswith("; try a larger --budget"), captured.err
    assert "minimized" not in captured.out + captured.err
    assert not out.exists()


def test_a_recording_already_minimal_removes_nothing_because_every_candidate_lost_the_failure(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two sessions of one long streamed turn each, at once; the hop answers 429 to a second request
    # in flight. Either session alone passes, and there is nothing else to cut.
    sessions = [Session(start=0.05 * i, turns=[Turn()], new_connections=True) for i in range(2)]
    recording = write(tmp_path / "rec", engine.url, sessions, answer_words=300)
    hop = mitmdumps.faults(engine, "max_concurrent=1")
    out = tmp_path / "min"
    assert run(engine, recording, chain(tmp_path, engine, hop), out, "--budget", "40") == 1
    captured = capsys.readouterr()
    assert "candidate 1:" in captured.err  # it did try
    assert re.search(r"nothing removed: every candidate lost the failure \(\d+ tried\): the whole input is needed for it$",
                     captured.err.rstrip().splitlines()[-1]), captured.err  # fmt: skip
    assert "minimized" not in captured.out + captured.err and not out.exists()


@pytest.mark.parametrize(("flag", "value"), [("--max-think", "0"), ("--max-think", "-1"), ("--max-think", "nan"),
                                             ("--pace", "x"), ("--pace", "-1")])  # fmt: skip
def test_bad_pace_or_max_think_is_one_line_and_exit_2(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main_status("minimize", str(tmp_path / "rec"), "--chain", str(tmp_path / "chain.toml"), "--out",
                         str(tmp_path / "min"), flag, value)  # fmt: skip
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and value in err[0], err  # the shared types' own words
    assert not (tmp_path / "min").exists()
