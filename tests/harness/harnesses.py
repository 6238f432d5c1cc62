"""What the harness tests share: where `make test` installs the real harnesses (Claude Code and
Codex CLI from npm into .harness/, the OpenAI Agents SDK into .venv-agents), a home of the test's
own for each harness run, running one bounded, and reading the recording it left. The fixtures that
find the harnesses (or skip saying why) are in conftest.py beside this module."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli_runner import run_proxycheck

from proxycheck.io.recordings import open_recording

REPO = Path(__file__).resolve().parents[2]
HARNESS_BIN = REPO / ".harness" / "node_modules" / ".bin"
AGENTS_PYTHON = REPO / ".venv-agents" / "bin" / "python"
DUMMY_KEY = "sk-proxycheck-dummy-key"


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for a harness process: PATH and the locale of this one, HOME (and every config
    and cache dir a harness looks at) inside `home`, never the user's, no proxy settings nor keys
    of this process; `extra` laid over it."""
    home.mkdir(parents=True, exist_ok=True)
    kept = {name: os.environ[name] for name in ("PATH", "LANG", "LC_ALL", "TERM") if name in os.environ}
    return {
        **kept,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "TMPDIR": str(home),
        "NO_COLOR": "1",
        **extra,
    }


def run_harness(argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a harness to its end, no standard input, at most `timeout` seconds (a harness still
    running then is killed and the test fails saying so, with what it had printed)."""
    try:
        return subprocess.run(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(f"{argv[0]} still running after {timeout} s\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")


def sessions_of(recording: Path) -> dict[str, Any]:
    """`proxycheck sessions RECORDING --json`, parsed (it must exit 0)."""
    done = run_proxycheck("sessions", str(recording), "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def model_sessions(document: dict[str, Any], path_part: str) -> list[dict[str, Any]]:
    """The sessions whose turns went to a path containing `path_part` (a harness also sends
    side requests, e.g. token counts, that are not the conversation)."""
    return [s for s in document["sessions"] if any(path_part in turn["path"] for turn in s["turns"])]


def request_bodies(recording: Path, path_part: str) -> list[dict[str, Any]]:
    """The JSON request bodies the recording holds for paths containing `path_part`, in order."""
    bodies = []
    loaded = open_recording(str(recording)).recording
    for exchange in loaded.exchanges:
        if path_part in exchange.path and exchange.body:
            try:
                body = json.loads(loaded.request_body(exchange))
            except ValueError:
                continue
            if isinstance(body, dict):
                bodies.append(body)
    return bodies


@dataclass
class HarnessRun:
    """A harness run to its end through a recorder: what it printed and where the recording is."""

    done: subprocess.CompletedProcess[str]
    recording: Path

    def failure(self) -> str:
        return (f"exit {self.done.returncode}\nstdout: {self.done.stdout[-3000:]}\n"
                f"stderr: {self.done.stderr[-3000:]}")  # fmt: skip


def run_through_recorder(mitmdumps: Any, upstream: Any, recording: Path, argv: list[str], *, cwd: Path,
                         env_for: Callable[[str], dict[str, str]], timeout: float) -> HarnessRun:  # fmt: skip
    """Run `argv` with the environment `env_for(recorder_url)` against a recorder in front of
    `upstream` that writes `recording`; the recorder is stopped once it has written all."""
    recorder = mitmdumps.recorder(upstream, recording)
    try:
        done = run_harness(argv, cwd=cwd, env=env_for(recorder.url), timeout=timeout)
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
    finally:
        recorder.stop()
    return HarnessRun(done, recording)
