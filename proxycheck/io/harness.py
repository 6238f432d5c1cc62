"""Real agent harnesses as clients: finding an installed Claude Code or Codex CLI, the command line
and the environment that point it at a base URL, and running it to its end, bounded.

Where a harness is looked for: the `.harness/` folder of the project (`make test` installs the
pinned npm packages there: `.harness/node_modules/.bin/claude` and `codex`), or the folder
`PROXYCHECK_HARNESS_DIR` names instead, then PATH. A harness runs with an environment of its own:
PATH and the locale of this process, HOME (and every config and cache dir it looks at) in a folder
given by the caller, a dummy API key, no proxy settings nor keys of this process. Claude Code runs
`-p` with read-only tools; Codex runs `exec` with a read-only sandbox and a custom model provider
on the Responses API (over HTTP by default; with `websocket`, its WebSocket mode). Neither
retries a failed request, so a wedge ends the run instead of starting it again.

A run is one process in its own process group, its output in a log file; at its deadline (or on
Ctrl-C) the group gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from proxycheck.io.outputs import make_dirs, open_private, write_file

# The project's own folder of harnesses (proxycheck/io/harness.py -> the project's root).
PROJECT_HARNESS_DIR = Path(__file__).resolve().parents[2] / ".harness"
HARNESS_DIR_VARIABLE = "PROXYCHECK_HARNESS_DIR"
DUMMY_KEY = "sk-proxycheck-dummy-key"
PROMPT = "Read README.md and tell me what this project is."
_KEPT_VARIABLES = ("PATH", "LANG", "LC_ALL", "TERM")

CODEX_CONFIG = """model = "proxycheck-model"
model_provider = "proxycheck"

[model_providers.proxycheck]
name = "proxycheck reference engine"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "PROXYCHECK_DUMMY_KEY"
request_max_retries = 0
stream_max_retries = 0
"""
# Lines added to CODEX_CONFIG's provider table for the Responses API's WebSocket mode: one socket
# per session (`GET /v1/responses` upgraded). Where the upgrade is refused, Codex falls back to
# HTTPS (at once with the retries above off; after its reconnect retries, with backoff, otherwise).
CODEX_WEBSOCKET = "supports_websockets = true\n"


@dataclass(frozen=True, slots=True)
class HarnessKind:
    """One harness proxycheck can drive: its `--harness` name, what users call it, its command and
    where it comes from."""

    name: str
    title: str
    command: str
    package: str
    path_part: str  # the API path its conversation goes to


CLAUDE_CODE = HarnessKind("claude-code", "Claude Code", "claude", "@anthropic-ai/claude-code", "/v1/messages")
CODEX = HarnessKind("codex", "Codex CLI", "codex", "@openai/codex", "/v1/responses")
HARNESSES = {kind.name: kind for kind in (CLAUDE_CODE, CODEX)}


def harness_dir() -> Path:
    """The folder of npm-installed harnesses looked in before PATH."""
    named = os.environ.get(HARNESS_DIR_VARIABLE)
    return Path(named) if named else PROJECT_HARNESS_DIR


def find_harness(kind: HarnessKind) -> str | None:
    """The path of the harness's command (the harness folder first, then PATH), None when neither has it."""
    candidate = harness_dir() / "node_modules" / ".bin" / kind.command
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(kind.command)


def not_installed(kind: HarnessKind) -> str:
    """What to say when the harness is missing: how to install it."""
    return (f"{kind.title} is not installed (make test installs it into .harness/, "
            f"or npm install -g {kind.package})")  # fmt: skip


def harness_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a harness process: PATH and the locale of this one, HOME and the XDG dirs
    inside `home` (created 0700), nothing else of this process; `extra` laid over it."""
    make_dirs(home)
    kept = {name: os.environ[name] for name in _KEPT_VARIABLES if name in os.environ}
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


def codex_config(base_url: str, *, websocket: bool = False) -> str:
    """Codex's config.toml: CODEX_CONFIG at `base_url`, with its WebSocket mode when `websocket`."""
    return CODEX_CONFIG.format(base_url=base_url) + (CODEX_WEBSOCKET if websocket else "")


def harness_command(kind: HarnessKind, command: str, *, base_url: str, work: Path, home: Path,
                    websocket: bool = False) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """argv and environment that run `command` (the harness `kind`) on PROMPT in `work`, its requests
    to `base_url`, its home in `home`; `websocket`: Codex on the Responses API's WebSocket mode
    (Claude Code has none)."""
    if kind is CLAUDE_CODE:
        tools = ["Read", "Glob", "Grep"]
        argv = [command, "-p", PROMPT, "--output-format", "json", "--bare",
                "--tools", *tools, "--allowedTools", *tools, "--no-session-persistence"]  # fmt: skip
        env = harness_env(home, ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY=DUMMY_KEY,
                          CLAUDE_CONFIG_DIR=str(home / ".claude"), CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                          CLAUDE_CODE_MAX_RETRIES="0", DISABLE_AUTOUPDATER="1", DISABLE_TELEMETRY="1")  # fmt: skip
        return argv, env
    codex_home = home / ".codex"
    write_file(codex_home / "config.toml", codex_config(base_url, websocket=websocket))
    argv = [command, "exec", "--strict-config", "--skip-git-repo-check", "--sandbox", "read-only", "--json",
            "-C", str(work), PROMPT]  # fmt: skip
    return argv, harness_env(home, CODEX_HOME=str(codex_home), PROXYCHECK_DUMMY_KEY=DUMMY_KEY)


@dataclass(frozen=True, slots=True)
class HarnessResult:
    """How a harness run ended: its exit status (None: stopped at its deadline) and how long it took."""

    status: int | None
    seconds: float
    log: Path


def run_harness(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float, log: Path) -> HarnessResult:
    """Run `argv` to its end, no standard input, stdout and stderr to `log` (0600); at `timeout`
    seconds, or on Ctrl-C, its process group is stopped (and Ctrl-C raised on)."""
    t0 = time.monotonic()
    descriptor = open_private(log)
    with os.fdopen(descriptor, "wb") as output:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            status: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = None
        finally:
            _stop_group(proc)
    return HarnessResult(status, time.monotonic() - t0, log)


def _stop_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the process group if its leader still runs, SIGKILL after `grace` seconds; then
    SIGKILL whatever the group still holds (children a harness that has exited left behind)."""
    if proc.poll() is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    _signal_group(proc, signal.SIGKILL)
    proc.wait(timeout=grace)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
