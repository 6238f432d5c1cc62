"""The official OpenAI and Anthropic SDKs, recorded through the recorder in front of a chain, then
judged by `sessions` and `check`: what the recording and the verdict say must hold for the traffic
real clients make.

The OpenAI SDK stops reading at `data: [DONE]` and closes the response a millisecond or two later,
often before the chunked body's end (the recorder then sees "Client disconnected." on about one
exchange in three here): those exchanges are `ok` and a healthy chain is `healthy`, every time.
A gateway holding the stream open after its finish reason without `[DONE]` makes the same SDK
hang until its timeout: `held_open`, and `check` names the hop.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory
from sdk import converse

pytestmark = pytest.mark.timeout(240)


def proxycheck(*argv: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return run_proxycheck(*argv, timeout=timeout)


class Chain:
    """engine <- hop "gateway" (the fault addon; a correct proxy without faults) <- recorder."""

    def __init__(self, tmp: Path, engines: EngineFactory, mitmdumps: MitmdumpFactory, *faults: str) -> None:
        self.tmp = tmp
        self.engine = engines("--token-interval", "0.002", "--ttft-per-kb", "0")
        self.gateway = mitmdumps.faults(self.engine, *faults)
        self.recording = tmp / "recording"
        self.recorder = mitmdumps.recorder(self.gateway, self.recording)
        self.file = tmp / "chain.toml"
        self.file.write_text(f'engine = "{self.engine.url}"\n[[hop]]\nname = "gateway"\nurl = "{self.gateway.url}"\n')

    def stop_recorder(self) -> None:
        time.sleep(1.2)  # the recorder flushes chunk times at least every second
        self.recorder.stop()

    def sessions(self) -> dict:
        done = proxycheck("sessions", str(self.recording), "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def check(self, *argv: str) -> tuple[int, dict, str]:
        verdict = self.tmp / "verdict.json"
        done = proxycheck("check", str(self.recording), "--chain", str(self.file), "--json", str(verdict),
                          "--out", str(self.tmp / "run"), *argv)  # fmt: skip
        assert verdict.exists(), done.stderr
        return done.returncode, json.loads(verdict.read_text()), done.stdout


@pytest.fixture
def chain_factory(tmp_path: Path, engines: EngineFactory, mitmdumps: MitmdumpFactory) -> Callable[..., Chain]:
    """`chain_factory(*faults)`: a chain for this test, its processes stopped when the test ends."""
    return partial(Chain, tmp_path, engines, mitmdumps)


def turns_of(doc: dict) -> list[dict]:
    return [turn for session in doc["sessions"] for turn in session["turns"]]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_healthy_chain_recorded_through_the_sdk_is_healthy(chain_factory, sdk: str) -> None:
    chain = chain_factory()
    client = converse(sdk, chain.recorder.url, sessions=4, turns=4, think=0.05, max_tokens=24)
    assert client.ok and len(client.lines) == 16, client.errors
    chain.stop_recorder()

    turns = turns_of(chain.sessions())
    assert len(turns) == 16
    assert {t["outcome"] for t in turns} == {"ok"}, [(t["outcome"], t["detail"]) for t in turns if t["outcome"] != "ok"]
    early = [t for t in turns if "closed the connection" in t["detail"]]
    for t in early:  # the SDK's early close is kept as a fact, named after the dialect's terminator
        assert ("[DONE]" if sdk == "openai" else "message_stop") in t["detail"]

    status, verdict, out = chain.check("--pace", "fast")
    assert (status, verdict["verdict"]) == (0, "healthy"), out


def test_a_gateway_holding_the_stream_after_its_finish_reason_wedges_the_openai_sdk(chain_factory) -> None:
    # The gateway drops [DONE] and never ends the body: the SDK reads on for [DONE] until its timeout.
    chain = chain_factory("drop_terminal=true", "hold_open=true", "stall_seconds=60")
    client = converse("openai", chain.recorder.url, sessions=1, turns=2, max_tokens=8, timeout=2.0)
    assert not client.ok and "Timeout" in client.errors[0]  # what the user of the SDK saw
    chain.stop_recorder()

    (turn,) = turns_of(chain.sessions())
    assert turn["outcome"] == "held_open", turn
    assert "without its terminator [DONE]" in turn["detail"]

    status, verdict, out = chain.check("--pace", "fast", "--stall-timeout", "1.5")
    assert (status, verdict["verdict"], verdict["culprit"]) == (1, "proxy", "gateway"), out
    finding = next(f for f in verdict["findings"] if f["route"] == "via:gateway")
    assert finding["outcome"] == "held_open" and "without its terminator [DONE]" in finding["detail"]
    assert "buffering" not in json.dumps(verdict["findings"])  # no advice about another cause
