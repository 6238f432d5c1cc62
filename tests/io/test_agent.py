"""The synthetic agent (proxycheck.io.agent and `proxycheck agent`) against real processes: the
reference engine, a mitmdump hop that stalls streams from turn 3 on (addons/faults.py), a plain
forward proxy, and a closed port."""

from __future__ import annotations

import json
import subprocess

import pytest
from cli_runner import main_output, run_proxycheck
from processes import EngineFactory, MitmdumpFactory

from proxycheck.core.testbed.agent import AgentOptions, AgentRun
from proxycheck.io.agent import endpoint_url, run_agent
from proxycheck.io.procs import Managed, free_port

STALL_FROM_TURN = 3


def proxycheck(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run_proxycheck(*args, timeout=timeout, env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--tool-call-rate", "0.6")


@pytest.fixture(scope="module")
def short_keepalive_engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--keepalive-timeout", "0.2")


@pytest.fixture(scope="module")
def stalling_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    """A reverse hop that stalls every stream after 6 events, from turn 3 on."""
    return module_mitmdumps.faults(engine, "stall_after=6", f"from_turn={STALL_FROM_TURN}", "stall_seconds=600")


@pytest.fixture(scope="module")
def keepalive_stalling_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    """A reverse hop that, from turn 2 on, answers every withheld event with a keep-alive comment."""
    return module_mitmdumps.faults(engine, "stall_after=6", "stall_keepalive=true", "from_turn=2", "stall_seconds=600")


@pytest.fixture(scope="module")
def blackhole_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    """A reverse hop that never answers a request arriving on a connection idle for over 0.3 s."""
    return module_mitmdumps.faults(engine, "idle_blackhole=0.3", "stall_seconds=600")


@pytest.fixture(scope="module")
def truncating_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    """A reverse hop that keeps only the last 2 messages of every request (a context trimmer)."""
    return module_mitmdumps.faults(engine, "truncate_messages=2")


@pytest.fixture(scope="module")
def forward_proxy(module_mitmdumps: MitmdumpFactory) -> Managed:
    """A plain forward proxy that streams bodies through as they come."""
    return module_mitmdumps("--mode", "regular", "--set", "stream_large_bodies=1")


def options(base_url: str, **kw) -> AgentOptions:
    defaults = dict(sessions=2, turns=4, think=0.05, read_timeout=10.0, connect_timeout=5.0, max_tokens=16,
                    tool_result_bytes=1500)
    return AgentOptions(base_url, **{**defaults, **kw})


def outcomes(run: AgentRun) -> list[list[str]]:
    return [[t.outcome.value for t in s.turns] for s in run.sessions]


# -- a healthy engine -------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dialect", ["openai_chat", "anthropic_messages"])
async def test_every_turn_completes_and_the_context_grows(engine, dialect: str) -> None:
    run = await run_agent(options(engine.url, sessions=3, turns=4, dialect=dialect))
    assert run.ok
    assert outcomes(run) == [["ok"] * 4] * 3
    turns = [t for s in run.sessions for t in s.turns]
    tool_turns = [t for t in turns if t.tool_calls]
    assert tool_turns, "the engine answered no turn with a tool call"
    tool_reason = "tool_calls" if dialect == "openai_chat" else "tool_use"
    assert all(t.finish_reason == tool_reason for t in tool_turns)
    assert {name for t in tool_turns for name in t.tool_calls} <= {"read_file", "run_tests", "write_file"}
    for s in run.sessions:
        sizes = [t.request_bytes for t in s.turns]
        assert all(b > a for a, b in zip(sizes, sizes[1:])), sizes
        assert [t.turn for t in s.turns] == [1, 2, 3, 4]
        # One client per session, kept alive across turns: every turn rides the same connection.
        assert [t.connection for t in s.turns] == [1, 1, 1, 1]
        for t in s.turns:
            assert t.status == 200 and t.detail == ""
            assert t.ttft is not None and t.duration is not None and t.ttft <= t.duration
            assert t.content_events >= 1 and t.events >= t.content_events and t.response_bytes > 0
            # A text answer is max_tokens long; a tool call is as long as its arguments.
            if t.tool_calls:
                assert t.completion_tokens
            else:
                assert t.completion_tokens == 16


@pytest.mark.timeout(60)
async def test_a_tool_turn_grows_the_next_request_by_the_tool_results(engine) -> None:
    run = await run_agent(options(engine.url, sessions=3, turns=4, tool_result_bytes=5000))
    grown = [
        (a, b) for s in run.sessions for a, b in zip(s.turns, s.turns[1:]) if a.tool_calls
    ]
    assert grown
    for before, after in grown:
        assert after.request_bytes - before.request_bytes >= 5000 * len(before.tool_calls)


@pytest.mark.timeout(60)
async def test_the_same_seed_replays_the_same_sessions(engine) -> None:
    first, second = [await run_agent(options(engine.url, sessions=2, turns=3, think=0)) for _ in range(2)]

    def shape(run: AgentRun) -> list[tuple[int, tuple[str, ...], str | None]]:
        return [(t.request_bytes, t.tool_calls, t.finish_reason) for s in run.sessions for t in s.turns]

    assert shape(first) == shape(second)


@pytest.mark.timeout(60)
async def test_idle_connections_closed_by_the_server_are_replaced(short_keepalive_engine) -> None:
    # The engine drops idle keep-alive connections after 0.2 s; the agent thinks for 0.6 s, so
    # every turn needs a fresh connection, and the report shows it.
    run = await run_agent(options(short_keepalive_engine.url, sessions=1, turns=3, think=0.6))
    assert outcomes(run) == [["ok", "ok", "ok"]]
    assert [t.connection for t in run.sessions[0].turns] == [1, 2, 3]


@pytest.mark.timeout(60)
async def test_sessions_through_a_forward_proxy(engine, forward_proxy) -> None:
    run = await run_agent(options(engine.url, proxy=forward_proxy.url, sessions=2, turns=3))
    assert outcomes(run) == [["ok"] * 3] * 2


# -- faults -----------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dialect", ["openai_chat", "anthropic_messages"])
async def test_a_hop_that_stalls_from_turn_3_wedges_turn_3_and_stops_the_session(stalling_hop, dialect) -> None:
    run = await run_agent(options(stalling_hop.url, dialect=dialect, sessions=2, turns=5, read_timeout=1.5))
    assert not run.ok
    assert outcomes(run) == [["ok", "ok", "stall_mid_stream"]] * 2
    for s in run.sessions:
        wedged = s.turns[-1]
        assert wedged.turn == STALL_FROM_TURN and wedged.status == 200
        assert wedged.content_events >= 1 and wedged.finish_reason is None
        assert wedged.detail.startswith("no content for 1.5 s after event")
        assert wedged.duration is not None and wedged.duration >= 1.5


@pytest.mark.timeout(60)
async def test_on_fail_continue_goes_on_after_a_stall(stalling_hop) -> None:
    run = await run_agent(options(stalling_hop.url, sessions=1, turns=4, read_timeout=1.5, on_fail="continue"))
    assert outcomes(run) == [["ok", "ok", "stall_mid_stream", "stall_mid_stream"]]
    turns = run.sessions[0].turns
    assert turns[3].request_bytes > turns[2].request_bytes  # the cut-off turn was folded in
    # The stalled connection was abandoned; the next turn opened another one.
    assert turns[2].connection == 1 and turns[3].connection == 2


@pytest.mark.timeout(60)
async def test_keep_alive_comments_do_not_hide_a_stall(keepalive_stalling_hop) -> None:
    # 400 tokens at 5 ms: for 2 s the hop sends a comment every 5 ms, so bytes keep coming and
    # httpx's read timeout never fires; the content watchdog does, after 1 s.
    run = await run_agent(options(keepalive_stalling_hop.url, sessions=1, turns=3, read_timeout=1.0, max_tokens=400))
    assert outcomes(run) == [["ok", "stall_mid_stream"]]
    wedged = run.sessions[0].turns[1]
    assert wedged.comments > 0 and wedged.finish_reason is None
    assert wedged.detail.startswith("no content for 1.0 s after event")
    assert f"{wedged.comments} comment(s)" in wedged.detail


@pytest.mark.timeout(60)
async def test_a_hop_that_blackholes_idle_connections_stalls_before_headers(blackhole_hop) -> None:
    # The agent thinks for 0.6 s between turns and reuses its connection, as the SDKs do: the
    # hop swallows the second request, and no response headers ever come.
    run = await run_agent(options(blackhole_hop.url, sessions=2, turns=3, think=0.6, read_timeout=1.5))
    assert outcomes(run) == [["ok", "stall_before_headers"]] * 2
    for s in run.sessions:
        wedged = s.turns[1]
        assert wedged.status is None and wedged.connection is None and wedged.events == 0
        assert wedged.detail == "no response headers within 1.5 s"


@pytest.mark.timeout(60)
async def test_a_hop_that_drops_context_is_caught_by_the_engine_digest(truncating_hop) -> None:
    # Turn 1 has a system and a user message (2: nothing to drop); turn 2 has more and is cut.
    run = await run_agent(options(truncating_hop.url, sessions=1, turns=3, on_fail="stop"))
    assert outcomes(run) == [["ok", "request_mutated"]]
    wedged = run.sessions[0].turns[1]
    # The hop keeps the system message and the last 2: the ones between are named as dropped.
    n = wedged.messages
    dropped = "message 2" if n == 4 else f"messages 2-{n - 2}"
    assert wedged.detail.startswith(f"what the model sees changed: messages {n} -> 3: {dropped} dropped (")
    assert f"{wedged.request_bytes} were sent" in wedged.detail


@pytest.mark.timeout(30)
@pytest.mark.parametrize("on_fail,expected", [("stop", ["connect_error"]), ("continue", ["connect_error"] * 3)])
async def test_a_closed_port_is_a_connect_error(on_fail: str, expected: list[str]) -> None:
    run = await run_agent(options(f"http://127.0.0.1:{free_port()}", sessions=1, turns=3, on_fail=on_fail))
    assert outcomes(run) == [expected]
    turn = run.sessions[0].turns[0]
    assert turn.status is None and turn.connection is None and turn.events == 0
    assert turn.detail.startswith("ConnectError")


def test_endpoint_url_accepts_base_urls_with_or_without_v1() -> None:
    assert endpoint_url("http://h:1", "openai_chat") == "http://h:1/v1/chat/completions"
    assert endpoint_url("http://h:1/v1/", "openai_chat") == "http://h:1/v1/chat/completions"
    assert endpoint_url("https://h/api/v1", "anthropic_messages") == "https://h/api/v1/messages"
    assert endpoint_url("http://h/gw", "anthropic_messages") == "http://h/gw/v1/messages"


# -- the command ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_cli_json_against_the_engine_exits_0(engine) -> None:
    result = proxycheck("agent", "--base-url", engine.url, "--sessions", "2", "--turns", "3", "--think", "0",
                        "--max-tokens", "8", "--session-id-header", "x-session-id", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == "proxycheck.agent/1" and doc["ok"] is True
    assert doc["outcomes"] == {"ok": 6}
    assert doc["url"] == f"{engine.url}/v1/chat/completions"
    assert [s["id"] for s in doc["sessions"]] == ["s1", "s2"]
    turn = doc["sessions"][0]["turns"][0]
    fields = {"request_bytes", "status", "ttft", "duration", "events", "finish_reason", "tool_calls", "outcome"}
    assert fields <= set(turn)
    assert turn["status"] == 200 and turn["outcome"] == "ok"


@pytest.mark.timeout(60)
def test_cli_without_tools_offers_none_and_still_grows_the_context(engine) -> None:
    """--no-tools, for a model served without tool calls: the engine, offered none, answers in text;
    each follow-up pastes a test output, so every request is larger by about its size."""
    result = proxycheck("agent", "--base-url", engine.url, "--sessions", "1", "--turns", "3", "--think", "0",
                        "--max-tokens", "8", "--tool-result-bytes", "1200", "--no-tools", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ok"] is True and doc["options"]["tools"] is False
    turns = doc["sessions"][0]["turns"]
    assert all(t["tool_calls"] == [] and t["finish_reason"] == "stop" for t in turns), turns
    sizes = [t["request_bytes"] for t in turns]
    assert all(b - a > 1200 for a, b in zip(sizes, sizes[1:])), sizes


@pytest.mark.timeout(60)
def test_cli_table_shows_the_wedged_turn_and_exits_1(stalling_hop) -> None:
    result = proxycheck("agent", "--base-url", stalling_hop.url, "--sessions", "2", "--turns", "4", "--think", "0",
                        "--read-timeout", "1.5", "--max-tokens", "16")
    assert result.returncode == 1, result.stderr
    out = result.stdout
    assert f"agent: 2 session(s) x 4 turn(s), openai_chat → {stalling_hop.url}/v1/chat/completions" in out
    rows = [line for line in out.splitlines() if line.startswith("│ s")]
    assert len(rows) == 4  # two in the grid, two in the failed turns
    grid = [c.strip() for c in rows[0].strip("│").split("│")]
    assert grid[0] == "s1" and grid[4:] == ["ok", "ok", "stall_mid_stream", "-"]
    assert "Failed turns" in out
    failed = [c.strip() for c in rows[2].strip("│").split("│")]
    assert failed[:2] == ["s1", "3"] and failed[5] == "200" and failed[9] == "stall_mid_stream"
    assert failed[10].startswith("no content for 1.5 s after event")
    assert "2 of 6 turn(s) failed (2 stall_mid_stream); first failure at turn 3; 2 session(s) stopped early" in out


@pytest.mark.timeout(30)
def test_cli_closed_port_exits_1() -> None:
    result = proxycheck("agent", "--base-url", f"http://127.0.0.1:{free_port()}", "--sessions", "1", "--turns", "2",
                        "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["outcomes"] == {"connect_error": 1}


VALID = ["--base-url", "http://127.0.0.1:9", "--sessions", "1", "--turns", "1"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "args,message",
    [
        (["--sessions", "-1"], "argument --sessions: '-1' is not a positive integer"),
        (["--turns", "0"], "argument --turns: '0' is not a positive integer"),
        (["--think", "-0.5"], "argument --think: '-0.5' is not a non-negative number of seconds"),
        (["--read-timeout", "nan"], "argument --read-timeout: 'nan' is not a positive number of seconds"),
        (["--connect-timeout", "inf"], "argument --connect-timeout: 'inf' is not a positive number of seconds"),
        (["--tool-result-bytes", "x"], "argument --tool-result-bytes: 'x' is not a non-negative integer"),
        (["--base-url", "localhost:8000"], "'localhost:8000' is not an http:// or https:// URL with a host"),
        (["--base-url", "http://h:99999"], "'http://h:99999' is not an http:// or https:// URL with a host"),
        (["--proxy", "socks9://x"], "argument --proxy: 'socks9://x' is not an http:// or https:// URL"),
        (["--session-id-header", "bad header"], "'bad header' is not a valid header name"),
        (["--dialect", "sglang_generate"], "argument --dialect: invalid choice"),
        (["--on-fail", "retry"], "argument --on-fail: invalid choice"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(capsys, args: list[str], message: str) -> None:
    # A repeated option is parsed again, so the bad value comes after a valid one.
    code, out, err = main_output(capsys, "agent", *VALID, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proxycheck: ") and message in lines[0], err


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "argv,message",
    [
        (["--sessions", "1", "--turns", "1"], "the following arguments are required: --base-url"),
        ([*VALID, "--sessions", "-3"], "argument --sessions: '-3' is not a positive integer"),
    ],
)
def test_cli_bad_arguments_exit_2_without_traceback(argv: list[str], message: str) -> None:
    result = proxycheck("agent", *argv)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("proxycheck: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_request_headers_name_the_session_and_the_anthropic_version() -> None:
    from proxycheck.io.agent import request_headers

    opts = AgentOptions("http://h", dialect="anthropic_messages", session_id_header="x-session-id")
    headers = request_headers(opts, "s2")
    assert headers["x-session-id"] == "s2" and headers["anthropic-version"] == "2023-06-01"
    assert "x-session-id" not in request_headers(AgentOptions("http://h"), "s1")


def test_many_turns_fold_into_runs_of_outcomes(monkeypatch) -> None:
    from rich.console import Console

    from proxycheck.core.exchange.outcomes import Outcome
    from proxycheck.core.testbed.agent import SessionReport, TurnReport
    from proxycheck.report.agent_view import agent_view

    def turn(n: int, outcome: Outcome) -> TurnReport:
        return TurnReport("s1", n, 0.1 * n, 1000 * n, 2 * n, outcome, status=200, connection=1, ttft=0.05)

    turns = tuple(turn(n, Outcome.OK) for n in range(1, 14)) + (turn(14, Outcome.TRUNCATED),)
    run = AgentRun(AgentOptions("http://e", sessions=1, turns=20), "http://e/v1/chat/completions", 0.0, 2.0,
                   (SessionReport("s1", turns),))
    monkeypatch.setenv("COLUMNS", "150")
    console = Console(highlight=False)
    with console.capture() as capture:
        console.print(agent_view(run))
    out = capture.get()
    row = next(line for line in out.splitlines() if line.startswith("│ s1 "))
    assert "1.0K → 14.0K" in row and "1-13 ok · 14 truncated" in row
    assert "1 of 14 turn(s) failed (1 truncated); first failure at turn 14; 1 session(s) stopped early" in out
