"""Claude Code (the pinned @anthropic-ai/claude-code in .harness/) against the reference engine
through the recorder: a real harness's requests (its system prompt, tool schemas, betas, side
requests) are what the engine must serve, and the recording it leaves is what `sessions` must group.

One run serves the module's tests. Its command line (HOME, CLAUDE_CONFIG_DIR and the working dir,
which holds a README.md, in a temp dir; the engine with `--token-interval 0 --ttft-base 0
--tool-call-rate 1`, the recorder in reverse mode in front of it):

    ANTHROPIC_BASE_URL=http://127.0.0.1:RECORDER_PORT ANTHROPIC_API_KEY=sk-proxycheck-dummy-key \\
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 HOME=TMP/home CLAUDE_CONFIG_DIR=TMP/home/.claude \\
    claude -p "Read README.md and tell me what this project is." --output-format json --bare \\
        --tools Read Glob Grep --allowedTools Read Glob Grep --no-session-persistence
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harnesses import (
    DUMMY_KEY,
    HarnessRun,
    isolated_env,
    model_sessions,
    request_bodies,
    run_through_recorder,
    sessions_of,
)

from proxycheck.io.harness import PROMPT

READ_ONLY_TOOLS = ["Read", "Glob", "Grep"]
# The shared run streams without waiting; every turn offering tools answers with a tool call, so the
# loop has turns to group.
ENGINE_ARGS = ("--token-interval", "0", "--ttft-base", "0", "--tool-call-rate", "1")
# What "a short answer" means to a user of a harness asking for 128k tokens.
SHORT_ANSWER_TOKENS = 8192


def claude_argv(claude: str) -> list[str]:
    return [claude, "-p", PROMPT, "--output-format", "json", "--bare",
            "--tools", *READ_ONLY_TOOLS, "--allowedTools", *READ_ONLY_TOOLS, "--no-session-persistence"]  # fmt: skip


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    return isolated_env(home, ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY=DUMMY_KEY,
                        CLAUDE_CONFIG_DIR=str(home / ".claude"), CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                        DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1")  # fmt: skip


@pytest.fixture(scope="module")
def claude_run(claude_code: str, module_engines: Any, module_mitmdumps: Any,
               tmp_path_factory: pytest.TempPathFactory) -> HarnessRun:  # fmt: skip
    """Claude Code's run of PROMPT, to its end (at most 90 s), through the recorder."""
    tmp = tmp_path_factory.mktemp("claude")
    work = tmp / "project"
    work.mkdir()
    (work / "README.md").write_text("# demo\n\nA small project the harness reads.\n")
    return run_through_recorder(module_mitmdumps, module_engines(*ENGINE_ARGS), tmp / "rec", claude_argv(claude_code),
                                cwd=work, env_for=lambda url: claude_env(tmp / "home", url), timeout=90)  # fmt: skip


@pytest.mark.timeout(150)
def test_claude_code_ends_its_prompt_well_and_sessions_shows_one_conversation(claude_run):
    assert claude_run.done.returncode == 0, claude_run.failure()
    result = json.loads(claude_run.done.stdout)
    assert result["is_error"] is False, result
    assert result["num_turns"] >= 2, result  # at least one tool call and the answer after its result
    conversation = model_sessions(sessions_of(claude_run.recording), "/v1/messages")
    assert len(conversation) == 1, conversation
    assert conversation[0]["turn_count"] >= 2
    assert any(turn["tool_calls"] for turn in conversation[0]["turns"]), conversation[0]["turns"]


@pytest.mark.timeout(150)
def test_claude_code_runs_the_engines_tool_calls_and_gets_real_results(claude_run):
    """The engine's tool arguments are valid against the offered schema, so Claude Code runs the
    calls (no tool_use_error) and the loop goes on with real tool results."""
    assert claude_run.done.returncode == 0, claude_run.failure()
    results = [block for body in request_bodies(claude_run.recording, "/v1/messages")
               for message in body.get("messages", []) if isinstance(message.get("content"), list)
               for block in message["content"]
               if isinstance(block, dict) and block.get("type") == "tool_result"]  # fmt: skip
    assert results, "no tool result went back to the engine"
    failed = [block for block in results if block.get("is_error")]
    assert not failed, failed[:3]


@pytest.mark.timeout(150)
def test_claude_code_at_the_engines_own_pace_gets_short_answers_and_ends_within_a_minute(claude_code, engines,
                                                                                        mitmdumps, tmp_path):  # fmt: skip
    """Claude Code asks for max_tokens=128000: at the engine's default pace (0.02 s a token) an answer
    that long would stream for 43 minutes; the engine's answer cap keeps it short, and `usage` says so."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "README.md").write_text("# demo\n")
    run = run_through_recorder(mitmdumps, engines("--tool-call-rate", "1"), tmp_path / "rec", claude_argv(claude_code),
                               cwd=work, env_for=lambda url: claude_env(tmp_path / "home", url), timeout=60)  # fmt: skip
    assert run.done.returncode == 0, run.failure()
    conversation = model_sessions(sessions_of(run.recording), "/v1/messages")
    lengths = [turn["completion_tokens"] for session in conversation for turn in session["turns"]]
    assert lengths and all(length is not None and length <= SHORT_ANSWER_TOKENS for length in lengths), lengths
    assert json.loads(run.done.stdout)["usage"]["output_tokens"] == sum(lengths), run.done.stdout[:2000]
