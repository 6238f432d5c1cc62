"""Codex CLI (the pinned @openai/codex in .harness/) against the reference engine through the
recorder, on the Responses API (Codex no longer speaks chat completions): its requests (instructions,
tools, streamed `/v1/responses`) are what the engine must serve, and its function calls and their
outputs are what `sessions` must group into one conversation.

The command line the test runs (HOME and CODEX_HOME in a temp dir, the working dir holding a
README.md; the engine with `--token-interval 0 --ttft-base 0 --tool-call-rate 1`, the recorder in
reverse mode in front of it):

    CODEX_HOME=TMP/home/.codex PROXYCHECK_DUMMY_KEY=sk-proxycheck-dummy-key HOME=TMP/home \\
    codex exec --strict-config --skip-git-repo-check --sandbox read-only --json -C TMP/project \\
        "Read README.md and tell me what this project is."

with TMP/home/.codex/config.toml (`proxycheck.io.harness.codex_config`): a model provider
`proxycheck` whose base_url is the recorder's + /v1, `wire_api = "responses"`, `env_key =
"PROXYCHECK_DUMMY_KEY"`, no retries.
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

from proxycheck.io.harness import PROMPT, codex_config

ENGINE_ARGS = ("--token-interval", "0", "--ttft-base", "0", "--tool-call-rate", "1")


def codex_argv(codex: str, work: Path) -> list[str]:
    return [codex, "exec", "--strict-config", "--skip-git-repo-check", "--sandbox", "read-only", "--json",
            "-C", str(work), PROMPT]  # fmt: skip


def codex_env(home: Path, base_url: str, *, websocket: bool = False) -> dict[str, str]:
    """Codex's environment, its config.toml the demo's (retries off, so a failing engine shows at
    once; `websocket`: on the Responses API's WebSocket mode)."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(base_url, websocket=websocket))
    return isolated_env(home, CODEX_HOME=str(codex_home), PROXYCHECK_DUMMY_KEY=DUMMY_KEY)


def events(stdout: str) -> list[dict[str, Any]]:
    """The JSON events `codex exec --json` printed, one a line."""
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def codex_run(codex: str, module_engines: Any, module_mitmdumps: Any,
              tmp_path_factory: pytest.TempPathFactory) -> HarnessRun:  # fmt: skip
    """Codex's run of PROMPT, to its end (at most 90 s), through the recorder."""
    tmp = tmp_path_factory.mktemp("codex")
    work = tmp / "project"
    work.mkdir()
    (work / "README.md").write_text("# demo\n\nA small project the harness reads.\n")
    return run_through_recorder(module_mitmdumps, module_engines(*ENGINE_ARGS), tmp / "rec", codex_argv(codex, work),
                                cwd=work, env_for=lambda url: codex_env(tmp / "home", url), timeout=90)  # fmt: skip


@pytest.mark.timeout(150)
def test_codex_ends_its_prompt_well_on_the_responses_api(codex_run):
    assert codex_run.done.returncode == 0, codex_run.failure()
    printed = events(codex_run.done.stdout)
    kinds = [event["type"] for event in printed]
    assert "turn.completed" in kinds and "turn.failed" not in kinds, codex_run.failure()
    answers = [event["item"]["text"] for event in printed
               if event["type"] == "item.completed" and event["item"].get("type") == "agent_message"]  # fmt: skip
    assert answers and answers[-1].strip(), codex_run.failure()


@pytest.mark.timeout(150)
def test_sessions_shows_codex_function_calls_as_one_conversation(codex_run):
    assert codex_run.done.returncode == 0, codex_run.failure()
    conversation = model_sessions(sessions_of(codex_run.recording), "/v1/responses")
    assert len(conversation) == 1, conversation
    turns = conversation[0]["turns"]
    assert len(turns) >= 2 and any(turn["tool_calls"] for turn in turns), turns
    assert all(turn["outcome"] == "ok" for turn in turns), turns
    # Each function call went back to the engine with its output: the loop went on.
    later = request_bodies(codex_run.recording, "/v1/responses")[-1]
    outputs = [item for item in later["input"] if isinstance(item, dict) and item.get("type") == "function_call_output"]
    assert outputs, later["input"][-3:]
