"""The replayer (proxycheck.io.replayer) and `proxycheck replay`, against real processes.

Once per module: the reference engine, a recorder (mitmdump + addons/record.py, reverse mode) in
front of it, a recording of 2 sessions x 3 turns made through it by the synthetic agent, and
mitmdump hops with the faults addon (one clean, one per fault). Each test writes its own chain
file and replays over it. The recorder stays in the chain for the ladder test: it must record
nothing of the replay (every replayed request carries x-proxycheck-replay).

Times are bounded from below only, except the think-time fidelity check (an upper bound on the
ERROR against the recorded think times) and the stall isolation check (the other session ends
well before the stalled one's own watchdog).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import proxycheck_argv
from ctrl_c import as_at_a_terminal
from processes import EngineFactory, MitmdumpFactory

from proxycheck import cli
from proxycheck.commands import replay as replay_cmd
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.recording.sessions import DEFAULT_SESSION_HEADERS
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.core.replay.chain import parse_chain
from proxycheck.core.replay.plan import PlannedSession, PlannedTurn, p99, plan_sessions
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed
from proxycheck.io.recordings import recorded_session_headers
from proxycheck.io.replayer import REPLAY_HEADER, ReplayOptions, replay, request_headers
from proxycheck.io.runstore import Run, load_run
from proxycheck.io.storage import load

REPO = Path(__file__).resolve().parents[2]
THINK = 0.3
# p99 of |replayed - recorded| think time: whether the think time is kept (not skipped, not doubled),
# with room for a loaded machine; how close it is kept is measured by benchmarks/bench_replayer.py.
THINK_ERROR = THINK / 3
STALL = 1.0  # --stall-timeout of the fault tests

pytestmark = pytest.mark.timeout(90)

# --------------------------------------------------------------------------------------------
# processes and the recording


@dataclass
class World:
    engine: Managed
    other_engine: Managed  # another seed: other answers, for chained mode
    recorder: Managed
    recording: Path
    sessions: list[PlannedSession]
    hops: dict[str, Managed]


def plan(directory: Path) -> list[PlannedSession]:
    rec = load(directory)
    headers = recorded_session_headers(rec.meta) + DEFAULT_SESSION_HEADERS
    return plan_sessions(rec.exchanges, rec.piece, summarize_sessions(rec.exchanges, rec.piece, session_headers=headers))


def _hop_args(sessions: list[PlannedSession]) -> dict[str, list[str]]:
    """The faulty hops: name -> faults options. The isolation hop stalls only the largest body
    of the recording, which is one session's last turn."""
    sizes = sorted(len(t.body) for s in sessions for t in s.turns)
    assert sizes[-1] > sizes[-2], "the recording's two largest bodies must differ in size"
    return {
        "stall": ["stall_after=3", "from_turn=2"],
        "reset": ["reset_after=2"],
        "max_body": ["max_body=1"],
        "drop_terminal": ["drop_terminal=true"],
        "truncate": ["truncate_messages=1"],
        "buffer": ["buffer=true"],
        "slow_headers": ["delay_headers=4"],
        "isolate": ["stall_after=2", f"min_body={sizes[-2]}"],
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
          module_mitmdumps: MitmdumpFactory) -> World:  # fmt: skip
    engine = module_engines("--token-interval", "0.004", "--ttft-per-kb", "0", "--tool-call-rate", "0.6")
    other = module_engines("--token-interval", "0.001", "--seed", "7", "--tool-call-rate", "0.6")
    out = tmp_path_factory.mktemp("rec") / "recording"
    recorder = module_mitmdumps.recorder(engine, out)
    options = AgentOptions(
        base_url=recorder.url, sessions=2, turns=3, think=THINK, max_tokens=48, session_id_header="x-session-id"
    )
    import asyncio

    assert asyncio.run(run_agent(options)).ok
    time.sleep(1.5)  # the recorder flushes its last chunks within a second
    sessions = plan(out)
    assert [len(s.turns) for s in sessions] == [3, 3]
    clean = module_mitmdumps.faults(recorder)
    hops = {"clean": clean, "recorder": recorder}
    specs = _hop_args(sessions)

    def start(name: str) -> tuple[str, Managed]:
        # The stall hop sits in front of the clean hop (chain: stall -> clean -> recorder).
        upstream = clean if name == "stall" else engine
        return name, module_mitmdumps.faults(upstream, *specs[name])

    with ThreadPoolExecutor(len(specs)) as pool:
        futures = [pool.submit(start, n) for n in specs]
        for future in futures:
            try:
                name, proc = future.result()
            except Exception:
                continue  # reported below
            hops[name] = proc
    assert set(specs) <= set(hops), "a faulty hop did not start"
    return World(engine, other, recorder, out, sessions, hops)


