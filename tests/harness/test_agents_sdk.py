"""The OpenAI Agents SDK (the pinned openai-agents in .venv-agents) against the reference engine
through the recorder: an agent with one function tool (agents_conversation.py, a separate process),
two user turns of one conversation, each a `Runner.run` that calls the tool and answers after its
output, on the Responses API (the SDK's default model) and on Chat Completions.

The command line the test runs (the engine with `--token-interval 0 --ttft-base 0 --tool-call-rate
1`, the recorder in reverse mode in front of it):

    .venv-agents/bin/python tests/harness/agents_conversation.py \\
        --base-url http://127.0.0.1:RECORDER_PORT --api responses|chat --turns 2
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from harnesses import model_sessions, sessions_of

CONVERSATION = Path(__file__).with_name("agents_conversation.py")
ENGINE_ARGS = ("--token-interval", "0", "--ttft-base", "0", "--tool-call-rate", "1")
PATHS = {"responses": "/v1/responses", "chat": "/v1/chat/completions"}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("api", ["responses", "chat"])
def test_an_agent_with_a_function_tool_holds_one_conversation_through_the_recorder(api, agents_python, engines,
                                                                                    mitmdumps, tmp_path):  # fmt: skip
    recorder = mitmdumps.recorder(engines(*ENGINE_ARGS), tmp_path / "rec")
    argv = [agents_python, str(CONVERSATION), "--base-url", recorder.url, "--api", api, "--turns", "2"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, cwd=tmp_path)
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
    finally:
        recorder.stop()
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, f"exit {done.returncode}\nstdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
    assert [line["turn"] for line in lines] == [1, 2] and all(line["ok"] for line in lines), lines
    assert all(line["tool_calls"] and line["final_output"] for line in lines), lines
    conversation = model_sessions(sessions_of(tmp_path / "rec"), PATHS[api])
    assert len(conversation) == 1, conversation
    turns = conversation[0]["turns"]
    # Every model call of both runs is one turn of the one session: the tool calls, the answers after them.
    assert len(turns) == sum(line["model_calls"] for line in lines), turns
    assert all(turn["outcome"] == "ok" for turn in turns), turns
    assert sum(len(turn["tool_calls"]) for turn in turns) == sum(len(line["tool_calls"]) for line in lines), turns
