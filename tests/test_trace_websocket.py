"""`proxycheck trace` over WebSocket sessions (the Responses API's WebSocket mode) recorded at two
points of a real chain: the reference engine, a recorder in front of it (engine-side), the fault
hop with a socket fault, a recorder in front of the hop (client-side), and a client driving one
socket per session (tests/websocket_clients.converse). The set-up and helpers are
tests/test_trace_points.py's.

Each turn of a socket is what the points match and locate: a healthy socket is nothing lost, every
turn matched; a turn the hop cut mid-answer, the socket the hop closed after a turn (the next
create never reaching the engine, or the socket's end seen cut outside and ended by its client
inside), a socket the hop cut while it sat idle and an upgrade the hop refused are each lost
between the two points, named by the turn, the hop named when a chain file places the points."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest
from processes import EngineFactory, MitmdumpFactory
from test_trace_points import FLUSHED, INNER, OUTER, around_fault_hop, lost_between, trace
from websocket_clients import converse, ws_url

pytestmark = pytest.mark.timeout(120)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02", "--ttft-per-kb", "0")


def talk(url: str, turns: int, *, sockets: int = 1, think: float = 0.0) -> list[list[list[dict[str, Any]]]]:
    """`sockets` sockets at once, `turns` turns each; what each client got (a socket the chain ended
    shows as its turns so far: a client that meets a closed socket stops there)."""

    async def one() -> list[list[dict[str, Any]]]:
        try:
            return await asyncio.wait_for(converse(url, turns, think=think), timeout=30)
        except (aiohttp.ClientError, ConnectionError, RuntimeError):
            return []  # sent on a socket the chain had closed

    async def all_of_them() -> list[list[list[dict[str, Any]]]]:
        return list(await asyncio.gather(*(one() for _ in range(sockets))))

    return asyncio.run(all_of_them())


def socket_parts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [x for x in doc["exchanges"] if "websocket" in x]


def test_healthy_sockets_through_both_points_are_every_turn_matched_and_nothing_lost(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    points = around_fault_hop(engines, mitmdumps, tmp_path, FAST)
    got = talk(ws_url(points.outer), 3, sockets=2)
    assert [len(turns) for turns in got] == [3, 3]
    points.stop_recorders()
    status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side))
    assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
    turns = [x for x in doc["exchanges"] if x.get("websocket") == "turn"]
    # Each turn of each socket a track of its own, seen at both points; the two sockets' first
    # turns carry the same create message, told apart by time and answer.
    assert sorted(x["turn"] for x in turns) == [1, 1, 2, 2, 3, 3], [x["line"] for x in doc["exchanges"]]
    for x in turns:
        outer, inner = x["points"][OUTER], x["points"][INNER]
        assert outer["complete"] and inner["complete"], x["line"]
        assert outer["request"]["view"] == inner["request"]["view"] and outer["socket_turn"] == x["turn"]
        assert outer["events"] == inner["events"] > 0 and outer["terminal"]
    # The client closed each socket with its close frame: the socket's end, at both points, is over.
    ends = [x for x in doc["exchanges"] if x.get("websocket") == "end"]
    assert len(ends) == 2 and all(x["locus"] == {"kind": "fine"} and set(x["points"]) == {OUTER, INNER} for x in ends)
    assert all(x["locus"] == {"kind": "fine"} for x in doc["exchanges"])
    pair = doc["pairs"][0]
    assert pair["diverged_total"] == 0 and pair["outer_only"] == 0 and pair["inner_only"] == 0, pair


def test_a_turn_the_hop_cut_mid_answer_is_lost_between_the_points_at_that_turn(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    points = around_fault_hop(engines, mitmdumps, tmp_path, FAST, "ws_cut_after_events=3", "from_turn=3")
    (got,) = talk(ws_url(points.outer), 4)
    assert len(got) == 3 and got[2][-1]["type"] != "response.completed"  # turn 3 cut, turn 4 never sent
    points.stop_recorders()
    status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side), "--chain",
                                str(points.chain(tmp_path)))  # fmt: skip
    assert status == 1 and (doc["verdict"], doc["culprit"]) == ("proxy", "F"), doc["summary"]
    (lost,) = lost_between(doc)
    assert (lost["websocket"], lost["turn"]) == ("turn", 3), [x["line"] for x in doc["exchanges"]]
    outer, inner = lost["points"][OUTER], lost["points"][INNER]
    assert not outer["complete"] and outer["outcome"] == "reset" and outer["events"] == 3, lost["line"]
    # Inside, the engine's answer went on: it completed there, or the hop closed the socket on it.
    assert inner["complete"] or inner["events"] > 3 or "closed by the client" in inner["detail"], lost["line"]
    assert "s1 WebSocket turn 3" in doc["summary"] and "s1 WebSocket turn 3: " in out
    assert all(x["locus"] == {"kind": "fine"} for x in doc["exchanges"] if x is not lost)


def test_a_socket_the_hop_closed_after_a_turn_is_lost_between_the_points_at_the_next_turn(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    points = around_fault_hop(engines, mitmdumps, tmp_path, FAST, "ws_close_after_turns=2")
    (got,) = talk(ws_url(points.outer), 4, think=0.2)
    assert len(got) <= 3 and all(t[-1]["type"] == "response.completed" for t in got[:2])
    points.stop_recorders()
    status, _, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side))
    assert status == 1 and doc["verdict"] == "proxy", doc["summary"]
    (lost,) = lost_between(doc)
    # Turn 3's create reached the client-side point and no further, or the client met the socket
    # already cut: its end after turn 2, cut outside, ended by its client (the hop) inside.
    assert lost["turn"] == 3 and lost["websocket"] in ("turn", "end"), lost["line"]
    outer = lost["points"][OUTER]
    assert outer["outcome"] == "reset" and not outer["complete"], lost["line"]
    if lost["websocket"] == "turn":
        assert INNER not in lost["points"], lost["line"]  # the engine never saw it
    else:
        assert lost["points"][INNER]["complete"], lost["line"]
    assert [x["turn"] for x in doc["exchanges"] if x.get("websocket") == "turn" and x["locus"]["kind"] == "fine"] == [1, 2]


def test_a_socket_the_hop_cut_while_idle_is_lost_between_the_points_at_its_end(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    points = around_fault_hop(engines, mitmdumps, tmp_path, FAST, "ws_idle_close=0.5")
    (got,) = talk(ws_url(points.outer), 2, think=1.5)
    assert len(got) <= 1  # the hop cut the socket while the client thought (its send may raise)
    points.stop_recorders()
    status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side), "--chain",
                                str(points.chain(tmp_path)))  # fmt: skip
    assert status == 1 and (doc["verdict"], doc["culprit"]) == ("proxy", "F"), doc["summary"]
    (lost,) = lost_between(doc)
    assert (lost["websocket"], lost["turn"]) == ("end", 2), [x["line"] for x in doc["exchanges"]]
    outer, inner = lost["points"][OUTER], lost["points"][INNER]
    assert outer["outcome"] == "reset" and "between turns the socket was" in outer["detail"], lost["line"]
    assert inner["complete"] and inner["detail"].startswith("the client ended the socket"), lost["line"]
    assert "s1 WebSocket end after turn 1" in out
    assert doc["pairs"][0]["diverged"] == {"cut": 1}


def test_an_upgrade_the_hop_refused_is_lost_between_the_points(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                               tmp_path: Path) -> None:  # fmt: skip
    points = around_fault_hop(engines, mitmdumps, tmp_path, FAST, "ws_refuse=405")
    assert talk(ws_url(points.outer), 1) == [[]]
    # The client goes on over HTTP (as Codex falls back): what the engine-side point saw of the
    # client side's traffic says that a request missing there never got there.
    body = {"model": "m", "input": "over HTTP then", "max_output_tokens": 8}
    for _ in range(2):
        assert httpx.post(points.outer.url + "/v1/responses", json=body, timeout=20).status_code == 200
    points.stop_recorders()
    status, _, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side), "--chain",
                              str(points.chain(tmp_path)))  # fmt: skip
    assert status == 1 and (doc["verdict"], doc["culprit"]) == ("proxy", "F"), doc["summary"]
    (lost,) = lost_between(doc)
    assert lost["websocket"] == "upgrade" and set(lost["points"]) == {OUTER}, lost["line"]
    assert lost["points"][OUTER]["status"] == 405 and "engine-side never saw it" in lost["line"]
