"""`proxycheck watch` over WebSocket sessions: real processes (the reference engine behind a recorder
(engine-side), the fault hop, a recorder in front of it (client-side), a client driving one
socket), the watch as its own process (tests/test_watch_command.py's WatchProcess). The recorder
journals each message as it passes, so a turn in flight is watched as a stream is: an engine
silent mid-answer on turn 2 is that turn stalled at both points, named as the socket's turn; an
upgrade the hop holds is stuck: the client side saw the request, the engine side never did. In
this process, from journals written as a recorder writes them: a turn that went further at the
engine side than at the client side is stuck, and recovers when the client side catches up."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from processes import EngineFactory, MitmdumpFactory
from test_watch_command import WatchProcess, chain
from websocket_clients import converse, ws_url

from proxycheck.core.points.watching import Findings, snapshot
from proxycheck.io.storage import RecordingWriter
from proxycheck.io.watching import WatchedRecordings

pytestmark = pytest.mark.timeout(90)

FAST = ("--token-interval", "0.01", "--ttft-base", "0.02", "--ttft-per-kb", "0")
RESPONSES = "http://engine/v1/responses"


def socket_turns(url: str, turns: int, limit: float) -> list[list[dict[str, Any]]]:
    """One socket, `turns` turns; what the client got within `limit` seconds ([] when it met an error)."""

    async def run() -> list[list[dict[str, Any]]]:
        try:
            return await asyncio.wait_for(converse(url, turns), timeout=limit)
        except (aiohttp.ClientError, ConnectionError, TimeoutError):
            return []

    return asyncio.run(run())


@pytest.mark.timeout(120)
def test_an_engine_silent_mid_answer_is_the_socket_turn_stalled_at_both_points(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Turn 2 gets 3 messages, then nothing; the engine drops the connection 5 s later.
    engine = engines(*FAST, "--fault", "stall:after=3,seconds=5,from_turn=2")
    entry = chain(mitmdumps, engine, tmp_path)
    watch = WatchProcess(tmp_path, str(tmp_path / "client"), str(tmp_path / "engine"), "--stall", "1.5", "--json-lines",
                         "--for", "14")  # fmt: skip
    try:
        got = socket_turns(ws_url(entry), 3, 20)
        assert len(got) <= 2  # turn 2 never completed
        assert watch.wait(timeout=40) == 0, watch.stderr
    finally:
        watch.close()
    docs = watch.findings
    stalled = [d for d in docs if d["event"] == "stalled"]
    assert {d["behind"] for d in stalled} == {"client-side", "engine-side"}, docs
    for d in stalled:
        assert (d["session"], d["turn"], d["ahead"]) == ("s1", 2, None), d
        assert d["behind_progress"]["websocket"] == "turn" and d["behind_progress"]["socket_turn"] == 2
        assert d["behind_progress"]["events"] == 3 and d["behind_progress"]["ended"] is False
        assert d["line"].startswith(f"s1 WebSocket turn 2: {d['behind']}: no progress for "), d["line"]
    assert not [d for d in docs if d["event"] == "stuck"], docs  # neither point was ahead of the other
    recovered = [d for d in docs if d["event"] == "recovered"]
    assert {(r["behind"], r["how"]) for r in recovered} == {("client-side", "ended"), ("engine-side", "ended")}, docs
    assert "Traceback" not in watch.stderr


@pytest.mark.timeout(120)
def test_an_upgrade_the_hop_holds_is_stuck_the_engine_side_never_saw_it(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    engine = engines(*FAST)
    entry = chain(mitmdumps, engine, tmp_path, "ws_swallow=true")
    watch = WatchProcess(tmp_path, str(tmp_path / "client"), str(tmp_path / "engine"), "--stall", "1.5", "--json-lines",
                         "--for", "12")  # fmt: skip
    try:
        # An HTTP request first: the engine side sees the client side's traffic, so a request
        # missing there never got there.
        body = {"model": "m", "input": "over HTTP", "max_output_tokens": 8}
        assert httpx.post(entry.url + "/v1/responses", json=body, timeout=20).status_code == 200
        assert socket_turns(ws_url(entry), 1, 5) == []  # the client gives up on the upgrade after 5 s
        assert watch.wait(timeout=40) == 0, watch.stderr
    finally:
        watch.close()
    docs = watch.findings
    (stuck,) = [d for d in docs if d["event"] == "stuck"]
    assert (stuck["ahead"], stuck["behind"]) == ("client-side", "engine-side"), stuck
    assert stuck["ahead_progress"]["websocket"] == "upgrade" and stuck["behind_progress"] == {"seen": False, "text": "never saw it"}
    assert "WebSocket upgrade: client-side saw the request" in stuck["line"] and "engine-side never saw it" in stuck["line"]
    assert stuck["turn"] == 1 and stuck["line"].startswith(f"{stuck['session']} WebSocket upgrade: "), stuck["line"]
    # The client side itself had no answer: stalled there too (no point is ahead of it).
    assert {(d["event"], d["behind"]) for d in docs if d["event"] != "recovered"} == {
        ("stuck", "engine-side"), ("stalled", "client-side")}, docs  # fmt: skip
    # When the client gave up, the upgrade ended at the client side: both over.
    assert sorted((r["finding"], r["how"]) for r in docs if r["event"] == "recovered") == [("stalled", "ended"),
                                                                                          ("stuck", "ended")], docs  # fmt: skip


def _socket(w: RecordingWriter, turns: list[tuple[float, float, int, bool]], *, at: float = 0.0) -> int:
    """A socket on `w`: per turn (create time, first event time, events, terminal), event i at +0.1 s each."""
    x = w.request("GET", RESPONSES, [("upgrade", "websocket"), ("connection", "Upgrade")], b"", t=at)
    w.response(x, 101, "Switching Protocols", [("upgrade", "websocket"), ("connection", "Upgrade")], streamed=False,
               t=at + 0.01)
    previous = None
    for k, (t, first, events, terminal) in enumerate(turns, start=1):
        create: dict[str, Any] = {"type": "response.create", "model": "m", "input": f"step {k}"}
        if previous:
            create["previous_response_id"] = previous
        w.ws_message(x, json.dumps(create).encode(), from_client=True, t=t)
        previous = f"resp_{k}"
        for i in range(events):
            doc = {"type": "response.output_text.delta", "delta": "a", "output_index": 0}
            w.ws_message(x, json.dumps(doc).encode(), from_client=False, t=first + 0.1 * i)
        if terminal:
            done = {"type": "response.completed", "response": {"id": previous, "status": "completed", "output": []}}
            w.ws_message(x, json.dumps(done).encode(), from_client=False, t=first + 0.1 * events)
    w.flush()
    return x


def test_a_socket_turn_further_at_the_engine_side_is_stuck_and_recovers_when_the_client_side_catches_up(tmp_path: Path) -> None:
    outer, inner = RecordingWriter(tmp_path / "client", point="client-side"), RecordingWriter(tmp_path / "engine", point="engine-side")
    started = time.time()
    try:
        # Turn 1 through at both; turn 2 at 3 events at the client side, complete at the engine side.
        xo = _socket(outer, [(0.1, 0.2, 5, True), (1.0, 1.1, 3, False)])
        _socket(inner, [(0.105, 0.15, 5, True), (1.005, 1.05, 8, True)])
        watched = WatchedRecordings([str(tmp_path / "client"), str(tmp_path / "engine")])
        watched.poll()
        points, local = watched.points()
        findings = Findings()
        snap = snapshot(points, started + 6.0, 2.0, local)
        (said,) = findings.update(snap, started + 6.0)
        assert (said.event, said.label, said.turn, said.ahead, said.behind) == ("stuck", "s1", 2, "engine-side", "client-side")
        assert said.line.startswith("s1 WebSocket turn 2: engine-side done ") and "client-side stuck at event 3" in said.line
        assert said.behind_progress["socket_turn"] == 2 and said.ahead_progress["complete"]  # type: ignore[index]
        # Turn 1 is over at both points: nothing said of it, nor of the open socket between turns.
        assert len(snap.lags) == 1
        # The client side's turn goes on to its end: recovered, caught up.
        for i in range(3, 8):
            outer.ws_message(xo, json.dumps({"type": "response.output_text.delta", "delta": "a"}).encode(),
                             from_client=False, t=6.1 + 0.01 * i)  # fmt: skip
        done = {"type": "response.completed", "response": {"id": "resp_2", "status": "completed", "output": []}}
        outer.ws_message(xo, json.dumps(done).encode(), from_client=False, t=6.2)
        outer.flush()
        watched.poll()
        points, local = watched.points()
        (over,) = findings.update(snapshot(points, started + 6.5, 2.0, local), started + 6.5)
        assert (over.event, over.how, over.behind) == ("recovered", "caught up", "client-side"), over.line
        assert over.line.startswith("s1 WebSocket turn 2: client-side caught up with engine-side")
    finally:
        outer.close()
        inner.close()
