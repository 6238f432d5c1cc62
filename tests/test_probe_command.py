"""`proxycheck probe` against real processes: the reference engine and mitmdump hops.

Once per module: the reference engine (idle connections kept 60 s, so only the hops' limits show)
and these hops in front of it:

    clean    -> engine      mitmdump with addons/faults.py and no fault: a healthy hop
    limits   -> clean       mitmdump: 413 over 100000 bytes, never answers after 3 s idle
    buffer   -> engine      mitmdump: buffers SSE

Read timeouts and connection caps, which mitmproxy has not, are probed on real nginx and HAProxy
in tests/integration/test_probe_proxies.py. Every process is stopped by the fixture, also when a
test fails. Each test probes only what it checks, with small bounds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from processes import EngineFactory, MitmdumpFactory, write_chain

from proxycheck import cli
from proxycheck.io import prober
from proxycheck.io.procs import Managed, free_port

BODY_LIMIT, IDLE_LIMIT = 100_000, 3.0
QUICK = ["--timeout", "2"]

pytestmark = pytest.mark.timeout(60)


@dataclass
class Setup:
    engine: Managed
    hops: dict[str, str]  # name -> url

    def chain(self, tmp: Path, *names: str) -> Path:
        return write_chain(tmp / "chain.toml", self.engine.url, [(name, self.hops[name]) for name in names])


@pytest.fixture(scope="module")
def setup(module_engines: EngineFactory, module_mitmdumps: MitmdumpFactory) -> Setup:
    engine = module_engines("--token-interval", "0.01", "--keepalive-timeout", "60")
    hops = {"clean": module_mitmdumps.faults(engine).url, "buffer": module_mitmdumps.faults(engine, "buffer=true").url}
    limits = module_mitmdumps.faults(hops["clean"], f"max_body={BODY_LIMIT}", f"idle_blackhole={IDLE_LIMIT:g}")
    hops["limits"] = limits.url
    return Setup(engine, hops)


def probe(tmp: Path, chain: Path, *argv: str) -> tuple[int, dict]:
    out = tmp / "probe.json"
    status = cli.main(["probe", "--chain", str(chain), "--json", str(out), *QUICK, *argv])
    return status, json.loads(out.read_text())


def result(doc: dict, route: str, probe_name: str) -> dict:
    return next(r for r in doc["results"] if r["route"] == route and r["probe"] == probe_name)


# --------------------------------------------------------------------------------------------


def test_a_clean_chain_shows_no_hop_limit(setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    chain = setup.chain(tmp_path, "clean")
    status, doc = probe(tmp_path, chain, "--max-body", "1M", "--max-header", "16K", "--max-idle", "2",
                        "--max-gap", "2", "--max-concurrency", "8")  # fmt: skip
    assert status == 0, doc["findings"]
    assert doc["schema"] == "proxycheck.probe/1" and doc["healthy"] and doc["complete"]
    assert [f for f in doc["findings"] if f["belongs_to"] != "engine"] == []
    assert doc["engine"]["reference"] is True
    for route in ("direct", "via:clean"):
        for name in ("body", "idle", "gap", "concurrency"):
            r = result(doc, route, name)
            assert r["state"] == "none" and r["value"] == r["bound"], r
        assert result(doc, route, "sse")["kind"] == "streamed"
        assert result(doc, route, "compression")["state"] == "none"
    # The engine's own header limit (aiohttp: 8190 bytes a line) is the engine's, and inherited.
    header = result(doc, "direct", "header")
    assert header["state"] == "limit" and header["belongs_to"] == "engine"
    assert result(doc, "via:clean", "header")["inherited"] is True
    out = capsys.readouterr().out
    assert "healthy: no hop adds a limit" in out and "The engine's own" in out


def test_body_and_idle_limits_are_found_and_given_to_their_hop(setup: Setup, tmp_path: Path) -> None:
    chain = setup.chain(tmp_path, "limits", "clean")
    status, doc = probe(tmp_path, chain, "--probe", "body", "--probe", "idle", "--max-body", "1M", "--max-idle", "6")
    assert status == 1
    body = result(doc, "via:limits", "body")
    assert body["state"] == "limit" and body["belongs_to"] == "limits" and not body["inherited"]
    assert abs(body["value"] - BODY_LIMIT) <= 0.1 * BODY_LIMIT, body  # within 10%
    assert body["value"] <= BODY_LIMIT < body["failed_at"]
    assert body["evidence"]["status"] == 413
    idle = result(doc, "via:limits", "idle")
    assert idle["state"] == "limit" and idle["belongs_to"] == "limits"
    assert abs(idle["value"] - IDLE_LIMIT) <= 1.0, idle  # within 1 s
    assert idle["value"] <= IDLE_LIMIT <= idle["failed_at"]
    for route in ("direct", "via:clean"):
        assert result(doc, route, "body")["state"] == "none"
        assert result(doc, route, "idle")["state"] == "none"
    found = {(f["route"], f["probe"], f["belongs_to"]) for f in doc["findings"]}
    assert found == {("via:limits", "body", "limits"), ("via:limits", "idle", "limits")}


def test_a_buffering_hop_is_reported(setup: Setup, tmp_path: Path) -> None:
    chain = setup.chain(tmp_path, "buffer")
    status, doc = probe(tmp_path, chain, "--probe", "sse", "--probe", "compression", "--probe", "gap",
                        "--max-gap", "1")  # fmt: skip
    assert status == 1
    sse = result(doc, "via:buffer", "sse")
    assert sse["state"] == "degraded" and sse["kind"] == "buffered" and sse["belongs_to"] == "buffer"
    assert result(doc, "direct", "sse")["kind"] == "streamed"
    # Buffering holds back the headers too: that is not mistaken for a read timeout.
    assert result(doc, "via:buffer", "gap")["state"] == "none"
    assert [(f["probe"], f["belongs_to"]) for f in doc["findings"]] == [("sse", "buffer")]


def test_the_token_budget_stops_probing(setup: Setup, tmp_path: Path) -> None:
    chain = setup.chain(tmp_path, "clean")
    status, doc = probe(tmp_path, chain, "--max-tokens-total", "40", "--skip", "idle", "--skip", "gap")
    assert status == 0
    assert doc["budget"] == {"max_tokens_total": 40, "spent": doc["budget"]["spent"], "exhausted": True}
    assert doc["budget"]["spent"] <= 40 and doc["complete"] is False
    states = [r["state"] for r in doc["results"]]
    assert "skipped" in states
    assert sum(r["tokens"] for r in doc["results"]) <= doc["budget"]["spent"]


def test_a_dead_hop_is_one_finding(setup: Setup, tmp_path: Path) -> None:
    setup.hops["dead"] = f"http://127.0.0.1:{free_port()}"
    chain = setup.chain(tmp_path, "dead", "clean")
    status, doc = probe(tmp_path, chain, "--probe", "sse", "--probe", "body", "--max-body", "64K")
    assert status == 1
    assert [(f["route"], f["belongs_to"], f["state"]) for f in doc["findings"]] == [("via:dead", "dead", "failed")]
    assert "baseline request failed" in doc["findings"][0]["summary"]
    assert result(doc, "via:clean", "sse")["kind"] == "streamed"


def test_an_engine_other_than_the_reference_one_is_probed_at_its_own_pace(
    setup: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without its digest header the reference engine passes for any engine: no timing extension,
    # the gap probe falls back to one long prefill.
    monkeypatch.setattr(prober, "SHA_HEADER", "x-no-such-header")
    chain = setup.chain(tmp_path, "clean")
    status, doc = probe(tmp_path, chain, "--probe", "body", "--probe", "gap", "--probe", "sse", "--probe",
                        "concurrency", "--max-body", "64K", "--max-concurrency", "4")  # fmt: skip
    assert status == 0 and doc["engine"]["reference"] is False
    gap = result(doc, "via:clean", "gap")
    assert gap["state"] == "none" and "prefill" in gap["note"]
    assert result(doc, "via:clean", "sse")["kind"] == "streamed"
    assert result(doc, "via:clean", "concurrency")["state"] == "none"


def test_the_timing_extension_of_the_reference_engine(setup: Setup) -> None:
    url = setup.engine.url + "/v1/chat/completions"
    doc = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True,
           "proxycheck": {"ttft": 0.0, "token_interval": 0.4}}  # fmt: skip
    with httpx.Client(timeout=10, trust_env=False) as client:
        times, t0 = [], time.monotonic()
        with client.stream("POST", url, content=json.dumps(doc)) as resp:
            assert resp.status_code == 200
            for line in resp.iter_lines():
                if '"content"' in line and '"content":""' not in line:
                    times.append(time.monotonic() - t0)
        assert len(times) == 3 and times[0] < 0.3 and 0.3 < times[1] - times[0] < 0.6
        bad = client.post(url, content=json.dumps({**doc, "proxycheck": {"token_interval": -1}}))
        assert bad.status_code == 400 and "token_interval" in bad.text
        unknown = client.post(url, content=json.dumps({**doc, "proxycheck": {"speed": 2}}))
        assert unknown.status_code == 400


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--chain", "missing.toml"], "missing.toml: cannot read the chain file"),
        (["--route", "via:nope"], "no hop named 'nope'"),
        (["--max-body", "lots"], "not a size in bytes"),
        (["--max-idle", "-1"], "not a positive number of seconds"),
        (["--probe", "speed"], "invalid choice"),
        (["--skip", "body", "--probe", "body"], "leaves no probe to run"),
        (["--max-tokens-total", "0"], "not a positive integer"),
        (["--json", "/dev/null/out.json"], "cannot be written"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture, argv: list[str],
                                          words: str) -> None:  # fmt: skip
    chain = tmp_path / "c.toml"
    chain.write_text('engine = "http://127.0.0.1:9"\n[[hop]]\nname = "edge"\nurl = "http://127.0.0.1:9"\n')
    if "--chain" not in argv:
        argv = ["--chain", str(chain), *argv]
    try:
        status = cli.main(["probe", *argv])
    except SystemExit as exc:  # argparse's own errors (bad flag values) exit from the parser
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
