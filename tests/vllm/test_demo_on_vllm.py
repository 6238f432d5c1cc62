"""`proxycheck demo --engine vllm`, run as a user runs it: the demo's story on the real engine.

The demo starts its own vLLM (not the session's `vllm` fixture), so this test must run while no
other engine of the session is up: in test_vllm.py, before the first test that uses `vllm`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from vllm_engine import missing

from proxycheck.io.procs import port_accepts
from proxycheck.io.vllm import MEASURED_START_SECONDS

# The start (about 40 s, minutes on a busy machine, at most START_TIMEOUT) and about a minute of story.
DEMO_TIMEOUT = 420


@pytest.mark.timeout(DEMO_TIMEOUT + 30)
def test_the_demo_runs_on_vllm(tmp_path: Path) -> None:
    reason = missing()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "demo"
    done = run_proxycheck("demo", "--engine", "vllm", "--out", str(out), timeout=DEMO_TIMEOUT)
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown
    # It says how long vLLM's start takes before it waits, and how long it took once ready.
    before = shown.index(f"about {MEASURED_START_SECONDS} s on 2 cores")
    assert re.search(r"vLLM ready in \d+ s", shown[before:]), shown[:2000]
    # The sessions wedged behind the gateway; the verdict names it and the turn the wedge starts...
    found = json.loads((out / "check-run" / "verdict.json").read_text())
    assert found["verdict"] == "proxy" and found["culprit"] == "gateway", found["summary"]
    assert found["first_turn"] == 3
    assert "hop gateway stalls mid-stream from turn 3 on" in shown
    # ...and with the gateway fixed the regression replay is clean.
    fixed = json.loads((out / "fixed-run" / "verdict.json").read_text())
    assert fixed["verdict"] == "not-reproduced"
    assert all(r["failures"] == 0 and r["state"] == "clean" for r in fixed["routes"]), fixed["routes"]
    assert "regression replay clean" in shown
    # Everything it started is stopped, vLLM too: nothing listens on the chain's ports any more.
    chain = (out / "chain.toml").read_text()
    ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", chain)]
    assert len(ports) == 3 and not any(port_accepts("127.0.0.1", p) for p in ports)
