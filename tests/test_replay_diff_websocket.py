"""`replay` and `diff` on WebSocket sessions, as a user runs them apart from `check`: the dry run
says which turns go on one socket; a replay over a hop that cuts sockets mid-answer keeps every
turn of every socket; `diff` of that run names the hop at the socket's first failing turn, and its
JUnit and HTML reports carry the socket's turns like an HTTP session's."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from processes import EngineFactory, MitmdumpFactory, write_chain
from test_check_websocket import FAST, TURNS, recorded

from proxycheck import cli
from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(120)


def test_the_dry_run_sends_a_sockets_turns_on_that_socket(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    recording = recorded(engines, mitmdumps, tmp_path / "rec", sockets=1)
    chain = write_chain(tmp_path / "chain.toml", "http://127.0.0.1:9", [])
    assert cli.main(["replay", str(recording), "--chain", str(chain), "--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert len(lines) == TURNS, lines
    assert "ws://127.0.0.1:9/v1/responses" in lines[0] and "new socket" in lines[0], lines[0]
    assert all("the same socket" in line and "ws://" in line for line in lines[1:]), lines


def test_diff_of_a_socket_replay_names_the_hop_at_the_first_failing_turn(engines: EngineFactory,
                                                                        mitmdumps: MitmdumpFactory,
                                                                        tmp_path: Path) -> None:  # fmt: skip
    recording = recorded(engines, mitmdumps, tmp_path / "rec", sockets=2)
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine, "ws_cut_after_events=3", "from_turn=2")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    run = tmp_path / "run"
    cli.main(["replay", str(recording), "--chain", str(chain), "--repeat", "2", "--pace", "fast", "--out", str(run)])
    observed = load_run(str(run)).observations
    # Every turn of both sockets, on both routes, both repetitions: the turns after a cut are kept
    # as not sent, not dropped.
    assert len(observed) == 2 * 2 * 2 * TURNS, len(observed)
    assert all(o.transport == "websocket" for o in observed)

    verdict, junit, html = tmp_path / "v.json", tmp_path / "j.xml", tmp_path / "r.html"
    status = cli.main(["diff", str(run), "--json", str(verdict), "--junit", str(junit), "--html", str(html)])
    doc = json.loads(verdict.read_text())
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "edge", 2), doc["summary"]
    assert doc["summary"].startswith("hop edge cuts WebSockets mid-answer"), doc["summary"]
    assert next(r for r in doc["routes"] if r["route"] == "direct")["failures"] == 0

    cases = ET.parse(junit).getroot().iter("testcase")
    failed = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
    assert failed and all("edge" in (classname or "") for classname, _ in failed), failed
    assert len(failed) == 2  # each socket is a session that failed on the hop, and only there
    page = html.read_text()
    assert "edge" in page and "turn 2" in page
