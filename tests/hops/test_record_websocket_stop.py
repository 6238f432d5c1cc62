"""The recorder stopped while a socket is still open (Ctrl-C on `record`, a proxy restarted): what
it journaled stays, and the socket's unknown end is said as such, never as a wedge.

What mitmproxy 11 does, found by running it: on shutdown it ends the open socket towards the
client (a close frame, 1000, or a cut, 1006, as its shutdown goes) and the recorder journals no
end for it: the journal ends with its `close` record naming the socket's exchange as in flight. So the recording holds the socket's
answered turns, `sessions` reads them ok, and `check` plans no end for the socket (the recording
does not show how it would have ended) and finds the chain healthy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory, write_chain
from websocket_clients import TERMINAL, ws_url

from proxycheck.io.recordings import open_recording
from proxycheck.io.storage import load

pytestmark = pytest.mark.timeout(90)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")


async def answered_then_stopped(url: str, stop: object) -> int | None:
    """One turn answered on a socket, then the recorder stopped (`stop()`) while it is open: the
    close code the client then saw."""
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as ws:
            await ws.send_str(json.dumps({"type": "response.create", "model": "m", "max_output_tokens": 8,
                                          "input": "one turn"}))  # fmt: skip
            while json.loads((await ws.receive(timeout=10)).data)["type"] not in TERMINAL:
                pass
            await asyncio.sleep(0.3)
            stop()  # type: ignore[operator]
            msg = await ws.receive(timeout=10)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR), msg
            return ws.close_code


def test_a_socket_open_when_the_recorder_stops_keeps_its_turns_and_an_unknown_end(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    engine = engines(*FAST)
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(engine, out)
    assert asyncio.run(answered_then_stopped(ws_url(recorder), recorder.stop)) in (1000, 1001, 1006)

    (socket,) = load(out).exchanges
    assert socket.websocket and socket.status == 101
    assert any(b"response.completed" in m.data for m in socket.ws if not m.from_client)
    assert socket.ws_close is None and socket.error is None  # its end was never seen: none is made up
    last = json.loads((out / "journal.jsonl").read_text().splitlines()[-1])
    assert last["k"] == "close" and last["inflight"] == [socket.xid], last

    done = run_proxycheck("sessions", str(out), "--json", timeout=30)
    assert done.returncode == 0, done.stderr
    (session,) = json.loads(done.stdout)["sessions"]
    (turn,) = session["turns"]
    assert turn["outcome"] == "ok", turn  # a recorder stopping is no reset of the socket

    (planned,) = open_recording(str(out)).planned
    assert [t.socket_end for t in planned.turns] == [False]  # no end to watch for: none was recorded
    chain = write_chain(tmp_path / "chain.toml", engine.url, [])
    done = run_proxycheck("check", str(out), "--chain", str(chain), "--json", str(tmp_path / "v.json"),
                          "--out", str(tmp_path / "run"), timeout=60)  # fmt: skip
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert done.returncode == 0 and verdict["verdict"] == "healthy", verdict["summary"]
