"""The fault hop's `active_for`: faults only on flows that start within that many seconds of the
first LLM flow the hop sees (a hop that wedges for a while and then behaves); real mitmdump
processes in front of the reference engine, an httpx client. Each test stops what it starts.
Times are only waited for, never asserted: a wait is always the window plus a wide margin."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
import pytest
from processes import EngineFactory
from test_faults import chat_body, concurrently, log_of, observe

from proxycheck.io.procs import Managed, mitmdump_path, start_mitmdump

ADDON = str(Path(__file__).resolve().parents[2] / "addons" / "faults.py")
WINDOW = 2.0  # seconds the hop stays faulty after its first LLM flow
MARGIN = 2.0  # seconds past the window before a flow counts as surely outside it

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005")


def hop(engine: Managed, *options: str) -> Managed:
    sets = [a for o in options for a in ("--set", f"proxycheck_fault_{o}")]
    return start_mitmdump("--mode", f"reverse:{engine.url}", "-s", ADDON, "--set", "termlog_verbosity=info", *sets)


def test_faults_fire_for_a_while_after_the_first_llm_flow_then_the_hop_behaves(engine: Managed) -> None:
    proc = hop(engine, "stall_after=1", "stall_seconds=1", f"active_for={WINDOW:g}")
    try:
        # The window opens with the first LLM flow, not with the hop: a quiet hop stays faulty, and
        # a request that is no LLM flow does not open it either.
        time.sleep(WINDOW + 0.5)
        assert httpx.get(proc.url + "/health", timeout=10).status_code < 500
        time.sleep(WINDOW + 0.5)
        started = time.monotonic()
        inside = concurrently(proc.url, [chat_body(1), chat_body(2)])
        assert [s.end for s in inside] == ["closed", "closed"], [s.raw for s in inside]  # stalled, then dropped
        assert all(s.status == 200 and len(s.events) == 1 for s in inside)
        time.sleep(max(0.0, started + WINDOW + MARGIN - time.monotonic()))
        after = [observe(proc.url, chat_body(turn)) for turn in (1, 2)]
        assert [s.end for s in after] == ["clean", "clean"]
        assert all(s.status == 200 and s.data[-1] == "[DONE]" for s in after)
        log = log_of(proc)
        assert log.count("proxycheck fault stall_after") == 2
        assert f"active for {WINDOW:g} s since the first LLM flow: over" in log
    finally:
        proc.stop()


def test_zero_means_always(engine: Managed) -> None:
    proc = hop(engine, "stall_after=1", "stall_seconds=0.5", "active_for=0")
    try:
        assert observe(proc.url, chat_body(1)).end == "closed"
        time.sleep(1.5)
        assert observe(proc.url, chat_body(1)).end == "closed"
    finally:
        proc.stop()


def test_a_bad_window_stops_mitmdump_with_a_clear_message(engine: Managed) -> None:
    for value, said in (("-1", "proxycheck_fault_active_for must be a number >= 0, not '-1'"),
                        ("soon", "proxycheck_fault_active_for must be a number, not 'soon'")):  # fmt: skip
        argv = [mitmdump_path(), "-q", "--listen-host", "127.0.0.1", "--listen-port", "0", "--mode",
                f"reverse:{engine.url}", "-s", ADDON, "--set", f"proxycheck_fault_active_for={value}"]  # fmt: skip
        done = subprocess.run(argv, capture_output=True, text=True, timeout=50)
        assert done.returncode != 0
        assert said in done.stdout + done.stderr
