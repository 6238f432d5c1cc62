"""Process control: started processes are ready when returned, and always stopped by their pid."""

from __future__ import annotations

import os
import sys
import time

import pytest

from proxycheck.core.errors import ProcessError
from proxycheck.io.procs import Managed, start_engine

pytestmark = pytest.mark.timeout(60)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_engine_starts_on_the_port_it_reports_and_stops() -> None:
    proc = start_engine()
    assert proc.port > 0 and proc.alive()
    assert proc.stop() is not None
    assert gone(proc.pid)


def test_a_process_that_dies_early_is_an_error_with_its_output() -> None:
    code = "import sys; print('cannot bind: boom', flush=True); sys.exit(3)"
    proc = Managed([sys.executable, "-c", code], "127.0.0.1", 0, name="dier", port_pattern=r"port (\d+)")
    with pytest.raises(ProcessError, match=r"(?s)exited with status 3.*cannot bind: boom"):
        proc.wait_ready(timeout=20)


def test_a_process_that_never_listens_is_stopped_after_the_timeout() -> None:
    proc = Managed([sys.executable, "-c", "import time; time.sleep(60)"], "127.0.0.1", 0, name="mute",
                   port_pattern=r"port (\d+)")
    with pytest.raises(ProcessError, match="did not listen within 1 s"):
        proc.wait_ready(timeout=1)
    assert gone(proc.pid)


def test_a_process_ignoring_sigterm_is_killed() -> None:
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    proc = Managed([sys.executable, "-c", code], "127.0.0.1", 0, name="stubborn")
    while b"up" not in proc.log_path.read_bytes():
        assert proc.alive()
        time.sleep(0.02)
    proc.stop(grace=0.5)
    assert gone(proc.pid)
