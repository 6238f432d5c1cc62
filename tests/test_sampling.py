"""`check` in front of a sampling engine (`proxycheck engine --sampling`), and `--greedy`.

A sampling engine answers two replays of one request differently: other words, a tool call or
not, another finish reason. Against it a healthy chain must stay healthy, a hop that stalls must
be found at the turn it starts stalling (not at a turn where sampling happened to differ), and
`--greedy` (temperature 0 and a fixed seed in every request) must make its answers comparable
exchange by exchange again.

Once per module: the reference engine with `--sampling`, a recording of 4 sessions x 4 turns
made through the recorder by the synthetic agent (which asks for no temperature: the engine's
default, 1), and mitmdump hops running addons/faults.py: a clean chain c0 -> c1 -> engine, and F,
which stalls mid-stream from turn 3 on. Every process is stopped by the fixture, also on failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory, write_chain
from test_check import FAST, check, verdict_of

from proxycheck import cli
from proxycheck.io.procs import Managed
from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(240)


@dataclass
class World:
    engine: Managed
    recording: Path
    hops: dict[str, Managed]

    def chain(self, tmp: Path, *names: str) -> Path:
        return write_chain(tmp / "chain.toml", self.engine.url, [(name, self.hops[name].url) for name in names])


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
          module_mitmdumps: MitmdumpFactory) -> World:  # fmt: skip
    engine = module_engines("--sampling", "--token-interval", "0.003", "--ttft-per-kb", "0", "--tool-call-rate", "0.5")
    out = module_mitmdumps.record_agent(engine, tmp_path_factory.mktemp("rec") / "recording", sessions=4, turns=4,
                                        think=0.1, max_tokens=24)  # fmt: skip
    hops = {"c1": module_mitmdumps.faults(engine), "F": module_mitmdumps.faults(engine, "stall_after=3", "from_turn=3")}
    hops["c0"] = module_mitmdumps.faults(hops["c1"])
    return World(engine, out, hops)


def shape(doc: dict) -> tuple:
    choice = doc["choices"][0]
    calls = tuple(c["function"]["name"] for c in choice["message"].get("tool_calls") or ())
    return choice["finish_reason"], calls, choice["message"].get("content")


def test_the_engine_samples_unless_asked_for_temperature_0_and_a_seed(world: World) -> None:
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    body = {"model": "m", "messages": [{"role": "user", "content": "fix it"}], "max_tokens": 12, "tools": tools}
    with httpx.Client(base_url=world.engine.url, timeout=10) as client:
        # 32 draws: half of them tool calls of one shape, so 16 could show as few as 4 shapes by chance.
        sampled = [shape(client.post("/v1/chat/completions", json=body).json()) for _ in range(32)]
        greedy = {**body, "temperature": 0, "seed": 0}
        fixed = [shape(client.post("/v1/chat/completions", json=greedy).json()) for _ in range(4)]
    finishes = {s[0] for s in sampled}
    assert len(set(sampled)) > 4  # other words every time
    assert "tool_calls" in finishes and finishes & {"stop", "length"}  # and tool calls or not
    assert len(set(fixed)) == 1


def test_a_healthy_chain_in_front_of_a_sampling_engine_is_healthy(world: World, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    # Three whole checks, each with its own two direct replays: healthy every time, not by luck.
    chain = world.chain(tmp_path, "c0", "c1")
    for attempt in range(3):
        path = tmp_path / f"v{attempt}.json"
        status = check(tmp_path, str(world.recording), "--chain", str(chain), *FAST, "--json", str(path))
        doc = verdict_of(path)
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert [r["route"] for r in doc["routes"]] == ["direct", "via:c1", "via:c0"]
        floor = doc["noise_floor"]
        assert floor["deterministic"] is False and floor["sampling"] is True, floor
        (hint,) = doc["suggestions"]
        assert "replay with --greedy" in hint
    shown = capsys.readouterr().out
    assert shown.count("suggestion: ") == 3 and "--greedy" in shown


def test_a_stalling_hop_behind_a_sampling_engine_is_found_at_its_first_failing_turn(world: World,
                                                                                    tmp_path: Path) -> None:  # fmt: skip
    chain = world.chain(tmp_path, "F")
    status = check(tmp_path, str(world.recording), "--chain", str(chain), *FAST, "--json", str(tmp_path / "v.json"))
    doc = verdict_of(tmp_path / "v.json")
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "F", doc["summary"]
    assert doc["first_turn"] == 3
    assert doc["summary"].startswith("hop F stalls mid-stream from turn 3 on"), doc["summary"]
    # Failures only stalls (a degradation from a loaded machine may stand beside them).
    assert {f["outcome"] for f in doc["findings"] if f["route"] == "via:F" and f["outcome"] not in ("slow", "buffered")} \
        == {"stall_mid_stream"}


def test_greedy_makes_direct_replays_agree_and_drops_the_suggestion(world: World, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    chain = world.chain(tmp_path, "c0", "c1")
    out, path = tmp_path / "run", tmp_path / "v.json"
    status = check(tmp_path, str(world.recording), "--chain", str(chain), *FAST, "--greedy", "--out", str(out),
                   "--json", str(path))  # fmt: skip
    doc = verdict_of(path)
    assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
    assert doc["noise_floor"]["deterministic"] is True and doc["noise_floor"]["sampling"] is False
    assert doc["suggestions"] == []
    assert "suggestion: " not in capsys.readouterr().out
    run = load_run(out)
    assert run.meta["options"]["greedy"] is True
    # Every route got the same answers to the same exchanges, exchange by exchange.
    answers: dict[tuple, set[str]] = {}
    for obs in run.observations:
        assert obs.outcome.value == "ok" and obs.result is not None, obs.detail
        answers.setdefault((obs.session, obs.turn, obs.xid), set()).add(obs.result.text_sha256)
    assert answers and all(len(texts) == 1 for texts in answers.values())
    # diff reads greedy from the run, and says what check said.
    assert cli.main(["diff", str(out), "--json", str(tmp_path / "d.json")]) == 0
    assert verdict_of(tmp_path / "d.json")["suggestions"] == []


def test_diff_of_a_run_without_greedy_suggests_it(world: World, tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["replay", str(world.recording), "--chain", str(world.chain(tmp_path, "c1")), "--route", "direct",
            "--repeat", "2", *FAST, "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    assert load_run(out).meta["options"]["greedy"] is False
    assert cli.main(["diff", str(out), "--json", str(tmp_path / "d.json")]) == 0
    doc = verdict_of(tmp_path / "d.json")
    assert doc["noise_floor"]["sampling"] is True and "replay with --greedy" in doc["suggestions"][0]


def test_dry_run_shows_the_greedy_bodies(world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["replay", str(world.recording), "--chain", str(world.chain(tmp_path, "c1")), "--route", "direct",
            "--dry-run"]  # fmt: skip
    assert cli.main(argv) == 0
    plain = capsys.readouterr().out
    assert cli.main([*argv, "--greedy"]) == 0
    greedy = capsys.readouterr().out
    assert "(x1, exact, httpx)" in plain and "(x1, exact, httpx, greedy)" in greedy
    # `"temperature":0,"seed":0` added to each compact body.
    sizes = [(int(a.split(" body ")[1].split(" B")[0]), int(b.split(" body ")[1].split(" B")[0]))
             for a, b in zip(plain.splitlines()[1:], greedy.splitlines()[1:])]  # fmt: skip
    assert sizes and all(g - p == len(b',"temperature":0,"seed":0') for p, g in sizes), sizes


def test_sampling_with_replay_is_one_line_and_exit_2(world: World) -> None:
    proc = run_proxycheck("engine", "--listen", "127.0.0.1:0", "--sampling", "--replay", str(world.recording))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "proxycheck: --sampling: does not apply with --replay DIR (recorded answers are replayed as they are)"
    ]


def test_minimize_takes_greedy_and_says_so(world: World, tmp_path: Path) -> None:
    out = tmp_path / "small"
    argv = ["minimize", str(world.recording), "--chain", str(world.chain(tmp_path, "F")), "--route", "via:F",
            "--greedy", "--budget", "12", "--pace", "fast", "--stall-timeout", "1", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 0
    summary = json.loads((out / "minimized.json").read_text())
    assert summary["greedy"] is True and summary["trigger"]["outcome"] == "stall_mid_stream"
