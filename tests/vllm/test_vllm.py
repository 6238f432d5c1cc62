"""vLLM on CPU, a real engine, driven by a real client through the recorder: what `sessions` reads
of its streams and what `check` says of a chain that is just the engine.

Every test of the real engine lives in this one file, so that `--dist loadfile` keeps them on one
worker and the session starts one engine (conftest.py). The engine's start (tens of seconds) is
counted in the first test's time, hence the generous bound.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from processes import MitmdumpFactory, write_chain
from sdk import converse
from vllm_engine import SERVED_MODEL

from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(480)


def test_openai_sdk_streams_from_vllm_are_read_whole_and_a_chain_of_just_the_engine_is_healthy(
    vllm: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(vllm, recording)
    client = converse("openai", recorder.url, model=SERVED_MODEL, sessions=2, turns=3, max_tokens=24,
                      include_usage=True, timeout=60, within=180)  # fmt: skip
    assert client.ok and len(client.lines) == 6, client.errors
    assert all(line["text"] for line in client.lines)  # the model said something every turn
    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()

    done = run_proxycheck("sessions", str(recording), "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    sessions = json.loads(done.stdout)["sessions"]
    assert [len(s["turns"]) for s in sessions] == [3, 3]
    turns = [turn for session in sessions for turn in session["turns"]]
    assert {t["outcome"] for t in turns} == {"ok"}, [(t["outcome"], t["detail"]) for t in turns]
    for turn in turns:
        # vLLM's usage chunk (choices: [], after the finish reason) is read: its token count stands
        assert 0 < turn["completion_tokens"] <= 24, turn
        assert turn["finish_reason"] in ("stop", "length"), turn
        assert turn["ttft"] is not None and turn["ttft"] <= turn["duration"], turn

    chain = write_chain(tmp_path / "chain.toml", vllm.url, [])
    verdict_path = tmp_path / "verdict.json"
    done = run_proxycheck("check", str(recording), "--chain", str(chain), "--json", str(verdict_path),
                          "--out", str(tmp_path / "run"), "--pace", "fast", timeout=240)  # fmt: skip
    assert verdict_path.exists(), done.stderr
    verdict = json.loads(verdict_path.read_text())
    assert (done.returncode, verdict["verdict"]) == (0, "healthy"), done.stdout


def recorded(vllm: Managed, mitmdumps: MitmdumpFactory, out: Path, sdk: str, **options: object) -> list[dict]:
    """A recording in `out` of `sdk`'s conversations with vLLM through the recorder; the client's lines."""
    recorder = mitmdumps.recorder(vllm, out)
    client = converse(sdk, recorder.url, model=SERVED_MODEL, timeout=60, within=180, **options)
    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()
    return client.lines


def checked(recording: Path, chain: Path, tmp: Path) -> tuple[int, dict]:
    verdict_path = tmp / "verdict.json"
    done = run_proxycheck("check", str(recording), "--chain", str(chain), "--json", str(verdict_path),
                          "--out", str(tmp / "run"), "--pace", "fast", timeout=300)  # fmt: skip
    assert verdict_path.exists(), done.stderr
    return done.returncode, json.loads(verdict_path.read_text())


def test_anthropic_sdk_messages_streams_from_vllm_through_a_hop_are_healthy(
    vllm: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    lines = recorded(vllm, mitmdumps, recording, "anthropic", sessions=2, turns=2, max_tokens=24)
    assert len(lines) == 4 and all(line["ok"] and line["text"] for line in lines), lines
    done = run_proxycheck("sessions", str(recording), "--json", timeout=60)
    turns = [t for s in json.loads(done.stdout)["sessions"] for t in s["turns"]]
    assert len(turns) == 4 and all(t["outcome"] == "ok" and t["path"] == "/v1/messages" for t in turns), turns
    hop = mitmdumps.faults(vllm)  # a mitmproxy hop with no fault in front of the engine
    status, verdict = checked(recording, write_chain(tmp_path / "chain.toml", vllm.url, [("edge", hop.url)]), tmp_path)
    assert (status, verdict["verdict"]) == (0, "healthy"), verdict["summary"]


def test_a_conversation_that_outgrows_the_context_is_the_server_from_the_turn_vllm_refuses(
    vllm: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Turn 2 pastes a file of some 10k tokens: past the model's 8,192-token window, vLLM answers 400.
    recording = tmp_path / "recording"
    lines = recorded(vllm, mitmdumps, recording, "openai", sessions=1, turns=3, max_tokens=16, paste="2:4000")
    assert [line["ok"] for line in lines] == [True, False] and "400" in lines[1]["error"], lines
    hop = mitmdumps.faults(vllm)
    status, verdict = checked(recording, write_chain(tmp_path / "chain.toml", vllm.url, [("edge", hop.url)]), tmp_path)
    assert status == 1 and (verdict["verdict"], verdict["first_turn"]) == ("server", 2), verdict["summary"]
    assert verdict["culprit"] != "edge"
    refused = [f for f in verdict["findings"] if f["turn"] == 2 and f["route"] == "direct"]
    assert refused and all(f["outcome"] == "http_error" and "maximum context length" in f["detail"] for f in refused), \
        refused  # vLLM's own words, quoted  # fmt: skip
