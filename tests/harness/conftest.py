"""The fixtures that find the real harnesses `make test` installs: `claude_code` and `codex` (the
pinned npm packages in .harness/) and `agents_python` (.venv-agents, the pinned openai-agents).

`make test` installs them when it can (Node and npm from Debian as root, the npm packages pinned by
tests/tools/harness/, the Agents SDK pinned by tests/tools/agents.txt). Where it could not (not
root and no npm, no registry), a test that needs one skips, saying which is missing and how to
install it: a harness is an outside tool, never a reason for the suite to fail.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from harnesses import AGENTS_PYTHON, HARNESS_BIN


def _npm_harness(name: str, package: str) -> str:
    """The path of an npm harness's command in .harness/, or skip saying why it is not there."""
    path = HARNESS_BIN / name
    if not os.access(path, os.X_OK):
        pytest.skip(f"{package} is not installed in .harness/ (`make test` installs it with npm; "
                    "it needs node and npm, from Debian as root)")  # fmt: skip
    try:
        version = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{package} in .harness/ does not run here ({exc})")
    if version.returncode != 0:
        pytest.skip(f"{package} in .harness/ does not run here: {version.stderr.strip()[-300:]}")
    return str(path)


@pytest.fixture(scope="session")
def claude_code() -> str:
    """The `claude` command of the pinned @anthropic-ai/claude-code, or skip."""
    return _npm_harness("claude", "@anthropic-ai/claude-code")


@pytest.fixture(scope="session")
def codex() -> str:
    """The `codex` command of the pinned @openai/codex, or skip."""
    return _npm_harness("codex", "@openai/codex")


@pytest.fixture(scope="session")
def agents_python() -> str:
    """The python of .venv-agents, where the pinned openai-agents imports, or skip."""
    if not AGENTS_PYTHON.exists():
        pytest.skip(f"{AGENTS_PYTHON} is missing (`make test` builds it: make .venv-agents/.installed)")
    probe = subprocess.run([str(AGENTS_PYTHON), "-c", "import agents"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"openai-agents does not import in .venv-agents: {probe.stderr.strip()[-300:]}")
    return str(AGENTS_PYTHON)
