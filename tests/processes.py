"""The processes tests start: the reference engine and mitmdump hops, each one kept by the factory
that started it and stopped by its pid when the fixture holding that factory ends, whether the test
passed or failed. The fixtures (`engines`, `mitmdumps` and their module-scoped twins) are in
conftest.py; this module owns what they hand out, and `RecordProcess` (`proxycheck record` as a
process the test stops itself)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from cli_runner import proxycheck_argv
from ctrl_c import as_at_a_terminal

from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed, mitmdump_path, start_engine, start_mitmdump

REPO = Path(__file__).resolve().parents[1]
ADDONS = REPO / "addons"
FAULTS = ADDONS / "faults.py"
RECORD = ADDONS / "record.py"


class _Started:
    """Every process this factory started, stopped together (newest first: a hop before its upstream)."""

    def __init__(self) -> None:
        self._started: list[Managed] = []

    def _keep(self, proc: Managed) -> Managed:
        self._started.append(proc)
        return proc

    def stop_all(self) -> None:
        while self._started:
            self._started.pop().stop()  # by pid: SIGTERM to its group, SIGKILL after a grace period


class EngineFactory(_Started):
    """`engines(*args)`: `python -m proxycheck engine --listen 127.0.0.1:0 ARGS` (`--fault SPEC`,
    `--token-interval`, `--sampling`, ...), ready on the port the system picked."""

    def __call__(self, *args: str) -> Managed:
        return self._keep(start_engine(*args))


class MitmdumpFactory(_Started):
    """`mitmdumps(*args)`: mitmdump with those arguments (its mode, scripts, options), ready on the
    port the system picked; `faults(...)` and `recorder(...)` for the two addons in reverse mode."""

    def __call__(self, *args: str, file_limit: int | None = None) -> Managed:
        """`file_limit`: no file mitmdump writes may grow past that many bytes (RLIMIT_FSIZE, set by
        `prlimit`; Python ignores SIGXFSZ, so a write past it fails with EFBIG, as on a full disk)."""
        if file_limit is None:
            return self._keep(start_mitmdump(*args))
        argv = [*_file_limited(file_limit), mitmdump_path(), "--listen-host", "127.0.0.1", "--listen-port", "0",
                "--set", "flow_detail=0", "--set", "connection_strategy=lazy", *args]  # fmt: skip
        proc = self._keep(Managed(argv, "127.0.0.1", 0, name="mitmdump", port_pattern=r"listening at \S+:(\d+)"))
        return proc.wait_ready(60)

    def faults(self, upstream: Managed | str, *options: str) -> Managed:
        """A reverse hop in front of `upstream` running addons/faults.py, each of `options`
        (`name=value`) set as its `proxycheck_fault_name`."""
        sets = [arg for option in options for arg in ("--set", f"proxycheck_fault_{option}")]
        return self("--mode", f"reverse:{_url(upstream)}", "-s", str(FAULTS), *sets)

    def recorder(self, upstream: Managed | str, out: Path, *args: str, file_limit: int | None = None) -> Managed:
        """A reverse hop in front of `upstream` running addons/record.py, recording into `out`
        (`file_limit`: as for the factory itself, a disk that fills)."""
        return self("--mode", f"reverse:{_url(upstream)}", "-s", str(RECORD), "--set", f"proxycheck_out={out}", *args,
                    file_limit=file_limit)  # fmt: skip

    def record_agent(self, upstream: Managed | str, out: Path, **options: object) -> Path:
        """A recording in `out` of the synthetic agent's sessions (`options`: AgentOptions fields) made
        through a recorder in front of `upstream`; every session must end well. The recorder is
        stopped once it has written all; returns `out`."""
        recorder = self.recorder(upstream, out)
        assert asyncio.run(run_agent(AgentOptions(base_url=recorder.url, **options))).ok  # type: ignore[arg-type]
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
        recorder.stop()
        return out


class RecordProcess:
    """`proxycheck record ...` in the background (the command as a user runs it), its output in
    files in `tmp`; `close()` always stops it, by its pid."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.out_path, self.err_path = tmp / "record.out", tmp / "record.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                proxycheck_argv("record", *args),
                stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd=REPO,
                env={**os.environ, "COLUMNS": "200"}, preexec_fn=as_at_a_terminal,
            )  # fmt: skip
        self.address = self._wait_listening()

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def _wait_listening(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"listening at (\S+:\d+)", self.err_path.read_text())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise AssertionError(f"record exited early: {self.err_path.read_text()}")
            time.sleep(0.05)
        self.close()
        raise AssertionError(f"record did not listen: {self.err_path.read_text()}")

    def interrupt(self, timeout: float = 30) -> int:
        """Ctrl-C, as a terminal sends it; the exit status."""
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def close(self) -> None:
        """Always stops it: SIGTERM (it stops its mitmdump), then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def write_chain(path: Path, engine: str, hops: list[tuple[str, str]]) -> Path:
    """A chain file at `path`: the engine's URL and each (name, url) hop, outermost first."""
    lines = [f'engine = "{engine}"']
    for name, url in hops:
        lines += ["[[hop]]", f'name = "{name}"', f'url = "{url}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def _file_limited(limit: int) -> list[str]:
    """The argv prefix that runs a command with RLIMIT_FSIZE at `limit` bytes."""
    if shutil.which("prlimit"):
        return ["prlimit", f"--fsize={limit}", "--"]
    setter = (f"import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
              "os.execv(sys.argv[1], sys.argv[1:])")  # fmt: skip
    return [sys.executable, "-c", setter]


def _url(upstream: Managed | str) -> str:
    return upstream if isinstance(upstream, str) else upstream.url


Factory = TypeVar("Factory", EngineFactory, MitmdumpFactory)


def stopped_at_the_end(factory: Factory) -> Iterator[Factory]:
    """The body of a fixture that hands out `factory` and stops what it started at teardown."""
    try:
        yield factory
    finally:
        factory.stop_all()
