"""`proxycheck minimize` against real processes: the reference engine and mitmdump fault hops.

Clean recordings made by the synthetic agent through the recorder straight to the engine: once
per module 3 sessions x 4 turns (tool results of ~2 KB, so each turn's body is ~2 KB larger than
the one before); the idle and concurrency cases record their own (long think times; sessions
streaming at once). Each test then minimizes a recording against a hop with a known trigger
(body over B bytes, turn >= T, idle over I s, more than C requests at once) and checks that the
trigger is found: the minimized recording fails, has one session (C + 1 for the concurrency
limit), and the trigger's value is within 10% of the truth.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ctrl_c import interrupt_when
from processes import EngineFactory

from proxycheck import cli
from proxycheck.core.testbed.ssefilter import turn_number
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed, start_engine, start_mitmdump
from proxycheck.io.recordings import open_recording
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
def setup(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory) -> Setup:
    engine = module_engines("--token-interval", "0.004", "--ttft-per-kb", "0", "--tool-call-rate", "1")
    out = record(engine, tmp_path_factory.mktemp("rec") / "recording", sessions=3, turns=4, think=0.2)
    sessions = open_recording(str(out)).planned
    assert len(sessions) == 3 and all(len(s.turns) == 4 for s in sessions)
    sizes = {k: [len(s.turns[k - 1].body) for s in sessions] for k in range(1, 5)}
    return Setup(engine, out, sizes)


def record(engine: Managed, out: Path, *, sessions: int, turns: int, think: float, max_tokens: int = 16) -> Path:
    """A recording of the synthetic agent's sessions, made through the recorder to the engine."""
    recorder = start_mitmdump("--mode", f"reverse:{engine.url}", "-s", RECORD, "--set", f"proxycheck_out={out}")
    try:
        options = AgentOptions(base_url=recorder.url, sessions=sessions, turns=turns, think=think,
                               max_tokens=max_tokens, tool_result_bytes=2000, session_id_header="x-session-id")
        assert asyncio.run(run_agent(options)).ok
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
    finally:
        recorder.stop()
    return out


def hop_chain(setup: Setup, tmp: Path, *faults: str) -> tuple[Managed, Path]:
    sets = [a for f in faults for a in ("--set", f"proxycheck_fault_{f}")]
    hop = start_mitmdump("--mode", f"reverse:{setup.engine.url}", "-s", FAULTS, *sets)
    chain = tmp / "chain.toml"
    chain.write_text(f'engine = "{setup.engine.url}"\n[[hop]]\nname = "F"\nurl = "{hop.url}"\n')
    return hop, chain


def minimize(setup: Setup, chain: Path, out: Path, *argv: str, recording: Path | None = None,
             route: str | None = "via:F", timeouts: tuple[str, str] = ("1", "5")) -> int:
    """`proxycheck minimize` over `route` (None: found as check does), stall and header watchdogs
    of `timeouts` seconds."""
    flags = [] if route is None else ["--route", route]
    return cli.main(["minimize", str(recording or setup.recording), "--chain", str(chain), *flags, "--out", str(out),
                     "--stall-timeout", timeouts[0], "--header-timeout", timeouts[1], *argv])  # fmt: skip


