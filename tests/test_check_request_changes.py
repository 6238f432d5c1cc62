"""`proxycheck check` on hops that rewrite request bodies: re-serializing one is healthy, trimming
the context is `request_mutated` with what was dropped.

Once per module: the reference engine, a recording of 1 session x 4 turns made through the
recorder by the synthetic agent, and two mitmdump hops running addons/faults.py in front of the
engine: one that re-serializes every JSON body (other member order, spacing, escapes, `1.0` for
`1`: what LiteLLM-like gateways do) and one that keeps only the last 2 messages (a context
trimmer). Every process is stopped by the fixture, also on failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from processes import EngineFactory, MitmdumpFactory
from test_check import FAST, check, verdict_of

from proxycheck.io.procs import Managed
from proxycheck.io.runstore import load_run
from proxycheck.io.storage import load

pytestmark = pytest.mark.timeout(120)


@dataclass
class World:
    engine: Managed
    recording: Path
    hops: dict[str, Managed]

    def chain(self, tmp: Path, hop: str) -> Path:
        path = tmp / "chain.toml"
        path.write_text(f'engine = "{self.engine.url}"\n[[hop]]\nname = "{hop}"\nurl = "{self.hops[hop].url}"\n')
        return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
          module_mitmdumps: MitmdumpFactory) -> World:  # fmt: skip
    engine = module_engines("--token-interval", "0.004", "--ttft-per-kb", "0", "--tool-call-rate", "0.6")
    out = module_mitmdumps.record_agent(engine, tmp_path_factory.mktemp("rec") / "recording", sessions=1, turns=4,
                                        think=0.2, max_tokens=24)  # fmt: skip
    hops = {name: module_mitmdumps.faults(engine, fault)
            for name, fault in (("gateway", "reserialize=true"), ("trimmer", "truncate_messages=2"))}  # fmt: skip
    return World(engine, out, hops)


def test_a_hop_that_re_serializes_every_body_is_healthy(world: World, tmp_path: Path) -> None:
    out, path = tmp_path / "run", tmp_path / "v.json"
    status = check(tmp_path, str(world.recording), "--chain", str(world.chain(tmp_path, "gateway")), *FAST,
                   "--out", str(out), "--json", str(path))  # fmt: skip
    doc = verdict_of(path)
    assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
    # No failure of any kind (a loaded machine may make a hop `slow`: a degradation, reported only).
    assert all(set(r["outcomes"]) <= {"ok", "slow", "buffered"} for r in doc["routes"]), doc["routes"]
    # The engine did get other bytes through the hop: the same content is what made it healthy.
    via = [o for o in load_run(out).observations if o.route == "via:gateway"]
    assert via and all(o.response_header("x-proxycheck-request-sha256") != o.request_sha256 for o in via)


def expected_diff(body: bytes) -> str | None:
    """What a hop keeping the leading system messages and the last 2 others does to `body`, in
    the words of the finding; None when it has nothing to cut."""
    messages = json.loads(body)["messages"]
    lead = 0
    while lead < len(messages) and messages[lead].get("role") in ("system", "developer"):
        lead += 1
    n = len(messages)
    if n - lead <= 2:
        return None
    first, last = lead + 1, n - 2  # 1-based, the dropped span
    if lead == 0:
        dropped = f"the first {last} dropped"
    else:
        dropped = f"message {first} dropped" if first == last else f"messages {first}-{last} dropped"
    return f"messages {n} -> {lead + 2}: {dropped}"


def test_a_hop_that_trims_the_context_is_named_with_what_it_dropped(world: World, tmp_path: Path) -> None:
    out, path = tmp_path / "run", tmp_path / "v.json"
    status = check(tmp_path, str(world.recording), "--chain", str(world.chain(tmp_path, "trimmer")), *FAST,
                   "--out", str(out), "--json", str(path))  # fmt: skip
    doc = verdict_of(path)
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "trimmer", doc["summary"]
    recording = load(world.recording)
    bodies = {ex.xid: recording.request_body(ex) for ex in recording.exchanges}
    via = [o for o in load_run(out).observations if o.route == "via:trimmer"]
    assert via
    for obs in via:
        want = expected_diff(bodies[obs.xid])
        if want is None:
            assert obs.outcome.value == "ok", obs.detail
        else:
            assert obs.outcome.value == "request_mutated" and obs.detail.startswith(
                f"what the model sees changed: {want} ("), obs.detail
    wants = {expected_diff(bodies[o.xid]) for o in via} - {None}
    assert wants, "the recording must have turns long enough to trim"
    findings = [f for f in doc["findings"] if f["outcome"] == "request_mutated"]
    assert findings and all(any(w in f["detail"] for w in wants) for f in findings), findings
