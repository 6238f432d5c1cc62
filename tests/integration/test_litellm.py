"""LiteLLM in the proxy matrix: the LLM gateway users chain most, as a real hop in front of the
reference engine, and what `proxycheck check` says about it.

The LiteLLM proxy (pinned in tests/tools/litellm.txt, run from its own venv) forwards one model
to the engine as an OpenAI-compatible backend, offline, without a database. Each test records
agent sessions through it (the recorder at the client side, where a harness's local mitmproxy
sits), runs `check` on a chain that names the LiteLLM hop and asserts what a user would see.
LiteLLM takes seconds to start, so the cases that can share one engine and one LiteLLM do (a
module fixture). What LiteLLM 1.108 really does, found by running it (and asserted here):

* It re-serializes every request (the engine receives other bytes than the client sent, with the
  same content) and every streamed event, and passes the engine's response headers on renamed
  `llm_provider-<name>`: judged on content, the sessions through it are healthy.
* A streaming request whose first token takes longer than its `timeout` (a long prefill; for
  streams `stream_timeout` takes its place when set): LiteLLM
  reads the first chunk before it sends its own response headers, so the client gets no early
  200 to be cut (as with nginx or HAProxy) but, after LiteLLM retried twice (its router's
  default), HTTP 408 with a JSON error ("litellm.Timeout: APITimeoutError"), from the first turn
  whose prefill outlasts the timeout: `http_error` 408.
* A gap between tokens longer than its `stream_timeout`: the 200 stream has begun, so LiteLLM ends
  it with an error event in the stream (`data: {"error": {... "code": "408"}}`) and no `[DONE]`:
  `stream_error`, from the first gap.
* With a `master_key`, every request needs `Authorization: Bearer KEY`; the recorder redacts it.
  Without a database LiteLLM answers a missing key with a bare 500 (not 401): on the route's first
  answers, with the key redacted and not supplied, `check` asks for the key (exit 2) instead of
  blaming the hop; the chain file gives it to the hop's route (`headers = { Authorization = ... }`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_runner import run_proxycheck
from common import RECORD, REPO, chain_file, check, record_through
from proxies import Proxy, start_litellm
from sdk import converse

from proxycheck.core.recording.sessions import turn_number
from proxycheck.core.testbed.synth import Timing
from proxycheck.io.procs import Managed, start_engine, start_mitmdump
from proxycheck.io.storage import load

SDK_KEY = "sk-test-0000"  # the api_key of tests/clients/conversation.py
# The LiteLLM version tests/tools/litellm.txt pins (the one that must answer: its headers say).
PINNED = re.findall(r"^litellm\[proxy\]==(\S+)$", (REPO / "tests" / "tools" / "litellm.txt").read_text(), re.M)[0]
# A long prefill: TTFT = base + per KiB of request body. With 3000-byte tool results the agent's
# requests are about 1.5 and 4.7 KiB (TTFT about 0.5 and 1.5 s); with 200-byte ones two turns stay
# under 2.1 KiB (TTFT under 0.7 s).
TIMING = Timing(ttft_base=0.05, ttft_per_kb=0.3)
PREFILL = ("--ttft-base", f"{TIMING.ttft_base}", "--ttft-per-kb", f"{TIMING.ttft_per_kb}",
           "--token-interval", "0.004", "--tool-call-rate", "1")  # fmt: skip
TIMEOUT = 1.0  # LiteLLM's timeout in the failing cases, s
FAST = ("--pace", "fast", "--stall-timeout", "4")  # the stall watchdog above every TTFT and token gap
# A failing turn takes LiteLLM three timeouts and its back-off (about 7.5 s) before it answers 408:
# the agent's read timeout is well above that.
PATIENT = 30.0


@dataclass
class Gateway:
    engine: Managed
    litellm: Proxy


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    """The engine with a long prefill behind a LiteLLM whose `timeout` is 1 s: short turns pass,
    a turn whose prefill outlasts the timeout does not. Shared by the cases that fit it."""
    engine = start_engine(*PREFILL)
    try:
        litellm = start_litellm(engine.url, params={"timeout": TIMEOUT})
        try:
            yield Gateway(engine, litellm)
        finally:
            litellm.stop()
    finally:
        engine.stop()


def hop_chain(tmp: Path, engine: Managed, litellm: Proxy, extra: str = "") -> Path:
    return chain_file(tmp, engine.url, ("litellm", f"url={litellm.url}"), extra=extra)


def routes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["route"]: r for r in doc["routes"]}


def findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    found = [f for f in doc["findings"] if f["route"] == "via:litellm"]
    assert found and len(found) == len(doc["findings"]), doc["findings"]
    return found


def no_failures(doc: dict[str, Any]) -> bool:
    """Every exchange of every route completed: ok, or a degradation (LiteLLM, a Python gateway,
    adds latency that a loaded machine can push past the noise floor: `slow`, reported only)."""
    return all(set(r["outcomes"]) <= {"ok", "slow", "buffered"} for r in doc["routes"])


def turns_seen(run: Any) -> list[tuple[int, str, int | None]]:
    """(turn, outcome, status) of every turn the agent made, as its user saw them."""
    return sorted((t.turn, t.outcome.value, t.status) for s in run.sessions for t in s.turns)


def prefills(recording: Path) -> dict[int, float]:
    """The engine's time to first token per turn, by its formula on the recorded body sizes."""
    rec = load(recording)
    bodies = [rec.request_body(x) for x in rec.exchanges]
    return {turn_number(json.loads(b)): TIMING.ttft(len(b)) for b in bodies}


