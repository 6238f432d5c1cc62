"""What the harness tests share: where `make test` installs the real harnesses (Claude Code and
Codex CLI from npm into .harness/, the OpenAI Agents SDK into .venv-agents), a home of the test's
own for each harness run, running one bounded, reading the recording it left, and the story of a
faulty hop (`faulty_hop_story`: the harness recorded through a hop that breaks a turn, `sessions`,
`check` and the replay through the hop fixed). The fixtures that find the harnesses (or skip saying
why) are in conftest.py beside this module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cli_runner import run_proxycheck

from proxycheck.io.harness import DUMMY_KEY as DUMMY_KEY  # the harness tests take it from here
from proxycheck.io.harness import harness_env
from proxycheck.io.procs import Managed
from proxycheck.io.recordings import open_recording
from proxycheck.io.runstore import load_run

REPO = Path(__file__).resolve().parents[2]
HARNESS_BIN = REPO / ".harness" / "node_modules" / ".bin"
AGENTS_PYTHON = REPO / ".venv-agents" / "bin" / "python"


def isolated_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for a harness process, as the demo gives one (`proxycheck.io.harness`): PATH
    and the locale of this one, HOME (and every config and cache dir a harness looks at) inside
    `home`, never the user's, no proxy settings nor keys of this process; `extra` laid over it."""
    return harness_env(home, **extra)


def run_harness(argv: list[str], *, cwd: Path, env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a harness to its end, no standard input, at most `timeout` seconds (a harness still
    running then is killed, with the processes it started: its own process group, by its pid; and
    the test fails saying so, with what it had printed). Also killed when the test itself is
    interrupted (pytest-timeout, Ctrl-C)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"{argv[0]} still running after {timeout} s\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}")
    except BaseException:
        _kill_group(proc)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to the process group `proc` leads (its pid: start_new_session made it a leader)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the whole group has already ended


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


Argv = list[str] | Callable[[str], list[str]]  # a command line, or one made from the recorder's URL
EnvFor = Callable[[str], dict[str, str]]  # a harness's environment, made from the recorder's URL


def run_through_recorder(mitmdumps: Any, upstream: Any, recording: Path, argv: Argv, *, cwd: Path, env_for: EnvFor,
                         timeout: float) -> HarnessRun:  # fmt: skip
    """Run `argv` (or `argv(recorder_url)`) with the environment `env_for(recorder_url)` against a
    recorder in front of `upstream` that writes `recording`; the recorder is stopped once it has
    written all."""
    recorder = mitmdumps.recorder(upstream, recording)
    try:
        command = argv(recorder.url) if callable(argv) else argv
        done = run_harness(command, cwd=cwd, env=env_for(recorder.url), timeout=timeout)
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
    finally:
        recorder.stop()
    return HarnessRun(done, recording)


# The faulty hop's story -------------------------------------------------------------------------

# The hop between the recorder and the engine, as the chain file and the verdict name it.
HOP_NAME = "gateway"
# The turn the hop's fault starts at: the harness's first model call (a tool call) goes through, the
# second (after the tool's result) is cut.
FAULT_TURN = 2
# The fault: the hop forwards this many events of an answer, holds the rest CUT_AFTER_SECONDS and
# then drops the connection, the body unfinished (no last chunk). Every harness notices the drop at
# once; a longer silence would be waited out by their own timeouts. (Not the hop's `reset_after`:
# in front of an engine that streams without pauses (`--token-interval 0`) its client gets the
# last chunk after the K-th event, a clean end that an OpenAI client takes for a whole answer.)
CUT_AFTER_EVENTS = 3
CUT_AFTER_SECONDS = 1


@dataclass
class FaultyHopRun:
    """A harness run through recorder -> faulty hop -> engine; the hop and the engine still run."""

    run: HarnessRun
    engine: Managed
    hop: Managed


