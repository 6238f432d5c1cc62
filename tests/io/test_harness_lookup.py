"""proxycheck.io.harness: where a harness is found (the harness folder, then PATH), and a run that
outlives its deadline is stopped with its whole process group."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from proxycheck.io.harness import CLAUDE_CODE, CODEX, HARNESS_DIR_VARIABLE, find_harness, harness_env, run_harness


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.mark.timeout(10)
def test_the_harness_folder_comes_before_path_and_path_before_nothing(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    folder = tmp_path / "harnesses"
    on_path = _executable(tmp_path / "bin" / "claude")
    monkeypatch.setenv(HARNESS_DIR_VARIABLE, str(folder))
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert find_harness(CLAUDE_CODE) == str(on_path)
    installed = _executable(folder / "node_modules" / ".bin" / "claude")
    assert find_harness(CLAUDE_CODE) == str(installed)
    assert find_harness(CODEX) is None


@pytest.mark.timeout(30)
def test_a_harness_past_its_deadline_is_stopped_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    t0 = time.monotonic()
    done = run_harness(["/bin/sh", "-c", script], cwd=tmp_path, env=harness_env(tmp_path / "home"), timeout=1.0,
                       log=tmp_path / "harness.log")  # fmt: skip
    assert done.status is None and time.monotonic() - t0 < 15
    child = int(pid_file.read_text())
    assert _gone(child, within=5.0), f"the harness's child {child} still runs"
    assert stat.S_IMODE((tmp_path / "harness.log").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700


def _gone(pid: int, within: float) -> bool:
    """Whether `pid` is gone (or a zombie waiting for init to reap it) within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z"):
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False
