"""`check` and `diff` benchmarks, measured side by side in one run:

(a) time to verdict on the demo chain (the reference engine, a recording hop `edge` and a faulty
    hop `gateway`, as `proxycheck demo` sets them up): agent sessions are recorded through the
    chain until they wedge, then `proxycheck check` runs in-process on the recording; its wall
    time is compared with the wall time of the traffic it replayed (per route and repetition,
    from the first request sent to the last exchange over; goal: ratio <= 1.5). The same for
    the clean regression replay once the gateway is fixed (demo step 4);
(b) analysis time of a run of 10,000 observations on one core (goal <= 5 s): a synthetic run
    (`direct` twice, then `via:c`, `via:b`, `via:a`; realistic streamed exchanges of ~40 content
    events; hop `b` stalls a fixed set of exchanges mid-stream) judged by `proxycheck diff RUN
    --json F` in-process, beside the least any analysis must do: read the observations file and
    `json.loads` every line;
(c) time to verdict on a long recording: 50 agent sessions over 10 minutes (think times 5-60 s,
    OpenAI chat streams whose history grows by tool results), one of them wedging at its turn 3
    about 6 minutes in (its client gives up after 30 s of silence), checked on the demo's chain
    (`edge` records, `gateway` stalls that session's turn 3 alone): `proxycheck check` in-process,
    its wall time against the recording's duration (goal: ratio <= 0.25; replaying the whole
    recording at its own pace over the ladder takes about 4 times it), and whether the verdict is
    right (proxy, culprit gateway, first turn 3, the wedged session). The recording is made in
    seconds (`long_recording.py`): every request answered once by the engine, the journal written
    at synthetic times. `--scale 0.1` makes the same shape in a tenth of the time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import io
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from long_recording import LongSpec, answer_sessions, write_long_recording

from proxycheck import cli
from proxycheck.commands.demo import _SCRIPTS, STALL_AFTER_EVENTS, STALL_FROM_BYTES, STALL_TIMEOUT
from proxycheck.core.exchange.observation import Event, Observation, ResultSummary, ToolCallSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed, start_engine, start_mitmdump
from proxycheck.io.runstore import OBSERVATIONS_FILE, RunWriter, load_run

# -------------------------------------------------------------------- (a) time to verdict


def quiet_cli(argv: list[str]) -> tuple[int, float]:
    """`proxycheck ARGV` in-process with its terminal output swallowed: (exit status, wall time)."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        t0 = time.monotonic()
        status = cli.main(argv)
        elapsed = time.monotonic() - t0
    return status, elapsed


def traffic_time(run_dir: Path) -> tuple[float, dict[str, int]]:
    """The replayed traffic's own wall time: for each (route, repetition), from the first request
    sent to the last exchange over, summed; and the repetitions replayed per route."""
    groups: dict[tuple[str, int], list[Observation]] = {}
    for obs in load_run(run_dir).observations:
        groups.setdefault((obs.route, obs.repetition), []).append(obs)
    total = 0.0
    for observations in groups.values():
        first = min(o.t_start for o in observations)
        last = max(o.t_start + (o.end if o.end is not None else max((e.t for e in o.events), default=0.0))
                   for o in observations)  # fmt: skip
        total += last - first
    replays: dict[str, int] = {}
    for route, _ in sorted(groups):
        replays[route] = replays.get(route, 0) + 1
    return total, replays


def checked(run_dir: Path, argv: list[str]) -> dict[str, Any]:
    status, total = quiet_cli([*argv, "--out", str(run_dir)])
    traffic, replays = traffic_time(run_dir)
    verdict = json.loads((run_dir / "verdict.json").read_text())
    return {
        "total_s": round(total, 3),
        "traffic_s": round(traffic, 3),
        "ratio": round(total / traffic, 3),
        "overhead_s": round(total - traffic, 3),
        "replays": sum(replays.values()),
        "replays_by_route": replays,
        "exit": status,
        "verdict": verdict["verdict"],
        "culprit": verdict["culprit"],
    }


def start_demo_engine(tmp: Path, started: list[Managed]) -> Managed:
    """The demo's engine (its addons' scripts written into `tmp` for the hops), added to `started`."""
    for name, text in _SCRIPTS.items():
        (tmp / name).write_text(text)
    engine = start_engine("--token-interval", "0.01", "--ttft-per-kb", "0.001", "--tool-call-rate", "0.9",
                          log_dir=tmp)  # fmt: skip
    started.append(engine)
    return engine


