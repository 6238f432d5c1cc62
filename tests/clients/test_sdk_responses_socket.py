"""The official OpenAI SDK's Responses WebSocket mode (`client.responses.connect()`) as a second
real client of WebSocket sessions: recorded through the recorder in front of the reference engine,
`sessions` shows its socket's turns, and `check` replays the socket, healthy, with every turn
continuing the live responses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory, write_chain
from sdk import sdk_python

from proxycheck.io.storage import load

pytestmark = pytest.mark.timeout(120)

CLIENT = Path(__file__).parent / "responses_socket.py"
TURNS = 3
KEY = "sk-proj-the-sdk-sends-this"


def test_the_sdks_socket_is_recorded_turn_by_turn_and_replayed_healthy(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    engine = engines("--token-interval", "0.005", "--ttft-base", "0.02")
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(engine, out)
    done = subprocess.run([sdk_python(), str(CLIENT), "--base-url", recorder.url + "/v1", "--turns", str(TURNS),
                           "--api-key", KEY], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    turns = [json.loads(line) for line in done.stdout.splitlines()]
    assert [t["types"][-1] for t in turns] == ["response.completed"] * TURNS and all(t["id"] for t in turns)
    recorder.stop()
    (socket,) = load(out).exchanges
    assert socket.websocket and len([m for m in socket.ws if m.from_client]) == TURNS
    assert KEY not in (out / "journal.jsonl").read_text()  # its Authorization header redacted
    listed = run_proxycheck("sessions", str(out), "--json")
    (session,) = json.loads(listed.stdout)["sessions"]
    assert session["turns"][0]["detail"].startswith(f"WebSocket: {TURNS} turn(s)"), session
    chain = write_chain(tmp_path / "chain.toml", engine.url, [])
    verdict = tmp_path / "v.json"
    checked = run_proxycheck("check", str(out), "--chain", str(chain), "--out", str(tmp_path / "run"), "--json",
                             str(verdict))  # fmt: skip
    doc = json.loads(verdict.read_text())
    assert checked.returncode == 0 and doc["verdict"] == "healthy", doc["summary"]
    (direct,) = doc["routes"]
    assert direct["outcomes"] == {"ok": TURNS * direct["repetitions"]}
