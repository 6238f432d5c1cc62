"""Running the command line from tests: `python -m proxycheck ARGS` in its own process, as a user
would (output captured, time bounded), or `proxycheck.cli.main(argv)` in this one, its exit status
and what it printed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from proxycheck import cli

REPO = Path(__file__).resolve().parents[1]


def proxycheck_argv(*args: str) -> list[str]:
    """argv of `python -m proxycheck ARGS` with this interpreter (for a process a test drives itself)."""
    return [sys.executable, "-m", "proxycheck", *args]


def run_proxycheck(
    *args: str, timeout: float = 60, env: Mapping[str, str] | None = None, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """`python -m proxycheck ARGS` to its end (at most `timeout` seconds), stdout and stderr as text;
    `env` is laid over this process's environment."""
    return subprocess.run(
        proxycheck_argv(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def main_status(*argv: str) -> int:
    """`proxycheck ARGV` in this process: its exit status, argparse's own errors (a SystemExit) too."""
    try:
        return cli.main(list(argv))
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return 1  # sys.exit("message"), as the interpreter would exit


def main_output(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`proxycheck ARGV` in this process: its exit status, and the stdout and stderr it wrote."""
    status = main_status(*argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err
