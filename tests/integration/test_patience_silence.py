"""A silence is judged by the real client's patience, never by proxycheck's own watchdog.

The derived stall watchdog is 10 s (its floor). Each case puts a silence longer than that in the
engine's answer, with real processes: the reference engine (its `pause` fault: a long silence
then the rest of the answer; its `stall` fault: silence for good), Squid as the forward hop, the
recorder at the client side, and `check` over the chain, asserting what a user sees:

* Squid's idle timeout (`read_timeout 10 seconds`) shorter than a 12.5 s silence the client sat
  through: the recording shows Squid cutting turn 2 while the client still waited. The direct
  route's engine goes on after its silence: a slow answer, not a stall; the verdict names Squid
  at turn 2 (the watchdog used to cut the direct route at 10 s and blame the server).
* an engine silent longer than the recorded client waited (it gave up after 12 s): `server`,
  the stall waited out to that patience, which the verdict quotes.
* a slow but healthy engine (silent 11.5 s mid-answer on replay, not while recording): `healthy`,
  the silence reported as a slow answer.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from common import chain_file, check, record_through
from proxies import start_squid

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.io.procs import Managed, start_engine

ENGINE = ("--token-interval", "0.02", "--ttft-base", "0.05", "--ttft-per-kb", "0", "--tool-call-rate", "0")
AFTER = 4  # the silence comes after this many events of the answer


def engine(stack: ExitStack, *args: str) -> Managed:
    proc = start_engine(*ENGINE, *args)
    stack.callback(proc.stop)
    return proc


def squid(stack: ExitStack, extra: str = "") -> Any:
    proxy = start_squid(extra)
    stack.callback(proxy.stop)
    return proxy


def findings(doc: dict[str, Any], route: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["route"] == route]


def routes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["route"]: r for r in doc["routes"]}


@pytest.mark.timeout(240)
def test_a_forward_hops_idle_timeout_shorter_than_a_silence_the_client_sits_through_is_the_hop(tmp_path: Path) -> None:
    with ExitStack() as stack:
        eng = engine(stack, "--fault", f"pause:after={AFTER},seconds=12.5,from_turn=2")
        hop = squid(stack, "read_timeout 10 seconds")
        rec = tmp_path / "rec"
        agent = record_through(eng.url, rec, upstream_proxy=hop.url, sessions=2, turns=3, read_timeout=60.0,
                               max_tokens=16)  # fmt: skip
        # Squid cut turn 2 mid-answer while the client still waited.
        assert [(s.turns[-1].turn, s.turns[-1].outcome) for s in agent.sessions] == [(2, Outcome.RESET)] * 2
        chain = chain_file(tmp_path, eng.url, ("squid", f"proxy={hop.url}"))
        status, doc = check(tmp_path, rec, chain)
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "squid", 2), doc["summary"]
    direct = routes(doc)["direct"]
    assert direct["failures"] == 0 and direct["outcomes"].get("slow", 0) >= 2, direct
    assert {f["outcome"] for f in findings(doc, "via:squid")} == {"reset"}
    waits = doc["waits"]
    assert waits["stall"] == 10.0 and waits["stall_limit"] >= 600.0 and waits["waited_out"]
    assert all(w["route"] == "direct" and w["turn"] == 2 and w["seconds"] > 10.0 for w in waits["waited_out"])
    assert any("slow answers the client would have waited for" in line for line in waits["said"])


@pytest.mark.timeout(240)
def test_an_engine_silent_longer_than_the_client_waits_is_the_server_at_that_patience(tmp_path: Path) -> None:
    with ExitStack() as stack:
        eng = engine(stack, "--fault", f"stall:after={AFTER},seconds=600,from_turn=2")
        hop = squid(stack)
        rec = tmp_path / "rec"
        # The client gives up after 12 s of silence: past the 10 s watchdog, its own patience.
        agent = record_through(eng.url, rec, upstream_proxy=hop.url, sessions=2, turns=3, read_timeout=12.0,
                               max_tokens=16)  # fmt: skip
        assert [(s.turns[-1].turn, s.turns[-1].outcome) for s in agent.sessions] == [(2, Outcome.STALL_MID_STREAM)] * 2
        chain = chain_file(tmp_path, eng.url, ("squid", f"proxy={hop.url}"))
        status, doc = check(tmp_path, rec, chain)
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("server", "engine", 2), doc["summary"]
    stalls = findings(doc, "direct")
    assert stalls and {f["outcome"] for f in stalls} == {"stall_mid_stream"}
    assert all("the client's patience: the recorded client gave up" in f["detail"] for f in stalls), stalls
    waits = doc["waits"]
    assert waits["stall_limit"] == pytest.approx(12.0, abs=1.0) and waits["stalls"] == waits["stalls_at_patience"] > 0
    assert any("waited out to the client's patience" in line for line in waits["said"])


@pytest.mark.timeout(240)
def test_a_slow_but_healthy_engine_is_healthy_with_its_silence_reported(tmp_path: Path) -> None:
    with ExitStack() as stack:
        rec = tmp_path / "rec"
        fast = engine(stack)
        hop = squid(stack)
        agent = record_through(fast.url, rec, upstream_proxy=hop.url, sessions=2, turns=2, read_timeout=60.0,
                               max_tokens=16)  # fmt: skip
        assert all(t.outcome is Outcome.OK for s in agent.sessions for t in s.turns)
        fast.stop()
        # The engine is slower now than when it was recorded: 11.5 s of silence in turn 2's answer.
        slow = engine(stack, "--fault", f"pause:after={AFTER},seconds=11.5,from_turn=2")
        chain = chain_file(tmp_path, slow.url, ("squid", f"proxy={hop.url}"))
        status, doc = check(tmp_path, rec, chain)
    assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
    assert routes(doc)["direct"]["outcomes"].get("slow", 0) >= 2
    # Reported as the engine's slow answers (a degradation), not the hop's: it is as slow as direct.
    assert {(f["route"], f["outcome"]) for f in doc["findings"]} == {("direct", "slow")}
    assert routes(doc)["via:squid"]["outcomes"].get("slow", 0) == 0
    said = next(a for a in doc["advice"] if a["hop"] is None)
    assert "slow answers, not failures" in said["seen"]
    waited = doc["waits"]["waited_out"]
    assert {(w["route"], w["turn"]) for w in waited} == {("direct", 2), ("via:squid", 2)}
    assert all(11.0 < w["seconds"] < 30.0 for w in waited)
