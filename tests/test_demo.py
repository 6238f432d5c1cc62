"""`make demo` (`proxycheck demo`), the README's first command, run as a user runs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from proxycheck.io.procs import port_accepts

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_finds_the_faulty_hop_then_replays_clean(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "demo", f"OUT={out}"],
                          capture_output=True, text=True, timeout=200)  # fmt: skip
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown
    # The verdict names the faulty hop and the turn where the wedge starts...
    found = json.loads((out / "check-run" / "verdict.json").read_text())
    assert found["verdict"] == "proxy" and found["culprit"] == "gateway", found["summary"]
    assert found["first_turn"] == 3
    assert "hop gateway stalls mid-stream from turn 3 on" in shown
    # ...the HTML report is written, and the regression replay after the fix is clean.
    assert 'id="verdict"' in (out / "report.html").read_text()
    fixed = json.loads((out / "fixed-run" / "verdict.json").read_text())
    assert fixed["verdict"] == "not-reproduced"
    assert all(r["failures"] == 0 and r["state"] == "clean" for r in fixed["routes"]), fixed["routes"]
    assert "regression replay clean" in shown
    # Everything it started is stopped: nothing listens on the chain's ports any more.
    chain = (out / "chain.toml").read_text()
    ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", chain)]
    assert len(ports) == 3 and not any(port_accepts("127.0.0.1", p) for p in ports)
