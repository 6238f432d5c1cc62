"""WebSocket sessions through forward proxies and over TLS: the recorder as the client's HTTP proxy
journals a `ws://` socket (an absolute-URI upgrade) and a `wss://` one (CONNECT, the TLS it
intercepts) as it journals one in front of the engine; a replay opens its sockets through a
forward hop the same two ways, and through a TLS entry, every turn answered.

The parts are real: the reference engine, a mitmdump in reverse mode serving TLS in front of it
(its own CA's certificate), a mitmdump as a plain forward proxy (CONNECT tunnels, no
interception), the recorder in mitmdump's regular mode."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from processes import RECORD, EngineFactory, MitmdumpFactory
from test_check_websocket import FAST
from websocket_clients import converse

from proxycheck import cli
from proxycheck.io.runstore import load_run
from proxycheck.io.storage import load

pytestmark = pytest.mark.timeout(120)

TURNS = 3


def sockets_ended_well(conversations: list[list[list[dict]]]) -> None:
    for events in conversations:
        assert len(events) == TURNS and all(turn[-1]["type"] == "response.completed" for turn in events), events


def test_the_recorder_as_a_forward_proxy_journals_ws_and_wss_sockets(engines: EngineFactory,
                                                                     mitmdumps: MitmdumpFactory,
                                                                     tmp_path: Path) -> None:  # fmt: skip
    engine = engines(*FAST)
    tls = mitmdumps("--mode", f"reverse:{engine.url}", "--set", f"confdir={tmp_path / 'tls-conf'}")
    out = tmp_path / "rec"
    # ssl_insecure: the recorder does not know the TLS hop's own CA (a test's, not the point here)
    recorder = mitmdumps("--mode", "regular", "-s", str(RECORD), "--set", f"proxycheck_out={out}",
                         "--set", "ssl_insecure=true", "--set", f"confdir={tmp_path / 'rec-conf'}")  # fmt: skip
    # aiohttp writes a ws:// URL into the proxy's request line as it is (`GET ws://...`), which
    # proxies refuse: its http form is the same upgrade, as the replayer sends it (upgrade_url).
    plain = f"http://127.0.0.1:{engine.port}/v1/responses"
    secure = f"wss://127.0.0.1:{tls.port}/v1/responses"

    async def both() -> list[list[list[dict]]]:
        return list(await asyncio.wait_for(asyncio.gather(
            converse(plain, TURNS, proxy=recorder.url), converse(secure, TURNS, proxy=recorder.url, ssl=False),
        ), timeout=60))  # fmt: skip

    sockets_ended_well(asyncio.run(both()))
    time.sleep(1.0)  # the recorder's last records follow the client's close by a moment
    recorder.stop()
    exchanges = sorted(load(out).exchanges, key=lambda x: x.url)
    assert [(x.url, x.status, x.websocket) for x in exchanges] == [
        (plain, 101, True), (f"https://127.0.0.1:{tls.port}/v1/responses", 101, True)]  # fmt: skip
    for socket in exchanges:
        creates = [json.loads(m.data) for m in socket.ws if m.from_client]
        assert [c["type"] for c in creates] == ["response.create"] * TURNS
        assert sum(1 for m in socket.ws if not m.from_client and b"response.completed" in m.data) == TURNS
        assert socket.ws_close is not None and socket.ws_close.by == "client", socket.ws_close


@pytest.fixture
def socket_recording(engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path) -> Path:
    engine = engines(*FAST)
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(engine, out)
    sockets_ended_well([asyncio.run(asyncio.wait_for(converse(recorder.url.replace("http", "ws", 1) + "/v1/responses",
                                                              TURNS), timeout=30))])  # fmt: skip
    time.sleep(0.5)
    recorder.stop()
    return out


def replayed(recording: Path, chain_text: str, tmp: Path) -> dict[str, list]:
    chain = tmp / "chain.toml"
    chain.write_text(chain_text)
    out = tmp / "run"
    assert cli.main(["replay", str(recording), "--chain", str(chain), "--pace", "fast", "--out", str(out)]) == 0
    routes: dict[str, list] = {}
    for obs in load_run(str(out)).observations:
        routes.setdefault(obs.route, []).append(obs)
    for route, observed in routes.items():
        assert [o.turn for o in observed] == list(range(1, TURNS + 1)), route
        assert all(o.outcome.value == "ok" and o.transport == "websocket" for o in observed), \
            [(route, o.turn, o.detail) for o in observed]  # fmt: skip
        assert [o.reused for o in observed] == [False] + [True] * (TURNS - 1)  # one socket, its turns on it
    return routes


def test_a_replay_opens_its_sockets_through_a_forward_hop_with_an_absolute_uri_upgrade(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, socket_recording: Path, tmp_path: Path
) -> None:
    engine = engines(*FAST)
    forward = mitmdumps("--mode", "regular")
    routes = replayed(socket_recording, f'engine = "{engine.url}"\n[[hop]]\nname = "corp"\nproxy = "{forward.url}"\n',
                      tmp_path)  # fmt: skip
    assert set(routes) == {"direct", "via:corp"}
    # The forward proxy carried the via:corp socket to the engine (an absolute-URI request: a
    # `GET ws://...` it would have refused, and the turns would not be ok).
    assert f"server connect 127.0.0.1:{engine.port}" in forward.log_tail(100_000)


def test_a_replay_opens_its_sockets_over_tls_and_through_a_connect_tunnel(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, socket_recording: Path, tmp_path: Path
) -> None:
    engine = engines(*FAST)
    confdir = tmp_path / "conf"
    tls = mitmdumps("--mode", f"reverse:{engine.url}", "--set", f"confdir={confdir}")
    forward = mitmdumps("--mode", "regular", "--ignore-hosts", ".*", "--set", f"confdir={confdir}")
    ca = json.dumps(str(confdir / "mitmproxy-ca-cert.pem"))
    routes = replayed(socket_recording, f'engine = "{engine.url}"\n'
                                        f'[[hop]]\nname = "corp"\nproxy = "{forward.url}"\n'
                                        f'[[hop]]\nname = "tls"\nurl = "https://127.0.0.1:{tls.port}"\nverify = {ca}\n',
                      tmp_path)  # fmt: skip
    assert set(routes) == {"direct", "via:tls", "via:corp"}
    # via:corp: CONNECT to the TLS entry, the socket opened inside the tunnel.
    assert f"server connect 127.0.0.1:{tls.port}" in forward.log_tail(100_000)
