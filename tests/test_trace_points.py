"""`proxycheck trace` over recordings made at two points of a real chain, and `check --with`.

Every scenario runs real processes on loopback: the reference engine, two mitmdump recorders
(addons/record.py) standing at two points, a hop between them, and the synthetic agent
(`python -m proxycheck agent`) as the client; `trace` and `check` run as `python -m proxycheck`:

    agent -> recorder "client-side" -> hop -> recorder "engine-side" -> engine

The hop is the fault hop (addons/faults.py) or a real nginx. This module: a hop that wedges only
for a while and then behaves (`active_for`), traced with and without a chain file placing the
points, then `check --with` on it, the JSON and HTML outputs and bad input; and an nginx read
timeout between the points. tests/test_trace_points_more.py has the healthy chains (jitter,
clocks apart, a re-serializing hop). Never absolute times: what each point saw decides.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cli_runner import REPO, proxycheck_argv, run_proxycheck
from processes import EngineFactory, MitmdumpFactory

from proxycheck.io.procs import Managed

OUTER, INNER = "client-side", "engine-side"  # the points' names, and their directories' too
FLUSHED = 1.5  # seconds: the recorder writes its last chunks within a second

pytestmark = pytest.mark.timeout(180)


@dataclass
class Points:
    """Two recorders around one hop: `outer` in front of the hop, `inner` in front of the engine."""

    engine: Managed
    hop_url: str
    outer: Managed
    inner: Managed
    client_side: Path
    engine_side: Path

    def chain(self, tmp: Path, hop: str = "F") -> Path:
        """A chain file naming the hop and placing both points: client-side just outside the
        hop, engine-side in front of the engine."""
        path = tmp / f"chain-{hop}.toml"
        path.write_text(f'engine = "{self.engine.url}"\n[engine_options]\npoint = "{INNER}"\n'
                        f'[[hop]]\nname = "{hop}"\nurl = "{self.hop_url}"\npoint = "{OUTER}"\n')  # fmt: skip
        return path

    def stop_recorders(self) -> None:
        time.sleep(FLUSHED)
        self.outer.stop()
        self.inner.stop()


def recorder(mitmdumps: MitmdumpFactory, upstream: Managed | str, out: Path) -> Managed:
    """A recorder of the point named after its directory (`client-side`, `engine-side`): also
    where a recorder without the point option would put it."""
    return mitmdumps.recorder(upstream, out, "--set", f"proxycheck_point={out.name}")


def around_fault_hop(engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp: Path, engine_args: tuple[str, ...],
                     *faults: str) -> Points:  # fmt: skip
    """The engine, the engine-side recorder, a fault hop with `faults`, the client-side recorder."""
    engine = engines(*engine_args)
    inner = recorder(mitmdumps, engine, tmp / INNER)
    hop = mitmdumps.faults(inner, *faults)
    outer = recorder(mitmdumps, hop, tmp / OUTER)
    return Points(engine, hop.url, outer, inner, tmp / OUTER, tmp / INNER)


def start_nginx(server: str) -> Any:
    """nginx with that server block, by the proxy matrix's helper (tests/integration/proxies.py:
    a generated config, stopped by pid; skipped, or failed as root, when nginx is missing)."""
    integration = str(REPO / "tests" / "integration")
    if integration not in sys.path:
        sys.path.insert(0, integration)
    from proxies import start_nginx as start

    return start(server)


def run_agents(url: str, *, agents: int = 1, timeout: float = 120, **options: object) -> list[dict[str, Any]]:
    """`proxycheck agent --json` processes against `url`, all at once (the same seed: the same
    conversations, sent in parallel); each one's report (schema proxycheck.agent/1)."""
    argv = proxycheck_argv("agent", "--base-url", url, "--json", *(a for k, v in options.items()
                           for a in (f"--{k.replace('_', '-')}", str(v))))  # fmt: skip
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO) for _ in range(agents)]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            assert proc.returncode in (0, 1), err
            reports.append(json.loads(out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return reports


def turns_of(reports: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(turn, outcome) of every turn the agents made, as their user saw them."""
    return sorted((t["turn"], t["outcome"]) for r in reports for s in r["sessions"] for t in s["turns"])


def trace(tmp: Path, *args: str, name: str = "trace.json") -> tuple[int, str, str, dict[str, Any]]:
    """`proxycheck trace ARGS --json F`: its exit status, stdout, stderr and the JSON it wrote."""
    path = tmp / name
    done = run_proxycheck("trace", *args, "--json", str(path), timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, done.stdout, done.stderr, json.loads(path.read_text())


def lost_between(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [x for x in doc["exchanges"] if x["locus"] == {"kind": "lost", "outer": OUTER, "inner": INNER}]


# --------------------------------------------------------------------------------------------
# a hop that wedges for a while, then behaves


@dataclass
class Wedged:
    points: Points
    turns: list[tuple[int, str]]  # what the agent saw


@pytest.fixture(scope="module")
def wedged(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
           module_mitmdumps: MitmdumpFactory) -> Wedged:  # fmt: skip
    # Both sessions' first turns start together, inside the hop's 1 s window, and stall after 3
    # events until the agent gives up (1.5 s); every later turn starts after the window: the hop
    # passes it. The recorders stay up: `check` replays through the hop, whose upstream is the
    # engine-side recorder (replays carry the replay marker and pass unrecorded).
    tmp = tmp_path_factory.mktemp("wedged")
    points = around_fault_hop(module_engines, module_mitmdumps, tmp,
                              ("--token-interval", "0.005", "--ttft-per-kb", "0", "--tool-call-rate", "0.6"),
                              "stall_after=3", "active_for=1")  # fmt: skip
    reports = run_agents(points.outer.url, sessions=2, turns=3, think=0.2, read_timeout=1.5, max_tokens=16,
                         on_fail="continue")  # fmt: skip
    time.sleep(FLUSHED)
    return Wedged(points, turns_of(reports))


def failed_turns(turns: list[tuple[int, str]]) -> list[int]:
    return sorted(turn for turn, outcome in turns if outcome != "ok")


def test_a_hop_that_wedged_for_a_while_is_placed_between_the_two_points(wedged: Wedged, tmp_path: Path) -> None:
    points = wedged.points
    failed = failed_turns(wedged.turns)
    assert failed and len(failed) < len(wedged.turns), wedged.turns  # it wedged, and then it behaved
    assert all(outcome == "ok" for turn, outcome in wedged.turns if turn == 3), wedged.turns

    status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side))
    assert status == 1, out
    assert doc["schema"] == "proxycheck.trace/1"
    assert doc["verdict"] == "proxy", doc["summary"]
    assert doc["segment"] == {"outer": OUTER, "inner": INNER, "hops": None}  # no chain file: no hop named
    assert [p["name"] for p in doc["points"]] == [OUTER, INNER]
    lost = lost_between(doc)
    assert sorted(x["turn"] for x in lost) == failed, [x["line"] for x in doc["exchanges"]]
    for x in lost:
        # The engine-side point saw the answer complete; the client-side point saw it cut short.
        outer, inner = x["points"][OUTER], x["points"][INNER]
        assert inner["complete"] and inner["outcome"] == "ok" and inner["terminal"], x["line"]
        assert not outer["complete"] and outer["outcome"] != "ok" and outer["events"] < inner["events"], x["line"]
    assert all(x["locus"] == {"kind": "fine"} for x in doc["exchanges"] if x not in lost)
    assert len(doc["exchanges"]) == len(wedged.turns)
    assert f"lost between {INNER} and {OUTER}" in out

    # The chain file places the points: the segment's hops are the fault hop, the culprit.
    status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side), "--chain",
                                str(points.chain(tmp_path)), name="chained.json")  # fmt: skip
    assert status == 1 and doc["verdict"] == "proxy", doc["summary"]
    assert doc["segment"] == {"outer": OUTER, "inner": INNER, "hops": ["F"]} and doc["culprit"] == "F"
    assert doc["order"] == "chain" and [p["position"] for p in doc["points"]] == [0, 1]
    assert sorted(x["turn"] for x in lost_between(doc)) == failed
    assert "(hops F)" in out


def test_check_with_the_other_point_places_what_did_not_fail_again(wedged: Wedged, tmp_path: Path) -> None:
    points = wedged.points
    verdict = tmp_path / "verdict.json"
    done = run_proxycheck("check", str(points.client_side), "--chain", str(points.chain(tmp_path)), "--with",
                          str(points.engine_side), "--json", str(verdict), "--pace", "fast", "--stall-timeout", "1",
                          "--out", str(tmp_path / "run"), timeout=150)  # fmt: skip
    doc = json.loads(verdict.read_text())
    # The hop behaves now: replayed, nothing fails, but the points saw where it was lost.
    assert done.returncode == 1, done.stdout + done.stderr
    assert doc["verdict"] == "proxy" and doc["culprit"] == "F", doc["summary"]
    assert doc["segment"] == {"outer": OUTER, "inner": INNER, "hops": ["F"]}
    assert doc["summary"].startswith("seen while recording, not reproduced on replay")
    seen = doc["seen_while_recording"]
    assert seen["points"] == [OUTER, INNER] and seen["segment"] == doc["segment"]
    assert len(seen["exchanges"]) == len(failed_turns(wedged.turns))


def test_the_json_has_every_exchange_with_what_each_point_saw(wedged: Wedged, tmp_path: Path) -> None:
    _, _, _, doc = trace(tmp_path, str(wedged.points.client_side), str(wedged.points.engine_side))
    assert {"schema", "verdict", "culprit", "summary", "segment", "places", "order", "points", "pairs", "exchanges",
            "notes"} <= set(doc)  # fmt: skip
    assert doc["places"] == [{"outer": OUTER, "inner": INNER, "hops": None, "exchanges": len(lost_between(doc))}]
    for p in doc["points"]:
        assert {"name", "directory", "host", "position", "started_at", "offset", "exchanges"} <= set(p)
        assert p["exchanges"] == len(wedged.turns) and p["host"]
    for x in doc["exchanges"]:
        assert {"session", "turn", "first_seen_at", "locus", "line", "points", "not_recording"} <= set(x)
        assert x["first_seen_at"] == OUTER and set(x["points"]) == {OUTER, INNER} and x["not_recording"] == []
        for seen in x["points"].values():
            assert {"exchange", "session", "turn", "method", "path", "t_request", "t_response", "t_ended", "status",
                    "streamed", "events", "content_events", "bytes", "terminal", "complete", "outcome", "detail",
                    "ttft", "request"} <= set(seen)  # fmt: skip
            assert seen["method"] == "POST" and seen["path"] == "/v1/chat/completions" and seen["status"] == 200
        # The same request at both points: the same bytes (the hop does not touch the body).
        assert x["points"][OUTER]["request"] == x["points"][INNER]["request"]
    assert stat.S_IMODE(os.stat(tmp_path / "trace.json").st_mode) == 0o600


def test_the_html_page_says_the_verdict(wedged: Wedged, tmp_path: Path) -> None:
    page = tmp_path / "trace.html"
    done = run_proxycheck("trace", str(wedged.points.client_side), str(wedged.points.engine_side), "--chain",
                          str(wedged.points.chain(tmp_path)), "--html", str(page), timeout=60)  # fmt: skip
    assert done.returncode == 1, done.stderr
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<script" not in text
    assert f'<h1 id="verdict" style="color:#c62828">proxy: between {INNER} and {OUTER} (hops F)</h1>' in text
    assert text.count(f": lost between {INNER} and {OUTER}</li>") == len(failed_turns(wedged.turns))
    assert stat.S_IMODE(os.stat(page).st_mode) == 0o600


@pytest.mark.parametrize("case", ["one recording", "the same point twice", "not a recording", "no such directory"])
def test_bad_input_is_one_line_and_exit_2(wedged: Wedged, tmp_path: Path, case: str) -> None:
    client_side = str(wedged.points.client_side)
    if case == "one recording":
        args, said = [client_side], "trace: needs the recordings of at least two points"
    elif case == "the same point twice":
        copy = shutil.copytree(client_side, tmp_path / "copy")
        args, said = [client_side, str(copy)], f"{copy}: is point '{OUTER}' too, as {client_side} is"
    elif case == "not a recording":
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "notes.txt").write_text("not a recording\n")
        args, said = [client_side, str(tmp_path / "other")], f"{tmp_path / 'other'}: not a proxycheck recording"
    else:
        args, said = [client_side, str(tmp_path / "missing")], f"{tmp_path / 'missing'}: no such directory"
    done = run_proxycheck("trace", *args, "--json", str(tmp_path / "t.json"), timeout=60)
    assert done.returncode == 2
    assert done.stdout == "" and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"proxycheck: {said}"), done.stderr
    assert not (tmp_path / "t.json").exists()


# --------------------------------------------------------------------------------------------
# nginx's read timeout between the points


NGINX_CASES = {
    # A token every 1.5 s through nginx's 1 s read timeout: cut after the first token.
    "mid-stream pause": ("--token-interval", "1.5", "--ttft-per-kb", "0", "--tool-call-rate", "0"),
    # Headers at once, then a 2 s prefill: cut before the first token.
    "slow first token": ("--ttft-base", "2", "--ttft-per-kb", "0", "--token-interval", "0.01", "--tool-call-rate", "0"),
}


@pytest.mark.parametrize("case", list(NGINX_CASES))
def test_an_nginx_read_timeout_is_placed_between_the_points(engines: EngineFactory, mitmdumps: MitmdumpFactory,
                                                            tmp_path: Path, case: str) -> None:  # fmt: skip
    with ExitStack() as stack:
        engine = engines(*NGINX_CASES[case])
        inner = recorder(mitmdumps, engine, tmp_path / INNER)
        nginx = start_nginx(f"location / {{ proxy_pass {inner.url}; proxy_http_version 1.1; proxy_buffering off; "
                            "proxy_read_timeout 1s; }")  # fmt: skip
        stack.callback(nginx.stop)
        outer = recorder(mitmdumps, nginx.url, tmp_path / OUTER)
        points = Points(engine, nginx.url, outer, inner, tmp_path / OUTER, tmp_path / INNER)
        reports = run_agents(outer.url, sessions=2, turns=1, think=0.2, read_timeout=5, max_tokens=2)
        assert turns_of(reports) == [(1, "reset")] * 2  # nginx forwarded the 200, then cut the stream
        points.stop_recorders()
        status, out, _, doc = trace(tmp_path, str(points.client_side), str(points.engine_side), "--chain",
                                    str(points.chain(tmp_path, hop="nginx")))  # fmt: skip
    assert len(doc["exchanges"]) == 2
    for x in doc["exchanges"]:
        outer_seen, inner_seen = x["points"][OUTER], x["points"][INNER]
        # The client side got cut by its upstream; the engine side saw its client (nginx) leave
        # while the engine's answer was still on its way: nginx closed both.
        assert not outer_seen["complete"] and "peer closed connection" in outer_seen["detail"], x["line"]
        assert not inner_seen["complete"] and inner_seen["detail"].startswith("Client disconnected."), x["line"]
        assert inner_seen["events"] == outer_seen["events"]
    assert status == 1
    assert doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
    assert doc["segment"] == {"outer": OUTER, "inner": INNER, "hops": ["nginx"]}
    assert len(lost_between(doc)) == 2, [x["line"] for x in doc["exchanges"]]
