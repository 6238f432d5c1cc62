"""Codex CLI (the pinned @openai/codex in .harness/) on the Responses API's WebSocket mode, recorded
by `proxycheck record` (reverse mode) in front of the reference engine, then with a real nginx
between the recorder and the engine, once forwarding the upgrade and once not; each recording then
checked (`check --pace fast` over the engine, and nginx when it was there): healthy, every turn
replayed ok on every route (the socket's on a socket), and the refused upgrades, replayed as the
handshakes they were, name nginx.

The command line and config are test_codex.py's, the provider table with `supports_websockets =
true` added (`proxycheck.io.harness.codex_config(url, websocket=True)`; retries off), the engine
with `--token-interval 0 --ttft-base 0 --tool-call-rate 1`, Codex's key in its environment
(`PROXYCHECK_DUMMY_KEY`, sent as `Authorization: Bearer`).

What Codex 0.171 did, run after run:

* **One socket for the session.** `GET /v1/responses` with `Upgrade: websocket`, `OpenAI-Beta:
  responses_websockets=2026-02-06` and the key in `Authorization`; then, on that socket, first a
  warm-up `response.create` with `generate: false` (its answer: `response.created`,
  `response.in_progress`, `response.completed` with no output), then one `response.create` per
  model call, each continuing the last with `previous_response_id` and sending only the new input
  (the function call outputs). The prompt took 4 turns here (the warm-up, two function calls,
  the answer), all within a second.
* **No close frame.** When `codex exec` is done it exits without closing the socket: the recorder
  sees the client's connection cut (code 1006, "client disconnected") after the last answer.
  `sessions` reads that as the client leaving, not as a reset between turns.
* **nginx forwarding the upgrade** (`proxy_http_version 1.1; proxy_set_header Upgrade
  $http_upgrade; proxy_set_header Connection "upgrade"`): the same socket, through nginx.
* **nginx not forwarding it** (`proxy_http_version 1.1` alone): nginx drops the hop-by-hop
  `Upgrade` and `Connection` headers and sends a plain `GET /v1/responses`, which the engine
  answers `405 Method Not Allowed` (`Allow: POST`). Codex tried twice (the warm-up's connection,
  `x-codex-turn-metadata` request_kind `prewarm`, then the turn's, 40 ms later), printed "Falling
  back from WebSockets to HTTPS transport. unexpected status 405 ...", and ran the whole task as
  `POST /v1/responses` streams (no warm-up, each request the whole input), ending well. With its
  retries on (Codex's defaults), the turn's connection is tried 5 more times first ("Reconnecting...
  2/5" to "5/5", backoff about 0.2, 0.4, 0.75, 1.5, 3.3 s): the fallback comes some 6.5 s later.
  The recording shows what happened: the refused upgrades, as the HTTP exchanges they were (their
  status kept), then the HTTP turns. Every request carries Codex's `session-id` header (the same
  value on the upgrades and the POSTs; each on a connection of its own): `sessions` shows one
  session that changed transport, the refused upgrades (`http_error`) earlier attempts of its
  first turn, and `check` still replays each refused upgrade as its handshake and names nginx.
* **nginx answering the upgrade `426 Upgrade Required` itself** (`if ($http_upgrade = websocket)
  { return 426; }`): one GET (the warm-up's), then HTTP at once, retries on or off, and nothing
  said: the 426 tells Codex to use HTTP.
"""

from __future__ import annotations

import json
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from harnesses import DUMMY_KEY, REPO, HarnessRun, check_verdict, run_harness, sessions_of
from processes import RecordProcess, write_chain
from test_codex import ENGINE_ARGS, codex_argv, codex_env, events

from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.websocket import WsTurn, turns
from proxycheck.core.replay.plan import plan_socket
from proxycheck.io.harness import codex_config
from proxycheck.io.procs import Managed
from proxycheck.io.recordings import open_recording
from proxycheck.io.runstore import load_run
from proxycheck.io.storage import load

sys.path.insert(0, str(REPO / "tests" / "integration"))
from proxies import Proxy, start_nginx  # noqa: E402  (the proxy matrix's real nginx, stopped by pid)

