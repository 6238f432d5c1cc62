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

`--engine vllm` tells the synthetic agent's story on vLLM (`proxycheck.io.vllm`: the CPU build and
the small model `make vllm` builds, or `--vllm-python` and `--vllm-model`) instead of the reference
engine: the engine part (`EnginePart`) starts the engine and says what the agent, the gateway and the
replay need of it; the rest of the story is the same. vLLM serves the model without tool calls, so
the agent offers none and pastes its tool outputs (`AgentOptions.tools` off); its context grows by
them turn by turn, so the gateway's body-size fault still fires at turn 3.

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
import math
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
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
from proxycheck.core.testbed.engine_speed import settings_for
from proxycheck.io.vllm import (
    MEASURED_START_SECONDS,
    SERVED_MODEL,
    STOP_GRACE,
    VllmSetup,
    measure_speed,
    read_cpu,
    start_vllm,
)

# The gateway's fault: stall after 4 events once a request body passes this many bytes. The
# agent's context grows by its tool results (about 2 KB a turn), so sessions wedge at turn 3.
STALL_AFTER_EVENTS = 4
STALL_FROM_BYTES = 5000
STALL_TIMEOUT = 2.0  # the replay's stall watchdog: the demo need not wait the default 10 s
# On vLLM the agent offers no tools and pastes a 2,000 B test output with each follow-up; its answers
# are sampled, up to VLLM_MAX_TOKENS tokens (at most some 200 B). Its bodies are then about 0.6 KB,
# 2.8-3.0 KB and 4.9-5.2 KB at turns 1-3: a threshold of 4,000 B stalls turn 3, with 1 KB of margin
# either way. How long vLLM takes to a first token at these sizes differs many times between CPUs
# (0.5 s on an AVX-512 machine, 5-10 s on an AVX2 EPYC, more on a busy machine), so the agent and the
# replay call a silence a stall only after VLLM_STALL_MARGIN times the first token of the largest
# prompt (VLLM_LARGEST_TOKENS: turn 3's 5.2 KB at 2.5 bytes a token), as measured on the engine once
# it is ready, and never before check's default 10 s.
VLLM_STALL_FROM_BYTES = 4000
VLLM_MAX_TOKENS = 32
VLLM_STALL_TIMEOUT = 10.0
VLLM_LARGEST_TOKENS = 2100
VLLM_STALL_MARGIN = 4.0
VLLM_KV_CACHE_GB = 1  # two sessions of 2k tokens need a few MB of it
ENGINES = ("reference", "vllm")

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
        description="Start an engine (the reference engine, or vLLM with --engine vllm) and a chain of two "
        "mitmproxy hops (one recording, one faulty), run agent sessions through it until they wedge, check the "
        "recording (the verdict names the hop and the turn), fix the hop and replay again. Stops everything it "
        "started.",
    )
    p.add_argument("--out", default="proxycheck-demo", metavar="DIR",
                   help="where the recording, the runs and the HTML report go (default: proxycheck-demo)")  # fmt: skip
    p.add_argument("--engine", choices=ENGINES, default="reference",
                   help="the engine: proxycheck's reference engine (default), or vLLM serving SmolLM2-135M-Instruct "
                        "(`make vllm` builds both into .venv-vllm and .models/ here; its start takes about "
                        f"{MEASURED_START_SECONDS} s on 2 cores); with the synthetic agent only")  # fmt: skip
    p.add_argument("--vllm-python", metavar="PATH",
                   help="with --engine vllm: the Python that has vLLM installed, for a vLLM installed elsewhere "
                        "(default: .venv-vllm/bin/python here)")  # fmt: skip
    p.add_argument("--vllm-model", metavar="DIR",
                   help="with --engine vllm: the model folder vLLM serves as smollm2-135m, for one built elsewhere "
                        "(default: .models/smollm2-135m here)")  # fmt: skip
    p.add_argument("--harness", choices=sorted(HARNESSES), default=None,
                   help="the client: a real harness, installed in the project's .harness/ or on PATH "
                        "(default: the synthetic agent, proxycheck agent)")  # fmt: skip
    p.add_argument("--websocket", action="store_true",
                   help="with --harness codex: Codex on the Responses API's WebSocket mode; the gateway cuts its "
                        "socket mid-answer instead of stalling a stream")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    harness: tuple[HarnessKind, str] | None = None
    part = _engine_part(args)
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
        ok = _story(out, started, part, harness, websocket=args.websocket)
    finally:
        for proc in reversed(started):
            proc.stop(grace=STOP_GRACE)  # vLLM's engine core may take seconds to leave; the others go at once
    _say(f"done in {time.monotonic() - t0:.0f} s; files in {out}/ (open {out / 'report.html'})")
    return EXIT_OK if ok else EXIT_FAULT


