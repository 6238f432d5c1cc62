"""Ctrl-C, as a user's terminal sends it, to a proxycheck command running in its own process."""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from cli_runner import proxycheck_argv


def as_at_a_terminal() -> None:
    """A child's SIGINT as a terminal's foreground job has it (`preexec_fn`): a test suite started
    in the background (`make test &`) ignores SIGINT, and its children would inherit that and
    never see the Ctrl-C these tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when(argv: list[str], ready: Callable[[str], bool], *, within: float = 60) -> tuple[int, str]:
    """Run `python -m proxycheck ARGV`, send SIGINT once `ready(stderr so far)` says so (or after
    `within` seconds), and return its exit status and stderr. The process is always stopped."""
    with tempfile.TemporaryDirectory() as tmp:
        err_path = Path(tmp) / "stderr"
        with open(err_path, "wb") as err:
            proc = subprocess.Popen(proxycheck_argv(*argv), stdout=subprocess.DEVNULL, stderr=err,
                                    preexec_fn=as_at_a_terminal)  # fmt: skip
        try:
            deadline = time.monotonic() + within
            while proc.poll() is None and time.monotonic() < deadline and not ready(err_path.read_text()):
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            status = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        return status, err_path.read_text()


def lines_in(path: Path, count: int) -> Callable[[str], bool]:
    """Ready once the file at `path` (a run's observations) holds `count` lines."""
    return lambda _: path.exists() and path.read_bytes().count(b"\n") >= count