pytestmark = pytest.mark.timeout(150)

RESPONSES = "/v1/responses"
FALLBACK = "Falling back from WebSockets to HTTPS transport"
NGINX = "proxy_pass {url}; proxy_http_version 1.1; proxy_buffering off;"
FORWARD_UPGRADE = 'proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade";'
ANSWER_426 = "if ($http_upgrade = websocket) { return 426; }"  # nginx refusing the upgrade itself


def run_recorded(codex: str, upstream: str, tmp: Path) -> HarnessRun:
    """Codex's run of PROMPT on the WebSocket mode (at most 90 s) through `proxycheck record
    --upstream UPSTREAM`, which is stopped (Ctrl-C) once it has written all."""
    work = tmp / "project"
    work.mkdir()
    (work / "README.md").write_text("# demo\n\nA small project the harness reads.\n")
    out = tmp / "rec"
    recorder = RecordProcess(tmp, "--listen", "127.0.0.1:0", "--upstream", upstream, "--out", str(out))
    try:
        done = run_harness(codex_argv(codex, work), cwd=work, env=codex_env(tmp / "home", recorder.url, websocket=True),
                           timeout=90)  # fmt: skip
        time.sleep(1.5)  # the recorder flushes its last records within a second
        assert recorder.interrupt() == 0, recorder.stderr
    finally:
        recorder.close()
    return HarnessRun(done, out)


def nginx_in_front(engine: Managed, *extra: str) -> Proxy:
    return start_nginx(f"location / {{ {NGINX.format(url=engine.url)} {' '.join(extra)} }}")


def the_socket(run: HarnessRun) -> tuple[RecordedExchange, list[WsTurn]]:
    """The recording's one exchange, a socket, and its turns."""
    (socket,) = load(run.recording).exchanges
    assert socket.websocket and socket.method == "GET" and socket.path == RESPONSES and socket.status == 101, socket
    return socket, turns(socket.ws)


def doc(data: bytes) -> dict[str, Any]:
    return json.loads(data)


def ended_well(run: HarnessRun) -> list[str]:
    """Codex exited 0 with an answer; the types of the events it printed."""
    assert run.done.returncode == 0, run.failure()
    kinds = [event["type"] for event in events(run.done.stdout)]
    assert "turn.completed" in kinds and "turn.failed" not in kinds, run.failure()
    return kinds


def assert_codex_session_on_the_socket(run: HarnessRun) -> None:
    """Codex ran its whole task on one socket: a warm-up, then turns continuing each other, a
    function call and its output among them, every turn completed; it left without a close frame;
    `sessions` shows the socket's turns, ok."""
    ended_well(run)
    assert FALLBACK not in run.done.stdout, run.failure()
    socket, found = the_socket(run)
    assert len(found) >= 3 and all(turn.terminal == "response.completed" for turn in found), found
    warm_up = doc(found[0].body)
    assert warm_up["generate"] is False, warm_up
    assert doc(found[0].answer[-1].data)["response"]["output"] == []
    ids = [doc(turn.answer[-1].data)["response"]["id"] for turn in found]
    assert [doc(turn.body).get("previous_response_id") for turn in found[1:]] == ids[:-1]
    outputs = [doc(answer.data)["response"]["output"] for answer in (turn.answer[-1] for turn in found)]
    calls = {item["call_id"] for output in outputs for item in output if item["type"] == "function_call"}
    sent = {item.get("call_id") for turn in found[1:] for item in doc(turn.body)["input"]
            if item.get("type") == "function_call_output"}  # fmt: skip
    assert calls and calls <= sent, (calls, sent)  # each function call's output went back on the socket
    assert socket.ws_close is not None and socket.ws_close.by is None and socket.ws_close.code == 1006
    assert socket.error == "client disconnected"

    (session,) = sessions_of(run.recording)["sessions"]
    (turn,) = session["turns"]
    assert turn["path"] == RESPONSES and turn["status"] == 101 and turn["outcome"] == "ok", turn
    assert turn["detail"] == f"WebSocket: {len(found)} turn(s); the client hung up without a close frame (1006)"