def test_a_body_size_limit_is_minimized_to_one_turn_and_its_size(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert max(setup.sizes[2]) < min(setup.sizes[3]), setup.sizes
    limit = (max(setup.sizes[2]) + min(setup.sizes[3])) // 2
    hop, chain = hop_chain(setup, tmp_path, f"max_body={limit}")
    out = tmp_path / "min"
    try:
        assert minimize(setup, chain, out, "--budget", "60") == 0
        captured = capsys.readouterr()
        # The result is an ordinary recording: check finds the same hop breaking it.
        assert cli.main(["check", str(out), "--chain", str(chain), "--json", str(tmp_path / "v.json")]) == 1
    finally:
        hop.stop()
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["verdict"] == "proxy" and verdict["culprit"] == "F", verdict
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
    minimized = open_recording(str(out)).planned
    assert len(minimized) == 1 and len(minimized[0].turns) == 1
    assert len(minimized[0].turns[0].body) == trigger["request_bytes"]
    assert len(load(out).exchanges) == 1
    assert "trigger:" in captured.out
    assert "candidate 1:" in captured.err  # progress, candidate by candidate
    # ... which export and the engine's replay mode take as any other.
    assert cli.main(["export", str(out), "--har", str(tmp_path / "min.har")]) == 0
    assert len(json.loads((tmp_path / "min.har").read_text())["log"]["entries"]) == 1
    engine = start_engine("--replay", str(out))
    try:
        answer = httpx.post(engine.url + "/v1/chat/completions", content=minimized[0].turns[0].body,
                            headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
    finally:
        engine.stop()
    assert answer.status_code == 200 and "x-proxycheck-replay-match" in answer.headers


def test_a_stall_from_turn_3_keeps_one_session_and_turn_3(setup: Setup, tmp_path: Path) -> None:
    hop, chain = hop_chain(setup, tmp_path, "from_turn=3", "stall_after=2")
    out = tmp_path / "min"
    try:
        assert minimize(setup, chain, out, "--budget", "40", route=None) == 0  # the route found as check does
    finally:
        hop.stop()
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["route"] == "via:F" and doc["culprit"]["verdict"] == "proxy", doc["culprit"]
    assert doc["matched"] == ["stall_mid_stream"]
    assert doc["sessions"]["after"] == 1
    trigger = doc["trigger"]
    assert trigger["turn"] == 3, doc
    assert trigger["outcome"].startswith("stall"), trigger
    assert all(k["session"] == trigger["session"] for k in doc["kept"])
    assert 3 in [k["turn"] for k in doc["kept"]]
    minimized = open_recording(str(out)).planned
    assert len(minimized) == 1
    # The hop counts turns by the assistant messages in the history: the history was not cut below it.
    assert max(turn_number(t.body) for t in minimized[0].turns) >= 3
    assert doc["messages"]["kept"] < doc["messages"]["droppable"], doc["messages"]  # the rest were dropped


def test_a_budget_or_ctrl_c_keeps_the_smallest_failing_candidate_so_far(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    limit = (max(setup.sizes[2]) + min(setup.sizes[3])) // 2
    hop, chain = hop_chain(setup, tmp_path, f"max_body={limit}")
    try:
        # 3 replays of baseline, then 2 for candidates: not enough to finish.
        assert minimize(setup, chain, tmp_path / "budget", "--budget", "5") == 0
        assert "(budget ran out: not minimal)" in capsys.readouterr().out
        doc = json.loads((tmp_path / "budget" / "minimized.json").read_text())
        assert doc["complete"] is False and doc["interrupted"] is False and doc["replays"] <= 5
        assert doc["trigger"]["status"] == 413 and len(open_recording(str(tmp_path / "budget")).planned) >= 1

        out = tmp_path / "ctrl-c"
        status, err = interrupt_when(["minimize", str(setup.recording), "--chain", str(chain), "--route", "via:F",
                                      "--out", str(out)], lambda text: "candidate 2:" in text)  # fmt: skip
        assert status == 130, err
    finally:
        hop.stop()
    assert "interrupted: keeping the smallest failing candidate so far" in err
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["complete"] is False and doc["interrupted"] is True
    assert doc["trigger"]["status"] == 413 and open_recording(str(out)).planned


IDLE = 0.6  # the hop never answers on a connection idle longer than this


def test_an_idle_connection_blackhole_is_minimized_to_its_think_time(setup: Setup, tmp_path: Path) -> None:
    recording = record(setup.engine, tmp_path / "idle-recording", sessions=2, turns=2, think=2 * IDLE)
    hop, chain = hop_chain(setup, tmp_path, f"idle_blackhole={IDLE}")
    out = tmp_path / "min"
    try:
        assert minimize(setup, chain, out, "--budget", "60", recording=recording, timeouts=("1", "1")) == 0
    finally:
        hop.stop()
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["sessions"] == {"before": 2, "after": 1}
    trigger = doc["trigger"]
    assert trigger["outcome"] == "stall_before_headers" and trigger["status"] is None, trigger
    assert doc["body_size"] == {"depends": False, "fails_at": trigger["request_bytes"]}  # size plays no part
    think = doc["think"]
    assert think["depends"] is True and think["recorded"] > 1.5 * IDLE
    assert think["passes_at"] < think["fails_from"], think
    assert abs(think["fails_from"] - IDLE) <= 0.1 * IDLE, think
    assert trigger["think_time"] == pytest.approx(think["fails_from"], abs=0.01)
    # Two turns on one connection: the idle one needs one before it.
    minimized = open_recording(str(out)).planned
    assert len(minimized) == 1 and len(minimized[0].turns) == 2


CONCURRENT = 2  # the hop answers 429 to a request arriving while this many are in flight


def test_a_concurrency_limit_is_minimized_to_one_session_over_it(setup: Setup, tmp_path: Path) -> None:
    # Five sessions of one long streamed turn each (200 tokens, ~0.8 s), all at once.
    recording = record(setup.engine, tmp_path / "concurrent-recording", sessions=5, turns=1, think=0.0,
                       max_tokens=200)  # fmt: skip
    hop, chain = hop_chain(setup, tmp_path, f"max_concurrent={CONCURRENT}")
    out = tmp_path / "min"
    try:
        assert minimize(setup, chain, out, "--budget", "60", recording=recording) == 0
    finally:
        hop.stop()
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["sessions"] == {"before": 5, "after": CONCURRENT + 1}, doc["kept"]
    trigger = doc["trigger"]
    assert trigger["status"] == 429 and trigger["outcome"] == "http_error"
    assert trigger["in_flight"] == CONCURRENT + 1
    assert doc["concurrency"] == {"depends": True, "sessions": CONCURRENT + 1, "in_flight": CONCURRENT + 1}
    assert len(open_recording(str(out)).planned) == CONCURRENT + 1


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
    assert minimize(setup, chain, tmp_path / "o2", route="to:F") == 2
    assert "--route" in capsys.readouterr().err
    # Without --route, nothing fails anywhere: nothing to minimize, and the verdict says so.
    hop, chain = hop_chain(setup, tmp_path)
    try:
        assert minimize(setup, chain, tmp_path / "o3", route=None) == 1
    finally:
        hop.stop()
    assert "nothing to minimize: " in capsys.readouterr().err
    assert not (tmp_path / "o3" / "minimized.json").exists()