def litellm_log(litellm: Proxy) -> str:
    """Everything LiteLLM has printed so far (its access log and its errors)."""
    return litellm.proc.log_tail(100_000_000)


def response_header(exchange: Any, name: str) -> str | None:
    return next((v for n, v in exchange.response_headers if n.lower() == name), None)


# --------------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_healthy_through_litellm(tmp_path: Path, gateway: Gateway) -> None:
    # Short tool results: every prefill stays well under LiteLLM's 1 s timeout.
    agent = record_through(gateway.litellm.url, tmp_path / "rec", turns=2, max_tokens=16, tool_result_bytes=200)
    assert agent.ok, turns_seen(agent)
    assert all(t < 0.7 * TIMEOUT for t in prefills(tmp_path / "rec").values()), prefills(tmp_path / "rec")

    # LiteLLM re-serialized every request: the engine (its digest comes back renamed) received
    # other bytes than the client sent. Judged on content, that is no change.
    rec = load(tmp_path / "rec")
    assert len(rec.exchanges) == 4
    for exchange in rec.exchanges:
        assert response_header(exchange, "x-litellm-version") == PINNED  # LiteLLM answered
        received = response_header(exchange, "llm_provider-x-proxycheck-request-sha256")
        assert received is not None and received != hashlib.sha256(rec.request_body(exchange)).hexdigest()

    status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, gateway.engine, gateway.litellm), *FAST)
    assert status == 0 and doc["verdict"] == "healthy" and doc["culprit"] is None, doc["summary"]
    assert [r["route"] for r in doc["routes"]] == ["direct", "via:litellm"]
    assert no_failures(doc), doc["routes"]
    assert all(f["outcome"] in ("slow", "buffered") for f in doc["findings"]), doc["findings"]


@pytest.mark.timeout(180)
def test_a_hop_that_trims_the_context_in_front_of_litellm_is_found_by_what_the_engine_saw(tmp_path: Path, gateway: Gateway) -> None:
    # The engine's report of what it received comes back through LiteLLM renamed
    # (llm_provider-x-proxycheck-request-parts): a trimming hop outside LiteLLM is request_mutated,
    # with what changed, not a vague content_mismatch; LiteLLM's own re-serialization is no change.
    agent = record_through(gateway.litellm.url, tmp_path / "rec", turns=3, max_tokens=16, tool_result_bytes=200)
    assert agent.ok, turns_seen(agent)
    trim = start_mitmdump("--mode", f"reverse:{gateway.litellm.url}", "-s", str(REPO / "addons" / "faults.py"),
                          "--set", "proxycheck_fault_truncate_messages=2")  # fmt: skip
    try:
        chain = chain_file(tmp_path, gateway.engine.url, ("trim", f"url={trim.url}"), ("litellm", f"url={gateway.litellm.url}"))
        status, doc = check(tmp_path, tmp_path / "rec", chain, *FAST)
    finally:
        trim.stop()
    assert (status, doc["verdict"], doc["culprit"]) == (1, "proxy", "trim"), doc["summary"]
    assert set(routes(doc)["via:litellm"]["outcomes"]) <= {"ok", "slow", "buffered"}, doc["routes"]
    # (LiteLLM's added latency may show as a degradation beside it: reported, not a failure.)
    mutated = [f for f in doc["findings"] if f["route"] == "via:trim" and f["outcome"] not in ("slow", "buffered")]
    assert mutated and {f["outcome"] for f in mutated} == {"request_mutated"}, doc["findings"]
    # The trim keeps the system prompt and the last 2 messages: the ones between are named.
    assert all(re.search(r"what the model sees changed: messages (\d+) -> 3: messages? [\d-]+ dropped", f["detail"])
               for f in mutated), [f["detail"] for f in mutated]  # fmt: skip