@dataclass(frozen=True)
class EnginePart:
    """The engine the story runs on: how to start it (ready, with the stall watchdog that fits it:
    the agent's read timeout and the replay's), and what the rest of the story needs of it: the
    synthetic agent's options (all but the base URL and the read timeout), and the request size from
    which the gateway stalls."""

    title: str
    start: Callable[[], tuple[Managed, float]]
    agent: AgentOptions
    stall_from_bytes: int = STALL_FROM_BYTES


def _reference(*engine_args: str) -> EnginePart:
    agent = AgentOptions(base_url="", sessions=2, turns=6, think=0.2, max_tokens=40)
    return EnginePart("the reference engine", lambda: (start_engine(*engine_args), STALL_TIMEOUT), agent)


def _engine_part(args: argparse.Namespace) -> EnginePart:
    """The engine `--engine` asks for; bad input (before anything starts) where it cannot be."""
    if args.engine == "reference":
        if args.vllm_python or args.vllm_model:
            raise BadInput("demo --vllm-python/--vllm-model", "need --engine vllm")
        if args.harness:
            return _reference(*HARNESS_ENGINE_ARGS)
        return _reference("--token-interval", "0.01", "--ttft-per-kb", "0.001", "--tool-call-rate", "0.9")
    if args.harness or args.websocket:
        given = f"--harness {args.harness}" if args.harness else "--websocket"
        raise BadInput("demo --engine vllm", f"{given} cannot run on it: the harnesses need tool calls, and the "
                       "small model it serves makes none (its chat template has no tools)")  # fmt: skip
    setup = VllmSetup.of_project(Path.cwd())
    setup = VllmSetup(Path(args.vllm_python) if args.vllm_python else setup.python,
                      Path(args.vllm_model) if args.vllm_model else setup.model)  # fmt: skip
    reason = setup.missing()
    if reason:
        raise BadInput("demo --engine vllm", f"{reason} (or --vllm-python and --vllm-model name one built elsewhere)")
    agent = AgentOptions(base_url="", sessions=2, turns=6, model=SERVED_MODEL, think=0.2, max_tokens=VLLM_MAX_TOKENS,
                         tools=False)  # fmt: skip
    return EnginePart("vLLM (SmolLM2-135M-Instruct)", lambda: _start_vllm(setup), agent, VLLM_STALL_FROM_BYTES)


def _start_vllm(setup: VllmSetup) -> tuple[Managed, float]:
    """vLLM ready and measured, with the stall watchdog its measured speed calls for."""
    cpu = read_cpu()
    _say(f"    starting vLLM ({setup.python}; {settings_for(cpu).describe()} on {cpu.describe()}): about "
         f"{MEASURED_START_SECONDS} s on 2 cores, longer on a busy machine (it loads the model before it "
         "answers)")  # fmt: skip
    t0 = time.monotonic()
    engine = start_vllm(setup, kv_cache_gb=VLLM_KV_CACHE_GB)
    try:
        _say(f"    vLLM ready in {time.monotonic() - t0:.0f} s; measuring it")
        speed = measure_speed(engine.url)
    except BaseException:
        engine.stop(grace=STOP_GRACE)
        raise
    stall = float(max(VLLM_STALL_TIMEOUT, math.ceil(VLLM_STALL_MARGIN * speed.first_token_after(VLLM_LARGEST_TOKENS))))
    _say(f"    {speed.describe()}: stalls judged after {stall:.0f} s")
    return engine, stall


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


