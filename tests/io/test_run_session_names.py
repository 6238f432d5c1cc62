"""A run keeps the names of the sessions it replayed (run.json `sessions`), so `diff RUN` labels
them as `proxycheck sessions` did; a run without them, or with a damaged list, says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxycheck import cli
from proxycheck.core.errors import BadInput
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import SessionName
from proxycheck.io.runstore import RUN_FILE, RunWriter, load_run

KEY = '{"device_id":"' + "d" * 64 + '","account_uuid":"","session_id":"5c3e8a0f-2b1d-4c6e-9f7a-0d1e2f3a4b5c"}'
NAMES = (SessionName(KEY, "s1", "5c3e8a0f-2b1d-4c6e-9f7a-0d1e2f3a4b5c", "field:metadata.user_id"),
         SessionName("s2", "s2", None, "continuity"))  # fmt: skip


def write(directory: Path, sessions: list) -> None:
    with RunWriter(directory, chain={"hops": []}, routes=["direct"], sessions=sessions) as w:
        for rep in (1, 2):
            w.add(Observation(route="direct", repetition=rep, session=KEY, turn=1, xid=1, t_start=0.0,
                              outcome=Outcome.RESET, detail="closed"))  # fmt: skip


def test_the_names_a_run_was_written_with_are_read_back(tmp_path: Path) -> None:
    write(tmp_path / "run", [n.to_json() for n in NAMES])
    assert load_run(tmp_path / "run").session_names == NAMES


def test_a_run_written_before_names_were_kept_has_none(tmp_path: Path) -> None:
    write(tmp_path / "run", [])
    meta = json.loads((tmp_path / "run" / RUN_FILE).read_text())
    del meta["sessions"]
    (tmp_path / "run" / RUN_FILE).write_text(json.dumps(meta))
    assert load_run(tmp_path / "run").session_names == ()


@pytest.mark.parametrize("bad", [{"s1": KEY}, [{"id": KEY}], ["s1"]])
def test_a_damaged_list_of_names_is_bad_input_in_one_line(tmp_path: Path, bad, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "run", [])
    meta = json.loads((tmp_path / "run" / RUN_FILE).read_text())
    meta["sessions"] = bad
    (tmp_path / "run" / RUN_FILE).write_text(json.dumps(meta))
    with pytest.raises(BadInput):
        load_run(tmp_path / "run").session_names
    assert cli.main(["diff", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"proxycheck: {tmp_path / 'run' / RUN_FILE}: ")