def start_demo_hops(tmp: Path, started: list[Managed], engine: Managed, recording: Path, *, min_body: int,
                    from_turn: int = 1) -> tuple[Managed, Managed]:  # fmt: skip
    """The demo's hops: `gateway` stalling streams of requests over `min_body` bytes (from turn
    `from_turn`) in front of the engine, and `edge` recording into `recording` in front of it."""
    faults = ("--set", f"proxycheck_fault_stall_after={STALL_AFTER_EVENTS}",
              "--set", f"proxycheck_fault_min_body={min_body}", "--set", f"proxycheck_fault_from_turn={from_turn}")  # fmt: skip
    gateway = start_mitmdump("--mode", f"reverse:{engine.url}", "-s", str(tmp / "faults_addon.py"), *faults,
                             log_dir=tmp)  # fmt: skip
    started.append(gateway)
    edge = start_mitmdump("--mode", f"reverse:{gateway.url}", "-s", str(tmp / "record_addon.py"),
                          "--set", f"proxycheck_out={recording}", log_dir=tmp)  # fmt: skip
    started.append(edge)
    return gateway, edge


def time_to_verdict(sessions: int, turns: int) -> dict[str, dict[str, Any]]:
    """The demo's chain and agent; `check` on the wedged recording, then on the fixed gateway."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-check-"))
    started: list[Managed] = []
    try:
        engine = start_demo_engine(tmp, started)
        recording = tmp / "recording"
        gateway, edge = start_demo_hops(tmp, started, engine, recording, min_body=STALL_FROM_BYTES)

        options = AgentOptions(base_url=edge.url, sessions=sessions, turns=turns, think=0.2, max_tokens=40,
                               read_timeout=STALL_TIMEOUT)  # fmt: skip
        agent = asyncio.run(run_agent(options))
        time.sleep(1.2)  # the recorder writes a stream's last chunks within a second (as the demo waits)
        if agent.ok:
            raise RuntimeError("the agent's sessions did not wedge behind the faulty gateway")

        chain = tmp / "chain.toml"
        chain.write_text(f'engine = "{engine.url}"\n[[hop]]\nname = "edge"\nurl = "{edge.url}"\n'
                         f'[[hop]]\nname = "gateway"\nurl = "{gateway.url}"\n')  # fmt: skip
        argv = ["check", str(recording), "--chain", str(chain), "--stall-timeout", str(STALL_TIMEOUT)]
        faulty = checked(tmp / "check-run", argv)
        if faulty["verdict"] != "proxy" or faulty["culprit"] != "gateway":
            raise RuntimeError(f"check blamed {faulty['culprit']} ({faulty['verdict']}), not the gateway")

        gateway.stop()
        started.remove(gateway)
        # The same gateway without its fault, on the same port (the demo's step 4).
        started.append(start_mitmdump("--mode", f"reverse:{engine.url}", "-s", str(tmp / "faults_addon.py"),
                                      port=gateway.port, log_dir=tmp))  # fmt: skip
        fixed = checked(tmp / "fixed-run", argv)
        if fixed["exit"] != 0:
            raise RuntimeError(f"the regression replay still fails: {fixed['verdict']}")
    finally:
        for proc in reversed(started):
            proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"faulty_chain": faulty, "fixed_chain": fixed}


# -------------------------------------------------------------------- (b) analysis of a large run
#
# A synthetic run as `check` would write it for a chain client -> a -> b -> c -> engine: the
# ladder direct (2 repetitions, the noise floor), via:c, via:b, via:a, each replaying the same
# `sessions` x `turns` exchanges. Each exchange is a streamed chat completion: a meta event with
# the first content, ~40 content events ~20 ms apart, usage and the terminal marker; answers are
# deterministic per exchange; each hop adds a millisecond or so. Hop b stalls the exchanges of
# every fifth session from turn 12 on (after 3 content events, cut by a 10 s watchdog), so
# via:b and via:a (which passes b) fail them and the verdict is `proxy`, culprit b.

LADDER = (("direct", 1), ("direct", 2), ("via:c", 1), ("via:b", 1), ("via:a", 1))
HOP_LATENCY = {"direct": 0.0, "via:c": 0.0012, "via:b": 0.0021, "via:a": 0.0035}
FAILING_ROUTES = ("via:b", "via:a")
CULPRIT = "b"
TURNS = 20
STALL = 10.0


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fails(route: str, session: int, turn: int) -> bool:
    return route in FAILING_ROUTES and session % 5 == 2 and turn >= 12


def exchange(rng: random.Random, route: str, repetition: int, session: int, turn: int, xid: int,
             t_start: float, reused: bool, idle: float | None) -> Observation:  # fmt: skip
    context = 1500 + 2100 * (turn - 1) + 37 * session  # request bytes: the context grows by tool results
    tokens = 38 + (session + turn) % 5
    ttft = 0.045 + 0.001 * context / 1024 + HOP_LATENCY[route] + abs(rng.gauss(0, 0.002))
    headers = (0.002 + HOP_LATENCY[route]) if not reused else 0.0015 + HOP_LATENCY[route]
    sizes = [265 + (i * 7 + session) % 6 for i in range(tokens)]
    events = [Event(round(ttft, 6), 241, "meta")]
    t = ttft
    for i, size in enumerate(sizes):
        if i:
            t += 0.02 + rng.uniform(-0.003, 0.003)
        events.append(Event(round(t, 6), size, "content"))
    tool = turn % 3 != 0
    calls = (ToolCallSummary("write_file" if turn % 2 else "run_tests", _sha(f"args {session}/{turn}"), True),)
    if fails(route, session, turn):
        events = events[: STALL_AFTER_EVENTS]
        received = sum(e.size for e in events)
        end = round(events[-1].t + STALL + rng.uniform(0.0005, 0.004), 6)
        result = ResultSummary(_sha(f"partial {session}/{turn}"), 17)
        outcome = Outcome.STALL_MID_STREAM
        detail = f"no content for {STALL:.1f} s after event {len(events)} ({received} B received)"
    else:
        tail = round(t, 6)
        events += [Event(tail, 216, "meta"), Event(tail, 208, "meta"), Event(tail, 14, "terminal")]
        received = sum(e.size for e in events)
        end = round(tail + 0.0003, 6)
        result = ResultSummary(
            text_sha256=_sha("" if tool else f"answer {session}/{turn}"), text_len=0 if tool else 4 * tokens,
            tool_calls=calls if tool else (), finish_reason="tool_calls" if tool else "stop",
            prompt_tokens=context // 4, completion_tokens=tokens, terminal=True,
        )  # fmt: skip
        outcome, detail = Outcome.OK, ""
    request_sha = _sha(f"request {session}/{turn}")
    return Observation(
        route=route, repetition=repetition, session=f"s{session}", turn=turn, xid=xid,
        t_start=round(t_start, 6), connect=None if reused else round(0.0004 + HOP_LATENCY[route], 6),
        headers=round(headers, 6), first_event=round(ttft, 6), first_content=round(ttft, 6), end=end,
        events=tuple(events), streamed=True, status=200,
        response_headers=(("x-proxycheck-request-sha256", request_sha), ("x-proxycheck-request-bytes", str(context)),
                          ("content-type", "text/event-stream"), ("x-accel-buffering", "no"),
                          ("server", "Python/3.11 aiohttp/3.14.5")),
        request_bytes=context, request_sha256=request_sha, response_bytes=received, result=result,
        reused=reused, idle=None if idle is None else round(idle, 6), http_version="HTTP/1.1", connection=1,
        outcome=outcome, detail=detail,
    )  # fmt: skip


def synthetic_run(run_dir: Path, observations: int, seed: int = 1) -> int:
    """Write the run; returns the number of observations written."""
    sessions = observations // (len(LADDER) * TURNS)
    rng = random.Random(seed)
    chain = {
        "source": "bench.toml", "engine": "http://127.0.0.1:30000", "engine_headers": [],
        "hops": [{"name": n, "url": f"http://127.0.0.1:{8080 + i}", "proxy": None, "headers": []}
                 for i, n in enumerate("abc")],
    }  # fmt: skip
    options = {"command": "check", "strategy": "ladder", "repeat": 1, "max_repeat": 10, "fail_on": [],
               "pace": "recorded", "mode": "exact", "client": "httpx", "on_fail": "continue"}  # fmt: skip
    with RunWriter(run_dir, chain=chain, routes=["direct", "via:c", "via:b", "via:a"], options=options) as writer:
        clock = 0.0
        for route, repetition in LADDER:
            base = clock
            for s in range(sessions):
                t = base + 0.01 * s  # recorded session starts, spread
                idle: float | None = None
                for turn in range(1, TURNS + 1):
                    obs = exchange(rng, route, repetition, s, turn, s * TURNS + turn, t, turn > 1, idle)
                    writer.add(obs)
                    idle = 0.2 + rng.uniform(0, 0.01)  # think time before the next turn
                    t = obs.t_start + (obs.end or 0.0) + idle
                    clock = max(clock, t)
    return writer.count


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """(CPU seconds, wall seconds, result) of fn()."""
    c0, w0 = time.process_time(), time.monotonic()
    result = fn()
    return time.process_time() - c0, time.monotonic() - w0, result


def read_lines(path: Path) -> None:
    with open(path, "rb") as f:
        for line in f:
            json.loads(line)


def analysis(count: int, rounds: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-diff-"))
    try:
        run_dir, out = tmp / "run", tmp / "verdict.json"
        written = synthetic_run(run_dir, count)
        path = run_dir / OBSERVATIONS_FILE
        best = {"diff": (float("inf"), float("inf")), "read": (float("inf"), float("inf"))}
        status = None
        for _ in range(rounds):  # alternating, best of each: noise hits both alike
            cpu, wall, _ = timed(lambda: read_lines(path))
            best["read"] = (min(best["read"][0], cpu), min(best["read"][1], wall))
            sink = io.StringIO()
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                cpu, wall, status = timed(lambda: cli.main(["diff", str(run_dir), "--json", str(out)]))
            best["diff"] = (min(best["diff"][0], cpu), min(best["diff"][1], wall))
            verdict = json.loads(out.read_text())
            if verdict["verdict"] != "proxy" or verdict["culprit"] != CULPRIT:
                raise RuntimeError(f"diff found {verdict['verdict']} (culprit {verdict['culprit']}), "
                                   f"not proxy with hop {CULPRIT}: {verdict['summary']}")  # fmt: skip
        size = path.stat().st_size
        stats = verdict["statistics"]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (d_cpu, d_wall), (r_cpu, r_wall) = best["diff"], best["read"]
    return {
        "observations": written,
        "file_mb": round(size / 1e6, 1),
        "diff_cpu_s": round(d_cpu, 3),
        "diff_wall_s": round(d_wall, 3),
        "read_json_cpu_s": round(r_cpu, 3),
        "read_json_wall_s": round(r_wall, 3),
        "ratio_cpu": round(d_cpu / r_cpu, 2),
        "ratio_wall": round(d_wall / r_wall, 2),
        "verdict": verdict["verdict"],
        "culprit": verdict["culprit"],
        "failing": stats.get("failing"),
        "exit": status,
    }


# -------------------------------------------------------------------- (c) a long recording
#
# The recording is synthetic in its times only (long_recording.py): the requests are the synthetic
# agent's, the answers the engine's own. The gateway stalls after STALL_AFTER_EVENTS events the
# requests larger than the wedged session's `min_body` from turn 3 on: that session's turn 3
# alone, as recorded. `check` runs with its defaults (its stall watchdog is derived from the
# recorded client's patience), plus whatever `--long-check-args` adds.

WEDGE_TURN = 3
LONG_GOAL = 0.25


def listed(recording: Path) -> dict[str, Any]:
    """`proxycheck sessions DIR --json`, in-process: the listing a user would see."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(io.StringIO()):
        status = cli.main(["sessions", str(recording), "--json"])
    if status != 0:
        raise RuntimeError(f"proxycheck sessions {recording} exited {status}")
    return json.loads(sink.getvalue())