def checked_healthy(run: HarnessRun, engine: Managed, hops: list[tuple[str, str]], tmp: Path) -> str:
    """`check` of the recording over the engine and `hops`: exit 0, `healthy`, each route replayed
    every turn of the recording ok; what it said on stderr."""
    done, verdict = check_verdict(run.recording, write_chain(tmp / "chain.toml", engine.url, hops), tmp)
    assert done.returncode == 0 and verdict["verdict"] == "healthy", f"{verdict['summary']}\n{done.stderr[-2000:]}"
    assert [route["route"] for route in verdict["routes"]] == ["direct", *(f"via:{name}" for name, _ in hops)]
    assert all(route["exchanges"] and route["outcomes"] == {"ok": route["exchanges"]} for route in verdict["routes"])
    return done.stderr


def test_the_websocket_mode_is_an_option_of_codexs_provider_off_by_default() -> None:
    plain, socket = (tomllib.loads(codex_config("http://h:1", websocket=on)) for on in (False, True))
    provider = plain["model_providers"].pop("proxycheck")
    assert "supports_websockets" not in provider
    assert socket["model_providers"].pop("proxycheck") == {**provider, "supports_websockets": True}
    assert socket == plain  # nothing else differs


@pytest.fixture(scope="module")
def engine(module_engines: Any) -> Managed:
    return module_engines(*ENGINE_ARGS)


@pytest.fixture(scope="module")
def direct_run(codex: str, engine: Managed, tmp_path_factory: pytest.TempPathFactory) -> HarnessRun:
    return run_recorded(codex, engine.url, tmp_path_factory.mktemp("codex-ws"))


def test_codex_runs_its_session_on_one_socket_turn_after_turn(direct_run: HarnessRun) -> None:
    assert_codex_session_on_the_socket(direct_run)


def test_check_replays_codexs_socket_healthy(direct_run: HarnessRun, engine: Managed, tmp_path: Path) -> None:
    ended_well(direct_run)
    _, found = the_socket(direct_run)
    stderr = checked_healthy(direct_run, engine, [], tmp_path)
    assert "left out" not in stderr, stderr  # the socket was replayed, its warm-up and every turn
    observed = {obs.turn for obs in load_run(tmp_path / "check-run").observations}
    assert set(range(1, len(found) + 1)) <= observed, observed


def test_codex_hanging_up_is_not_replayed_as_the_chain_ending_its_socket(direct_run: HarnessRun) -> None:
    loaded = open_recording(str(direct_run.recording))
    (summary,) = loaded.summaries
    (socket,) = loaded.recording.exchanges
    planned = plan_socket(summary, socket, socket.t_request)
    assert planned is not None and not any(turn.socket_end for turn in planned.turns), planned.turns[-1]


def test_codexs_key_never_reaches_the_recording(direct_run: HarnessRun) -> None:
    ended_well(direct_run)
    socket, _ = the_socket(direct_run)
    assert socket.request_header("authorization") is not None  # sent, and kept as redacted
    journal = direct_run.recording / "journal.jsonl"
    assert oct(journal.stat().st_mode & 0o777) == "0o600"
    for path in direct_run.recording.rglob("*"):
        if path.is_file():
            assert DUMMY_KEY.encode() not in path.read_bytes(), path


def test_through_nginx_forwarding_the_upgrade_codex_keeps_its_socket(codex: str, engine: Managed,
                                                                    tmp_path: Path) -> None:  # fmt: skip
    nginx = nginx_in_front(engine, FORWARD_UPGRADE)
    try:
        run = run_recorded(codex, nginx.url, tmp_path)
        assert_codex_session_on_the_socket(run)
        checked_healthy(run, engine, [("nginx", nginx.url)], tmp_path)  # the socket replayed through it too
    finally:
        nginx.stop()


