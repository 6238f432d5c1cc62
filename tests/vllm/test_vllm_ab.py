"""The story this project was born from, on a real engine: `bench` and `compare` tell apart two
configurations of vLLM that differ in one knob, with confidence intervals, and call an unchanged
configuration unchanged.

The knob: prefix caching (vLLM's default) against `--no-enable-prefix-caching`, on a multi-turn
recording whose turns share a long prefix (turn 1 pastes a file the later turns carry): with the
cache, a request prefills only what is new; without it, all of it. The paste is sized from the
uncached engine's measured speed (a prefill of PREFIX_SECONDS), so the difference is as clear, and
the runs as short, on a CPU many times slower than another. Bench runs of one configuration
are compared with each other, so this file runs `alone` (`make test`: after the parallel tests, with
nothing beside it); its engines are the session's (conftest.py), started side by side.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from processes import MitmdumpFactory, write_chain
from sdk import converse
from vllm_engine import SERVED_MODEL, Engine

pytestmark = [pytest.mark.timeout(600), pytest.mark.alone]

# Closed loop at concurrency 2 (the engine batches them), a fixed number of requests after a warm-up
# that fills the cache of the configuration that has one (the recording filled the other engine's).
LOAD = ("--concurrency", "2", "--requests", "16", "--warmup", "2")
# The shared prefix's prefill without the cache: several times a cached turn's first token on any
# machine, and short enough that 16 uncached requests take a minute or two on the slowest.
PREFIX_SECONDS = 1.5


def bench(recording: Path, engine: Engine, out: Path) -> dict:
    chain = write_chain(out.with_suffix(".toml"), engine.url, [])
    summary = out.with_suffix(".json")
    done = run_proxycheck("bench", str(recording), "--chain", str(chain), "--route", "direct", "--out", str(out),
                          *LOAD, "--json", str(summary), timeout=300)  # fmt: skip
    assert done.returncode == 0 and summary.exists(), done.stdout + done.stderr
    return json.loads(summary.read_text())


def compare(a: Path, b: Path) -> tuple[int, dict, str]:
    out = b.with_name(f"{a.name}-{b.name}.json")
    done = run_proxycheck("compare", str(a), str(b), "--json", str(out), timeout=120)
    assert out.exists(), done.stderr
    return done.returncode, json.loads(out.read_text()), done.stdout


def metric(doc: dict, name: str) -> dict:
    return next(m for m in doc["metrics"] if m["name"] == name)


def test_bench_and_compare_tell_prefix_caching_off_from_on_and_an_unchanged_engine_unchanged(
    vllm: Engine, vllm_uncached: Engine, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(vllm.url, recording)
    words = vllm_uncached.speed.words_for(PREFIX_SECONDS)
    lines = converse("openai", recorder.url, model=SERVED_MODEL, sessions=2, turns=3, max_tokens=16,
                     paste=f"1:{words}", include_usage=True, timeout=60, within=400).lines  # fmt: skip
    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()
    assert len(lines) == 6 and all(line["ok"] for line in lines), lines

    runs = {name: tmp_path / name for name in ("cached", "again", "uncached")}
    summaries = {"cached": bench(recording, vllm, runs["cached"]), "again": bench(recording, vllm, runs["again"]),
                 "uncached": bench(recording, vllm_uncached, runs["uncached"])}  # fmt: skip
    assert all(s["requests"] >= 16 and s["failures"] == {} for s in summaries.values()), summaries

    # One knob: without the prefix cache every request prefills its whole context again.
    status, doc, out = compare(runs["cached"], runs["uncached"])
    ttft = metric(doc, "ttft_p50")
    assert ttft["significant"] and ttft["ci_low"] > 0, ttft  # slower, with an interval that excludes no change
    assert status == 1 and any(r.startswith("ttft_p50") for r in doc["regressions"]), doc["regressions"]
    assert "regressions beyond 5%" in out
    # And the mirror image: turning the cache on is no regression.
    status, doc, _ = compare(runs["uncached"], runs["cached"])
    assert status == 0 and metric(doc, "ttft_p50")["ci_high"] < 0, metric(doc, "ttft_p50")

    # The same configuration twice: no regression, and nothing significant beyond the noise band
    # but (at most) one metric a disturbed run moved.
    status, doc, _ = compare(runs["cached"], runs["again"])
    assert status == 0, doc["regressions"]
    moved = [m["name"] for m in doc["metrics"] if m["headline"] and m["significant"]]
    assert len(moved) <= 1, moved