@pytest.mark.timeout(180)
def test_timeout_shorter_than_a_long_prefill(tmp_path: Path, gateway: Gateway) -> None:
    recording = tmp_path / "rec"
    logged = len(litellm_log(gateway.litellm))
    agent = record_through(gateway.litellm.url, recording, turns=3, max_tokens=16, tool_result_bytes=3000,
                           read_timeout=PATIENT)  # fmt: skip
    ttft = prefills(recording)
    k = min(turn for turn, t in ttft.items() if t > TIMEOUT)
    assert k > 1 and all(t < 0.7 * TIMEOUT for turn, t in ttft.items() if turn < k), ttft  # a clean start
    assert all(abs(t - TIMEOUT) > 0.3 * TIMEOUT for t in ttft.values()), ttft  # and margins
    # The agent wedged at turn k with LiteLLM's own 408: it holds its headers until the first
    # token, so the engine's early 200 never reached the client.
    assert turns_seen(agent) == sorted([(turn, "ok", 200) for turn in range(1, k)] * 2 + [(k, "http_error", 408)] * 2)
    # ... once it had tried each of them three times (two retries: its router's default).
    log = litellm_log(gateway.litellm)[logged:]
    assert log.count('"POST /v1/chat/completions HTTP/1.1" 408') == 2, log[-3000:]
    assert "Timeout on reading data from socket" in log and "LiteLLM Retried: 2 times" in log, log[-3000:]

    status, doc = check(tmp_path, recording, hop_chain(tmp_path, gateway.engine, gateway.litellm), *FAST)
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "litellm", doc["summary"]
    assert doc["first_turn"] == k and f"answers HTTP 408 from turn {k} on" in doc["summary"]
    assert routes(doc)["direct"]["failures"] == 0
    reps = routes(doc)["via:litellm"]["repetitions"]
    # The turns before k got through (ok, or `slow` on a loaded machine: a degradation, reported only).
    outcomes = dict(routes(doc)["via:litellm"]["outcomes"])
    assert outcomes.pop("http_error") == 2 * reps and sum(outcomes.values()) == 2 * (k - 1) * reps, outcomes
    assert set(outcomes) <= {"ok", "slow", "buffered"}, outcomes
    for finding in findings(doc):
        if finding["outcome"] in ("slow", "buffered"):
            continue
        assert finding["turn"] == k and finding["outcome"] == "http_error", finding
        assert finding["detail"].startswith("HTTP 408") and "litellm.Timeout" in finding["detail"], finding
        assert "hop litellm" in finding["advice"], finding


# The gap between two tokens that LiteLLM's 1 s stream_timeout must cut. LiteLLM's read timeout
# counts from when it starts the next read, after it has handled the first token: on a loaded
# machine that took over half a second, and a 1.5 s gap passed whole (both turns `ok`). Three
# times the timeout leaves it two seconds; the check's stall watchdog stays above the gap.
STREAM_GAP = 3.0
GAP_STALL = ("--pace", "fast", "--stall-timeout", "8")


