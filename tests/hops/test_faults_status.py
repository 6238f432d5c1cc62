"""The fault hop's `status_first`: the first N LLM requests past the gates answered with a status
(a gateway timing out while the engine recovers), the ones after passed through; real mitmdump
processes in front of the reference engine, an httpx client. Each test stops what it starts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from processes import EngineFactory
from test_faults import chat_body, observe, sha

from proxycheck.io.procs import Managed, mitmdump_path, start_mitmdump

ADDON = str(Path(__file__).resolve().parents[2] / "addons" / "faults.py")

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005")


def hop(engine: Managed, *options: str) -> Managed:
    sets = [a for o in options for a in ("--set", f"proxycheck_fault_{o}")]
    return start_mitmdump("--mode", f"reverse:{engine.url}", "-s", ADDON, *sets)


def test_the_first_requests_of_a_turn_get_the_status_then_they_pass(engine: Managed) -> None:
    proc = hop(engine, "status_first=2", "from_turn=2")
    try:
        first = observe(proc.url, chat_body(1))
        assert first.status == 200 and first.end == "clean"  # turn 1: before from_turn
        body = chat_body(2)
        tries = [observe(proc.url, body) for _ in range(3)]
        assert [t.status for t in tries] == [504, 504, 200]
        assert all("x-proxycheck-request-sha256" not in t.headers for t in tries[:2])  # the engine never saw them
        assert "answered 504" in json.loads(tries[0].raw)["error"]["message"]
        assert tries[2].headers["x-proxycheck-request-sha256"] == sha(body) and tries[2].end == "clean"
    finally:
        proc.stop()


def test_the_status_is_the_one_asked_for(engine: Managed) -> None:
    proc = hop(engine, "status_first=1", "status_code=502")
    try:
        assert [observe(proc.url, chat_body(1)).status for _ in range(2)] == [502, 200]
    finally:
        proc.stop()


def test_a_status_that_is_no_http_status_stops_mitmdump_with_a_clear_message(engine: Managed) -> None:
    argv = [mitmdump_path(), "-q", "--listen-host", "127.0.0.1", "--listen-port", "0", "--mode",
            f"reverse:{engine.url}", "-s", ADDON, "--set", "proxycheck_fault_status_code=1000"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=50)
    assert done.returncode != 0
    assert "proxycheck_fault_status_code must be an HTTP status (100-599), not 1000" in done.stdout + done.stderr
