"""Codex CLI (the pinned @openai/codex in .harness/) on the Responses API's WebSocket mode through a
real nginx that cuts idle sockets, recorded by `proxycheck record` in front of it: the issue's
story from the recording to the fixed chain.

The engine (`--tool-command "sleep 3; ls"`, beside test_codex.py's arguments) answers each turn
offering tools with a call of Codex's shell (`exec_command`) running `sleep 3; ls`: Codex sits
idle on its socket for 3 s while the command runs. nginx forwards the upgrade (as
test_codex_websocket.py's) with `proxy_read_timeout 1s`, which counts a socket's silence.

What Codex 0.171 did, run after run:

* **Its first socket**: the warm-up, then the first model call, answered with the shell call.
  While the command ran, nginx cut the socket (no close frame: the recorder sees the server's side
  cut, 1006, "server disconnected", about a second after the answer ended).
* **It dials again, silently, when it next has something to send**: once the command is done it
  opens a new socket (no warm-up on it) and sends the whole input again (no
  `previous_response_id`: the new socket's memory is empty), the function call and its output at
  its end. The next shell call is cut the same way, and so on: one socket per model call after the
  first, each answered well. It does not fall back to HTTP, says nothing, and `codex exec` ends
  well (exit 0, its answer printed).
* **What the recording shows**: the sockets in order, every one but the last cut by the server
  side after its last turn was answered. `sessions` shows one conversation whose turns are the
  sockets (each a later attempt of the one before: it resends the conversation after a failure),
  each cut socket `reset`, "between turns the socket was cut without a close frame (1006)".
* **`check`** over the engine and that nginx: `proxy`, nginx named, the first failing turn the
  turn after a socket's last answer (its idle end, replayed as a last turn of the socket:
  `PlannedTurn.socket_end`), advice `ws_idle_cut` (proxy_read_timeout). The direct route keeps
  every socket open as long: clean.
* **`minimize`** over that route shrinks it to one socket's first turns and its idle end (Codex's
  warm-up and nginx's cut after it, here), which still fails through nginx.
* **The same chain fixed** (`proxy_read_timeout 60s`): no route fails. The recording holds the
  cuts as failures, so the verdict of a clean replay is `not-reproduced` (exit 0, the regression
  replay's clean result), every route clean.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from cli_runner import run_proxycheck
from harnesses import REPO, HarnessRun, check_verdict, sessions_of
from processes import write_chain
from test_codex import ENGINE_ARGS
from test_codex_websocket import FALLBACK, FORWARD_UPGRADE, NGINX, RESPONSES, ended_well, run_recorded

from proxycheck.core.recording.websocket import turns
from proxycheck.io.procs import Managed
from proxycheck.io.recordings import open_recording
from proxycheck.io.storage import load

sys.path.insert(0, str(REPO / "tests" / "integration"))
from proxies import Proxy, start_nginx  # noqa: E402  (the proxy matrix's real nginx, stopped by pid)

pytestmark = pytest.mark.timeout(200)

THINK = 3  # seconds Codex runs each shell call
TOOL_COMMAND = f"sleep {THINK}; ls"
CUTS_IDLE = "1s"  # nginx's proxy_read_timeout, shorter than THINK
FIXED = "60s"


def nginx_idle(engine: Managed, read_timeout: str) -> Proxy:
    """nginx forwarding the upgrade to `engine`, cutting a socket silent for `read_timeout`."""
    return start_nginx(f"location / {{ {NGINX.format(url=engine.url)} {FORWARD_UPGRADE} "
                       f"proxy_read_timeout {read_timeout}; }}")  # fmt: skip


def chain(tmp: Path, engine: Managed, nginx: Proxy) -> Path:
    return write_chain(tmp / "chain.toml", engine.url, [("nginx", nginx.url)])


@pytest.fixture(scope="module")
def engine(module_engines: Any) -> Managed:
    return module_engines(*ENGINE_ARGS, "--tool-command", TOOL_COMMAND)


@pytest.fixture(scope="module")
def cutting(engine: Managed) -> Iterator[Proxy]:
    nginx = nginx_idle(engine, CUTS_IDLE)
    try:
        yield nginx
    finally:
        nginx.stop()


@pytest.fixture(scope="module")
def cut_run(codex: str, cutting: Proxy, tmp_path_factory: pytest.TempPathFactory) -> HarnessRun:
    return run_recorded(codex, cutting.url, tmp_path_factory.mktemp("codex-ws-idle"))


def test_codex_dials_a_new_socket_and_resends_the_whole_input_after_nginx_cut_the_idle_one(cut_run: HarnessRun) -> None:
    ended_well(cut_run)
    assert FALLBACK not in cut_run.done.stdout, cut_run.failure()
    exchanges = load(cut_run.recording).exchanges
    assert len(exchanges) >= 2 and all(x.websocket and x.method == "GET" and x.path == RESPONSES for x in exchanges)
    *cut, last = exchanges
    for socket in cut:  # cut by the server's side (nginx) after its last turn was answered with a shell call
        found = turns(socket.ws)
        assert found and found[-1].terminal == "response.completed", found
        calls = [item for item in json.loads(found[-1].answer[-1].data)["response"]["output"]
                 if item["type"] == "function_call"]  # fmt: skip
        assert [(c["name"], json.loads(c["arguments"])["cmd"]) for c in calls] == [("exec_command", TOOL_COMMAND)]
        assert socket.ws_close is not None and socket.ws_close.by is None and socket.ws_close.code == 1006
        assert socket.error == "server disconnected", socket.error
        idle = socket.ws_close.t - found[-1].answer[-1].t
        assert 0 < idle < THINK, idle  # while Codex ran the command, not after
    assert last.error == "client disconnected"  # the last socket: Codex left when done
    for socket in exchanges[1:]:  # a new socket: the whole input again, the function calls' outputs in it
        first = json.loads(turns(socket.ws)[0].body)
        assert "previous_response_id" not in first and first.get("generate") is not False, first
        kinds = [item.get("type") for item in first["input"]]
        assert kinds[-2:] == ["function_call", "function_call_output"], kinds


def test_sessions_shows_the_sockets_turns_and_each_cut(cut_run: HarnessRun) -> None:
    ended_well(cut_run)
    sockets = load(cut_run.recording).exchanges
    (session,) = sessions_of(cut_run.recording)["sessions"]
    shown = session["turns"]
    assert [t["exchange"] for t in shown] == [x.xid for x in sockets]
    for turn, socket in zip(shown, sockets):
        assert turn["status"] == 101 and turn["detail"].startswith(f"WebSocket: {len(turns(socket.ws))} turn(s)"), turn
    assert all(t["outcome"] == "reset" and "between turns the socket was cut" in t["detail"] for t in shown[:-1]), shown
    assert shown[-1]["outcome"] == "ok", shown[-1]


def test_check_names_nginx_at_the_first_turn_its_idle_cut_ended(cut_run: HarnessRun, engine: Managed, cutting: Proxy,
                                                                tmp_path: Path) -> None:  # fmt: skip
    ended_well(cut_run)
    ends = [t.turn for s in open_recording(str(cut_run.recording)).planned for t in s.turns if t.socket_end]
    assert ends, "the plan watches no socket's idle end"
    done, verdict = check_verdict(cut_run.recording, chain(tmp_path, engine, cutting), tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert (verdict["verdict"], verdict["culprit"], verdict["first_turn"]) == ("proxy", "nginx", min(ends)), \
        verdict["summary"]
    routes = {r["route"]: r for r in verdict["routes"]}
    assert routes["direct"]["failures"] == 0 and routes["via:nginx"]["outcomes"].get("reset"), routes
    (said,) = [a for a in verdict["advice"] if a["hop"] == "nginx"]
    assert said["kind"] == "ws_idle_cut" and "proxy_read_timeout" in said["likely"], said


def test_with_nginx_fixed_no_route_fails(cut_run: HarnessRun, engine: Managed, tmp_path: Path) -> None:
    ended_well(cut_run)
    nginx = nginx_idle(engine, FIXED)
    try:
        done, verdict = check_verdict(cut_run.recording, chain(tmp_path, engine, nginx), tmp_path)
    finally:
        nginx.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    # The recording holds the cuts as failures: a replay without them is `not-reproduced`.
    assert verdict["verdict"] == "not-reproduced", verdict["summary"]
    assert [r["route"] for r in verdict["routes"]] == ["direct", "via:nginx"]
    assert all(r["failures"] == 0 and r["exchanges"] for r in verdict["routes"]), verdict["routes"]


def test_minimize_shrinks_it_to_a_socket_up_to_its_idle_cut(cut_run: HarnessRun, engine: Managed, cutting: Proxy,
                                                    tmp_path: Path) -> None:  # fmt: skip
    ended_well(cut_run)
    out = tmp_path / "min"
    done = run_proxycheck("minimize", str(cut_run.recording), "--chain", str(chain(tmp_path, engine, cutting)),
                          "--route", "via:nginx", "--out", str(out), timeout=150)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    original = load(cut_run.recording).exchanges
    kept = load(out).exchanges
    assert kept and len(kept) <= len(original) and all(x.websocket for x in kept), kept
    # A socket keeps its turns from its first up to the failure: its last answered turn, then the cut.
    cut = [x for x in kept if x.error == "server disconnected"]
    assert cut and all(turns(x.ws) and turns(x.ws)[-1].terminal == "response.completed" for x in cut), cut
    summary = json.loads((out / "minimized.json").read_text())
    trigger = summary["trigger"]
    # The failure kept is a socket's idle end, the cut nginx made; fewer turns and sockets than recorded.
    assert trigger["outcome"] == "reset" and trigger["socket"]["idle_end"] and "while it sat idle" in trigger["detail"]
    assert summary["turns"]["after"] < summary["turns"]["before"], summary["turns"]
    assert summary["sessions"]["after"] < summary["sessions"]["before"], summary["sessions"]
    # The minimized recording still fails through nginx at that idle end, and direct stays clean.
    (tmp_path / "again").mkdir()
    done, verdict = check_verdict(out, chain(tmp_path, engine, cutting), tmp_path / "again")
    assert done.returncode == 1 and (verdict["verdict"], verdict["culprit"]) == ("proxy", "nginx"), verdict["summary"]
