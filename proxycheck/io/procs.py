"""Process control for the parts proxycheck runs: the reference engine, mitmdump hops, proxies.

A `Managed` process is started in its own process group, waited for until its TCP port accepts
connections (or it exits, which is an error with its output), and stopped by its pid: SIGTERM to
the group, then SIGKILL after a grace period. Every wait is bounded. Output goes to a log file so
a process that writes a lot never blocks on a full pipe, and the log is quoted when it fails.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from proxycheck.core.errors import ProcessError


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Managed:
    """One child process with a TCP port.

    Give `port`, or `port=0` and a `port_pattern`: a regular expression whose first group is the
    port the process reports in its output once it listens (no race for a free port).
    """

    def __init__(
        self,
        args: Sequence[str],
        host: str,
        port: int,
        *,
        name: str | None = None,
        port_pattern: str | None = None,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.args = list(args)
        self.host = host
        self.port = port
        self.name = name or Path(self.args[0]).name
        self._port_pattern = re.compile(port_pattern.encode()) if port_pattern else None
        log_root = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="proxycheck-"))
        self.log_path = log_root / f"{self.name}-{os.getpid()}-{id(self)}.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,  # its own process group: stop() reaches its children too
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def log_tail(self, limit: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 30.0) -> "Managed":
        """Wait until the port accepts; ProcessError (with the log) if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise ProcessError(
                    f"{self.name} exited with status {self.proc.returncode} before listening:\n{self.log_tail()}"
                )
            if not self.port and self._port_pattern is not None:
                found = self._port_pattern.search(self.log_path.read_bytes())
                if found:
                    self.port = int(found.group(1))
            if self.port and port_accepts(self.host, self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise ProcessError(f"{self.name} did not listen within {timeout:.0f} s:\n{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `grace` seconds; returns the exit status."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout=grace)
        else:
            self._signal(signal.SIGKILL)  # children it may have left behind
        self._log.close()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL at once (a crash, as far as the process can tell)."""
        self._signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def _signal(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> "Managed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def python_module(module: str, *args: str) -> list[str]:
    """argv that runs `python -m module args` with this interpreter."""
    return [sys.executable, "-m", module, *args]


def mitmdump_path() -> str:
    """The mitmdump next to this interpreter (the one installed with proxycheck)."""
    candidate = Path(sys.executable).with_name("mitmdump")
    if candidate.exists():
        return str(candidate)
    return "mitmdump"


def start_engine(*args: str, host: str = "127.0.0.1", timeout: float = 30.0, **kw: object) -> Managed:
    """The reference engine on a loopback port the system picks, ready."""
    argv = python_module("proxycheck", "engine", "--listen", f"{host}:0", *args)
    proc = Managed(argv, host, 0, name="engine", port_pattern=r"listening on http://\S+:(\d+)", **kw)  # type: ignore[arg-type]
    return proc.wait_ready(timeout)


def start_mitmdump(
    *args: str, host: str = "127.0.0.1", port: int = 0, timeout: float = 60.0, **kw: object
) -> Managed:
    """mitmdump on a loopback port (0: one the system picks), ready; `args` give its mode,
    scripts and options. Flows are not printed (`flow_detail=0`); addon log lines are."""
    argv = [
        mitmdump_path(), "--listen-host", host, "--listen-port", str(port),
        "--set", "flow_detail=0", "--set", "connection_strategy=lazy", *args,
    ]
    pattern = r"listening at \S+:(\d+)" if port == 0 else None
    proc = Managed(argv, host, port, name="mitmdump", port_pattern=pattern, **kw)  # type: ignore[arg-type]
    return proc.wait_ready(timeout)
