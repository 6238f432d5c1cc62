"""`check` on WebSocket sessions (the Responses API's WebSocket mode): recorded through the recorder
from a client driving one socket per session, replayed one socket per recorded socket, direct and
through a mitmdump hop, and judged turn by turn as HTTP turns are (`bench` over sockets:
tests/test_bench_websocket.py).

What a user sees: a healthy chain is `healthy` with every turn of every socket observed on every
route (the later turns continue the live responses: the recorded ids mapped); an engine that cuts
its sockets at turn 2 is `server` from turn 2, the turns after it on the same socket not sent
(they continue that socket's memory) and said so; a replay never sends a socket's upgrade as a
plain HTTP request."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest
from processes import EngineFactory, MitmdumpFactory, write_chain
from websocket_clients import converse, ws_url

from proxycheck import cli
from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(120)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
TURNS = 3


def recorded(engines: EngineFactory, mitmdumps: MitmdumpFactory, out: Path, sockets: int = 2,
             think: float = 0.0) -> Path:  # fmt: skip
    engine = engines(*FAST)
    recorder = mitmdumps.recorder(engine, out)

    async def all_of_them() -> None:
        await asyncio.gather(*(converse(ws_url(recorder), TURNS, think=think) for _ in range(sockets)))

    asyncio.run(all_of_them())
    time.sleep(0.5)  # the recorder's last records follow the client's close by a moment
    recorder.stop()
    engine.stop()
    return out


def check(tmp: Path, recording: Path, chain: Path, *argv: str) -> tuple[int, dict]:
    out = tmp / f"run-{time.monotonic_ns()}"
    verdict = out.with_suffix(".json")
    status = cli.main(["check", str(recording), "--chain", str(chain), "--out", str(out), "--json", str(verdict),
                       *argv])  # fmt: skip
    return status, json.loads(verdict.read_text())


def test_a_healthy_chain_replays_every_socket_turn_by_turn(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                          tmp_path: Path) -> None:  # fmt: skip
    recording = recorded(engines, mitmdumps, tmp_path / "rec")
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine)  # a mitmproxy hop with no fault: sockets pass through it
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    status, doc = check(tmp_path, recording, chain)
    assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
    routes = {r["route"]: r for r in doc["routes"]}
    assert routes["direct"]["outcomes"] == {"ok": 2 * TURNS * routes["direct"]["repetitions"]}
    assert routes["via:edge"]["outcomes"] == {"ok": 2 * TURNS * routes["via:edge"]["repetitions"]}
    run = load_run(doc["run"])
    turns = sorted({(o.session, o.turn) for o in run.observations})
    assert len(turns) == 2 * TURNS and {t for _, t in turns} == {1, 2, 3}
    # Later turns continued the live responses (ids mapped): they were answered, not refused.
    assert all(o.outcome.value == "ok" and o.result is not None and o.result.terminal for o in run.observations)
    assert all(o.reused for o in run.observations if o.turn > 1)


def test_an_engine_that_cuts_its_sockets_at_turn_2_is_the_server_from_turn_2(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = recorded(engines, mitmdumps, tmp_path / "rec")
    engine = engines(*FAST, "--fault", "close:after=3,from_turn=2")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [])
    status, doc = check(tmp_path, recording, chain)
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("server", "engine", 2), doc["summary"]
    found = {(f["turn"], f["outcome"]) for f in doc["findings"]}
    assert (2, "reset") in found and (3, "reset") in found, found
    third = [f for f in doc["findings"] if f["turn"] == 3]
    assert all(f["detail"].startswith("not sent: ") for f in third), third
    second = [f for f in doc["findings"] if f["turn"] == 2]
    assert all("without a close frame" in f["detail"] for f in second), second




def test_a_hop_cutting_sockets_mid_answer_is_named_at_its_first_failing_turn(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = recorded(engines, mitmdumps, tmp_path / "rec")
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine, "ws_cut_after_events=3", "from_turn=2")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    status, doc = check(tmp_path, recording, chain)
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "edge", 2), doc["summary"]
    found = {(f["turn"], f["outcome"]) for f in doc["findings"] if f["route"] == "via:edge"}
    assert (2, "reset") in found, found
    assert next(r for r in doc["routes"] if r["route"] == "direct")["failures"] == 0


async def refused_then_gone(url: str, wait: float) -> str:
    """What a client saw of an upgrade, giving up after `wait` seconds without an answer."""
    async with aiohttp.ClientSession() as session:
        try:
            ws = await asyncio.wait_for(session.ws_connect(url), timeout=wait)  # a harness's connect timeout
            await ws.close()
            return "open"
        except aiohttp.WSServerHandshakeError as exc:
            return f"refused {exc.status}"
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            return "no answer"


@pytest.mark.parametrize(("fault", "saw", "outcome", "kind"), [
    ("ws_refuse=404", "refused 404", "http_error", "ws_upgrade_refused"),
    ("ws_swallow=true", "no answer", "stall_before_headers", "ws_upgrade_unanswered"),
])  # fmt: skip
def test_a_refused_and_a_swallowed_upgrade_each_get_a_verdict_that_says_so(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path, fault: str, saw: str, outcome: str, kind: str
) -> None:
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine, fault)
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(hop, out)

    async def client() -> str:
        return await asyncio.wait_for(refused_then_gone(ws_url(recorder), 3.0), timeout=20)

    assert asyncio.run(client()) == saw
    time.sleep(0.5)
    recorder.stop()
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("gateway", hop.url)])
    status, doc = check(tmp_path, out, chain)
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "gateway", 1), doc["summary"]
    assert {f["outcome"] for f in doc["findings"] if f["route"] == "via:gateway"} == {outcome}
    said_upgrade = "refuses the WebSocket upgrade (HTTP 404)" if outcome == "http_error" else "never answers the WebSocket upgrade"
    assert doc["summary"].startswith(f"hop gateway {said_upgrade}"), doc["summary"]
    (said,) = [a for a in doc["advice"] if a["hop"] == "gateway"]
    assert said["kind"] == kind, said


def test_an_engine_silent_mid_answer_on_a_socket_is_the_stall_its_watchdog_cuts(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = recorded(engines, mitmdumps, tmp_path / "rec")
    engine = engines(*FAST, "--fault", "stall:after=6,from_turn=2,seconds=30")  # after 2 of its deltas
    chain = write_chain(tmp_path / "chain.toml", engine.url, [])
    status, doc = check(tmp_path, recording, chain, "--stall-timeout", "1")  # the stated watchdog: the limit
    assert status == 1 and (doc["verdict"], doc["first_turn"]) == ("server", 2), doc["summary"]
    found = {(f["turn"], f["outcome"]) for f in doc["findings"]}
    assert (2, "stall_mid_stream") in found and (3, "reset") in found, found  # turn 3 not sent on the given-up socket


def test_a_hop_closing_a_socket_while_the_next_turn_waits_is_named_at_that_turn(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = recorded(engines, mitmdumps, tmp_path / "rec", sockets=1, think=3.0)
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine, "ws_idle_close=1.5")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    status, doc = check(tmp_path, recording, chain, "--full")  # the recorded 3 s think times, as they were
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "edge", 2), doc["summary"]
    second = [f for f in doc["findings"] if f["turn"] == 2]
    assert second and all("into the wait before this turn" in f["detail"] for f in second), second
    kinds = {a["kind"] for a in doc["advice"] if a["hop"] == "edge"}
    assert "ws_idle_cut" in kinds and kinds <= {"ws_idle_cut", "ws_not_sent"}, kinds
