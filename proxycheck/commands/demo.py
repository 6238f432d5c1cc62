"""`proxycheck demo` (`make demo`): the whole story, on this machine alone, in under a minute.

1. the reference engine, and a chain of two mitmproxy hops in front of it: `edge` records the
   traffic (the recorder addon), `gateway` has a fault (the faults addon): it stalls streams once
   the growing context of a session passes a size, as a proxy with a body-size-dependent bug does;
2. the synthetic agent runs sessions through the chain until they wedge;
3. `check` replays the recording straight to the engine and through each hop, names the hop and
   the turn where the wedge starts, and writes the HTML report;
4. the hop is "fixed" (restarted without its fault, on the same port) and `check` replays the
   same recording again: a clean regression replay (the recorded wedge does not reproduce).

Everything it starts is stopped by it, also on Ctrl-C or failure. Its files (the recording, both
runs, the chain file, the report) go to `--out`. The addon scripts it gives mitmdump are written
there too, so the demo needs only the installed package. Exit 0 when the story went as told.

`--harness claude-code|codex` tells the same story with a real harness as the client instead of the
synthetic agent (`proxycheck.io.harness` finds it and builds its command line): it reads the
README.md of a small project folder in `--out` through the chain, its home is in `--out` too, and the
gateway stalls its turn 2 on. A harness that is not installed is bad input (exit 2).

`--harness codex --websocket` tells it with Codex on the Responses API's WebSocket mode (one socket
for the session, a `response.create` message per turn): the gateway cuts the socket mid-answer
(after STALL_AFTER_EVENTS events) from the socket's turn 2 on (its turn 1 is Codex's warm-up), a
fault of the hop's socket part (`ws_cut_after_events`), and `check` names it at that turn as
over HTTP. `--websocket` without `--harness codex` is bad input (exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

from proxycheck.commandline.common import load_sessions
from proxycheck.commandline.verdicts import Reports, report_check
from proxycheck.core.errors import EXIT_FAULT, EXIT_OK, BadInput
from proxycheck.core.recording.summary import SessionSummary
from proxycheck.core.replay.plan import derive_watchdogs
from proxycheck.core.testbed.agent import AgentOptions
from proxycheck.io.harness import (
    HARNESSES,
    PROMPT,
    HarnessKind,
    HarnessResult,
    find_harness,
    harness_command,
    not_installed,
    run_harness,
)
from proxycheck.io.inputs import check_tls, load_chain
from proxycheck.io.outputs import check_outputs, make_dirs, write_file
from proxycheck.io.procs import Managed, start_engine, start_mitmdump
from proxycheck.io.recordings import open_recording

# The gateway's fault: stall after 4 events once a request body passes this many bytes. The
# agent's context grows by its tool results (about 2 KB a turn), so sessions wedge at turn 3.
STALL_AFTER_EVENTS = 4
STALL_FROM_BYTES = 5000
STALL_TIMEOUT = 2.0  # the replay's stall watchdog: the demo need not wait the default 10 s

_SCRIPTS = {
    "record_addon.py": "from proxycheck.hops.record import Recorder\n\naddons = [Recorder()]\n",
    "faults_addon.py": "from proxycheck.hops.faults import Faults\n\naddons = [Faults()]\n",
}
# A real harness: the engine streams without waiting and answers each turn offering tools with a
# tool call (the harness runs it and comes back: turn 2); the gateway stalls from a turn on and drops
# a stalled stream after GATEWAY_STALL_SECONDS, and the harness, which is told not to retry, ends.
HARNESS_ENGINE_ARGS = ("--token-interval", "0", "--ttft-base", "0", "--tool-call-rate", "1")
# The gateway stalls the harness's turn 2 on: the fault hop counts a request's turns by the answers in
# its history (`messages` for Claude Code, the Responses API `input` items for Codex).
HARNESS_STALL_FROM_TURN = 2
GATEWAY_STALL_SECONDS = 5
HARNESS_TIMEOUT = 90.0
PROJECT_README = """# proxycheck demo project

