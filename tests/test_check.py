"""`proxycheck check` and `proxycheck diff` against real chains of mitmproxy hops.

Once per module: the reference engine (with timing jitter, so repetitions differ as a real
engine's do), a recording of 2 sessions x 3 turns made through the recorder by the synthetic
agent, and a tree of mitmdump hops running addons/faults.py that makes chains of one to three
hops with a fault at each position:

    engine <- c2 <- c1 <- c0             the clean three-hop chain [c0, c1, c2]
    F0 -> c1                             fault at the outer hop:  [F0, c1, c2]
    X0 -> F1 -> c2                       fault at the middle hop: [X0, F1, c2]
    Y0 -> Y1 -> F2 -> engine             fault at the inner hop:  [Y0, Y1, F2]; also [Y1, F2], [F2]
    P -> c2                              a hop whose fault fires in 30% of exchanges
    E <- bad_engine                      a clean hop in front of an engine that stalls

F* stall mid-stream from turn 2 on. Every process is stopped by the fixture, also on failure.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from ctrl_c import interrupt_when, lines_in
from processes import EngineFactory, MitmdumpFactory

from proxycheck import cli
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed, start_mitmdump
from proxycheck.io.runstore import RunWriter, load_run

REPO = Path(__file__).resolve().parents[1]
RECORD = str(REPO / "addons" / "record.py")
STALL = ["stall_after=3", "from_turn=2"]
FAST = ["--pace", "fast", "--stall-timeout", "1"]

pytestmark = pytest.mark.timeout(180)


@dataclass
class Chains:
    engine: Managed
    bad_engine: Managed
    recording: Path
    hops: dict[str, Managed]

    def chain(self, tmp: Path, *names: str, engine: Managed | None = None, name: str = "chain.toml") -> Path:
        lines = [f'engine = "{(engine or self.engine).url}"']
        for hop in names:
            lines += ["[[hop]]", f'name = "{hop}"', f'url = "{self.hops[hop].url}"']
        path = tmp / name
        path.write_text("\n".join(lines) + "\n")
        return path


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
           module_mitmdumps: MitmdumpFactory) -> Chains:  # fmt: skip
    engine = module_engines("--token-interval", "0.004", "--ttft-per-kb", "0", "--jitter", "0.3",
                            "--tool-call-rate", "0.6")  # fmt: skip
    bad_engine = module_engines("--token-interval", "0.004", "--fault", "stall:after=3,from_turn=2")
    out = module_mitmdumps.record_agent(engine, tmp_path_factory.mktemp("rec") / "recording", sessions=2, turns=3,
                                        think=0.2, max_tokens=32)  # fmt: skip

    hops: dict[str, Managed] = {}

    def hop(name: str, upstream: str, *faults: str) -> Managed:
        hops[name] = module_mitmdumps.faults(upstream, *faults)
        return hops[name]

    # Level by level, each level's hops started at once (their upstreams are up by then).
    levels: list[list[tuple[str, str, tuple[str, ...]]]] = [
        [("c2", engine.url, ()), ("F2", engine.url, tuple(STALL)), ("E", bad_engine.url, ()),
         ("B", engine.url, ("idle_blackhole=1",))],
        [("c1", "c2", ()), ("F1", "c2", tuple(STALL)), ("Y1", "F2", ()),
         ("P", "c2", ("stall_after=3", "probability=0.3", "seed=5"))],
        [("c0", "c1", ()), ("F0", "c1", tuple(STALL)), ("X0", "F1", ()), ("Y0", "Y1", ())],
    ]  # fmt: skip
    for level in levels:
        with ThreadPoolExecutor(len(level)) as pool:
            futures = [
                pool.submit(hop, name, hops[up].url if up in hops else up, *faults)
                for name, up, faults in level
            ]  # fmt: skip
            for future in futures:
                future.result()
    return Chains(engine, bad_engine, out, hops)


def check(tmp: Path, *argv: str) -> int:
    """`proxycheck check ARGV`; the run goes under `tmp` unless --out says where."""
    if "--out" not in argv:
        argv = (*argv, "--out", tempfile.mkdtemp(prefix="run-", dir=tmp))
    return cli.main(["check", *argv])


def verdict_of(path: Path) -> dict:
    return json.loads(path.read_text())


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "hops, culprit",
    [
        (("F0", "c1", "c2"), "F0"),
        (("X0", "F1", "c2"), "F1"),
        (("Y0", "Y1", "F2"), "F2"),
        (("F1", "c2"), "F1"),
        (("Y1", "F2"), "F2"),
        (("F2",), "F2"),
    ],
)
def test_the_verdict_names_the_faulty_hop(chains: Chains, tmp_path: Path, hops: tuple[str, ...], culprit: str) -> None:
    chain = chains.chain(tmp_path, *hops)
    out = tmp_path / "run"
    status = check(tmp_path, str(chains.recording), "--chain", str(chain), *FAST, "--out", str(out), "--json",
                   str(tmp_path / "v.json"))  # fmt: skip
    doc = verdict_of(tmp_path / "v.json")
    assert status == 1, doc["summary"]
    assert doc["verdict"] == "proxy" and doc["culprit"] == culprit, doc["summary"]
    assert doc["first_turn"] == 2
    assert doc["summary"].startswith(f"hop {culprit} stalls mid-stream from turn 2 on")
    routes = {r["route"]: r for r in doc["routes"]}
    assert routes["direct"]["failures"] == 0 and routes[f"via:{culprit}"]["failures"] > 0
    inner = hops[hops.index(culprit) + 1 :]
    assert all(routes[f"via:{h}"]["failures"] == 0 for h in inner)
    assert all(f"via:{h}" not in routes for h in hops[: hops.index(culprit)])  # outward: not needed
    # The run keeps its observations and its own verdict.
    run = load_run(out)
    assert {o.route for o in run.observations} == set(routes)
    assert verdict_of(out / "verdict.json")["culprit"] == culprit


def test_engine_faults_give_server(chains: Chains, tmp_path: Path) -> None:
    chain = chains.chain(tmp_path, "E", engine=chains.bad_engine)
    assert check(tmp_path, str(chains.recording), "--chain", str(chain), *FAST, "--json", str(tmp_path / "v.json")) == 1
    doc = verdict_of(tmp_path / "v.json")
    assert doc["verdict"] == "server" and doc["culprit"] == "engine", doc["summary"]
    assert [r["route"] for r in doc["routes"]] == ["direct"]


def test_clean_chain_is_healthy_with_no_false_alarm_over_repetitions(chains: Chains, tmp_path: Path) -> None:
    # Recorded pacing, jittered engine timing, three repetitions of every route, twice over.
    chain = chains.chain(tmp_path, "c0", "c1", "c2")
    for attempt in range(2):
        path = tmp_path / f"v{attempt}.json"
        status = check(tmp_path, str(chains.recording), "--chain", str(chain), "--repeat", "3", "--json", str(path))
        doc = verdict_of(path)
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert all(r["outcomes"] == {"ok": r["exchanges"]} for r in doc["routes"]), doc["routes"]
        assert [r["route"] for r in doc["routes"]] == ["direct", "via:c2", "via:c1", "via:c0"]
        assert doc["noise_floor"]["deterministic"] is True


def test_a_fault_in_30_percent_of_exchanges_is_found_by_repetition(chains: Chains, tmp_path: Path) -> None:
    chain = chains.chain(tmp_path, "P", "c2")
    status = check(tmp_path, str(chains.recording), "--chain", str(chain), *FAST, "--repeat", "3", "--max-repeat", "12",
                   "--json", str(tmp_path / "v.json"))  # fmt: skip
    doc = verdict_of(tmp_path / "v.json")
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "P", doc["summary"]
    stats = doc["statistics"]
    assert stats["method"] in ("fisher_exact", "deterministic")
    if stats["method"] == "fisher_exact":
        assert stats["p_value"] < 0.01
    k, n = stats["failing"]
    assert 0 < k < n  # flaky: some exchanges got through


def test_bisect_finds_the_same_hop(chains: Chains, tmp_path: Path) -> None:
    chain = chains.chain(tmp_path, "X0", "F1", "c2")
    path = tmp_path / "v.json"
    argv = ["--chain", str(chain), *FAST, "--strategy", "bisect", "--json", str(path)]
    assert check(tmp_path, str(chains.recording), *argv) == 1
    doc = verdict_of(path)
    assert doc["culprit"] == "F1" and doc["strategy"] == "bisect"


def test_junit_and_diff_of_the_run(chains: Chains, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = chains.chain(tmp_path, "Y1", "F2")
    out = tmp_path / "run"
    junit = tmp_path / "junit.xml"
    argv = ["--chain", str(chain), *FAST, "--out", str(out), "--junit", str(junit)]
    assert check(tmp_path, str(chains.recording), *argv) == 1
    shown = capsys.readouterr().out
    assert "F2" in shown and "proxy" in shown
    root = ET.parse(junit).getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"direct", "via:F2"}
    cases = list(suites["via:F2"].iter("testcase"))
    assert len(cases) == 2 and all(c.find("failure") is not None for c in cases)  # both sessions reach turn 2
    assert all(c.find("failure") is None for c in suites["direct"].iter("testcase"))
    # diff: the same verdict from the run alone, without replaying.
    assert cli.main(["diff", str(out), "--json", str(tmp_path / "d.json")]) == 1
    doc = verdict_of(tmp_path / "d.json")
    assert doc["verdict"] == "proxy" and doc["culprit"] == "F2"


def test_recorded_wedges_that_no_longer_happen_are_not_reproduced(chains: Chains, tmp_path: Path) -> None:
    # Record through the faulty hop (the agent's sessions wedge), then check a chain without it.
    out = tmp_path / "wedged"
    recorder = start_mitmdump("--mode", f"reverse:{chains.hops['F2'].url}", "-s", RECORD,
                              "--set", f"proxycheck_out={out}")  # fmt: skip
    try:
        options = AgentOptions(base_url=recorder.url, sessions=1, turns=3, think=0.1, max_tokens=32, read_timeout=1.0)
        asyncio.run(run_agent(options))
        time.sleep(1.5)
    finally:
        recorder.stop()
    chain = chains.chain(tmp_path, "c2")
    assert check(tmp_path, str(out), "--chain", str(chain), *FAST, "--json", str(tmp_path / "v.json")) == 0
    doc = verdict_of(tmp_path / "v.json")
    assert doc["verdict"] == "not-reproduced", doc["summary"]
    assert doc["differences"][0].startswith("recorded failures: ")
    assert any(d.startswith("think times: replayed at pace fast") for d in doc["differences"])


def test_a_hop_that_drops_idle_connections_is_found_with_keepalive_advice(chains: Chains, tmp_path: Path) -> None:
    # Turns 1.2 s apart on one kept-alive connection; hop B never answers on a connection idle
    # for over a second (a gateway whose pooled connection died unnoticed).
    out = tmp_path / "idle"
    recorder = start_mitmdump("--mode", f"reverse:{chains.engine.url}", "-s", RECORD, "--set", f"proxycheck_out={out}")
    try:
        assert asyncio.run(run_agent(AgentOptions(base_url=recorder.url, sessions=1, turns=3, think=1.2,
                                                  max_tokens=16))).ok  # fmt: skip
        time.sleep(0.5)
    finally:
        recorder.stop()
    chain = chains.chain(tmp_path, "B")
    status, doc = check_json(tmp_path, out, chain, "--header-timeout", "2")
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "B", doc["summary"]
    assert doc["first_turn"] == 2
    findings = [f for f in doc["findings"] if f["route"] == "via:B"]
    assert findings and all(f["outcome"] == "stall_before_headers" for f in findings)
    assert all("idle" in f["advice"] and "keep-alive" in f["advice"] for f in findings)


def check_json(tmp: Path, recording: Path, chain: Path, *argv: str) -> tuple[int, dict]:
    path = tmp / "verdict.json"
    status = check(tmp, str(recording), "--chain", str(chain), *argv, "--json", str(path))
    return status, verdict_of(path)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--fail-on", "sluggish"], "--fail-on"),
        (["--strategy", "random"], "--strategy"),
        (["--repeat", "0"], "--repeat"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(chains: Chains, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           argv: list[str], says: str) -> None:  # fmt: skip
    chain = chains.chain(tmp_path, "c2")
    with pytest.raises(SystemExit) as exc:
        check(tmp_path, str(chains.recording), "--chain", str(chain), *argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_a_bad_chain_file_is_one_line_in_a_subprocess(chains: Chains, tmp_path: Path) -> None:
    bad = tmp_path / "chain.toml"
    bad.write_text('engine = "http://127.0.0.1:1"\n[[hop]]\nname = "x"\n')  # a hop with neither url nor proxy
    proc = run_proxycheck("check", str(chains.recording), "--chain", str(bad))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"proxycheck: {bad}"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_ctrl_c_keeps_what_was_observed_as_a_loadable_run(chains: Chains, tmp_path: Path) -> None:
    # The faulty hop's stalls hold each failing turn for the 30 s watchdog: Ctrl-C lands mid-check.
    chain = chains.chain(tmp_path, "F2")
    out = tmp_path / "run"
    # Both direct replays (12 exchanges) and the first of via:F2 are in: it is waiting on a stall.
    status, err = interrupt_when(["check", str(chains.recording), "--chain", str(chain), "--pace", "fast",
                                  "--stall-timeout", "30", "--out", str(out), "--json", str(tmp_path / "v.json")],
                                 lines_in(out / "observations.jsonl", 13))  # fmt: skip
    assert status == 130, err
    assert "Traceback" not in err and "interrupted; " in err and "observation(s) kept in" in err, err
    run = load_run(out)
    assert run.status == "interrupted" and len(run.observations) >= 13
    assert {o.route for o in run.observations} == {"direct", "via:F2"}
    # Its clean first turns through F2 are in the run: judged, they would make it look healthy.
    cut = [o for o in run.observations if o.route == "via:F2"]
    assert cut and all(o.outcome.value == "ok" for o in cut)
    for doc in (verdict_of(tmp_path / "v.json"), verdict_of(out / "verdict.json")):
        assert_incomplete_in_f2(doc, len(cut))
        # What was being replayed: the recording shows no failure, so all of it.
        assert doc["scope"]["replayed"] == "whole" and doc["scope"]["sessions"] == 2
    # diff of the run says the same, exit 1.
    assert cli.main(["diff", str(out), "--json", str(tmp_path / "d.json")]) == 1
    assert_incomplete_in_f2(verdict_of(tmp_path / "d.json"), len(cut))


def assert_incomplete_in_f2(doc: dict, observed: int) -> None:
    assert doc["verdict"] == "incomplete" and doc["culprit"] is None, doc["summary"]
    assert doc["missing_routes"] == ["via:F2"] and doc["run_status"] == "interrupted"
    (missing,) = doc["missing"]
    assert missing["state"] == "cut_short" and missing["observed"] == observed and missing["planned"] == 6
    assert [r["route"] for r in doc["routes"]] == ["direct"] and doc["routes"][0]["exchanges"] == 12
    assert "via:F2 cut short" in doc["summary"] and "so far" in doc["summary"]


def test_a_run_cut_by_hand_is_incomplete(chains: Chains, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A whole check run, then what kill -9 leaves of one: the last route's lines gone and run.json
    # still "running"; or the last route cut in the middle, run.json saying it finished.
    chain = chains.chain(tmp_path, "F2")
    whole = tmp_path / "whole"
    assert check(tmp_path, str(chains.recording), "--chain", str(chain), *FAST, "--out", str(whole)) == 1
    assert cli.main(["diff", str(whole), "--json", str(tmp_path / "whole.json")]) == 1
    assert verdict_of(tmp_path / "whole.json")["culprit"] == "F2"
    lines = (whole / "observations.jsonl").read_text().splitlines(keepends=True)
    direct = [line for line in lines if '"route":"direct"' in line]
    f2 = [line for line in lines if '"route":"via:F2"' in line]
    assert len(direct) == 12 and len(f2) >= 6

    def cut_run(name: str, kept: list[str], status: str) -> Path:
        run = tmp_path / name
        shutil.copytree(whole, run)
        (run / "observations.jsonl").write_text("".join(kept))
        meta = json.loads((run / "run.json").read_text())
        (run / "run.json").write_text(json.dumps({**meta, "status": status, "ended_at": None}))
        return run

    killed = cut_run("killed", direct, "running")
    capsys.readouterr()
    assert cli.main(["diff", str(killed), "--json", str(tmp_path / "k.json")]) == 1
    doc = verdict_of(tmp_path / "k.json")
    assert doc["verdict"] == "incomplete" and doc["missing_routes"] == ["via:F2"], doc["summary"]
    assert doc["missing"][0]["state"] == "not_replayed" and doc["run_status"] == "running"
    shown = capsys.readouterr().out
    assert "incomplete" in shown and "via:F2: not replayed" in shown and "so far" in shown

    truncated = cut_run("truncated", direct + f2[:2], "completed")
    junit = tmp_path / "t.xml"
    assert cli.main(["diff", str(truncated), "--json", str(tmp_path / "t.json"), "--junit", str(junit)]) == 1
    doc = verdict_of(tmp_path / "t.json")
    assert doc["verdict"] == "incomplete" and doc["missing_routes"] == ["via:F2"], doc["summary"]
    assert doc["missing"][0]["state"] == "cut_short" and doc["missing"][0]["observed"] == 2
    errors = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("error") is not None]
    assert [(c.get("classname"), c.get("name")) for c in errors] == [("proxycheck.via:F2", "(cut short)")]


@pytest.mark.parametrize(
    "options, says",
    [
        ({"command": "check", "strategy": "zigzag"}, "options.strategy"),
        ({"command": "check", "repeat": 0}, "options.repeat"),
        ({"command": "check", "fail_on": ["sluggish"]}, "options.fail_on"),
        ({"command": "check", "turns": {"s1": "three"}}, "options.turns"),
    ],
)
def test_a_damaged_run_json_is_one_line_for_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 options: dict, says: str) -> None:  # fmt: skip
    RunWriter(tmp_path / "run", chain={"hops": []}, routes=["direct"], options=options).close("interrupted")
    assert cli.main(["diff", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"proxycheck: {tmp_path / 'run' / 'run.json'}: ") and says in err[0]
