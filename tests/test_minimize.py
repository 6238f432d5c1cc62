"""`proxycheck minimize` against real processes: the reference engine and mitmdump fault hops.

Once per module: a clean recording of 3 sessions x 4 turns made by the synthetic agent through
the recorder straight to the engine (tool results of ~2 KB, so each turn's body is ~2 KB larger
than the one before). Each test then minimizes it against a hop with a known trigger.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from proxycheck import cli
from proxycheck.commands.replay import load_sessions
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed, start_engine, start_mitmdump
from proxycheck.io.storage import load

REPO = Path(__file__).resolve().parents[1]
RECORD = str(REPO / "addons" / "record.py")
FAULTS = str(REPO / "addons" / "faults.py")

pytestmark = pytest.mark.timeout(120)


@dataclass
class Setup:
    engine: Managed
    recording: Path
    sizes: dict[int, list[int]]  # turn -> the request body sizes of that turn in each session


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    started: list[Managed] = []
    try:
        engine = start_engine("--token-interval", "0.004", "--ttft-per-kb", "0", "--tool-call-rate", "1")
        started.append(engine)
        out = tmp_path_factory.mktemp("rec") / "recording"
        recorder = start_mitmdump("--mode", f"reverse:{engine.url}", "-s", RECORD, "--set", f"proxycheck_out={out}")
        started.append(recorder)
        options = AgentOptions(base_url=recorder.url, sessions=3, turns=4, think=0.2, max_tokens=16,
                               tool_result_bytes=2000, session_id_header="x-session-id")  # fmt: skip
        assert asyncio.run(run_agent(options)).ok
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
        recorder.stop()
        sessions = load_sessions(str(out))
        assert len(sessions) == 3 and all(len(s.turns) == 4 for s in sessions)
        sizes = {k: [len(s.turns[k - 1].body) for s in sessions] for k in range(1, 5)}
        yield Setup(engine, out, sizes)
    finally:
        for proc in started:
            proc.stop()


def hop_chain(setup: Setup, tmp: Path, *faults: str) -> tuple[Managed, Path]:
    sets = [a for f in faults for a in ("--set", f"proxycheck_fault_{f}")]
    hop = start_mitmdump("--mode", f"reverse:{setup.engine.url}", "-s", FAULTS, *sets)
    chain = tmp / "chain.toml"
    chain.write_text(f'engine = "{setup.engine.url}"\n[[hop]]\nname = "F"\nurl = "{hop.url}"\n')
    return hop, chain


def minimize(setup: Setup, chain: Path, out: Path, *argv: str) -> int:
    return cli.main(["minimize", str(setup.recording), "--chain", str(chain), "--route", "via:F", "--out", str(out),
                     "--stall-timeout", "1", "--header-timeout", "5", *argv])  # fmt: skip


def test_a_body_size_limit_is_minimized_to_one_turn_and_its_size(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert max(setup.sizes[2]) < min(setup.sizes[3]), setup.sizes
    limit = (max(setup.sizes[2]) + min(setup.sizes[3])) // 2
    hop, chain = hop_chain(setup, tmp_path, f"max_body={limit}")
    out = tmp_path / "min"
    try:
        assert minimize(setup, chain, out, "--budget", "60") == 0
    finally:
        hop.stop()
    captured = capsys.readouterr()
    assert "sessions 3 -> 1" in captured.err and "turns 4 -> 1" in captured.err
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["sessions"] == {"before": 3, "after": 1} and doc["turns"] == {"before": 12, "after": 1}
    assert doc["complete"] is True
    trigger = doc["trigger"]
    assert trigger["turn"] == 3 and trigger["status"] == 413 and trigger["outcome"] != "ok"
    assert doc["body_size"]["depends"] is True
    assert abs(trigger["request_bytes"] - limit) <= 0.1 * limit, (trigger, limit)
    assert doc["body_size"]["passes_at"] <= limit < doc["body_size"]["fails_from"]
    assert doc["trials"]["deterministic"] is True and doc["trials"]["tries_per_candidate"] == 1
    assert 0 < doc["replays"] <= 60
    # An ordinary recording: one session, one exchange, the shrunk body.
    minimized = load_sessions(str(out))
    assert len(minimized) == 1 and len(minimized[0].turns) == 1
    assert len(minimized[0].turns[0].body) == trigger["request_bytes"]
    assert len(load(out).exchanges) == 1
    assert "trigger:" in captured.out


def test_a_stall_from_turn_3_keeps_one_session_and_turn_3(setup: Setup, tmp_path: Path) -> None:
    hop, chain = hop_chain(setup, tmp_path, "from_turn=3", "stall_after=2")
    out = tmp_path / "min"
    try:
        assert minimize(setup, chain, out, "--budget", "40") == 0
    finally:
        hop.stop()
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["sessions"]["after"] == 1
    trigger = doc["trigger"]
    assert trigger["turn"] == 3, doc
    assert trigger["outcome"].startswith("stall"), trigger
    assert all(k["session"] == trigger["session"] for k in doc["kept"])
    assert 3 in [k["turn"] for k in doc["kept"]]
    assert len(load_sessions(str(out))) == 1


def test_a_clean_hop_does_not_reproduce_and_bad_input_is_exit_2(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hop, chain = hop_chain(setup, tmp_path)
    try:
        assert minimize(setup, chain, tmp_path / "min", "--budget", "5") == 1
    finally:
        hop.stop()
    assert "does not reproduce" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert minimize(setup, chain, tmp_path / "full") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an empty directory" in err[0]
    assert cli.main(["minimize", str(setup.recording), "--chain", str(chain), "--route", "direct",
                     "--out", str(tmp_path / "o2")]) == 2  # fmt: skip
