"""`proxycheck trace` over two points of a real chain, continued (the set-up and helpers are in
tests/test_trace_points.py; split so that two workers run the scenarios at once):

* a healthy chain under timing jitter, identical sessions sent in parallel: healthy, nothing
  diverged, every exchange matched although each request was sent twice at once;
* two points whose clocks are 37.5 s apart (one recording's `started_at` shifted, as a machine
  whose clock is off writes it): every exchange matched, the offset estimated, the same verdict;
* a hop that re-serializes every request body between the points: every exchange matched,
  every one counted re-serialized, healthy.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from processes import EngineFactory, MitmdumpFactory
from test_trace_points import INNER, OUTER, around_fault_hop, lost_between, run_agents, trace, turns_of

pytestmark = pytest.mark.timeout(180)

SKEW = 37.5  # seconds the engine-side machine's clock is ahead


def only_pair(doc: dict[str, Any]) -> dict[str, Any]:
    assert len(doc["pairs"]) == 1
    pair = doc["pairs"][0]
    assert (pair["outer"], pair["inner"]) == (OUTER, INNER)
    return pair


# `alone`: the points are compared in timing too (a stream bunched between them is `buffered`), and a
# moment of starved CPU bunched one (seen beside vLLM's tests: "1 buffered").
@pytest.mark.alone
def test_a_healthy_chain_under_jitter_is_healthy_and_nothing_diverges(engines: EngineFactory,
                                                                      mitmdumps: MitmdumpFactory, tmp_path: Path) -> None:  # fmt: skip
    # The engine's time to first token and between tokens each scaled by 1 +- 0.5 per answer; the
    # hop holds the response headers 0.1 s, less than the shortest prefill (0.15 s), so nothing
    # piles up behind them. Two agents with the same seed send the same conversations at once.
    points = around_fault_hop(engines, mitmdumps, tmp_path, ("--ttft-base", "0.3", "--token-interval", "0.01", "--jitter",
                              "0.5", "--ttft-per-kb", "0", "--tool-call-rate", "0.6"), "delay_headers=0.1")  # fmt: skip
    reports = run_agents(points.outer.url, agents=2, sessions=3, turns=3, think=0.1, read_timeout=5, max_tokens=16)
    turns = turns_of(reports)
    assert {outcome for _, outcome in turns} == {"ok"} and len(turns) == 18
    points.stop_recorders()

    status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side))
    assert status == 0, out
    assert doc["verdict"] == "healthy" and doc["segment"] is None and doc["culprit"] is None, doc["summary"]
    assert doc["summary"] == "no exchange failed at any point"
    pair = only_pair(doc)
    assert pair["diverged_total"] == 0 and pair["diverged"] == {}, pair
    assert (pair["both"], pair["outer_only"], pair["inner_only"], pair["resent"]) == (18, 0, 0, 0), pair
    assert all(x["locus"] == {"kind": "fine"} and set(x["points"]) == {OUTER, INNER} for x in doc["exchanges"])
    # Every request was sent twice at once: no exchange anchors the clocks, the order of each
    # request's copies does, and they still pair one to one.
    views = Counter(x["points"][OUTER]["request"]["view"] for x in doc["exchanges"])
    assert set(views.values()) == {2}, views
    assert pair["offset"]["source"] == "order" and pair["offset"]["anchors"] == 0
    assert "no exchange failed at any point" in out


def test_points_whose_clocks_are_apart_still_pair_every_exchange(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                                  tmp_path: Path) -> None:  # fmt: skip
    points = around_fault_hop(engines, mitmdumps, tmp_path, ("--token-interval", "0.005", "--ttft-per-kb", "0",
                              "--tool-call-rate", "0.6"), "stall_after=3", "from_turn=2")  # fmt: skip
    reports = run_agents(points.outer.url, sessions=3, turns=3, think=0.2, read_timeout=1.5, max_tokens=16,
                         on_fail="continue")  # fmt: skip
    exchanges = len(turns_of(reports))
    assert any(outcome != "ok" for _, outcome in turns_of(reports))
    points.stop_recorders()

    # What the engine-side machine writes when its clock is SKEW seconds ahead.
    shifted = Path(shutil.copytree(points.engine_side, tmp_path / "shifted" / INNER))
    meta = json.loads((shifted / "recording.json").read_text())
    meta["started_at"] += SKEW
    (shifted / "recording.json").write_text(json.dumps(meta))

    _, _, _, same = trace(tmp_path, str(points.client_side), str(points.engine_side), name="same.json")
    docs = {"shifted": trace(tmp_path, str(points.client_side), str(shifted), name="shifted.json"),
            "shifted, given first": trace(tmp_path, str(shifted), str(points.client_side), name="first.json")}  # fmt: skip
    same_offset = same["points"][1]["offset"]["seconds"]
    assert abs(same_offset) < 0.1, same["points"]
    for case, (status, _, _, doc) in docs.items():
        assert status == 1, case
        pair = only_pair(doc)
        assert pair["both"] == exchanges and pair["outer_only"] == pair["inner_only"] == 0, (case, pair)
        assert [p["name"] for p in doc["points"]] == [OUTER, INNER], case  # ordered by timing, not by the clocks
        offset = doc["points"][1]["offset"]["seconds"]
        assert abs(offset - SKEW) < 0.1 and abs(offset - same_offset - SKEW) < 0.001, (case, offset, same_offset)
        assert pair["offset"]["source"] == "exchanges" and pair["offset"]["anchors"] == exchanges
        # The same verdict as with the clocks together, exchange by exchange.
        for key in ("verdict", "culprit", "segment", "places"):
            assert doc[key] == same[key], (case, key)
        assert doc["verdict"] == "proxy" and lost_between(doc), doc["summary"]
        assert [(x["session"], x["turn"], x["locus"]) for x in doc["exchanges"]] == \
            [(x["session"], x["turn"], x["locus"]) for x in same["exchanges"]], case  # fmt: skip


def test_a_hop_that_reserializes_bodies_between_the_points_changes_no_match(engines: EngineFactory,
                                                                             mitmdumps: MitmdumpFactory, tmp_path: Path) -> None:  # fmt: skip
    points = around_fault_hop(engines, mitmdumps, tmp_path, ("--token-interval", "0.005", "--ttft-per-kb", "0",
                              "--tool-call-rate", "0.6"), "reserialize=true")  # fmt: skip
    reports = run_agents(points.outer.url, sessions=3, turns=3, think=0.2, read_timeout=5, max_tokens=16)
    turns = turns_of(reports)
    assert {outcome for _, outcome in turns} == {"ok"}
    points.stop_recorders()

    status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side))
    assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
    pair = only_pair(doc)
    assert pair["both"] == pair["reserialized"] == len(turns) and pair["changed"] == 0, pair
    assert pair["diverged_total"] == 0 and pair["outer_only"] == pair["inner_only"] == 0, pair
    for x in doc["exchanges"]:
        outer, inner = x["points"][OUTER]["request"], x["points"][INNER]["request"]
        assert outer["sha256"] != inner["sha256"]  # other bytes ...
        assert outer["canonical"] == inner["canonical"] and outer["view"] == inner["view"]  # ... the same JSON
