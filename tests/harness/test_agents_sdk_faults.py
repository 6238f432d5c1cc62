"""The OpenAI Agents SDK (the pinned openai-agents in .venv-agents) through a faulty hop: the agent
of agents_conversation.py, streaming, recorded through recorder -> hop `gateway` (mitmdump running
the fault addon) -> the reference engine, on Chat Completions and on the Responses API. The hop
cuts the answer of the second model call (the one after the tool's output) mid-stream: 3 events,
a second of silence, the connection dropped; the SDK, its client's retries off, fails the run at
once. Then `sessions`, `check` and the replay through the hop fixed tell the story
(harnesses.faulty_hop_story).

The command line (the engine with `--token-interval 0 --ttft-base 0 --tool-call-rate 1`):

    .venv-agents/bin/python tests/harness/agents_conversation.py --base-url http://127.0.0.1:RECORDER_PORT \\
        --api chat|responses --turns 2 --stream --output-bytes 8000

and the hop

    mitmdump --mode reverse:ENGINE -s addons/faults.py --set proxycheck_fault_stall_after=3 \\
        --set proxycheck_fault_stall_seconds=1 --set proxycheck_fault_from_turn=2

on both APIs (the hop counts a request's turns by the answers in its history: assistant messages in
`messages`, the model's runs of messages and function calls in a Responses API `input`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harnesses import FAULT_TURN, faulty_hop_story, isolated_env, run_through_faulty_hop

CONVERSATION = Path(__file__).with_name("agents_conversation.py")
ENGINE_ARGS = ("--token-interval", "0", "--ttft-base", "0", "--tool-call-rate", "1")
PATHS = {"responses": "/v1/responses", "chat": "/v1/chat/completions"}
OUTPUT_BYTES = 8000


@pytest.mark.timeout(150)
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_check_names_the_hop_that_cut_the_agents_second_model_call(api, agents_python, engines, mitmdumps, tmp_path):
    def argv(base_url: str) -> list[str]:
        return [agents_python, str(CONVERSATION), "--base-url", base_url, "--api", api, "--turns", "2", "--stream",
                "--output-bytes", str(OUTPUT_BYTES)]  # fmt: skip

    faulty = run_through_faulty_hop(mitmdumps, engines(*ENGINE_ARGS), tmp_path / "rec", argv, gate=f"from_turn={FAULT_TURN}",
                                    cwd=tmp_path, env_for=lambda _url: isolated_env(tmp_path / "home"),
                                    timeout=60)  # fmt: skip
    lines = [json.loads(line) for line in faulty.run.done.stdout.splitlines() if line.startswith("{")]
    # The SDK noticed the cut at once: the first user turn fails after its tool call, nothing after.
    assert faulty.run.done.returncode == 1, faulty.run.failure()
    assert [line["turn"] for line in lines] == [1] and not lines[0]["ok"], lines
    assert lines[0]["tool_calls"], lines
    faulty_hop_story(faulty, mitmdumps, PATHS[api], tmp_path)