def chain_file(tmp: Path, engine: str, *hops: tuple[str, str], headers: str = "") -> Path:
    lines = [f'engine = "{engine}"']
    if headers:
        lines += ["[engine_options]", f"headers = {{ {headers} }}"]
    for name, url in hops:
        lines += ["[[hop]]", f'name = "{name}"', f'url = "{url}"']
    path = tmp / "chain.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_replay(*argv: str) -> int:
    """`proxycheck replay ARGV` through a throwaway parser like cli's; usage errors exit 2."""
    parser = cli._Parser(prog="proxycheck")
    commands = parser.add_subparsers(dest="command", parser_class=cli._Parser)
    replay_cmd.add_parser(commands)
    try:
        args = parser.parse_args(["replay", *argv])
    except SystemExit as exc:
        return int(exc.code or 0)
    return cli.run_command(args)  # its errors as cli.main reports them


def by_route(run: Run) -> dict[str, list[Observation]]:
    out: dict[str, list[Observation]] = {}
    for obs in run.observations:
        out.setdefault(obs.route, []).append(obs)
    return out


def turns_of(world: World) -> dict[tuple[str, int], PlannedTurn]:
    return {(t.session, t.turn): t for s in world.sessions for t in s.turns}


def think_errors(world: World, observations: list[Observation]) -> list[float]:
    """|replayed - recorded| think time of every turn after the first."""
    planned = turns_of(world)
    by_session: dict[str, list[Observation]] = {}
    for obs in observations:
        by_session.setdefault(obs.session, []).append(obs)
    errors = []
    for session in by_session.values():
        session.sort(key=lambda o: o.turn)
        for prev, obs in zip(session, session[1:]):
            actual = obs.t_start - (prev.t_start + (prev.end or 0.0))
            errors.append(abs(actual - (planned[(obs.session, obs.turn)].think_time or 0.0)))
    return errors


# --------------------------------------------------------------------------------------------
# the ladder: direct, the recorder, a clean hop, a stalling hop


def test_ladder_clean_routes_ok_and_stall_found(world: World, tmp_path: Path) -> None:
    hops = world.hops
    chain = chain_file(tmp_path, world.engine.url, ("stall", hops["stall"].url), ("clean", hops["clean"].url),
                       ("recorder", world.recorder.url))  # fmt: skip
    out = tmp_path / "run"
    assert (
        run_replay(str(world.recording), "--chain", str(chain), "--stall-timeout", str(STALL), "--out", str(out)) == 1
    )
    run = load_run(out)
    assert run.status == "completed" and not run.warnings
    assert run.routes == ["direct", "via:recorder", "via:clean", "via:stall"]
    routes = by_route(run)
    assert list(routes) == run.routes  # route after route
    planned = turns_of(world)
    for name in ("direct", "via:recorder", "via:clean"):
        obs = routes[name]
        assert len(obs) == 6 and all(o.outcome is Outcome.OK for o in obs), [(o.outcome, o.detail) for o in obs]
        # connection reuse as recorded
        assert [o.reused for o in obs] == [not planned[(o.session, o.turn)].new_connection for o in obs]
        # think time as recorded, from the end of the previous response
        assert p99(think_errors(world, obs)) <= THINK_ERROR
    stalled = {(o.session, o.turn): o.outcome for o in routes["via:stall"]}
    assert stalled == {k: Outcome.OK if k[1] == 1 else Outcome.STALL_MID_STREAM for k in planned}
    # The recorder stayed in the chain and recorded none of the replayed requests.
    assert len(load(world.recording).exchanges) == 6


