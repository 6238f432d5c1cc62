"""The recorder on the Responses API's WebSocket mode: a real mitmdump with the recorder in front of
the reference engine's WebSocket mode, driven by an aiohttp WebSocket client as Codex drives one
socket per session.

What a user notices: the client gets every event as it would without the recorder; the recording
holds the socket (its 101, every message both ways with its time, how it ended) with a client's
credential redacted; `sessions` shows the socket's turns; a socket the engine cut mid-answer is
that turn's `reset`; a replay sends the socket's turns on a socket of its own, never its upgrade
as a plain request."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from cli_runner import run_proxycheck
from processes import RECORD, EngineFactory, MitmdumpFactory
from websocket_clients import TERMINAL, converse, ws_url

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.websocket import turns
from proxycheck.io.recordings import open_recording
from proxycheck.io.storage import load
from proxycheck.io.subset import write_subset

pytestmark = pytest.mark.timeout(60)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
SECRET = "sk-proj-not-for-the-journal"


def one_socket(engines: EngineFactory, mitmdumps: MitmdumpFactory, out: Path, turns_: int = 2) -> Path:
    """A recording in `out` of one socket of `turns_` turns, through the recorder in front of an engine."""
    recorder = mitmdumps.recorder(engines(*FAST), out)
    asyncio.run(converse(ws_url(recorder), turns_=turns_))
    settle()
    recorder.stop()
    return out


def settle() -> None:
    time.sleep(0.5)  # the recorder's last records (the close) follow the client's close by a moment


def test_a_socket_is_recorded_whole_and_passes_unchanged(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                          tmp_path: Path) -> None:  # fmt: skip
    engine = engines(*FAST)
    direct = asyncio.run(converse(ws_url(engine)))
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(engine, out)
    through = asyncio.run(converse(ws_url(recorder), key=SECRET))
    settle()
    recorder.stop()
    # The client got the same events through the recorder (ids and times aside).
    assert [[e["type"] for e in t] for t in through] == [[e["type"] for e in t] for t in direct]
    assert [t[-1]["type"] for t in through] == ["response.completed"] * 2

    (socket,) = load(out).exchanges
    assert socket.websocket and socket.status == 101 and socket.method == "GET"
    assert socket.ws_close is not None and socket.ws_close.by == "client" and socket.ws_close.code == 1000
    assert socket.t_end is not None and socket.error is None
    sent = [m for m in socket.ws if m.from_client]
    got = [m for m in socket.ws if not m.from_client]
    assert len(sent) == 2 and len(got) == sum(len(t) for t in through)
    assert [json.loads(m.data)["type"] for m in got] == [e["type"] for t in through for e in t]
    assert all(a.t <= b.t for a, b in zip(socket.ws, socket.ws[1:]))  # in the order they passed
    assert [(t.index, t.terminal) for t in turns(socket.ws)] == [(1, "response.completed"), (2, "response.completed")]
    journal = (out / "journal.jsonl").read_text()
    assert SECRET not in journal and '\\"api_key\\": \\"[redacted]\\"' in journal  # redacted in place, the key kept
    assert oct((out / "journal.jsonl").stat().st_mode & 0o777) == "0o600"

    (summary,) = open_recording(str(out)).summaries
    (turn,) = summary.turns
    assert turn.outcome is Outcome.OK and turn.detail.startswith("WebSocket: 2 turn(s); closed by the client (1000")
    done = run_proxycheck("sessions", str(out), "--json")
    assert done.returncode == 0 and "WebSocket: 2 turn(s)" in done.stdout


def test_a_socket_the_engine_cuts_mid_answer_is_that_turns_reset(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    engine = engines(*FAST, "--fault", "close:after=3,from_turn=2")
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(engine, out)
    through = asyncio.run(converse(ws_url(recorder)))
    settle()
    recorder.stop()
    assert through[0][-1]["type"] == "response.completed" and through[1][-1]["type"] not in TERMINAL
    (socket,) = load(out).exchanges
    assert socket.ws_close is not None and socket.ws_close.by is None and socket.ws_close.code == 1006
    assert socket.error == "server disconnected"
    (summary,) = open_recording(str(out)).summaries
    (turn,) = summary.turns
    assert turn.outcome is Outcome.RESET and turn.detail.startswith("WebSocket turn 2 of 2:"), turn.detail


def test_beside_http_sessions_a_socket_is_planned_as_one_socket_of_its_turns(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    engine = engines(*FAST)
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(engine, out)
    asyncio.run(converse(ws_url(recorder), turns_=2))
    body = {"model": "m", "input": "over HTTP", "stream": True, "max_output_tokens": 4}
    with httpx.stream("POST", recorder.url + "/v1/responses", json=body, timeout=10) as response:
        assert response.status_code == 200 and b"response.completed" in response.read()
    settle()
    recorder.stop()
    chain = tmp_path / "chain.toml"
    chain.write_text(f'engine = "{engine.url}"\n')
    done = run_proxycheck("replay", str(out), "--chain", str(chain), "--dry-run")
    assert done.returncode == 0 and "left out" not in done.stderr, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("  ")]
    sockets = [line for line in lines if " WS ws://" in line]
    assert len(sockets) == 2 and "new socket" in sockets[0] and "the same socket" in sockets[1], lines
    assert sum(" POST http://" in line for line in lines) == 1 and not any(" GET " in line for line in lines)


def test_a_socket_goes_through_har_and_back_whole(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                   tmp_path: Path) -> None:  # fmt: skip
    out = one_socket(engines, mitmdumps, tmp_path / "rec")
    har = tmp_path / "rec.har"
    assert run_proxycheck("export", str(out), "--har", str(har)).returncode == 0
    (entry,) = json.loads(har.read_text())["log"]["entries"]
    assert entry["_resourceType"] == "websocket" and {m["type"] for m in entry["_webSocketMessages"]} == {"send", "receive"}
    back = tmp_path / "back"
    done = run_proxycheck("import", str(har), "--out", str(back))
    assert done.returncode == 0, done.stderr
    (before,), (after,) = load(out).exchanges, load(back).exchanges
    assert [(m.from_client, m.data) for m in after.ws] == [(m.from_client, m.data) for m in before.ws]
    assert [round(m.t, 6) for m in after.ws] == [round(m.t, 6) for m in before.ws]
    assert after.ws_close == before.ws_close and after.websocket
    assert [t.outcome for t in open_recording(str(back)).summaries[0].turns] == [Outcome.OK]


def test_a_mitmproxy_dump_of_a_socket_imports_as_the_recorder_journals_it(engines: EngineFactory,
                                                                           mitmdumps: MitmdumpFactory,
                                                                           tmp_path: Path) -> None:  # fmt: skip
    engine = engines(*FAST)
    dump = tmp_path / "socket.flow"
    out = tmp_path / "rec"
    # One mitmdump both dumps the flows (-w) and records them: the same socket, two ways.
    hop = mitmdumps("--mode", f"reverse:{engine.url}", "-w", str(dump), "-s", str(RECORD), "--set", f"proxycheck_out={out}")
    asyncio.run(converse(ws_url(hop), turns_=2))
    settle()
    hop.stop()
    imported = tmp_path / "imported"
    done = run_proxycheck("import", str(dump), "--out", str(imported))
    assert done.returncode == 0, done.stderr
    (recorded,), (back,) = load(out).exchanges, load(imported).exchanges
    assert [(m.from_client, m.data) for m in back.ws] == [(m.from_client, m.data) for m in recorded.ws]
    assert back.ws_close is not None and recorded.ws_close is not None
    assert (back.ws_close.by, back.ws_close.code) == (recorded.ws_close.by, recorded.ws_close.code) == ("client", 1000)
    assert [t.outcome for t in open_recording(str(imported)).summaries[0].turns] == [Outcome.OK]


def test_a_subset_of_a_recording_keeps_its_sockets_whole(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                         tmp_path: Path) -> None:  # fmt: skip
    out = one_socket(engines, mitmdumps, tmp_path / "rec")
    recording = load(out)
    (socket,) = recording.exchanges
    write_subset(recording, [socket.xid], tmp_path / "subset", shifts={socket.xid: 1.5})
    (copy,) = load(tmp_path / "subset").exchanges
    assert [(m.from_client, m.data) for m in copy.ws] == [(m.from_client, m.data) for m in socket.ws]
    assert [round(b.t - a.t, 3) for a, b in zip(socket.ws, copy.ws)] == [1.5] * len(socket.ws)  # moved with it
    assert copy.ws_close is not None and socket.ws_close is not None
    assert (copy.ws_close.by, copy.ws_close.code) == (socket.ws_close.by, socket.ws_close.code)
