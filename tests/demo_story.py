"""What a user sees when `proxycheck demo` told its story, whatever its engine: the gateway named
from the turn the wedge starts, the regression replay with it fixed clean, nothing left listening."""

from __future__ import annotations

import json
import re
from pathlib import Path

from proxycheck.io.procs import port_accepts


def assert_story_told(out: Path, shown: str, first_turn: int = 3, said: str | None = None) -> None:
    """The demo that wrote `out` and printed `shown` named the gateway from `first_turn` (in words
    `said`, by default the agent's stall), replayed clean with it fixed, and stopped everything it
    started."""
    found = json.loads((out / "check-run" / "verdict.json").read_text())
    assert found["verdict"] == "proxy" and found["culprit"] == "gateway", found["summary"]
    assert found["first_turn"] == first_turn
    assert (said or f"hop gateway stalls mid-stream from turn {first_turn} on") in shown
    fixed = json.loads((out / "fixed-run" / "verdict.json").read_text())
    assert fixed["verdict"] == "not-reproduced"
    assert all(r["failures"] == 0 and r["state"] == "clean" for r in fixed["routes"]), fixed["routes"]
    assert "regression replay clean" in shown
    # Nothing listens on the chain's ports any more (the engine's included).
    chain = (out / "chain.toml").read_text()
    ports = [int(p) for p in re.findall(r"127\.0\.0\.1:(\d+)", chain)]
    assert len(ports) == 3 and not any(port_accepts("127.0.0.1", p) for p in ports)
