"""Retries are attempts of one turn, end to end with a real client: the official OpenAI Python SDK
(in its own venv, as a separate process, as harnesses are) holds a 3-turn conversation through
the recorder (mitmdump with addons/record.py) in front of a fault hop that answers 504 to the
first two requests of turn 2, then the reference engine. The SDK retries them (its default: 2
retries, with backoff, counted in `x-stainless-retry-count`), so the recording holds 5 exchanges;
`sessions` shows 3 turns, turn 2 in 3 attempts, and `replay` sends every attempt after its
recorded backoff. Every process is stopped by the fixture."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import main_output as run
from clients.sdk import converse
from processes import EngineFactory, MitmdumpFactory

from proxycheck.io.procs import Managed
from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(180)


@dataclass
class Setup:
    recording: Path
    engine: Managed
    clean: Managed  # a correct hop in front of the engine: the chain once the 504s are fixed


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
          module_mitmdumps: MitmdumpFactory) -> Setup:  # fmt: skip
    engine = module_engines("--token-interval", "0.004", "--ttft-per-kb", "0", "--tool-call-rate", "0")
    gateway = module_mitmdumps.faults(engine, "status_first=2", "from_turn=2")
    clean = module_mitmdumps.faults(engine)
    out = tmp_path_factory.mktemp("rec") / "recording"
    recorder = module_mitmdumps.recorder(gateway, out)
    turns = converse("openai", recorder.url, turns=3, max_retries=2, think=0.1, max_tokens=8)
    assert turns.ok and [line["turn"] for line in turns.lines] == [1, 2, 3], turns.stderr[-2000:]
    time.sleep(1.5)  # the recorder flushes its last chunks within a second
    recorder.stop()
    return Setup(out, engine, clean)


def test_sessions_shows_three_turns_turn_2_in_three_attempts(
    setup: Setup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "120")  # a table row on one line
    status, out, _ = run(capsys, "sessions", str(setup.recording), "--json")
    assert status == 0
    (session,) = json.loads(out)["sessions"]
    turns = session["turns"]
    assert [(t["turn"], t["attempt"], t["attempts"]) for t in turns] == [(1, 1, 1), (2, 1, 3), (2, 2, 3), (2, 3, 3),
                                                                         (3, 1, 1)]  # fmt: skip
    assert [t["status"] for t in turns] == [200, 504, 504, 200, 200]
    assert [t["outcome"] for t in turns] == ["ok", "http_error", "http_error", "ok", "ok"]
    assert [t["retry_count"] for t in turns] == [0, 0, 1, 2, 0]  # the SDK's own count confirms it
    assert (session["turn_count"], session["retries"], session["outcomes"]) == (3, 2, {"ok": 3})
    # The SDK's backoff is a backoff, not think time; think time runs from the turn's last attempt.
    assert [t["think_time"] is None for t in turns] == [True, False, True, True, False]
    assert all(t["backoff"] > 0 for t in turns[2:4])
    assert turns[4]["think_time"] >= 0.09  # the client thinks 0.1 s after turn 2's third attempt

    status, out, _ = run(capsys, "sessions", str(setup.recording))
    flat = " ".join(out.split())
    assert "1 session(s), 5 exchange(s) (2 of them retries)" in flat
    row = [cell.strip() for cell in next(line for line in out.splitlines() if line.startswith("│ s1")).split("│")[1:-1]]
    assert row[2] == "3"  # conversation turns
    assert "1 ok · 2 ok (3 attempts) · 3 ok" in flat
    assert "s1 turn 2, attempt 1 of 3: http_error" in flat and "s1 turn 2, attempt 2 of 3: http_error" in flat
    assert flat.count("retried: ok on attempt 3") == 2


def test_replay_sends_every_attempt_after_its_recorded_backoff(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(capsys, "sessions", str(setup.recording), "--json")
    recorded = json.loads(out)["sessions"][0]["turns"]
    chain = tmp_path / "chain.toml"
    chain.write_text(f'engine = "{setup.engine.url}"\n')
    status, _, err = run(capsys, "replay", str(setup.recording), "--chain", str(chain), "--route", "direct",
                         "--out", str(tmp_path / "run"))  # fmt: skip
    assert status == 0, err
    run_ = load_run(tmp_path / "run")
    observations = sorted(run_.observations, key=lambda o: o.t_start)
    assert [(o.turn, o.xid) for o in observations] == [(t["turn"], t["exchange"]) for t in recorded]
    assert all(o.outcome.value == "ok" for o in observations)  # the engine answers what the gateway refused
    for i in (2, 3):  # each retry waited at least its recorded backoff after the attempt before
        before = observations[i - 1]
        gap = observations[i].t_start - (before.t_start + (before.end or 0.0))
        assert gap >= 0.9 * recorded[i]["backoff"], (i, gap, recorded[i]["backoff"])
    (name,) = run_.session_names
    assert name.attempts == tuple((t["exchange"], t["attempt"], 3) for t in recorded[1:4])


def test_check_on_the_fixed_chain_says_the_recorded_attempts_do_not_reproduce(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = tmp_path / "chain.toml"
    chain.write_text(f'engine = "{setup.engine.url}"\n[[hop]]\nname = "gateway"\nurl = "{setup.clean.url}"\n')
    status, out, err = run(capsys, "check", str(setup.recording), "--chain", str(chain), "--pace", "fast",
                           "--out", str(tmp_path / "run"), "--json", str(tmp_path / "v.json"))  # fmt: skip
    doc = json.loads((tmp_path / "v.json").read_text())
    assert status == 0 and doc["verdict"] == "not-reproduced", doc["summary"]
    # Every attempt was replayed and judged, exchange by exchange, on both routes.
    assert {r["route"]: r["exchanges"] for r in doc["routes"]} == {"direct": 10, "via:gateway": 5}
    assert "the recording shows 2 failed exchange(s) (2 http_error)" in doc["summary"]
    assert doc["differences"][0] == ("recorded failures: s1 turn 2, attempt 1 of 3: http_error (HTTP 504); "
                                     "s1 turn 2, attempt 2 of 3: http_error (HTTP 504)")  # fmt: skip
    assert "s1 turn 2, attempt 1 of 3: http_error" in " ".join(out.split())
