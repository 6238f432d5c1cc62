"""Damaged runs read back: an observations line nested too deeply, holding NaN or Infinity, or
values of the wrong type is skipped with a warning naming `file:line`; a run.json that cannot be
read (nested too deeply, not strict JSON, a start that is no time) is one line naming it, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import main_output

from proxycheck.core.exchange.observation import Event, Observation, ResultSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.io.runstore import OBSERVATIONS_FILE, RUN_FILE, RunWriter, load_run

NESTED = "[" * 100_000 + "]" * 100_000

pytestmark = pytest.mark.timeout(60)


def observation(n: int, repetition: int) -> Observation:
    return Observation(
        route="direct", repetition=repetition, session="s1", turn=n, xid=n, t_start=0.5 * n, connect=None,
        headers=0.01, first_event=0.02, first_content=0.02, end=0.2,
        events=(Event(0.02, 90, "content"), Event(0.2, 14, "terminal")), status=200, request_bytes=100 * n,
        request_sha256="ab" * 32, response_bytes=104, result=ResultSummary("cd" * 32, 3, terminal=True),
        reused=n > 1, connection=1, outcome=Outcome.OK,
    )  # fmt: skip


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A completed run: direct, two repetitions of three exchanges."""
    w = RunWriter(tmp_path / "run", chain={"engine": "http://127.0.0.1:9"}, routes=["direct"], wall=lambda: 1.7e9)
    for repetition in (1, 2):
        for n in (1, 2, 3):
            w.add(observation(n, repetition))
    w.close()
    return tmp_path / "run"


def replace_line(run_dir: Path, number: int, old: str, new: str) -> None:
    path = run_dir / OBSERVATIONS_FILE
    lines = path.read_text().splitlines(keepends=True)
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    path.write_text("".join(lines))


@pytest.mark.parametrize(
    "old, new, problem",
    [
        ('"t_start":1.0', f'"t_start":{NESTED}', "JSON nested too deeply; skipped"),
        ('"t_start":1.0', '"t_start":NaN', "invalid JSON (NaN is not JSON); skipped"),
        ('"t_start":1.0', '"t_start":-Infinity', "invalid JSON (-Infinity is not JSON); skipped"),
        ('"t_start":1.0', '"t_start":1e999', "invalid JSON (number 1e999 is too large); skipped"),
        ('"k":"obs"', '"k":' + "[" * 900 + "]" * 900, "unknown record kind '<list>'; skipped"),
        ('"turn":2', '"turn":"two"', "bad observation (turn: "),
    ],
    ids=["nested", "nan", "minus-infinity", "huge", "nested-kind", "wrong-type"],
)
def test_a_damaged_observation_line_is_skipped_with_its_line(
    run_dir: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, problem: str
) -> None:
    replace_line(run_dir, 2, old, new)
    run = load_run(run_dir)
    (warning,) = run.warnings
    assert warning.where == f"{run_dir / OBSERVATIONS_FILE}:2" and warning.message.startswith(problem)
    assert len(run.observations) == 5
    status, _, err = main_output(capsys, "diff", str(run_dir))
    assert status in (0, 1) and "Traceback" not in err
    assert f"proxycheck: warning: {run_dir / OBSERVATIONS_FILE}:2: {problem}" in err


@pytest.mark.parametrize(
    "started_at, problem",
    [
        (NESTED, "invalid JSON (nested too deeply)"),
        ("NaN", "invalid JSON (NaN is not JSON)"),
        ("1e309", "invalid JSON (number 1e309 is too large)"),
        ("1e300", "started_at is missing or not a wall-clock time (epoch seconds)"),
        ('"soon"', "started_at is missing or not a wall-clock time (epoch seconds)"),
    ],
    ids=["nested", "nan", "inf", "huge", "text"],
)
def test_a_run_json_that_cannot_be_read_is_one_line_and_exit_2(
    run_dir: Path, capsys: pytest.CaptureFixture[str], started_at: str, problem: str
) -> None:
    meta = json.loads((run_dir / RUN_FILE).read_text())
    text = json.dumps({**meta, "started_at": "STARTED"}).replace('"STARTED"', started_at)
    (run_dir / RUN_FILE).write_text(text)
    status, out, err = main_output(capsys, "diff", str(run_dir))
    assert status == 2 and out == ""
    assert err.splitlines() == [f"proxycheck: {run_dir / RUN_FILE}: {problem}"]