def _story(out: Path, started: list[Managed], part: EnginePart, harness: tuple[HarnessKind, str] | None, *,
           websocket: bool = False) -> bool:  # fmt: skip
    client = harness[0].title if harness else "the agent"
    _say(f"1/4 starting {part.title} and two mitmproxy hops: {client} -> edge (records) -> gateway -> engine")
    engine, stall_timeout = part.start()
    started.append(engine)
    if harness is None:
        gate = ("--set", f"proxycheck_fault_min_body={part.stall_from_bytes}")
        fault_text = f"stalls streams once a request passes {part.stall_from_bytes} B"
    else:
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
    if harness is None:
        wedged = _run_agent(replace(part.agent, base_url=edge.url, read_timeout=stall_timeout))
    else:
        wedged = _run_harness(out, edge.url, *harness, websocket=websocket)
    if not wedged:
        return False

    chain = out / "chain.toml"
    write_file(chain, f'engine = "{engine.url}"\n[[hop]]\nname = "edge"\nurl = "{edge.url}"\n'
                      f'[[hop]]\nname = "gateway"\nurl = "{gateway.url}"\n')  # fmt: skip
    _say(f"3/4 proxycheck check {recording} --chain {chain}")
    status = _check(recording, chain, out / "check-run", Reports(html=str(out / "report.html")), stall_timeout)
    sys.stdout.flush()
    found = json.loads((out / "check-run" / "verdict.json").read_text())
    if status != EXIT_FAULT or found["culprit"] != "gateway":
        _say(f"    expected the gateway to be blamed; the verdict was {found['verdict']} ({found['summary']})")
        return False

    _say("4/4 fixing the gateway (restarted without its fault, same port) and replaying the same recording")
    gateway.stop()
    started.remove(gateway)
    started.append(start_mitmdump(*gateway_args, port=gateway.port))
    status = _check(recording, chain, out / "fixed-run", Reports(), stall_timeout)
    sys.stdout.flush()
    fixed = json.loads((out / "fixed-run" / "verdict.json").read_text())
    if status != EXIT_OK:
        _say(f"    the regression replay still fails: {fixed['summary']}")
        return False
    _say(f"    regression replay clean: {fixed['verdict']} — the wedge recorded at turn {found['first_turn']} "
         "is gone with the gateway fixed")  # fmt: skip
    return True


def _run_agent(options: AgentOptions) -> bool:
    """Step 2 with the synthetic agent: whether its sessions wedged."""
    # io.agent loads httpx and aiohttp: imported when the demo runs, not at every start.
    from proxycheck.io.agent import run_agent

    _say(f"2/4 the agent runs {options.sessions} sessions of up to {options.turns} turns through edge")
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


def _check(recording: Path, chain_file: Path, run: Path, reports: Reports, stall: float) -> int:
    """`proxycheck check RECORDING --chain CHAIN --stall-timeout STALL --out RUN`, as the command
    runs it (its progress, its verdict and reports); its exit status."""
    # io.diagnosis and io.replayer load httpx and aiohttp: imported when the demo runs.
    from proxycheck.io.diagnosis import CheckRun, CheckSettings
    from proxycheck.io.replayer import ReplayOptions

    chain = load_chain(str(chain_file))
    routes = {name: chain.route(name) for name in chain.ladder()}
    check_tls(routes.values())
    sessions = load_sessions(str(recording))
    options = ReplayOptions(watchdogs=derive_watchdogs(sessions).with_overrides(stall=stall), chain=chain)
    check = CheckRun(str(recording), chain, routes, sessions, options, CheckSettings(), str(run))
    return report_check(check, reports)


def _say(text: str) -> None:
    print(f"proxycheck demo: {text}", flush=True)
