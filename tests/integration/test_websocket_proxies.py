"""WebSocket sessions through real HAProxy and Squid: a socket recorded straight from the engine
(a client thinking between turns, as a harness runs a tool), then checked over a chain with the
proxy in it.

What the proxies do, found by running them:
* HAProxy 2.6 in HTTP mode passes the upgrade; once the socket is up, `timeout tunnel` counts its
  silence (neither side sending) and closes both sides without a close frame. Shorter than the
  think time: `check` names haproxy at the turn after the first think time, advice `ws_idle_cut`
  naming `timeout tunnel`; longer: healthy.
* Squid 5 as a forward proxy (a replay's absolute-URI `GET http://...` with `Upgrade:
  websocket`) drops the upgrade unless `http_upgrade_request_protocols websocket allow all` lets
  it through: the engine gets a plain GET and answers 405. Squid compares the protocol's name as
  written: `WebSocket` (its documentation's example) does not let the `websocket` clients send
  through. `check` names squid at turn 1, advice `ws_upgrade_refused` with the directive; with
  the directive, healthy."""

from __future__ import annotations

import asyncio
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from common import chain_file, check
from proxies import start_haproxy, start_squid

from proxycheck.io.procs import start_engine, start_mitmdump

sys.path.insert(0, str(Path(__file__).parents[1]))
from websocket_clients import converse  # noqa: E402

pytestmark = pytest.mark.timeout(180)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
RECORD = Path(__file__).parents[2] / "addons" / "record.py"
THINK = 3.0  # the client's think time between turns


def recorded(out: Path, turns: int, think: float) -> Path:
    """One socket of `turns` turns `think` s apart, recorded in front of an engine of its own."""
    with ExitStack() as stack:
        engine = start_engine(*FAST)
        stack.callback(engine.stop)
        recorder = start_mitmdump("--mode", f"reverse:{engine.url}", "-s", str(RECORD), "--set", f"proxycheck_out={out}")
        stack.callback(recorder.stop)
        url = recorder.url.replace("http://", "ws://") + "/v1/responses"
        events = asyncio.run(asyncio.wait_for(converse(url, turns, think=think), timeout=60))
        assert [turn[-1]["type"] for turn in events] == ["response.completed"] * turns, events
        time.sleep(0.5)
    return out


def test_haproxy_timeout_tunnel_cutting_idle_sockets_is_named_at_that_turn(tmp_path: Path) -> None:
    rec = recorded(tmp_path / "rec", 3, THINK)
    with ExitStack() as stack:
        engine = start_engine(*FAST)
        stack.callback(engine.stop)
        server = f"server engine 127.0.0.1:{engine.port}"
        cutting = start_haproxy(server, defaults="timeout tunnel 1500ms")
        stack.callback(cutting.stop)
        status, doc = check(tmp_path, rec, chain_file(tmp_path, engine.url, ("haproxy", f"url={cutting.url}")), "--full")
        assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "haproxy", 2), \
            doc["summary"]  # fmt: skip
        assert next(r for r in doc["routes"] if r["route"] == "direct")["failures"] == 0
        said = [a for a in doc["advice"] if a["hop"] == "haproxy" and a["kind"] == "ws_idle_cut"]
        assert said and "HAProxy timeout tunnel" in said[0]["likely"], doc["advice"]

        fixed = start_haproxy(server, defaults="timeout tunnel 60s")
        stack.callback(fixed.stop)
        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={fixed.url}"), name="fixed.toml")
        status, doc = check(tmp_path, rec, chain, "--full")
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]


def test_squid_dropping_the_upgrade_is_named_and_allowing_it_is_healthy(tmp_path: Path) -> None:
    rec = recorded(tmp_path / "rec", 2, 0.0)
    with ExitStack() as stack:
        engine = start_engine(*FAST)
        stack.callback(engine.stop)
        plain = start_squid()
        stack.callback(plain.stop)
        status, doc = check(tmp_path, rec, chain_file(tmp_path, engine.url, ("squid", f"proxy={plain.url}")))
        assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "squid", 1), \
            doc["summary"]  # fmt: skip
        said = [a for a in doc["advice"] if a["hop"] == "squid" and a["kind"] == "ws_upgrade_refused"]
        assert said and "HTTP 405" in said[0]["seen"], doc["advice"]
        assert "http_upgrade_request_protocols websocket allow all" in said[0]["likely"], said

        allowing = start_squid("http_upgrade_request_protocols websocket allow all")
        stack.callback(allowing.stop)
        chain = chain_file(tmp_path, engine.url, ("squid", f"proxy={allowing.url}"), name="fixed.toml")
        status, doc = check(tmp_path, rec, chain)
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