def fell_back(run: HarnessRun, status: int, tries: int) -> None:
    """Codex's upgrade was refused with `status` `tries` times and it ran its task over HTTP: what
    it said, what the recording shows, what `sessions` shows."""
    ended_well(run)
    said = [event["item"]["message"] for event in events(run.done.stdout)
            if event["type"] == "item.completed" and event["item"].get("type") == "error"]  # fmt: skip
    fallback = [m for m in said if m.startswith(FALLBACK)]
    if status == 426:
        assert not fallback, run.failure()  # the server said to use HTTP: Codex does, silently
    else:
        assert fallback and all(str(status) in m for m in fallback), run.failure()

    # The recording: the refused upgrades (HTTP exchanges, their status kept), then HTTP turns.
    exchanges = load(run.recording).exchanges
    refused = [x for x in exchanges if x.method == "GET"]
    posts = [x for x in exchanges if x.method == "POST"]
    assert len(refused) == tries and len(posts) >= 2, [(x.method, x.status) for x in exchanges]
    assert [x.xid for x in exchanges] == [x.xid for x in refused + posts]  # every GET before the first POST
    for x in refused:
        assert x.path == RESPONSES and x.request_header("upgrade") == "websocket", x
        assert x.status == status and not x.websocket and not x.ws, x
    assert all(x.path == RESPONSES and x.status == 200 for x in posts)

    # `sessions`: one session that changed transport, the refused upgrades (the same `session-id`
    # header as the POSTs) earlier attempts of the first turn it then sent over HTTP.
    (conversation,) = sessions_of(run.recording)["sessions"]
    shown = conversation["turns"]
    refusals = [turn for turn in shown if turn["method"] == "GET"]
    assert [t["exchange"] for t in refusals] == [x.xid for x in refused], shown
    assert all(t["turn"] == 1 and t["outcome"] == "http_error" and t["status"] == status for t in refusals)
    first = shown[len(refusals)]
    assert (first["method"], first["turn"], first["attempt"], first["attempts"]) == ("POST", 1, tries + 1, tries + 1)
    assert all(t["method"] == "POST" and t["outcome"] == "ok" for t in shown[len(refusals):]), conversation
    assert any(t["tool_calls"] for t in shown), conversation
    changed = conversation["changed_transport"]
    assert changed["from"] == "websocket" and changed["to"] == "http" and changed["refused_upgrades"] == \
        [x.xid for x in refused], changed
    assert f"({', '.join([str(status)] * tries)})" in changed["text"] and "over HTTP" in changed["text"], changed
    assert conversation["outcomes"] == {"ok": conversation["turn_count"]}  # the conversation ended well


# How nginx refuses the upgrade, the status Codex gets, and how many upgrades it tries with its
# retries off: the warm-up's connection and the turn's (a 426 ends the trying at the first).
REFUSALS = [("", 405, 2), (ANSWER_426, 426, 1)]


@pytest.mark.parametrize(("refusal", "status", "tries"), REFUSALS, ids=["plain-get", "nginx-426"])
def test_through_nginx_not_forwarding_the_upgrade_codex_falls_back_to_http(codex: str, engine: Managed, tmp_path: Path,
                                                                           refusal: str, status: int,
                                                                           tries: int) -> None:  # fmt: skip
    nginx = nginx_in_front(engine, refusal)
    try:
        run = run_recorded(codex, nginx.url, tmp_path)
        fell_back(run, status, tries)
        # check replays each refused upgrade as the handshake it was, beside the HTTP session
        # Codex fell back to: the engine agrees to it, nginx refuses it, and nginx is named for it.
        done, verdict = check_verdict(run.recording, write_chain(tmp_path / "chain.toml", engine.url,
                                                                 [("nginx", nginx.url)]), tmp_path)  # fmt: skip
        assert done.returncode == 1, done.stderr[-2000:]
        assert (verdict["verdict"], verdict["culprit"], verdict["first_turn"]) == ("proxy", "nginx", 1), verdict["summary"]
        routes = {r["route"]: r for r in verdict["routes"]}
        assert routes["direct"]["failures"] == 0
        assert routes["via:nginx"]["outcomes"].get("http_error") == tries * routes["via:nginx"]["repetitions"]
        (said,) = [a for a in verdict["advice"] if a["hop"] == "nginx"]
        assert said["kind"] == "ws_upgrade_refused" and "proxy_set_header Upgrade" in said["likely"], said
    finally:
        nginx.stop()