def run_through_faulty_hop(mitmdumps: Any, engine: Managed, recording: Path, argv: Argv, *, gate: str, cwd: Path,
                           env_for: EnvFor, timeout: float) -> FaultyHopRun:  # fmt: skip
    """Run `argv` as `run_through_recorder` does, the recorder in front of a hop running the fault
    addon in front of `engine`: the hop cuts each answer after CUT_AFTER_EVENTS events once its
    `gate` (a fault option: `from_turn=2`, or `min_body=N` for an API whose body counts no turns)
    lets the request through."""
    hop = mitmdumps.faults(engine, f"stall_after={CUT_AFTER_EVENTS}", f"stall_seconds={CUT_AFTER_SECONDS}", gate)
    run = run_through_recorder(mitmdumps, hop, recording, argv, cwd=cwd, env_for=env_for, timeout=timeout)
    return FaultyHopRun(run, engine, hop)


def write_chain(path: Path, engine: Managed, hop: Managed) -> Path:
    """A chain file: `engine`, and HOP_NAME at `hop`'s URL in front of it."""
    path.write_text(f'engine = "{engine.url}"\n[[hop]]\nname = "{HOP_NAME}"\nurl = "{hop.url}"\n')
    return path


def check_verdict(recording: Path, chain: Path, tmp: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`proxycheck check RECORDING --chain CHAIN --pace fast --json F`: the process and the verdict."""
    verdict = tmp / "verdict.json"
    done = run_proxycheck("check", str(recording), "--chain", str(chain), "--pace", "fast", "--json", str(verdict),
                          "--out", str(tmp / "check-run"), timeout=60)  # fmt: skip
    assert verdict.exists(), f"exit {done.returncode}\nstdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}"
    return done, json.loads(verdict.read_text())


def faulty_hop_story(faulty: FaultyHopRun, mitmdumps: Any, path_part: str, tmp: Path) -> None:
    """What a user of proxycheck sees of a harness run through a hop that cut its turn FAULT_TURN:
    `sessions` shows the conversation as one session whose turns before FAULT_TURN are ok (one with
    a tool call) and whose turn FAULT_TURN failed (every attempt of it, when the harness retried);
    `check` over the chain engine + the hop exits 1 with verdict `proxy`, the hop as the culprit and
    FAULT_TURN as the first failing turn; and with the hop fixed (the same name in the chain file,
    a hop without the fault) `replay` of the recording exits 0 with every exchange ok."""
    conversation = model_sessions(sessions_of(faulty.run.recording), path_part)
    assert len(conversation) == 1, conversation
    turns = conversation[0]["turns"]
    before = [turn for turn in turns if turn["turn"] < FAULT_TURN]
    failing = [turn for turn in turns if turn["turn"] == FAULT_TURN]
    assert [turn["turn"] for turn in turns] == [turn["turn"] for turn in before + failing], turns  # none after
    assert before and all(turn["outcome"] == "ok" for turn in before), turns
    assert any(turn["tool_calls"] for turn in before), turns  # the harness ran a tool and went on
    assert failing and all(turn["outcome"] != "ok" for turn in failing), turns

    done, verdict = check_verdict(faulty.run.recording, write_chain(tmp / "chain.toml", faulty.engine, faulty.hop), tmp)
    assert done.returncode == 1, f"exit {done.returncode}: {verdict['summary']}\n{done.stderr[-2000:]}"
    assert verdict["verdict"] == "proxy" and verdict["culprit"] == HOP_NAME, verdict["summary"]
    assert verdict["first_turn"] == FAULT_TURN, verdict["summary"]
    assert verdict["summary"].startswith(f"hop {HOP_NAME} "), verdict["summary"]

    fixed = mitmdumps.faults(faulty.engine)  # the same hop with its fault off
    out = tmp / "fixed-run"
    replayed = run_proxycheck("replay", str(faulty.run.recording), "--chain",
                              str(write_chain(tmp / "fixed.toml", faulty.engine, fixed)), "--pace", "fast",
                              "--out", str(out), timeout=60)  # fmt: skip
    assert replayed.returncode == 0, f"exit {replayed.returncode}\n{replayed.stdout[-3000:]}\n{replayed.stderr[-3000:]}"
    observations = load_run(out).observations
    assert {obs.route for obs in observations} == {"direct", f"via:{HOP_NAME}"}, observations
    not_ok = [(obs.route, obs.turn, obs.outcome.value) for obs in observations if obs.outcome.value != "ok"]
    assert not not_ok, not_ok