# --------------------------------------------------------------------------------------------
# faults, one hop each


def _fault_run(world: World, tmp_path: Path, hop: str, *extra: str) -> dict[str, list[Observation]]:
    chain = chain_file(tmp_path, world.engine.url, ("faulty", world.hops[hop].url))
    out = tmp_path / "run"
    status = run_replay(str(world.recording), "--chain", str(chain), "--route", "via:faulty", "--pace", "fast",
                        "--stall-timeout", str(STALL), "--out", str(out), *extra)  # fmt: skip
    routes = by_route(load_run(out))
    failing = any(o.outcome.is_failure for obs in routes.values() for o in obs)
    assert status == (1 if failing else 0)
    return routes


@pytest.mark.parametrize(
    "hop, expected",
    [
        ("reset", {1: Outcome.RESET, 2: Outcome.RESET, 3: Outcome.RESET}),
        ("max_body", {1: Outcome.HTTP_ERROR, 2: Outcome.HTTP_ERROR, 3: Outcome.HTTP_ERROR}),
        ("drop_terminal", {1: Outcome.TRUNCATED, 2: Outcome.TRUNCATED, 3: Outcome.TRUNCATED}),
        ("truncate", {2: Outcome.REQUEST_MUTATED, 3: Outcome.REQUEST_MUTATED}),
        ("slow_headers", dict.fromkeys((1, 2, 3), Outcome.STALL_BEFORE_HEADERS)),
    ],
)
def test_fault_outcomes(world: World, tmp_path: Path, hop: str, expected: dict[int, Outcome]) -> None:
    obs = _fault_run(world, tmp_path, hop, "--header-timeout", "0.5")["via:faulty"]
    assert len(obs) == 6
    for o in obs:
        if o.turn in expected:
            assert o.outcome is expected[o.turn], (o.turn, o.outcome, o.detail)
        if o.outcome is Outcome.HTTP_ERROR:
            assert o.status == 413


def test_buffering_hop_delivers_everything_at_the_end(world: World, tmp_path: Path) -> None:
    routes = _fault_run(world, tmp_path, "buffer", "--route", "direct")

    def spread(o: Observation) -> float:
        assert o.outcome is Outcome.OK and o.first_content is not None and o.end is not None
        return o.end - o.first_content

    direct = {(o.session, o.turn): spread(o) for o in routes["direct"]}
    buffered = {(o.session, o.turn): spread(o) for o in routes["via:faulty"]}
    # Streamed, the content of a longer answer is spread over its generation; buffered, the
    # first content comes with the last (the same answers: the engine is deterministic).
    long = [k for k, v in direct.items() if v >= 0.03]
    assert len(long) >= 3, direct
    assert all(buffered[k] < direct[k] / 4 for k in long), (direct, buffered)


# --------------------------------------------------------------------------------------------
# isolation, client stacks, chained mode


def test_a_stall_does_not_delay_the_other_session(world: World, tmp_path: Path) -> None:
    stall = 4.0
    chain = chain_file(tmp_path, world.engine.url, ("faulty", world.hops["isolate"].url))
    out = tmp_path / "run"
    assert run_replay(str(world.recording), "--chain", str(chain), "--route", "via:faulty", "--pace", "fast",
                      "--concurrency", "2", "--stall-timeout", str(stall), "--out", str(out)) == 1  # fmt: skip
    obs = load_run(out).observations
    stalled = [o for o in obs if o.outcome is not Outcome.OK]
    assert len(stalled) == 1 and stalled[0].outcome is Outcome.STALL_MID_STREAM
    cut = stalled[0]
    assert cut.end is not None and cut.end >= stall
    others = [o for o in obs if o.session != cut.session]
    assert len(others) == 3 and all(o.outcome is Outcome.OK for o in others)
    other_end = max(o.t_start + (o.end or 0.0) for o in others)
    assert other_end < cut.t_start + stall / 2