def check_listing(doc: dict[str, Any], spec: LongSpec, wedged_xid: int) -> str:
    """The wedged session's label, once the listing shows what the recording was made to hold:
    every session, and one failed turn, the wedged one, at WEDGE_TURN."""
    if doc["warnings"] or len(doc["sessions"]) != spec.sessions:
        raise RuntimeError(f"the listing shows {len(doc['sessions'])} session(s), not {spec.sessions}; "
                           f"warnings: {doc['warnings']}")  # fmt: skip
    failed = [(s["label"], t) for s in doc["sessions"] for t in s["turns"] if t["outcome"] != "ok"]
    if len(failed) != 1 or failed[0][1]["exchange"] != wedged_xid or failed[0][1]["turn"] != WEDGE_TURN:
        raise RuntimeError(f"the listing's failed turns are not the wedged one at turn {WEDGE_TURN}: "
                           f"{[(label, t['turn'], t['exchange'], t['outcome']) for label, t in failed]}")  # fmt: skip
    return failed[0][0]


def long_time_to_verdict(spec: LongSpec, check_args: list[str], keep: bool = False) -> dict[str, Any]:
    """(c); `keep` leaves the recording, the run and the processes' logs in a temporary directory."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-check-long-"))
    started: list[Managed] = []
    try:
        engine = start_demo_engine(tmp, started)
        answered = answer_sessions(engine.url, spec)  # the gateway's min_body depends on the bodies
        gateway, edge = start_demo_hops(tmp, started, engine, tmp / "edge-recording", min_body=answered.min_body,
                                        from_turn=WEDGE_TURN)  # fmt: skip
        t0 = time.monotonic()
        recording = write_long_recording(tmp / "recording", gateway.url, spec, answered)
        written = time.monotonic() - t0
        wedged = check_listing(listed(recording.path), spec, recording.wedged_xid)

        chain = tmp / "chain.toml"
        chain.write_text(f'engine = "{engine.url}"\n[[hop]]\nname = "edge"\nurl = "{edge.url}"\n'
                         f'[[hop]]\nname = "gateway"\nurl = "{gateway.url}"\n')  # fmt: skip
        run_dir, verdict_file = tmp / "check-run", tmp / "verdict.json"
        argv = ["check", str(recording.path), "--chain", str(chain), "--out", str(run_dir), "--json", str(verdict_file),
                *check_args]  # fmt: skip
        status, total = quiet_cli(argv)
        verdict = json.loads(verdict_file.read_text())
    finally:
        for proc in reversed(started):
            proc.stop()
        if keep:
            print(f"(c) kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    sessions_blamed = sorted({f.get("label") or f["session"] for f in verdict["findings"]})
    wrong = [what for what, ok in (
        (f"verdict {verdict['verdict']}, not proxy", verdict["verdict"] == "proxy"),
        (f"culprit {verdict['culprit']}, not gateway", verdict["culprit"] == "gateway"),
        (f"first turn {verdict['first_turn']}, not {WEDGE_TURN}", verdict["first_turn"] == WEDGE_TURN),
        (f"failing session(s) {sessions_blamed}, not {wedged}", sessions_blamed == [wedged]),
    ) if not ok]  # fmt: skip
    scope = verdict.get("scope") or {}
    return {
        "sessions": recording.sessions,
        "exchanges": recording.exchanges,
        "recording_s": round(recording.span, 1),
        "think_s": list(spec.think),
        "client_wait_s": spec.client_wait,
        "wedged_session": wedged,
        "wedged_at_s": round(recording.wedged_start, 1),
        "made_s": round(answered.seconds + written, 1),
        "check_args": check_args,
        "check_s": round(total, 1),
        "ratio": round(total / recording.span, 3),
        "goal": LONG_GOAL,
        "exit": status,
        "verdict": verdict["verdict"],
        "culprit": verdict["culprit"],
        "first_turn": verdict["first_turn"],
        "sessions_blamed": sessions_blamed,
        "right": not wrong,
        "wrong": wrong,
        "summary": verdict["summary"],
        "replayed": scope.get("replayed"),
        "replayed_sessions": scope.get("sessions"),
        "replayed_turns": scope.get("turns"),
        "passes": [{k: p.get(k) for k in ("name", "sessions", "turns", "verdict", "seconds")} for p in scope.get("passes", [])],
    }


def print_long(v: dict[str, Any]) -> None:
    lo, hi = v["think_s"]
    print(f"time to verdict on a long recording ({v['sessions']} agent sessions, {v['exchanges']} turns over "
          f"{v['recording_s']:.0f} s, think times {lo:g}-{hi:g} s; {v['wedged_session']} wedges at turn {WEDGE_TURN} "
          f"{v['wedged_at_s']:.0f} s in, its client giving up after {v['client_wait_s']:g} s; made in {v['made_s']:.0f} s):")  # fmt: skip
    args = f" {' '.join(v['check_args'])}" if v["check_args"] else ""
    print(f"  check{args}  {v['check_s']:6.1f} s  recording {v['recording_s']:6.1f} s  ratio {v['ratio']:.2f} "
          f"(goal <= {v['goal']:g}; the whole recording at its pace: about 4)")  # fmt: skip
    for p in v["passes"]:
        print(f"    pass {p['name']}: {p['sessions']} sessions, {p['turns']} turns, {p['seconds']:.1f} s -> {p['verdict']}")
    culprit = f", culprit {v['culprit']}" if v["culprit"] else ""
    judged = "right" if v["right"] else "WRONG: " + "; ".join(v["wrong"])
    print(f"  verdict {v['verdict']}{culprit}, first turn {v['first_turn']}, sessions {', '.join(v['sessions_blamed']) or '-'}: "
          f"{judged}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=2, help="agent sessions recorded for (a) (the demo's: 2)")
    ap.add_argument("--turns", type=int, default=6, help="turns per agent session for (a) (the demo's: 6)")
    ap.add_argument("--observations", type=int, default=10_000, help="size of the synthetic run for (b)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of (b); the best of each side counts")
    ap.add_argument("--long-sessions", type=int, default=LongSpec.sessions, help="sessions of (c)'s recording (50)")
    ap.add_argument("--long-duration", type=float, default=LongSpec.duration, help="seconds (c)'s recording spans (600)")
    ap.add_argument("--long-think", type=_range, default=LongSpec.think, metavar="MIN,MAX",
                    help="think times of (c)'s recording, seconds (5,60)")  # fmt: skip
    ap.add_argument("--client-wait", type=float, default=LongSpec.client_wait,
                    help="seconds the wedged session's client waited on the stall before it gave up (30)")  # fmt: skip
    ap.add_argument("--scale", type=float, default=1.0,
                    help="(c) in this fraction of the time: duration, think times and the client's wait scaled "
                         "(0.1: a one-minute recording)")  # fmt: skip
    ap.add_argument("--long-check-args", default="", metavar="ARGS",
                    help="more arguments for (c)'s check, e.g. '--parallel-routes' or '--full'")  # fmt: skip
    ap.add_argument("--sections", default="abc", help="which sections to run (default: abc)")
    ap.add_argument("--keep", action="store_true", help="keep (c)'s recording, run and logs (their directory is printed)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    figures: dict[str, Any] = {}
    if "a" in args.sections:
        figures["time_to_verdict"] = verdicts = time_to_verdict(args.sessions, args.turns)
    if "b" in args.sections:
        figures["analysis"] = big = analysis(args.observations, args.rounds)
    if "c" in args.sections:
        spec = LongSpec(sessions=args.long_sessions, duration=args.long_duration, think=args.long_think,
                        client_wait=args.client_wait).scaled(args.scale)  # fmt: skip
        figures["long_recording"] = long = long_time_to_verdict(spec, args.long_check_args.split(), args.keep)
    if "a" in args.sections:
        print_demo(args, verdicts)
    if "b" in args.sections:
        print_analysis(args, big)
    if "c" in args.sections:
        print_long(long)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0 if "c" not in args.sections or long["right"] else 1


def _range(text: str) -> tuple[float, float]:
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not MIN,MAX (seconds)") from None
    if not 0 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 <= MIN <= MAX")
    return lo, hi


def print_demo(args: argparse.Namespace, verdicts: dict[str, dict[str, Any]]) -> None:
    print(f"time to verdict on the demo chain ({args.sessions} agent sessions of up to {args.turns} turns, "
          f"--stall-timeout {STALL_TIMEOUT:g}); traffic = the replayed exchanges' own wall time:")  # fmt: skip
    for name, label in (("faulty_chain", "faulty gateway"), ("fixed_chain", "gateway fixed ")):
        v = verdicts[name]
        routes = ", ".join(f"{r} x{n}" for r, n in v["replays_by_route"].items())
        print(f"  {label}  check {v['total_s']:6.2f} s  traffic {v['traffic_s']:6.2f} s  "
              f"(overhead {v['overhead_s']:.2f} s)  ratio {v['ratio']:.2f} (goal <= 1.5)")  # fmt: skip
        culprit = f", culprit {v['culprit']}" if v["culprit"] else ""
        print(f"                  {v['replays']} replays ({routes}): {v['verdict']}{culprit}")


def print_analysis(args: argparse.Namespace, big: dict[str, Any]) -> None:
    print(f"analysis of a run of {big['observations']:,} observations ({big['file_mb']} MB), best of {args.rounds}:")
    print(f"  proxycheck diff --json     CPU {big['diff_cpu_s']:6.2f} s  wall {big['diff_wall_s']:6.2f} s  "
          f"(goal <= 5 s): {big['verdict']}, culprit {big['culprit']} ({big['failing'][0]}/{big['failing'][1]} "
          "failing on its route)")  # fmt: skip
    print(f"  read + json.loads per line CPU {big['read_json_cpu_s']:6.2f} s  wall {big['read_json_wall_s']:6.2f} s")
    print(f"  ratio ours/baseline        CPU {big['ratio_cpu']:.1f}  wall {big['ratio_wall']:.1f}")


if __name__ == "__main__":
    sys.exit(main())
