"""Runs on disk: run.json and observations.jsonl written, read back, and survived when damaged."""

from __future__ import annotations

import json
import stat
import threading
from pathlib import Path

import pytest

from proxycheck.core.errors import BadInput, StorageError
from proxycheck.core.exchange.observation import Event, Observation, ResultSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.io.jsonl import read_records
from proxycheck.io.runstore import OBSERVATIONS_FILE, RUN_FILE, VERSION, RunWriter, load_run

CHAIN = {"engine": "http://127.0.0.1:30000", "hops": [{"name": "edge", "url": "http://127.0.0.1:8080"}]}
ROUTES = ["direct", "via:edge"]


def obs(n: int, route: str = "direct", outcome: Outcome = Outcome.OK) -> Observation:
    return Observation(
        route=route, repetition=1, session="s1", turn=n, xid=n, t_start=0.5 * n, connect=None, headers=0.01,
        first_event=0.02, first_content=0.02, end=0.2, events=(Event(0.02, 90, "content"), Event(0.2, 14, "terminal")),
        status=200, request_bytes=100 * n, request_sha256="ab" * 32, response_bytes=104,
        result=ResultSummary("cd" * 32, 3, terminal=True), reused=n > 1, connection=1, outcome=outcome,
    )  # fmt: skip


def write_run(directory: Path, n: int = 3, **kw) -> RunWriter:
    w = RunWriter(directory, chain=CHAIN, routes=ROUTES, options={"repeat": 1}, wall=lambda: 1_700_000_000.0, **kw)
    for i in range(1, n + 1):
        w.add(obs(i))
    return w


def test_round_trip_with_metadata(tmp_path: Path) -> None:
    w = write_run(tmp_path / "run", run_id="r-1")
    w.add(obs(4, "via:edge", Outcome.STALL_MID_STREAM))
    w.close("completed")
    run = load_run(tmp_path / "run")
    assert run.warnings == []
    assert run.observations == [obs(1), obs(2), obs(3), obs(4, "via:edge", Outcome.STALL_MID_STREAM)]
    assert (run.run_id, run.started_at, run.routes, run.status) == ("r-1", 1_700_000_000.0, ROUTES, "completed")
    meta = run.meta
    assert meta["format"] == "proxycheck.run" and meta["version"] == VERSION
    assert meta["chain"] == CHAIN and meta["options"] == {"repeat": 1}
    assert meta["ended_at"] == 1_700_000_000.0 and meta["observations"] == 4
    assert set(meta["versions"]) == {"proxycheck", "python", "httpx", "aiohttp"}
    assert all(meta["versions"].values())


