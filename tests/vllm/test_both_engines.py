"""The same recordings against both engines: a conversation recorded against the reference engine
replays healthy against vLLM and one recorded against vLLM healthy against the reference engine;
what vLLM refuses (another model name, tools without a tool parser, a prompt past its window) is
reproduced by the reference engine told to refuse it as vLLM does (core/testbed/refusals), and only
then (docs/design.md, "A real engine: vLLM on CPU").

To be merged into test_vllm.py (one file, so `--dist loadfile` keeps the engine on one worker).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from processes import EngineFactory, MitmdumpFactory, write_chain
from sdk import converse
from test_vllm import checked
from vllm_engine import MAX_MODEL_LEN, SERVED_MODEL

from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(480)


def record(upstream: Managed, mitmdumps: MitmdumpFactory, out: Path, sdk: str, **options: object) -> list[dict]:
    """A recording in `out` of `sdk`'s conversations with `upstream` through the recorder; the
    client's lines."""
    recorder = mitmdumps.recorder(upstream, out)
    lines = converse(sdk, recorder.url, model=SERVED_MODEL, sessions=1, turns=2, max_tokens=12, timeout=60,
                     within=180, **options).lines  # fmt: skip
    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()
    return lines


def against(recording: Path, engine: Managed, tmp: Path) -> tuple[int, dict]:
    """`check` of `recording` against a chain that is `engine` alone: its exit status and verdict."""
    tmp.mkdir(exist_ok=True)
    return checked(recording, write_chain(tmp / "chain.toml", engine.url, []), tmp)


def test_a_recording_of_either_engine_replays_healthy_against_the_other(
    vllm: Managed, engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Recorded with the model name vLLM serves: neither the chain file nor the replay maps names.
    reference = engines("--served-model", SERVED_MODEL)
    for name, recorded_on, replayed_on, sdk, usage in (
        ("reference", reference, vllm, "openai", {"include_usage": True}),
        ("vllm", vllm, reference, "openai", {"include_usage": True}),
        ("vllm-anthropic", vllm, reference, "anthropic", {}),
    ):
        recording = tmp_path / f"{name}-recording"
        lines = record(recorded_on, mitmdumps, recording, sdk, **usage)
        assert [line["ok"] for line in lines] == [True, True], lines
        status, verdict = against(recording, replayed_on, tmp_path / name)
        assert (status, verdict["verdict"]) == (0, "healthy"), (name, verdict["summary"])


def test_what_vllm_refuses_is_reproduced_by_the_reference_engine_told_to_refuse_it(
    vllm: Managed, engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # One recording of three refusals by vLLM: another model name (404, the Anthropic SDK's), the
    # synthetic agent's tools (400: no tool parser), a turn 2 that pastes past the 8,192-token window
    # (400). Three conversations that start apart: the same first turn twice would read as one
    # session's retry.
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(vllm, recording)
    wrong = converse("anthropic", recorder.url, model="test-model", turns=1, timeout=60, within=120).lines
    agent = asyncio.run(run_agent(AgentOptions(base_url=recorder.url, model=SERVED_MODEL, turns=2, max_tokens=8,
                                               think=0.1, read_timeout=60)))  # fmt: skip
    long = converse("openai", recorder.url, model=SERVED_MODEL, turns=2, max_tokens=8, paste="2:4000", timeout=60,
                    within=180).lines  # fmt: skip
    time.sleep(1.2)
    recorder.stop()
    assert [line["ok"] for line in wrong + long] == [False, True, False], wrong + long
    assert [t.status for s in agent.sessions for t in s.turns] == [400]

    # The reference engine as it is answers all of it: the recording's failures are not reproduced.
    status, verdict = against(recording, engines(), tmp_path / "lenient")
    assert (status, verdict["verdict"]) == (0, "not-reproduced"), verdict["summary"]

    # Told to refuse as vLLM does, it refuses the same exchanges with the same statuses and words.
    strict = engines("--served-model", SERVED_MODEL, "--max-model-len", str(MAX_MODEL_LEN), "--no-tool-parser")
    status, verdict = against(recording, strict, tmp_path / "strict")
    assert (status, verdict["verdict"], verdict["culprit"]) == (1, "server", "engine"), verdict["summary"]
    details = " ".join(f["detail"] for f in verdict["findings"] if f["route"] == "direct")
    assert "The model `test-model` does not exist" in details, verdict["findings"]  # in the Anthropic shape
    assert "--enable-auto-tool-choice" in details and "maximum context length is 8192" in details, verdict["findings"]
