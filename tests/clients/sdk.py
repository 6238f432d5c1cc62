"""Running the official SDKs as the tests' clients.

The SDKs' current releases ride httpx2 (h11 >= 0.16, which mitmproxy 11 refuses), so they live in
a venv of their own, `.venv-sdk`, that `make test` builds from tests/tools/sdk.txt; a client runs
there as a separate process, as a harness does. Without that venv the tests fail, saying how to
build it (a skipped real-client test would hide the very traffic these tests exist for).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK_PYTHON = REPO / ".venv-sdk" / "bin" / "python"
CONVERSATION = Path(__file__).parent / "conversation.py"


@dataclass
class Turns:
    """What the client printed: one dict per turn (see conversation.py), and its stderr."""

    lines: list[dict[str, Any]]
    stderr: str

    @property
    def ok(self) -> bool:
        return bool(self.lines) and all(line["ok"] for line in self.lines)

    @property
    def errors(self) -> list[str]:
        return [line["error"] for line in self.lines if not line["ok"]]


def sdk_python() -> str:
    if not SDK_PYTHON.exists():
        pytest.fail(f"{SDK_PYTHON} is missing: `make test` builds it (make .venv-sdk/.installed)")
    return str(SDK_PYTHON)


def converse(sdk: str, base_url: str, *, within: float = 90.0, **options: Any) -> Turns:
    """Hold conversations with `sdk` ("openai" or "anthropic") against `base_url`; options are
    conversation.py's flags (sessions=2, turns=3, think=0.1, max_tokens=16, timeout=..., stream=False,
    include_usage=True, ...).
    `within` bounds the whole client process (`timeout` is the SDK's own)."""
    argv = [sdk_python(), str(CONVERSATION), "--sdk", sdk, "--base-url", base_url]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is False:
            argv.append("--no-" + name.replace("_", "-"))
        elif value is True:
            argv.append(flag)  # a switch (include_usage=True)
        else:
            argv += [flag, str(value)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=within)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0:
        raise AssertionError(f"the {sdk} client failed ({done.returncode}): {done.stderr[-2000:]}")
    return Turns(lines, done.stderr)
