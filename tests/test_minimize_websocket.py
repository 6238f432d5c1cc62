"""`proxycheck minimize` over WebSocket sessions, against the reference engine and a mitmdump fault hop.

A socket's turns continue its memory, so minimize keeps a prefix of each socket's turns: a
recording with a 5-turn socket beside unrelated HTTP sessions, minimized against a hop that cuts
sockets mid-answer at their turn 3, comes out as that socket's turns 1..3 alone, its trigger
naming turn 3 (not the socket's first turn, whose exchange all its turns share) and the cut; the
minimized recording is an ordinary one: `sessions` lists it, and `check` finds the same hop
breaking it at turn 3 while the direct route stays clean. A hop that cuts sockets idle longer
than a second, between turns recorded 2 s apart, is minimized to the turns up to the one whose
wait it cut, and to that wait: bisected to the hop's idle timeout."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from processes import EngineFactory, MitmdumpFactory, write_chain
from websocket_clients import converse, ws_url

from proxycheck import cli
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.recordings import open_recording

pytestmark = pytest.mark.timeout(150)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
TURNS = 5
CUT_AT = 3  # the hop cuts each socket mid-answer at this turn
IDLE = 1.0  # the hop cuts a socket idle longer than this many seconds


def record(engine: object, mitmdumps: MitmdumpFactory, out: Path, *, http_sessions: int, turns: int,
           think: float) -> Path:  # fmt: skip
    """One socket of `turns` turns, `think` s apart, beside `http_sessions` sessions of the
    synthetic agent (2 turns each), all through one recorder in front of the engine."""
    recorder = mitmdumps.recorder(engine, out)  # type: ignore[arg-type]

    async def both() -> None:
        agent = AgentOptions(base_url=recorder.url, sessions=http_sessions, turns=2, think=0.1, max_tokens=8,
                             tool_result_bytes=200, session_id_header="x-session-id")  # fmt: skip
        runs = [converse(ws_url(recorder), turns, think=think)]
        if http_sessions:
            runs.append(run_agent(agent))
        done = await asyncio.wait_for(asyncio.gather(*runs), timeout=60)
        assert len(done[0]) == turns and all(events[-1]["type"] == "response.completed" for events in done[0])
        assert not http_sessions or done[1].ok

    asyncio.run(both())
    time.sleep(1.0)  # the recorder's last records follow the client's close by a moment
    recorder.stop()
    return out


def minimize(recording: Path, chain: Path, out: Path, *argv: str) -> int:
    return cli.main(["minimize", str(recording), "--chain", str(chain), "--route", "via:edge", "--out", str(out),
                     "--stall-timeout", "2", "--header-timeout", "5", *argv])  # fmt: skip


def test_a_socket_cut_at_turn_3_is_minimized_to_its_turns_up_to_3_and_names_turn_3(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = engines(*FAST)
    recording = record(engine, mitmdumps, tmp_path / "rec", http_sessions=2, turns=TURNS, think=0.0)
    before = open_recording(str(recording)).planned
    assert sorted(s.transport for s in before) == ["http", "http", "websocket"]
    hop = mitmdumps.faults(engine, "ws_cut_after_events=3", f"from_turn={CUT_AT}")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    out = tmp_path / "min"
    assert minimize(recording, chain, out, "--pace", "fast", "--budget", "30") == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "minimized.json").read_text())
    assert doc["sessions"] == {"before": 3, "after": 1} and doc["complete"] is True, doc
    socket = next(s for s in before if s.transport == "websocket")
    xid = socket.turns[0].xid
    # The socket's turns 1..3: a prefix, up to the failure, every one on the socket's exchange.
    assert [(k["turn"], k["xid"]) for k in doc["kept"]] == [(1, xid), (2, xid), (3, xid)], doc["kept"]
    assert doc["socket_turns"] == [{"session": socket.id, "label": socket.label, "xid": xid, "before": TURNS,
                                    "after": CUT_AT}]  # fmt: skip
    trigger = doc["trigger"]
    # The turn that failed, not the socket's first (all its turns share one exchange).
    said = (trigger["turn"], trigger["xid"], trigger["outcome"], trigger["transport"])
    assert said == (CUT_AT, xid, "reset", "websocket"), trigger
    assert trigger["socket"] == {"turns": {"before": TURNS, "after": CUT_AT}, "idle_end": False}
    assert trigger["events"] >= 1 and "without a close frame" in trigger["detail"], trigger
    assert doc["messages"] is None and doc["body_size"] is None  # a socket's messages kept as recorded
    assert f"turn {CUT_AT}" in printed and f"turns {TURNS} -> {CUT_AT}" in printed, printed

    # An ordinary recording: one socket of 3 turns, which sessions and check read.
    (planned,) = open_recording(str(out)).planned
    assert planned.transport == "websocket" and [t.turn for t in planned.turns] == [1, 2, 3]
    assert cli.main(["sessions", str(out)]) == 0
    verdict = tmp_path / "verdict.json"
    assert cli.main(["check", str(out), "--chain", str(chain), "--pace", "fast", "--out", str(tmp_path / "run"),
                     "--json", str(verdict)]) == 1  # fmt: skip
    found = json.loads(verdict.read_text())
    assert (found["verdict"], found["culprit"], found["first_turn"]) == ("proxy", "edge", CUT_AT), found["summary"]
    assert next(r for r in found["routes"] if r["route"] == "direct")["failures"] == 0


def test_a_hop_cutting_idle_sockets_is_minimized_to_the_wait_it_cuts(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    engine = engines(*FAST)
    recording = record(engine, mitmdumps, tmp_path / "rec", http_sessions=0, turns=3, think=2 * IDLE)
    hop = mitmdumps.faults(engine, f"ws_idle_close={IDLE}")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    out = tmp_path / "min"
    assert minimize(recording, chain, out, "--budget", "40") == 0
    doc = json.loads((out / "minimized.json").read_text())
    trigger = doc["trigger"]
    # The first wait longer than the hop's idle timeout is before turn 2: turns 1..2 kept.
    assert (trigger["turn"], trigger["outcome"]) == (2, "reset"), trigger
    assert trigger["socket"]["turns"] == {"before": 3, "after": 2}, trigger
    # At a wait this close to the hop's timeout, its cut comes as the turn is sent or just before.
    assert "into the wait before this turn" in trigger["detail"] or "mid-answer" in trigger["detail"], trigger
    think = doc["think"]
    assert think["depends"] is True and think["recorded"] > 1.5 * IDLE, think
    assert think["passes_at"] < think["fails_from"], think
    assert abs(think["fails_from"] - IDLE) <= 0.2 * IDLE, think  # the wait that makes it fail: the hop's timeout
    # The minimized recording holds that wait before turn 2, and turn 3 not at all.
    (planned,) = open_recording(str(out)).planned
    assert [t.turn for t in planned.turns] == [1, 2]
    assert planned.turns[1].think_time == pytest.approx(think["fails_from"], abs=0.01)


def test_a_socket_cut_while_idle_after_its_last_turn_keeps_its_idle_end_after_one_turn(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Recorded through the hop: the client sat idle after its last turn and the hop cut the socket.
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine, f"ws_idle_close={IDLE}")
    out_rec = tmp_path / "rec"
    recorder = mitmdumps.recorder(hop, out_rec)
    turns = asyncio.run(asyncio.wait_for(converse(ws_url(recorder), 3, linger=4 * IDLE), timeout=30))
    assert len(turns) == 3
    time.sleep(1.0)
    recorder.stop()
    (socket,) = open_recording(str(out_rec)).planned
    assert [t.socket_end for t in socket.turns] == [False, False, False, True], socket.turns  # the idle end, planned
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    out = tmp_path / "min"
    assert minimize(out_rec, chain, out, "--budget", "30") == 0
    doc = json.loads((out / "minimized.json").read_text())
    trigger = doc["trigger"]
    # The failure is the idle end: it follows the first turn alone as well, after a wait the hop cuts.
    assert trigger["socket"] == {"turns": {"before": 3, "after": 1}, "idle_end": True}, trigger
    assert (trigger["turn"], trigger["outcome"]) == (4, "reset") and "while it sat idle" in trigger["detail"], trigger
    # One turn, then the idle end as long as recorded: when the chain ended the socket is no wait
    # of the client's to shorten (the replay watches for it with a margin, which would catch a
    # shortened one too, and the recording would then claim an end sooner than the hop made).
    (planned,) = open_recording(str(out)).planned
    assert [t.socket_end for t in planned.turns] == [False, True]
    assert planned.turns[1].think_time == pytest.approx(socket.turns[-1].think_time, abs=0.01)
    assert doc["think"] is None
    # It still fails via the hop, and direct outlives the idle.
    verdict = tmp_path / "verdict.json"
    assert cli.main(["check", str(out), "--chain", str(chain), "--out", str(tmp_path / "run"), "--json",
                     str(verdict)]) == 1  # fmt: skip
    found = json.loads(verdict.read_text())
    assert (found["verdict"], found["culprit"], found["first_turn"]) == ("proxy", "edge", 2), found["summary"]
