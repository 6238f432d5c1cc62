"""Readiness of vLLM as `proxycheck.io.vllm` waits for it, against stand-in processes that behave
as vLLM does at its start (its port bound before the model is loaded, GET /health answering 200
only once it is), and the bounded paths: a process that exits while starting, and one never ready,
are errors quoting them, and are stopped by their pid."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest

from proxycheck.core.errors import ProcessError
from proxycheck.io.procs import Managed, free_port
from proxycheck.io.vllm import VllmSetup, wait_ready

pytestmark = pytest.mark.timeout(60)

# Binds at once; GET /health is 503 for `LOADING` seconds (the model loading), then 200.
HEALTH_LATER = """
import http.server, sys, time
start, loading = time.monotonic(), float(sys.argv[2])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ready = self.path == "/health" and time.monotonic() - start >= loading
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def stand_in(script: str, *args: str) -> Managed:
    port = free_port()
    return Managed([sys.executable, "-c", script, str(port), *args], "127.0.0.1", port, name="vllm")


def test_an_engine_whose_port_accepts_before_it_is_ready_is_waited_for_until_health_says_so() -> None:
    proc = stand_in(HEALTH_LATER, "1.5")
    try:
        assert wait_ready(proc, timeout=30) is proc and proc.alive()
        # Ready means ready, not a bound port: /health answers 200 the moment the wait returns.
        with urllib.request.urlopen(proc.url + "/health", timeout=5) as answer:
            assert answer.status == 200
    finally:
        proc.stop()


def test_an_engine_never_ready_is_an_error_within_the_bound_and_is_stopped() -> None:
    proc = stand_in(HEALTH_LATER, "3600")
    with pytest.raises(ProcessError, match="vllm was not ready within 2 s"):
        wait_ready(proc, timeout=2)
    assert not proc.alive()


def test_an_engine_that_exits_while_starting_is_an_error_quoting_its_output() -> None:
    proc = stand_in("import sys; print('no model here'); sys.exit(3)")
    with pytest.raises(ProcessError, match=r"(?s)vllm exited with status 3 before it was ready:.*no model here"):
        wait_ready(proc, timeout=30)
    assert not proc.alive()


def test_a_setup_missing_its_python_or_its_model_says_which_and_how_to_build_it(tmp_path: Path) -> None:
    setup = VllmSetup.of_project(tmp_path)
    assert setup.missing() == f"vLLM is not installed ({setup.python} missing): `make vllm` builds it"
    setup.python.parent.mkdir(parents=True)
    setup.python.write_text("")
    assert setup.missing() == f"the model is not built ({setup.model}/config.json missing): `make vllm` builds it"
    setup.model.mkdir(parents=True)
    (setup.model / "config.json").write_text("{}")
    assert setup.missing() is None