def test_a_run_in_progress_is_readable_and_says_so(tmp_path: Path) -> None:
    w = write_run(tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.status == "running" and run.meta["ended_at"] is None
    assert len(run.observations) == 3
    assert run.run_id.count("-") == 1 and run.run_id.startswith("2023")  # generated: start time + random
    w.close()


def test_one_line_per_observation(tmp_path: Path) -> None:
    write_run(tmp_path / "run", n=2).close()
    lines = (tmp_path / "run" / OBSERVATIONS_FILE).read_bytes().splitlines()
    assert len(lines) == 2
    assert all(json.loads(line)["k"] == "obs" for line in lines)


def test_any_text_round_trips(tmp_path: Path) -> None:
    # A recorded session id may hold anything JSON can, a lone surrogate included.
    odd = Observation(session="s-\ud800-é-\u2028", t_start=0.0, detail="ünïcode", outcome=Outcome.RESET)
    with RunWriter(tmp_path / "run") as w:
        w.add(odd)
    assert load_run(tmp_path / "run").observations == [odd]


def test_files_are_private(tmp_path: Path) -> None:
    write_run(tmp_path / "run").close()
    root = tmp_path / "run"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for name in (RUN_FILE, OBSERVATIONS_FILE):
        assert stat.S_IMODE((root / name).stat().st_mode) == 0o600
    assert sorted(p.name for p in root.iterdir()) == [OBSERVATIONS_FILE, RUN_FILE]  # no temporary files left


def test_a_crash_mid_line_loses_only_that_line(tmp_path: Path) -> None:
    write_run(tmp_path / "run", n=3)  # never closed: the process died
    path = tmp_path / "run" / OBSERVATIONS_FILE
    data = path.read_bytes()
    path.write_bytes(data[:-25])  # cut inside the last record
    run = load_run(tmp_path / "run")
    (warning,) = run.warnings
    assert warning.where == f"{path}:3" and "incomplete" in warning.message
    assert run.observations == [obs(1), obs(2)]


def test_damaged_lines_are_skipped_with_file_and_line(tmp_path: Path) -> None:
    write_run(tmp_path / "run", n=1).close()
    path = tmp_path / "run" / OBSERVATIONS_FILE
    good = path.read_bytes()
    bad_obs = json.dumps({"k": "obs", "route": "direct"}).encode()
    path.write_bytes(good + b"\x00\x00garbage{\n" + b"\xff\xfe\n" + bad_obs + b"\n" + b'{"k":"note"}\n{"k":"note"}\n'
                     + b"[1]\n" + good)  # fmt: skip
    run = load_run(tmp_path / "run")
    assert run.observations == [obs(1), obs(1)]
    assert [(w.where, w.message) for w in run.warnings] == [
        (f"{path}:2", "invalid JSON; skipped"),
        (f"{path}:3", "line is not UTF-8; skipped"),
        (f"{path}:4", "bad observation (repetition: missing); skipped"),
        (f"{path}:5", "unknown record kind 'note'; skipped"),  # once per kind
        (f"{path}:7", "record is not a JSON object; skipped"),
    ]


def test_a_huge_line_is_skipped_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": "' + b"x" * (3 << 20) + b'"}\n{"b": 1}\n')
    warnings: list = []
    assert list(read_records(path, warnings, max_line=1 << 20)) == [(f"{path}:2", {"b": 1})]
    assert warnings[0].where == f"{path}:1" and "longer than 1 MiB" in warnings[0].message


def test_concurrent_adds_keep_every_line_whole(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "run", routes=ROUTES)

    def worker(k: int) -> None:
        for i in range(200):
            w.add(obs(i, route=f"r{k}"))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    run = load_run(tmp_path / "run")
    assert run.warnings == [] and len(run.observations) == 1200
    for k in range(6):
        assert [o.turn for o in run.observations if o.route == f"r{k}"] == list(range(200))


def test_closed_writer_refuses_and_close_is_idempotent(tmp_path: Path) -> None:
    w = write_run(tmp_path / "run", n=1)
    w.close("completed")
    w.close("failed")  # no effect: the first status stands
    assert load_run(tmp_path / "run").status == "completed"
    with pytest.raises(StorageError, match="closed"):
        w.add(obs(2))


def test_context_manager_records_a_failure(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with write_run(tmp_path / "run", n=1):
            raise RuntimeError("boom")
    assert load_run(tmp_path / "run").status == "failed"


def test_a_run_is_never_appended_to(tmp_path: Path) -> None:
    write_run(tmp_path / "run").close()
    with pytest.raises(StorageError, match="already holds a run"):
        RunWriter(tmp_path / "run")


def test_unwritable_place_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match="cannot write a run here"):
        RunWriter(tmp_path / "file" / "run")


# -- what is not a run ------------------------------------------------------------------------------


def test_not_a_run_names_the_directory(tmp_path: Path) -> None:
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "journal.jsonl").write_text("{}\n")
    with pytest.raises(BadInput) as err:
        load_run(tmp_path / "rec")
    assert err.value.where == str(tmp_path / "rec") and "not a proxycheck run" in err.value.message
    with pytest.raises(BadInput, match="no such directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(BadInput, match="not a directory"):
        load_run(tmp_path / "plain")


@pytest.mark.parametrize(
    "content,message",
    [
        (b"{not json", "invalid JSON"),
        (b'{"format": "proxycheck.recording", "version": 1}', "not a proxycheck run file"),
        (b'{"format": "proxycheck.run", "version": 99, "started_at": 1.0}', "version 99 is newer"),
        (b'{"format": "proxycheck.run", "version": "1", "started_at": 1.0}', "bad run format version"),
        (b'{"format": "proxycheck.run", "version": 1}', "started_at is missing"),
    ],
)
def test_a_bad_run_file_is_bad_input_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    root = tmp_path / "run"
    root.mkdir()
    (root / RUN_FILE).write_bytes(content)
    with pytest.raises(BadInput) as err:
        load_run(root)
    assert err.value.where == str(root / RUN_FILE) and message in err.value.message