def test_aiohttp_client_stack(world: World, tmp_path: Path) -> None:
    chain = chain_file(tmp_path, world.engine.url)
    out = tmp_path / "run"
    assert run_replay(str(world.recording), "--chain", str(chain), "--client", "aiohttp", "--out", str(out)) == 0
    obs = load_run(out).observations
    planned = turns_of(world)
    assert len(obs) == 6 and all(o.outcome is Outcome.OK for o in obs)
    assert [o.reused for o in obs] == [not planned[(o.session, o.turn)].new_connection for o in obs]
    assert p99(think_errors(world, obs)) <= THINK_ERROR


# --------------------------------------------------------------------------------------------
# https entries and forward (CONNECT) hops


@dataclass
class TlsChain:
    tls: Managed  # mitmdump in reverse mode: serves TLS (its CA's certificate) in front of the engine
    forward: Managed  # mitmdump as a plain forward proxy: CONNECT tunnels, no interception
    ca: Path

    def chain(self, world: World, tmp: Path, verify: str | None = None) -> Path:
        path = tmp / "chain.toml"
        path.write_text(
            f'engine = "{world.engine.url}"\n'
            f'[[hop]]\nname = "corp"\nproxy = "{self.forward.url}"\n'
            f'[[hop]]\nname = "tls"\nurl = "https://127.0.0.1:{self.tls.port}"\n'
            f"verify = {verify or json.dumps(str(self.ca))}\n"
        )
        return path


@pytest.fixture(scope="module")
def tls_chain(world: World, tmp_path_factory: pytest.TempPathFactory,
              module_mitmdumps: MitmdumpFactory) -> TlsChain:  # fmt: skip
    confdir = tmp_path_factory.mktemp("mitmproxy-conf")
    tls = module_mitmdumps("--mode", f"reverse:{world.engine.url}", "--set", f"confdir={confdir}")
    forward = module_mitmdumps("--mode", "regular", "--ignore-hosts", ".*", "--set", f"confdir={confdir}")
    return TlsChain(tls, forward, confdir / "mitmproxy-ca-cert.pem")


@pytest.mark.parametrize("client", ["httpx", "aiohttp"])
def test_forward_hop_tunnels_to_an_https_entry(world: World, tls_chain: TlsChain, tmp_path: Path, client: str) -> None:
    chain = tls_chain.chain(world, tmp_path)
    out = tmp_path / "run"
    argv = ["--route", "via:tls", "--route", "via:corp", "--pace", "fast", "--client", client]
    assert run_replay(str(world.recording), "--chain", str(chain), *argv, "--out", str(out)) == 0
    routes = by_route(load_run(out))
    assert set(routes) == {"via:tls", "via:corp"}
    for obs in routes["via:tls"] + routes["via:corp"]:
        assert obs.outcome is Outcome.OK, (obs.route, obs.detail)
        assert obs.http_version == "HTTP/1.1"
    # The forward hop carried the via:corp exchanges: it tunnelled to the https entry's port.
    assert f"server connect 127.0.0.1:{tls_chain.tls.port}" in tls_chain.forward.log_tail(100_000)


async def test_an_untrusted_certificate_is_a_connect_error(world: World, tls_chain: TlsChain, tmp_path: Path) -> None:
    # verify = true trusts the usual public CAs, not the hop's own: every exchange fails to connect.
    chain = parse_chain(tls_chain.chain(world, tmp_path, verify="true").read_text(), {}, "chain")
    seen: list[Observation] = []
    await replay(world.sessions[:1], chain.routes(["via:tls"]), ReplayOptions(pace="fast"), "run-1", seen.append)
    assert [o.outcome for o in seen] == [Outcome.CONNECT_ERROR] * len(world.sessions[0].turns)
    assert "CERTIFICATE_VERIFY_FAILED" in seen[0].detail


