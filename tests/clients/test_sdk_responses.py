"""The official OpenAI SDK's Responses API (`client.responses.create`, streamed and not) against the
reference engine: an agent loop with function calls, continued by `previous_response_id` or by
resending the input, straight to the engine and through the recorder (`sessions` shows it ok)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory
from sdk import sdk_python

pytestmark = pytest.mark.timeout(180)

AGENT = Path(__file__).parent / "responses_agent.py"


def run_agent(base_url: str, *flags: str) -> list[dict]:
    done = subprocess.run([sdk_python(), str(AGENT), "--base-url", base_url, *flags], capture_output=True, text=True,
                          timeout=90)  # fmt: skip
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, (lines, done.stderr[-2000:])
    return lines


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory):
    return module_engines("--token-interval", "0.002", "--ttft-base", "0.01", "--tool-call-rate", "1")


@pytest.mark.parametrize("chain", ["previous", "resend"])
@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_the_sdks_agent_loop_runs_to_a_text_answer(engine, stream: str, chain: str) -> None:
    lines = run_agent(engine.url, stream, "--chain", chain)
    # Two rounds of function calls (the SDK parsed each call and its arguments), then text.
    assert [line["calls"] for line in lines] == [["read_file"], ["read_file"], []]
    assert all(line["ok"] and line["status"] == "completed" and line["id"].startswith("resp_") for line in lines)
    assert len(lines[-1]["text"].split()) == 8 and all(line["usage"] for line in lines)


@pytest.mark.parametrize("chain", ["previous", "resend"])
def test_the_sdks_stream_recorded_through_the_recorder_is_ok_with_its_tool_calls(
    engine, mitmdumps: MitmdumpFactory, tmp_path: Path, chain: str
) -> None:
    out = tmp_path / "rec"
    hop = mitmdumps.recorder(engine, out)
    run_agent(hop.url, "--stream", "--chain", chain)
    hop.stop()
    done = run_proxycheck("sessions", str(out), "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    turns = [turn for session in json.loads(done.stdout)["sessions"] for turn in session["turns"]]
    assert [(turn["outcome"], turn["tool_calls"]) for turn in turns] == [("ok", ["read_file"]), ("ok", ["read_file"]),
                                                                         ("ok", [])]  # fmt: skip
    assert all(turn["dialect"] == "openai_responses" and turn["streamed"] for turn in turns)