@pytest.mark.timeout(150)
def test_stream_timeout_shorter_than_the_gap_between_tokens(tmp_path: Path) -> None:
    # Two tokens STREAM_GAP apart through a LiteLLM whose stream_timeout is 1 s: its 200 stream has
    # begun, so the timeout ends it with an error event in the stream (and no [DONE]).
    engine = start_engine("--ttft-per-kb", "0", "--token-interval", str(STREAM_GAP), "--tool-call-rate", "0")
    litellm = None
    try:
        litellm = start_litellm(engine.url, params={"stream_timeout": TIMEOUT})
        agent = record_through(litellm.url, tmp_path / "rec", turns=1, max_tokens=2, read_timeout=PATIENT)
        assert turns_seen(agent) == [(1, "stream_error", 200)] * 2
        assert all(t.content_events == 1 and "litellm.Timeout" in t.detail for s in agent.sessions for t in s.turns)

        status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, engine, litellm), *GAP_STALL)
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "litellm", doc["summary"]
        assert doc["first_turn"] == 1 and "sends errors inside streams" in doc["summary"]
        assert routes(doc)["direct"]["outcomes"] == {"ok": 4}  # two repetitions: the noise floor
        reps = routes(doc)["via:litellm"]["repetitions"]
        assert routes(doc)["via:litellm"]["outcomes"] == {"stream_error": 2 * reps}
        for finding in findings(doc):
            assert finding["outcome"] == "stream_error", finding
            assert finding["detail"].startswith("408: litellm.Timeout"), finding
    finally:
        if litellm is not None:
            litellm.stop()
        engine.stop()


@pytest.mark.timeout(180)
def test_master_key_from_the_chain_file(tmp_path: Path, gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    key = SDK_KEY  # the OpenAI SDK client below sends it, as a harness configured with the key does
    litellm = start_litellm(gateway.engine.url, master_key=key)
    recorder = start_mitmdump("--mode", f"reverse:{litellm.url}", "-s", RECORD, "--set", f"proxycheck_out={tmp_path / 'rec'}")
    try:
        # The key is needed. Without a database LiteLLM does not answer 401: no key is a 500 (its
        # error handler fails), another key a 400 (it looks for a virtual key in a database).
        body = {"model": "proxycheck-agent", "messages": [{"role": "user", "content": "hi"}]}
        refused = httpx.post(f"{litellm.url}/v1/chat/completions", json=body, timeout=10)
        assert refused.status_code == 500, refused.text
        refused = httpx.post(f"{litellm.url}/v1/chat/completions", json=body, timeout=10,
                             headers={"Authorization": "Bearer sk-another"})  # fmt: skip
        assert refused.status_code == 400 and "No connected db" in refused.text, refused.text
        client = converse("openai", recorder.url, model="proxycheck-agent", sessions=2, turns=2, max_tokens=16)
        assert client.ok, client.errors
        recorder.stop()

        # The recording holds no key: Authorization was redacted from every request.
        rec = load(tmp_path / "rec")
        assert len(rec.exchanges) == 4 and all("header:authorization" in x.redacted for x in rec.exchanges)
        assert not [p for p in (tmp_path / "rec").rglob("*") if p.is_file() and key.encode() in p.read_bytes()]

        # Without the key, LiteLLM's bare 500 is not taken for its fault: the key is asked for.
        chain = hop_chain(tmp_path, gateway.engine, litellm)
        done = run_proxycheck("check", str(tmp_path / "rec"), "--chain", str(chain), *FAST,
                              "--out", str(tmp_path / "run-without"), timeout=120)  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert "route via:litellm answered HTTP 500" in last and "may be refusing for want of the credential" in last
        assert 'supply it on [[hop]] name = "litellm" (line 3): headers = { "authorization" = "Bearer ${LITELLM_KEY}" }' in last

        # The chain file gives the key to the hop's route, from the environment.
        monkeypatch.setenv("LITELLM_KEY", key)
        auth = 'headers = { Authorization = "Bearer ${LITELLM_KEY}" }\n'
        chain = hop_chain(tmp_path, gateway.engine, litellm, extra=auth)
        status, doc = check(tmp_path, tmp_path / "rec", chain, *FAST)
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert no_failures(doc), doc["routes"]
        assert routes(doc)["via:litellm"]["exchanges"] == 4
        assert key not in json.dumps(doc)
        assert not [p for p in Path(doc["run"]).rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    finally:
        recorder.stop()
        litellm.stop()
