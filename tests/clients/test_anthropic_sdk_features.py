"""The official Anthropic SDK using extended thinking, prompt caching and `count_tokens` against
the reference engine, recorded through the recorder: what the SDK parses, and what `sessions`
says of the recorded turns."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory
from sdk import sdk_python

pytestmark = pytest.mark.timeout(120)

SCRIPT = Path(__file__).parent / "anthropic_features.py"


def test_the_sdk_streams_thinking_sends_it_back_reads_cache_usage_and_counts_tokens(
    tmp_path: Path, engines: EngineFactory, mitmdumps: MitmdumpFactory
) -> None:
    engine = engines("--token-interval", "0.002", "--ttft-per-kb", "0")
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(engine, recording)
    argv = [sdk_python(), str(SCRIPT), "--base-url", recorder.url]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)

    first, second = seen["turns"]
    for turn in (first, second):
        # The stream helper's thinking and signature events, then text, as from the real API.
        assert turn["blocks"] == ["thinking", "text"] and turn["thinking"] and turn["text"]
        assert turn["final_thinking"] == turn["thinking"] and len(turn["signature"]) > 100
        assert turn["stop"] == "end_turn" and turn["usage"]["output"] == 40  # thinking counts as output
    assert first["usage"]["cache_read"] == 0 and first["usage"]["cache_creation"] > 0
    assert first["usage"]["ephemeral_5m"] == first["usage"]["cache_creation"]
    # Turn 2 (its thinking block sent back, signature and all) reads what turn 1 wrote.
    assert second["usage"]["cache_read"] == first["usage"]["cache_creation"]
    assert seen["count_tokens"] > second["usage"]["input"]
    assert seen["plain"]["blocks"] == ["thinking", "text"] and seen["plain"]["signature"]

    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()
    shown = run_proxycheck("sessions", str(recording), "--json", timeout=60)
    assert shown.returncode == 0, shown.stderr
    sessions = json.loads(shown.stdout)["sessions"]
    turns = [t for s in sessions for t in s["turns"]]
    # The two streamed turns are one conversation (the thinking block resent is part of its history).
    assert [[(t["turn"], t["messages"]) for t in s["turns"]] for s in sessions] == [[(1, 1), (2, 3)], [(1, 1)]]
    # Three generations (count_tokens is no turn), each an ok, complete answer.
    assert [(t["path"], t["outcome"], t["finish_reason"]) for t in turns] == [("/v1/messages", "ok", "end_turn")] * 3, turns
