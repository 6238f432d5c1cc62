"""`proxycheck bench` and `proxycheck compare` against real processes: reference engines whose
token interval is known, and a mitmdump fault hop that stalls a known share of requests.

Once per module: a recording of agent sessions made through the recorder, and two engines 12%
apart in token interval (10 ms and 11.2 ms, with 10% jitter so the intervals are not trivially
tight). Each bench run is short (a few seconds); the assertions are about what the statistics
say (a confidence interval containing the truth and excluding zero, failures counted by outcome),
never about absolute times.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import main_status, proxycheck_argv
from ctrl_c import interrupt_when, lines_in
from processes import EngineFactory, MitmdumpFactory

from proxycheck import cli
from proxycheck.core.testbed.ssefilter import coin
from proxycheck.io.bench import arrival_gaps
from proxycheck.io.procs import Managed, start_mitmdump
from proxycheck.io.runstore import load_run

REPO = Path(__file__).resolve().parents[1]
FAULTS = str(REPO / "addons" / "faults.py")
FAST, SLOW = 0.010, 0.0112  # token intervals 12% apart
ENGINE_ARGS = ("--ttft-base", "0.02", "--ttft-per-kb", "0", "--tool-call-rate", "0", "--jitter", "0.1")

# Two bench runs are compared with each other: anything else running beside them would show as a
# difference, so these run after the parallel tests, alone (`make test`).
pytestmark = [pytest.mark.timeout(180), pytest.mark.alone]


@dataclass
class Setup:
    fast: Managed
    slow: Managed
    recording: Path
    tmp: Path

    def chain(self, engine: Managed, name: str, hop: Managed | None = None) -> Path:
        path = self.tmp / f"{name}.toml"
        text = f'engine = "{engine.url}"\n'
        if hop is not None:
            text += f'[[hop]]\nname = "F"\nurl = "{hop.url}"\n'
        path.write_text(text)
        return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
          module_mitmdumps: MitmdumpFactory) -> Setup:  # fmt: skip
    fast = module_engines("--token-interval", str(FAST), *ENGINE_ARGS)
    slow = module_engines("--token-interval", str(SLOW), *ENGINE_ARGS)
    tmp = tmp_path_factory.mktemp("bench")
    out = module_mitmdumps.record_agent(fast, tmp / "recording", sessions=2, turns=2, think=0.1, max_tokens=24,
                                        tool_result_bytes=500, session_id_header="x-session-id")  # fmt: skip
    return Setup(fast, slow, out, tmp)


def bench(setup: Setup, chain: Path, out: Path, *argv: str, route: str = "direct") -> int:
    return cli.main(["bench", str(setup.recording), "--chain", str(chain), "--route", route, "--out", str(out),
                     *argv])  # fmt: skip


def compare(a: Path, b: Path, out: Path, *argv: str) -> tuple[int, dict]:
    status = cli.main(["compare", str(a), str(b), "--json", str(out), *argv])
    return status, json.loads(out.read_text())


def metric(doc: dict, name: str) -> dict:
    return next(m for m in doc["metrics"] if m["name"] == name)


# A steady state: 3 s measured at concurrency 8 after a warm-up, about 90 requests (no tail of
# stragglers at the end, which a fixed number of requests would have).
LOAD = ("--concurrency", "8", "--duration", "3", "--warmup", "0.5", "--stall-timeout", "2")


def test_a_slower_token_interval_is_reported_with_an_interval_that_holds_the_truth(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = {}
    for name, engine in (("a", setup.fast), ("b", setup.slow)):
        runs[name] = tmp_path / name
        assert bench(setup, setup.chain(engine, name), runs[name], *LOAD, "--json", str(tmp_path / f"{name}.json")) == 0
    out = capsys.readouterr().out
    assert "output tokens/s" in out and "TPOT" in out and "failed: none" in out
    summary = json.loads((tmp_path / "a.json").read_text())
    assert summary["requests"] >= 48 and summary["failures"] == {}
    assert summary["tpot"]["p50"] == pytest.approx(FAST, rel=0.25)

    status, doc = compare(runs["a"], runs["b"], tmp_path / "cmp.json")
    for name in ("tpot_p50", "itl_mean"):
        assert metric(doc, name)["ci_low"] > 0 and metric(doc, name)["significant"], metric(doc, name)
    # The truth: the engines' token intervals are 12% apart (each request's drawn within +-10%).
    # A 95% interval misses it 1 time in 20 by design; at 99.9% a miss is a real defect.
    truth = SLOW / FAST - 1
    wide = compare(runs["a"], runs["b"], tmp_path / "wide.json", "--confidence", "0.999")[1]
    for name in ("tpot_p50", "itl_mean"):
        m = metric(wide, name)
        assert 0 < m["ci_low"] <= truth <= m["ci_high"], m
    tokens = metric(doc, "output_tokens_per_s")
    assert tokens["ci_high"] < 0 and tokens["significant"], tokens
    assert status == 1 and any("tpot_p50" in r for r in doc["regressions"]), doc["regressions"]
    assert "regressions beyond 5%" in capsys.readouterr().out
    # Within a 25% tolerance the same change is no regression (a 12% change, measured within a few
    # percent of it: p50s of jittered intervals move more than means).
    assert compare(runs["a"], runs["b"], tmp_path / "cmp2.json", "--max-regression", "25")[0] == 0
    # B against A is the mirror image: faster, no regression.
    status, doc = compare(runs["b"], runs["a"], tmp_path / "cmp3.json")
    assert status == 0 and metric(doc, "tpot_p50")["ci_high"] < 0


def test_runs_of_the_same_configuration_show_no_significant_difference(setup: Setup, tmp_path: Path) -> None:
    chain = setup.chain(setup.fast, "same")
    runs = []
    for i in range(3):
        runs.append(tmp_path / f"r{i}")
        assert bench(setup, chain, runs[-1], *LOAD) == 0
    significant = []
    for a, b in ((runs[0], runs[1]), (runs[1], runs[2]), (runs[0], runs[2])):
        status, doc = compare(a, b, tmp_path / "cmp.json")
        assert status == 0, doc["regressions"]
        significant += [m["name"] for m in doc["metrics"] if m["headline"] and m["significant"]]
    # Beyond the 2% noise band nothing should stand out; one metric over 3 x 6 checks is allowed
    # for a run disturbed by the machine (they differ by a percent or two for real).
    assert len(significant) <= 1, significant


def test_a_hop_stalling_10_percent_of_requests_shows_up_as_failures_not_a_faster_run(
    setup: Setup, tmp_path: Path
) -> None:
    requests, seed = 80, 7
    # The hop draws one seeded coin per request: how many it stalls is known in advance.
    stalled = sum(coin(0.1, seed, i) for i in range(requests))
    assert stalled >= 4
    hop = start_mitmdump("--mode", f"reverse:{setup.fast.url}", "-s", FAULTS, "--set", "proxycheck_fault_stall_after=3",
                         "--set", "proxycheck_fault_probability=0.1", "--set", f"proxycheck_fault_seed={seed}")  # fmt: skip
    try:
        chain = setup.chain(setup.fast, "hop", hop)
        load = ("--concurrency", "8", "--requests", str(requests), "--stall-timeout", "0.5")
        assert bench(setup, chain, tmp_path / "direct", *load) == 0
        assert bench(setup, chain, tmp_path / "hop", *load, "--json", str(tmp_path / "hop.json"), route="via:F") == 1
    finally:
        hop.stop()
    summary = json.loads((tmp_path / "hop.json").read_text())
    assert summary["failures"] == {"stall_mid_stream": stalled}, summary["failures"]
    assert summary["requests"] == requests and summary["completed"] == requests - stalled
    # Each stalled request waited out its timeout: counted as failed, not as a short answer.
    failed = [o for o in load_run(tmp_path / "hop").observations if o.outcome.is_failure]
    assert len(failed) == stalled and all(o.end is not None and o.end >= 0.5 for o in failed)
    status, doc = compare(tmp_path / "direct", tmp_path / "hop", tmp_path / "cmp.json")
    assert doc["failures"]["b_failed"] == stalled and doc["failures"]["a_failed"] == 0
    assert status == 1 and any("fail" in r for r in doc["regressions"]), doc["regressions"]


def test_bad_input_is_one_line_and_exit_2(setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = setup.chain(setup.fast, "bad")
    cases = [
        ("bench", str(setup.recording), "--chain", str(chain), "--route", "direct", "--out", str(tmp_path / "x")),
        ("bench", str(setup.recording), "--chain", str(chain), "--route", "direct", "--concurrency", "2",
         "--duration", "1", "--requests", "3", "--out", str(tmp_path / "y")),
        ("bench", str(setup.recording), "--chain", str(chain), "--route", "direct", "--concurrency", "2",
         "--slo", "ttft:fast", "--out", str(tmp_path / "z")),
        ("bench", str(setup.recording), "--chain", str(chain), "--route", "direct", "--concurrency", "2",
         "--workers", "3", "--requests", "4", "--out", str(tmp_path / "w")),
        ("bench", str(setup.recording), "--chain", str(chain), "--route", "direct", "--concurrency", "2",
         "--workers", "2", "--shard", "1/2", "--requests", "4", "--out", str(tmp_path / "v")),
        ("compare", str(setup.recording), str(setup.recording)),
        ("merge", str(setup.recording), "--out", str(tmp_path / "m")),
    ]  # fmt: skip
    for argv in cases:
        status = main_status(*argv)  # argparse's own errors too
        assert status == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Traceback" not in err[0], (argv, err)


def test_workers_and_shards_split_the_load_and_merge_back(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = setup.chain(setup.fast, "shards")
    load = ("--concurrency", "8", "--requests", "64", "--stall-timeout", "2")
    # Two worker processes on this machine, merged into one run.
    assert bench(setup, chain, tmp_path / "workers", *load, "--workers", "2", "--json", str(tmp_path / "w.json")) == 0
    merged = load_run(tmp_path / "workers")
    assert merged.meta["options"]["concurrency"] == 8 and len(merged.meta["options"]["merged_from"]) == 2
    summary = json.loads((tmp_path / "w.json").read_text())
    assert summary["requests"] == 64 and summary["failures"] == {}
    assert summary["tpot"]["p50"] == pytest.approx(FAST, rel=0.25)
    # Shards as separate machines would run them: started together, merged by hand.
    start_at = f"{time.time() + 3:.3f}"
    procs = [subprocess.Popen(proxycheck_argv("bench", str(setup.recording), "--chain", str(chain), "--route", "direct",
                                              *load, "--shard", f"{i}/2", "--start-at", start_at,
                                              "--out", str(tmp_path / f"shard{i}")),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for i in (1, 2)]  # fmt: skip
    try:
        assert [p.wait(timeout=60) for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    shard1 = load_run(tmp_path / "shard1")
    assert shard1.meta["options"]["concurrency"] == 4 and shard1.meta["bench"]["shard"] == [1, 2]
    assert abs(shard1.started_at - float(start_at)) < 1e-3
    capsys.readouterr()
    assert cli.main(["merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out", str(tmp_path / "m")]) == 0
    assert "64 request(s) from 2 runs" in capsys.readouterr().err
    assert load_run(tmp_path / "m").meta["bench"]["summary"]["requests"] == 64
    # The merged run is a bench run like any: compare takes it.
    assert cli.main(["compare", str(tmp_path / "workers"), str(tmp_path / "m")]) in (0, 1)
    # A shard alone is merged with a warning; runs that did not run together are refused.
    assert cli.main(["merge", str(tmp_path / "shard1"), "--out", str(tmp_path / "m1")]) == 0
    assert "not every shard of one load once" in capsys.readouterr().err
    assert cli.main(["merge", str(tmp_path / "workers"), str(tmp_path / "shard1"), "--out", str(tmp_path / "m2")]) == 2
    assert "do not overlap" in capsys.readouterr().err


def test_ctrl_c_keeps_the_run_with_its_window_cut_where_the_load_stopped(setup: Setup, tmp_path: Path) -> None:
    chain = setup.chain(setup.fast, "ctrl-c")
    out = tmp_path / "run"
    status, err = interrupt_when(["bench", str(setup.recording), "--chain", str(chain), "--route", "direct",
                                  "--concurrency", "4", "--duration", "60", "--out", str(out)],
                                 lines_in(out / "observations.jsonl", 20))  # fmt: skip
    assert status == 130, err
    assert "Traceback" not in err and "(interrupted)" in err, err
    run = load_run(out)
    assert run.status == "interrupted" and len(run.observations) >= 20
    start, end = run.meta["bench"]["window"]
    assert end < 60 and run.meta["bench"]["summary"]["requests"] >= 20


def test_open_loop_arrivals_and_the_cap_on_requests_in_flight(setup: Setup, tmp_path: Path) -> None:
    chain = setup.chain(setup.fast, "open")
    # Arrivals far faster than the server answers: the cap is what holds the load.
    assert bench(setup, chain, tmp_path / "capped", "--rate", "500", "--burstiness", "0.5", "--concurrency", "3",
                 "--requests", "30") == 0  # fmt: skip
    run = load_run(tmp_path / "capped")
    assert run.meta["options"]["rate"] == 500 and run.meta["options"]["burstiness"] == 0.5
    spans = [(o.t_start, o.t_start + (o.end or 0.0)) for o in run.observations]
    assert len(spans) == 30
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most == 3, most
    # Without a cap, the same arrivals pile up.
    assert bench(setup, chain, tmp_path / "open", "--rate", "500", "--requests", "30") == 0
    spans = [(o.t_start, o.t_start + (o.end or 0.0)) for o in load_run(tmp_path / "open").observations]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) > 3


def test_arrival_gaps_have_the_asked_rate_and_burstiness() -> None:
    from statistics import fmean, pstdev

    for burstiness in (1.0, 0.25, 4.0):
        gaps = [g for g, _ in zip(arrival_gaps(20.0, burstiness, seed=3), range(20000))]
        assert fmean(gaps) == pytest.approx(1 / 20, rel=0.05)
        # A gamma of shape k has a coefficient of variation of 1/sqrt(k): 1 for Poisson arrivals.
        assert pstdev(gaps) / fmean(gaps) == pytest.approx(burstiness**-0.5, rel=0.05)
    assert list(zip(arrival_gaps(5, 1, 1), range(3))) == list(zip(arrival_gaps(5, 1, 1), range(3)))