def test_aiohttp_warns_it_replays_http2_turns_over_http11(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = tmp_path / "h2"
    shutil.copytree(world.recording, recording)
    for journal in recording.glob("*.jsonl"):
        journal.write_text(journal.read_text().replace('"http":"HTTP/1.1"', '"http":"HTTP/2.0"'))
    chain = chain_file(tmp_path, world.engine.url)
    assert run_replay(str(recording), "--chain", str(chain), "--client", "aiohttp", "--dry-run") == 0
    err = capsys.readouterr().err
    assert "warning: aiohttp speaks HTTP/1.1 only: 6 turn(s) recorded over HTTP/2" in err


class Capture:
    """A replay listener that keeps what was sent."""

    def __init__(self) -> None:
        self.sent: dict[tuple[str, int], tuple[str, dict[str, str], bytes]] = {}
        self.observations: list[Observation] = []

    def route_started(self, route, repetition, turns):  # type: ignore[no-untyped-def]
        pass

    def request(self, route, turn, url, headers, body):  # type: ignore[no-untyped-def]
        self.sent[(turn.session, turn.turn)] = (url, headers, body)

    def observed(self, obs):  # type: ignore[no-untyped-def]
        self.observations.append(obs)

    def route_ended(self, route, repetition):  # type: ignore[no-untyped-def]
        pass


async def _replay_direct(world: World, mode: str) -> Capture:
    chain = parse_chain(f'engine = "{world.other_engine.url}"\n', {}, "chain")
    capture = Capture()
    options = ReplayOptions(watchdogs=Watchdogs(stall=5.0), pace="fast", mode=mode)  # type: ignore[arg-type]
    status = await replay(world.sessions, chain.routes(), options, "run-1", capture.observations.append, capture)
    assert status == "completed"
    return capture


async def test_chained_bodies_differ_from_exact_only_in_assistant_replies(world: World) -> None:
    exact = await _replay_direct(world, "exact")
    chained = await _replay_direct(world, "chained")
    assert all(o.outcome is Outcome.OK for o in exact.observations + chained.observations)
    changed = 0
    for key, (url, headers, body) in exact.sent.items():
        assert url.startswith(world.other_engine.url) and headers[REPLAY_HEADER] == "run-1"
        other = chained.sent[key][2]
        if key[1] == 1:
            assert other == body
            continue
        a, b = json.loads(body)["messages"], json.loads(other)["messages"]
        assert len(a) == len(b)
        for x, y in zip(a, b):
            if x.get("role") == "assistant":
                changed += x != y
            else:
                assert x == y
    assert changed > 0


def test_route_headers_override_recorded_ones(world: World) -> None:
    turn = world.sessions[0].turns[0]
    assert any(n.lower() == "content-type" for n, _ in turn.headers)
    chain = parse_chain('engine = "http://127.0.0.1:9"\n[engine_options]\nheaders = { "Content-Type" = "x/y" }\n',
                        {}, "chain")  # fmt: skip
    headers = request_headers(turn, chain.route("direct"), "RID")
    assert headers["Content-Type"] == "x/y"
    assert [n for n in headers if n.lower() == "content-type"] == ["Content-Type"]
    assert headers[REPLAY_HEADER] == "RID"


# --------------------------------------------------------------------------------------------
# safety: dry run, request budget, bad input, Ctrl-C


class CountingListener:
    """A TCP port that counts the connections made to it."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        self.sock.close()


def test_dry_run_sends_nothing(world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    listener = CountingListener()
    try:
        chain = chain_file(tmp_path, f"http://127.0.0.1:{listener.port}", headers='"x-api-key" = "k"')
        out = tmp_path / "run"
        assert run_replay(str(world.recording), "--chain", str(chain), "--dry-run", "--out", str(out)) == 0
        time.sleep(0.3)
        assert listener.accepted == 0
    finally:
        listener.close()
    assert not out.exists()
    text = capsys.readouterr().out
    assert f"POST http://127.0.0.1:{listener.port}/v1/chat/completions" in text
    assert text.count(" turn ") == 6 and "x-api-key" in text and REPLAY_HEADER in text


def test_max_requests_stops_sending(world: World, tmp_path: Path) -> None:
    chain = chain_file(tmp_path, world.engine.url)
    out = tmp_path / "run"
    assert run_replay(str(world.recording), "--chain", str(chain), "--pace", "fast", "--concurrency", "1",
                      "--max-requests", "4", "--repeat", "2", "--out", str(out)) == 0  # fmt: skip
    run = load_run(out)
    assert run.status == "limited" and len(run.observations) == 4


@pytest.mark.parametrize(
    "case",
    [
        "bad_chain", "missing_chain", "unknown_route", "no_recording", "run_exists", "bad_pace", "bad_timeout", "no_out",
        "bad_ca_file",
    ],  # fmt: skip
)
def test_bad_input_is_one_line_and_exit_2(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    good = chain_file(tmp_path, world.engine.url)
    bad = tmp_path / "bad.toml"
    bad.write_text("engine = [\n")
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "run.json").write_text("{}")
    not_a_ca = tmp_path / "ca.pem"
    not_a_ca.write_text("not a certificate\n")
    bad_ca = tmp_path / "bad-ca.toml"
    bad_ca.write_text(f'engine = "{world.engine.url}"\n[engine_options]\nverify = {json.dumps(str(not_a_ca))}\n')
    rec, out = str(world.recording), str(tmp_path / "run")
    argv = {
        "bad_chain": [rec, "--chain", str(bad), "--out", out],
        "missing_chain": [rec, "--chain", str(tmp_path / "nope.toml"), "--out", out],
        "unknown_route": [rec, "--chain", str(good), "--route", "via:nope", "--out", out],
        "no_recording": [str(tmp_path / "nothing"), "--chain", str(good), "--out", out],
        "run_exists": [rec, "--chain", str(good), "--out", str(existing)],
        "bad_pace": [rec, "--chain", str(good), "--pace", "slow", "--out", out],
        "bad_timeout": [rec, "--chain", str(good), "--stall-timeout", "0", "--out", out],
        "no_out": [rec, "--chain", str(good)],
        "bad_ca_file": [rec, "--chain", str(bad_ca), "--out", out],
    }[case]
    assert run_replay(*argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("proxycheck: "), err
    assert not (tmp_path / "run").exists()


def test_ctrl_c_keeps_a_loadable_interrupted_run(world: World, tmp_path: Path) -> None:
    chain = chain_file(tmp_path, world.engine.url, ("stall", world.hops["stall"].url))
    out = tmp_path / "run"
    proc = subprocess.Popen(
        proxycheck_argv("replay", str(world.recording), "--chain", str(chain), "--route", "via:stall",
                        "--pace", "fast", "--stall-timeout", "60", "--out", str(out)),
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"}, preexec_fn=as_at_a_terminal,
    )  # fmt: skip
    try:
        observations = out / "observations.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if observations.exists() and observations.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.05)
        time.sleep(0.3)  # both sessions are now stalled in turn 2
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    run = load_run(out)
    assert run.status == "interrupted" and not run.warnings
    assert len(run.observations) >= 2 and all(o.turn == 1 for o in run.observations)
    assert b"Traceback" not in err


def test_cli_module_namespace_run(world: World, tmp_path: Path) -> None:
    """`run(namespace)` as cli.main calls it, and a progress line per route on a non-terminal."""
    chain = chain_file(tmp_path, world.engine.url)
    ns = argparse.Namespace(
        directory=str(world.recording), chain=str(chain), route=["direct"], repeat=1, concurrency=None, pace="fast",
        mode="exact", client="httpx", on_fail="stop-session", connect_timeout=None, header_timeout=None,
        stall_timeout=None, total_timeout=None, max_requests=None, dry_run=False, out=str(tmp_path / "run"),
        greedy=False,
    )  # fmt: skip
    assert replay_cmd.run(ns) == 0
    meta = load_run(tmp_path / "run").meta
    assert meta["routes"] == ["direct"] and meta["options"]["pace"] == "fast"
    assert meta["versions"]["httpx"] and meta["chain"]["engine"] == world.engine.url
