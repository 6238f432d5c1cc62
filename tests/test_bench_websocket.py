"""`proxycheck bench` over WebSocket sessions (the Responses API's WebSocket mode, Codex's default
transport), against the reference engine serving the mode and a mitmdump fault hop.

What a user sees: a socket recording is benched as sockets (each replayed with its turns in order
on one socket, the later turns continuing the live responses), every turn observed and counted as
a request in the statistics; a hop cutting sockets mid-answer counts the cut turns by their
outcome, and the turns after a cut are not sent nor counted; `compare` and `merge` take socket
bench runs as any; a recording with both HTTP sessions and sockets loads the server with both.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from processes import EngineFactory, MitmdumpFactory, write_chain
from websocket_clients import converse, ws_url

from proxycheck import cli
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(180)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02", "--tool-call-rate", "0")
TURNS = 3
SOCKETS = 2
LOAD = ("--stall-timeout", "5")  # generous: the machine is shared, a stall here is no fault of the test


@dataclass
class Setup:
    engine_url: str
    sockets: Path  # a recording of SOCKETS sockets of TURNS turns
    mixed: Path  # the same engine's HTTP agent sessions and a socket, in one recording


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
          module_mitmdumps: MitmdumpFactory) -> Setup:  # fmt: skip
    engine = module_engines(*FAST)
    tmp = tmp_path_factory.mktemp("bench-ws")
    recorder = module_mitmdumps.recorder(engine, tmp / "sockets")

    async def sockets() -> None:
        await asyncio.gather(*(converse(ws_url(recorder), TURNS) for _ in range(SOCKETS)))

    asyncio.run(sockets())
    mixed = module_mitmdumps.recorder(engine, tmp / "mixed")

    async def both() -> None:
        agent = run_agent(AgentOptions(base_url=mixed.url, sessions=1, turns=2, max_tokens=16, think=0.1))
        outcome, _ = await asyncio.gather(agent, converse(ws_url(mixed), TURNS))
        assert outcome.ok

    asyncio.run(both())
    time.sleep(1.5)  # the recorders' last records follow the clients' closes by a moment
    recorder.stop()
    mixed.stop()
    return Setup(engine.url, tmp / "sockets", tmp / "mixed")


def bench(recording: Path, chain: Path, out: Path, *argv: str, route: str = "direct") -> tuple[int, dict]:
    summary = out.with_suffix(".json")
    status = cli.main(["bench", str(recording), "--chain", str(chain), "--route", route, "--out", str(out),
                       "--json", str(summary), *LOAD, *argv])  # fmt: skip
    return status, json.loads(summary.read_text()) if summary.exists() else {}


def test_a_socket_recording_is_benched_socket_by_socket_every_turn_a_request(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = write_chain(tmp_path / "chain.toml", setup.engine_url, [])
    status, summary = bench(setup.sockets, chain, tmp_path / "run", "--concurrency", "2", "--requests", "12")
    err = capsys.readouterr().err
    assert status == 0, err
    assert f"{SOCKETS} recorded WebSocket session(s) ({SOCKETS * TURNS} turns) cycled" in err
    assert "left out" not in err
    assert summary["requests"] == 12 and summary["failures"] == {} and summary["completed"] == 12
    assert summary["ttft"]["n"] == 12 and summary["tpot"]["n"] == 12 and summary["output_tokens_per_s"] > 0
    run = load_run(tmp_path / "run")
    assert all(o.transport == "websocket" and o.outcome.value == "ok" for o in run.observations)
    # Each socket replayed as recorded: its turns in order on one socket, the later ones answered
    # (their previous_response_id mapped to the live responses: the engine refuses an unknown id).
    by_socket: dict[tuple[int, str], list] = {}
    for o in run.observations:
        by_socket.setdefault((o.repetition, o.session), []).append(o)
    assert len(by_socket) == 12 // TURNS
    for turns in by_socket.values():
        turns.sort(key=lambda o: o.t_start)
        assert [o.turn for o in turns] == list(range(1, TURNS + 1))
        assert [o.reused for o in turns] == [False] + [True] * (TURNS - 1)
        assert all(o.result is not None and o.result.terminal for o in turns)
        assert all(a.t_start + (a.end or 0) <= b.t_start for a, b in zip(turns, turns[1:]))
    # Two sockets at once: concurrency is in sockets.
    spans = [(min(o.t_start for o in t), max(o.t_start + (o.end or 0) for o in t)) for t in by_socket.values()]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) == 2


def test_a_hop_cutting_sockets_counts_the_cut_turns_by_outcome_and_sends_none_after(
    setup: Setup, module_engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    engine = module_engines(*FAST)
    hop = mitmdumps.faults(engine, "ws_cut_after_events=3", "from_turn=2")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    status, summary = bench(setup.sockets, chain, tmp_path / "cut", "--concurrency", "2", "--requests", "8",
                            route="via:edge")  # fmt: skip
    assert status == 1
    run = load_run(tmp_path / "cut")
    # Every socket: turn 1 answered, turn 2 cut mid-answer, turn 3 (continuing turn 2) never sent.
    assert {(o.turn, o.outcome.value) for o in run.observations} == {(1, "ok"), (2, "reset")}
    assert not any("not sent" in (o.detail or "") for o in run.observations)
    cut = [o for o in run.observations if o.turn == 2]
    assert all("mid-answer" in (o.detail or "") for o in cut), [o.detail for o in cut]
    assert summary["requests"] == 8 and summary["failures"] == {"reset": 4} and summary["completed"] == 4
    assert summary["failure_rate"] == 0.5
    # The same load direct is clean: the cut is the hop's.
    assert bench(setup.sockets, chain, tmp_path / "direct", "--concurrency", "2", "--requests", "8")[0] == 0


def test_compare_and_merge_take_socket_bench_runs(setup: Setup, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    chain = write_chain(tmp_path / "chain.toml", setup.engine_url, [])
    load = ("--concurrency", "2", "--duration", "2")
    assert bench(setup.sockets, chain, tmp_path / "a", *load)[0] == 0
    # Two worker processes, each its share of the sockets, merged into one run.
    status, merged = bench(setup.sockets, chain, tmp_path / "b", *load, "--workers", "2")
    assert status == 0 and merged["failures"] == {} and merged["requests"] >= TURNS
    run = load_run(tmp_path / "b")
    assert len(run.meta["options"]["merged_from"]) == 2
    assert all(o.transport == "websocket" for o in run.observations)
    capsys.readouterr()
    status = cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json", str(tmp_path / "cmp.json")])
    assert status in (0, 1)  # the same configuration: whether noise crosses 5% is not this test's
    doc = json.loads((tmp_path / "cmp.json").read_text())
    names = {m["name"] for m in doc["metrics"]}
    assert {"output_tokens_per_s", "ttft_p50", "tpot_p50", "e2e_p50"} <= names
    failures = doc["failures"]
    assert failures["a_requests"] > 0 and failures["b_requests"] > 0
    assert failures["a_failed"] == 0 and failures["b_failed"] == 0
    assert "ttft_p50" in capsys.readouterr().out


def test_open_loop_sockets_arrive_at_a_rate_and_the_cap_holds_sockets(setup: Setup, tmp_path: Path) -> None:
    chain = write_chain(tmp_path / "chain.toml", setup.engine_url, [])
    # Socket arrivals far faster than a socket ends: the cap is what holds the load.
    status, summary = bench(setup.sockets, chain, tmp_path / "open", "--rate", "200", "--concurrency", "2",
                            "--requests", "9")  # fmt: skip
    assert status == 0 and summary["requests"] == 9 and summary["failures"] == {}
    run = load_run(tmp_path / "open")
    sockets: dict[tuple[int, str], list] = {}
    for o in run.observations:
        sockets.setdefault((o.repetition, o.session), []).append(o)
    spans = [(min(o.t_start for o in t), max(o.t_start + (o.end or 0) for o in t)) for t in sockets.values()]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) == 2


def test_a_recording_with_http_sessions_and_a_socket_loads_with_both(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = write_chain(tmp_path / "chain.toml", setup.engine_url, [])
    status, summary = bench(setup.mixed, chain, tmp_path / "run", "--concurrency", "2", "--requests", "10")
    err = capsys.readouterr().err
    assert status == 0, err
    assert "2 recorded request(s) and 1 recorded WebSocket session(s) (3 turns) cycled" in err, err
    assert summary["requests"] == 10 and summary["failures"] == {}
    kinds = {o.transport for o in load_run(tmp_path / "run").observations}
    assert kinds == {"http", "websocket"}, kinds


def test_an_upgrade_refused_without_a_turn_is_no_request_to_bench(
    module_engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = module_engines(*FAST)
    hop = mitmdumps.faults(engine, "ws_refuse=426")
    recorder = mitmdumps.recorder(hop, tmp_path / "rec")

    async def refused() -> None:
        try:
            await asyncio.wait_for(converse(ws_url(recorder), 1), timeout=20)
        except aiohttp.WSServerHandshakeError as exc:
            assert exc.status == 426
        else:
            raise AssertionError("the upgrade went through the refusing hop")

    asyncio.run(refused())
    time.sleep(0.5)
    recorder.stop()
    chain = write_chain(tmp_path / "chain.toml", engine.url, [])
    status, _ = bench(tmp_path / "rec", chain, tmp_path / "run", "--concurrency", "1", "--requests", "2")
    err = capsys.readouterr().err
    assert status == 2 and not (tmp_path / "run").exists()
    assert "1 WebSocket upgrade(s) without a turn left out: no request to send" in err
    assert "no LLM requests to send" in err and "Traceback" not in err


def test_an_answer_streaming_longer_than_the_stall_watchdog_is_not_cut_but_a_silent_one_is(
    setup: Setup, module_engines: EngineFactory, tmp_path: Path
) -> None:
    # Each answer streams for about a second, an event every 0.1 s: longer than the stall watchdog
    # (0.4 s), never silent that long. The watchdog's timer goes off before each answer ends and
    # must find the deadline moved on by the events since.
    slow = module_engines("--token-interval", "0.1", "--ttft-base", "0.02", "--tool-call-rate", "0")
    chain = write_chain(tmp_path / "slow.toml", slow.url, [])
    status, summary = bench(setup.sockets, chain, tmp_path / "slow", "--concurrency", "1", "--requests", "3",
                            "--stall-timeout", "0.4")  # fmt: skip
    assert status == 0 and summary["failures"] == {}, summary
    assert summary["e2e"]["p50"] > 0.4  # the answers did outlast the watchdog
    # An engine that goes silent from turn 2, mid-answer or before its first event (the receive
    # the wait between turns left pending): cut by the watchdog, counted as that stall.
    for after, stall in ((6, "stall_mid_stream"), (0, "stall_before_first_event")):
        silent = module_engines(*FAST, "--fault", f"stall:after={after},from_turn=2,seconds=30")
        chain = write_chain(tmp_path / f"silent{after}.toml", silent.url, [])
        status, summary = bench(setup.sockets, chain, tmp_path / f"silent{after}", "--concurrency", "1",
                                "--requests", "2", "--stall-timeout", "0.5")  # fmt: skip
        assert status == 1 and summary["failures"] == {stall: 1}, summary
        run = load_run(tmp_path / f"silent{after}")
        assert [(o.turn, o.outcome.value) for o in sorted(run.observations, key=lambda o: o.t_start)] == [
            (1, "ok"), (2, stall)]  # fmt: skip


def test_replay_with_stop_session_ends_a_socket_at_its_failed_turn(
    setup: Setup, module_engines: EngineFactory, tmp_path: Path
) -> None:
    # The rule a bench's socket follows, as `replay --on-fail stop-session` states it: the turns
    # after the failed one are neither sent nor observed (without it they are observed, not sent).
    engine = module_engines(*FAST, "--fault", "close:after=3,from_turn=2")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [])
    seen = {}
    for on_fail in ("continue", "stop-session"):
        out = tmp_path / on_fail
        assert cli.main(["replay", str(setup.sockets), "--chain", str(chain), "--route", "direct", "--pace", "fast",
                         "--on-fail", on_fail, "--out", str(out)]) == 1  # fmt: skip
        seen[on_fail] = sorted((o.turn, o.outcome.value) for o in load_run(out).observations)
    assert seen["continue"] == [(1, "ok"), (1, "ok"), (2, "reset"), (2, "reset"), (3, "reset"), (3, "reset")]
    assert seen["stop-session"] == [(1, "ok"), (1, "ok"), (2, "reset"), (2, "reset")]