A small project for the demo's harness to read. proxycheck records LLM agent traffic through
mitmproxy, replays it over chains of proxies and finds the hop (or the server) where a stream wedges.
"""

_OURS = ("recording", "check-run", "fixed-run", "chain.toml", "report.html", "verdict.json", "project", "home",
         "harness.log", *_SCRIPTS)  # fmt: skip


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "demo",
        help="record sessions that wedge behind a faulty hop, find the hop, fix it, replay again",
        description="Start the reference engine and a chain of two mitmproxy hops (one recording, one "
        "faulty), run agent sessions through it until they wedge, check the recording (the verdict names "
        "the hop and the turn), fix the hop and replay again. Stops everything it started.",
    )
    p.add_argument("--out", default="proxycheck-demo", metavar="DIR",
                   help="where the recording, the runs and the HTML report go (default: proxycheck-demo)")  # fmt: skip
    p.add_argument("--harness", choices=sorted(HARNESSES), default=None,
                   help="the client: a real harness, installed in the project's .harness/ or on PATH "
                        "(default: the synthetic agent, proxycheck agent)")  # fmt: skip
    p.add_argument("--websocket", action="store_true",
                   help="with --harness codex: Codex on the Responses API's WebSocket mode; the gateway cuts its "
                        "socket mid-answer instead of stalling a stream")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    harness: tuple[HarnessKind, str] | None = None
    if args.websocket and args.harness != "codex":
        raise BadInput("demo --websocket", "needs --harness codex (the harness that speaks the WebSocket mode)")
    if args.harness is not None:
        kind = HARNESSES[args.harness]
        command = find_harness(kind)
        if command is None:
            raise BadInput(f"demo --harness {kind.name}", not_installed(kind))
        harness = (kind, command)
    check_outputs(directories={"--out": args.out})
    out = Path(args.out)
    _fresh(out)
    started: list[Managed] = []
    t0 = time.monotonic()
    try:
        ok = _story(out, started, harness, websocket=args.websocket)
    finally:
        for proc in reversed(started):
            proc.stop()
    _say(f"done in {time.monotonic() - t0:.0f} s; files in {out}/ (open {out / 'report.html'})")
    return EXIT_OK if ok else EXIT_FAULT


def _fresh(out: Path) -> None:
    """Remove what an earlier demo left in `out` (only the demo's own files)."""
    make_dirs(out)  # 0700, as every directory proxycheck creates
    for name in _OURS:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for name, text in _SCRIPTS.items():
        write_file(out / name, text)


def _story(out: Path, started: list[Managed], harness: tuple[HarnessKind, str] | None, *,
           websocket: bool = False) -> bool:  # fmt: skip
    client = harness[0].title if harness else "the agent"
    _say(f"1/4 starting the reference engine and two mitmproxy hops: {client} -> edge (records) -> gateway -> engine")
    if harness is None:
        engine = start_engine("--token-interval", "0.01", "--ttft-per-kb", "0.001", "--tool-call-rate", "0.9")
        started.append(engine)
        gate = ("--set", f"proxycheck_fault_min_body={STALL_FROM_BYTES}")
        fault_text = f"stalls streams once a request passes {STALL_FROM_BYTES} B"
    else:
        engine = start_engine(*HARNESS_ENGINE_ARGS)
        started.append(engine)
        gate, fault_text = _harness_gate(harness[0], websocket)
    faults = (*(() if websocket else ("--set", f"proxycheck_fault_stall_after={STALL_AFTER_EVENTS}")), *gate)
    gateway_args = ("--mode", f"reverse:{engine.url}", "-s", str(out / "faults_addon.py"))
    gateway = start_mitmdump(*gateway_args, *faults)
    started.append(gateway)
    recording = out / "recording"
    edge = start_mitmdump("--mode", f"reverse:{gateway.url}", "-s", str(out / "record_addon.py"),
                          "--set", f"proxycheck_out={recording}")  # fmt: skip
    started.append(edge)
    _say(f"    engine {engine.url}, gateway {gateway.url} ({fault_text}), edge {edge.url}")
    wedged = _run_agent(edge.url) if harness is None else _run_harness(out, edge.url, *harness, websocket=websocket)
    if not wedged:
        return False

    chain = out / "chain.toml"
    write_file(chain, f'engine = "{engine.url}"\n[[hop]]\nname = "edge"\nurl = "{edge.url}"\n'
                      f'[[hop]]\nname = "gateway"\nurl = "{gateway.url}"\n')  # fmt: skip
    _say(f"3/4 proxycheck check {recording} --chain {chain}")
    status = _check(recording, chain, out / "check-run", Reports(html=str(out / "report.html")))
    sys.stdout.flush()
    found = json.loads((out / "check-run" / "verdict.json").read_text())
    if status != EXIT_FAULT or found["culprit"] != "gateway":
        _say(f"    expected the gateway to be blamed; the verdict was {found['verdict']} ({found['summary']})")
        return False

    _say("4/4 fixing the gateway (restarted without its fault, same port) and replaying the same recording")
    gateway.stop()
    started.remove(gateway)
    started.append(start_mitmdump(*gateway_args, port=gateway.port))
    status = _check(recording, chain, out / "fixed-run", Reports())
    sys.stdout.flush()
    fixed = json.loads((out / "fixed-run" / "verdict.json").read_text())
    if status != EXIT_OK:
        _say(f"    the regression replay still fails: {fixed['summary']}")
        return False
    _say(f"    regression replay clean: {fixed['verdict']} — the wedge recorded at turn {found['first_turn']} "
         "is gone with the gateway fixed")  # fmt: skip
    return True


def _run_agent(edge_url: str) -> bool:
    """Step 2 with the synthetic agent: whether its sessions wedged."""
    # io.agent loads httpx and aiohttp: imported when the demo runs, not at every start.
    from proxycheck.io.agent import run_agent

    _say("2/4 the agent runs 2 sessions of up to 6 turns through edge")
    options = AgentOptions(base_url=edge_url, sessions=2, turns=6, think=0.2, max_tokens=40, read_timeout=STALL_TIMEOUT)
    agent = asyncio.run(run_agent(options))
    for session in agent.sessions:
        turns = " ".join(f"{t.turn}:{t.outcome.value}" for t in session.turns)
        _say(f"    session {session.id}: {turns}")
    time.sleep(1.2)  # the recorder writes a stream's last chunks within a second
    if agent.ok:
        _say("    the sessions did not wedge: the demo cannot go on")
        return False
    return True


def _harness_gate(kind: HarnessKind, websocket: bool = False) -> tuple[tuple[str, ...], str]:
    """The gateway's options that stall the harness's turn 2 on (on a socket: cut it mid-answer
    from its turn 2 on), and how to say it."""
    if websocket:
        return (("--set", f"proxycheck_fault_from_turn={HARNESS_STALL_FROM_TURN}",
                 "--set", f"proxycheck_fault_ws_cut_after_events={STALL_AFTER_EVENTS}"),
                f"cuts WebSockets mid-answer from turn {HARNESS_STALL_FROM_TURN} of a socket on")  # fmt: skip
    held = ("--set", f"proxycheck_fault_stall_seconds={GATEWAY_STALL_SECONDS}")
    return (("--set", f"proxycheck_fault_from_turn={HARNESS_STALL_FROM_TURN}", *held),
            f"stalls streams from turn {HARNESS_STALL_FROM_TURN} of a conversation on")  # fmt: skip


def _drive(out: Path, base_url: str, kind: HarnessKind, command: str, recording: Path,
           log: Path, websocket: bool = False) -> tuple[HarnessResult, list[SessionSummary]]:  # fmt: skip
    """Run the harness on PROMPT in `out`/project (a fresh home each time: runs alike send requests of
    one size) with its requests to `base_url`, recorded into `recording`; how it ended, and the
    recording's sessions of its conversation (each shown)."""
    where = out.resolve()  # the harness runs in `work`: its paths must not be relative to here
    work, home = where / "project", where / "home"
    write_file(work / "README.md", PROJECT_README)
    if home.exists():
        shutil.rmtree(home)
    argv, env = harness_command(kind, command, base_url=base_url, work=work, home=home, websocket=websocket)
    done = run_harness(argv, cwd=work, env=env, timeout=HARNESS_TIMEOUT, log=log)
    ended = f"exited with status {done.status}" if done.status is not None else f"was stopped after {HARNESS_TIMEOUT:.0f} s"
    _say(f"    {kind.title} {ended} in {done.seconds:.0f} s (its output: {done.log})")
    time.sleep(1.5)  # the recorder writes a stream's last chunks within a second
    if not recording.is_dir():
        _say(f"    no request of {kind.title} reached the recorder")
        return done, []
    conversation = [s for s in open_recording(str(recording)).summaries
                    if any(kind.path_part in t.path for t in s.turns)]  # fmt: skip
    for session in conversation:
        turns = " ".join(f"{t.turn}:{t.outcome.value}" + (f"({','.join(t.tool_calls)})" if t.tool_calls else "")
                         for t in session.turns)  # fmt: skip
        _say(f"    session {session.label or session.id}: {turns}")
    if not conversation:
        _say(f"    no request of {kind.title} went to {kind.path_part}")
    return done, conversation


def _run_harness(out: Path, edge_url: str, kind: HarnessKind, command: str, *, websocket: bool = False) -> bool:
    """Step 2 with a real harness: it reads the README.md of `out`/project through edge; whether
    its conversation wedged (a turn of it did not end ok)."""
    over = " over a WebSocket" if websocket else ""
    _say(f'2/4 {kind.title} runs "{PROMPT}" in {out / "project"} through edge{over}, not retrying, '
         f"at most {HARNESS_TIMEOUT:.0f} s")  # fmt: skip
    done, conversation = _drive(out, edge_url, kind, command, out / "recording", out / "harness.log", websocket)
    if not conversation:
        _say("    the demo cannot go on")
        return False
    if all(t.outcome.value == "ok" for s in conversation for t in s.turns):
        _say(f"    the conversation did not wedge: the demo cannot go on (see {done.log})")
        return False
    if done.status == 0:
        _say(f"    {kind.title} got past the wedge by sending the stalled turns again; the recording keeps both")
    return True


def _check(recording: Path, chain_file: Path, run: Path, reports: Reports) -> int:
    """`proxycheck check RECORDING --chain CHAIN --stall-timeout STALL_TIMEOUT --out RUN`, as the
    command runs it (its progress, its verdict and reports); its exit status."""
    # io.diagnosis and io.replayer load httpx and aiohttp: imported when the demo runs.
    from proxycheck.io.diagnosis import CheckRun, CheckSettings
    from proxycheck.io.replayer import ReplayOptions

    chain = load_chain(str(chain_file))
    routes = {name: chain.route(name) for name in chain.ladder()}
    check_tls(routes.values())
    sessions = load_sessions(str(recording))
    options = ReplayOptions(watchdogs=derive_watchdogs(sessions).with_overrides(stall=STALL_TIMEOUT), chain=chain)
    check = CheckRun(str(recording), chain, routes, sessions, options, CheckSettings(), str(run))
    return report_check(check, reports)


def _say(text: str) -> None:
    print(f"proxycheck demo: {text}", flush=True)
