"""vLLM on CPU, a real engine, driven by real clients through the recorder and real hops: what
`sessions` reads of its streams, what `check` says of healthy chains and of hops that fail on what
a real engine does (a long prefill, a growing body, a refused context), and the demo told on it.

The same recordings are replayed against the reference engine too: what vLLM does that it did not
is either taught to it (core/testbed/refusals) or written down in docs/design.md.

Every test of the real engine lives in this one file, so that `--dist loadfile` keeps them on one
worker and the session starts its engines once (conftest.py), but for the bench runs that are
compared with each other (test_vllm_ab.py, run `alone`). The engines' start (tens of seconds) is
counted in the first test's time, hence the generous bound.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from demo_story import assert_story_told
from processes import EngineFactory, MitmdumpFactory, write_chain
from sdk import converse
from vllm_engine import MAX_MODEL_LEN, REPO, SERVED_MODEL, missing

from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed
from proxycheck.io.vllm import MEASURED_START_SECONDS

sys.path.insert(0, str(REPO / "tests" / "integration"))
from proxies import Proxy, start_nginx  # noqa: E402  (the proxy matrix's real nginx, stopped by pid)

pytestmark = pytest.mark.timeout(480)


# -- the demo, first: it starts its own engine, before the session's start ----------------------

# The start (about 40 s, minutes on a busy machine, at most START_TIMEOUT) and about a minute of story.
DEMO_TIMEOUT = 420


@pytest.mark.timeout(DEMO_TIMEOUT + 30)
def test_the_demo_runs_on_vllm(tmp_path: Path) -> None:
    # `proxycheck demo --engine vllm`, run as a user runs it. It starts its own vLLM, not the
    # session's: defined first, it runs while no engine of the session is up yet.
    reason = missing()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "demo"
    done = run_proxycheck("demo", "--engine", "vllm", "--out", str(out), timeout=DEMO_TIMEOUT)
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown
    # It says how long vLLM's start takes before it waits, and how long it took once ready.
    before = shown.index(f"about {MEASURED_START_SECONDS} s on 2 cores")
    assert re.search(r"vLLM ready in \d+ s", shown[before:]), shown[:2000]
    assert_story_told(out, shown)


# -- the session's engines --------------------------------------------------------------------


def test_openai_sdk_streams_from_vllm_are_read_whole_and_a_chain_of_just_the_engine_is_healthy(
    vllm: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(vllm, recording)
    client = converse("openai", recorder.url, model=SERVED_MODEL, sessions=2, turns=3, max_tokens=24,
                      include_usage=True, timeout=60, within=180)  # fmt: skip
    assert client.ok and len(client.lines) == 6, client.errors
    assert all(line["text"] for line in client.lines)  # the model said something every turn
    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()

    done = run_proxycheck("sessions", str(recording), "--json", timeout=60)
    assert done.returncode == 0, done.stderr
    sessions = json.loads(done.stdout)["sessions"]
    assert [len(s["turns"]) for s in sessions] == [3, 3]
    turns = [turn for session in sessions for turn in session["turns"]]
    assert {t["outcome"] for t in turns} == {"ok"}, [(t["outcome"], t["detail"]) for t in turns]
    for turn in turns:
        # vLLM's usage chunk (choices: [], after the finish reason) is read: its token count stands
        assert 0 < turn["completion_tokens"] <= 24, turn
        assert turn["finish_reason"] in ("stop", "length"), turn
        assert turn["ttft"] is not None and turn["ttft"] <= turn["duration"], turn

    chain = write_chain(tmp_path / "chain.toml", vllm.url, [])
    verdict_path = tmp_path / "verdict.json"
    done = run_proxycheck("check", str(recording), "--chain", str(chain), "--json", str(verdict_path),
                          "--out", str(tmp_path / "run"), "--pace", "fast", timeout=240)  # fmt: skip
    assert verdict_path.exists(), done.stderr
    verdict = json.loads(verdict_path.read_text())
    assert (done.returncode, verdict["verdict"]) == (0, "healthy"), done.stdout


def recorded(upstream: Managed, mitmdumps: MitmdumpFactory, out: Path, sdk: str, **options: object) -> list[dict]:
    """A recording in `out` of `sdk`'s conversations with `upstream` (vLLM, a hop in front of it, or
    the reference engine) through the recorder, asking for the model vLLM serves; the client's lines."""
    recorder = mitmdumps.recorder(upstream, out)
    client = converse(sdk, recorder.url, model=SERVED_MODEL, timeout=60, within=180, **options)
    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()
    return client.lines


def checked(recording: Path, chain: Path, tmp: Path, *argv: str) -> tuple[int, dict]:
    """`check RECORDING --chain CHAIN --pace fast ARGV`: its exit status and its verdict."""
    verdict_path = tmp / f"{chain.stem}-verdict.json"
    done = run_proxycheck("check", str(recording), "--chain", str(chain), "--json", str(verdict_path),
                          "--out", str(tmp / f"{chain.stem}-run"), "--pace", "fast", *argv, timeout=300)  # fmt: skip
    assert verdict_path.exists(), done.stderr
    return done.returncode, json.loads(verdict_path.read_text())


def test_a_conversation_that_outgrows_the_context_is_the_server_from_the_turn_vllm_refuses(
    vllm: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Turn 2 pastes a file of some 10k tokens: past the model's 8,192-token window, vLLM answers 400.
    recording = tmp_path / "recording"
    lines = recorded(vllm, mitmdumps, recording, "openai", sessions=1, turns=3, max_tokens=16, paste="2:4000")
    assert [line["ok"] for line in lines] == [True, False] and "400" in lines[1]["error"], lines
    hop = mitmdumps.faults(vllm)
    status, verdict = checked(recording, write_chain(tmp_path / "chain.toml", vllm.url, [("edge", hop.url)]), tmp_path)
    assert status == 1 and (verdict["verdict"], verdict["first_turn"]) == ("server", 2), verdict["summary"]
    assert verdict["culprit"] != "edge"
    refused = [f for f in verdict["findings"] if f["turn"] == 2 and f["route"] == "direct"]
    assert refused and all(f["outcome"] == "http_error" and "maximum context length" in f["detail"] for f in refused), \
        refused  # vLLM's own words, quoted  # fmt: skip


def nginx_in_front(engine: Managed, *directives: str) -> Proxy:
    """A real nginx streaming to `engine` (vLLM sends no X-Accel-Buffering: buffering is turned off
    here, as its users must), with `directives` more in its location."""
    return start_nginx(f"location / {{ proxy_pass {engine.url}; proxy_http_version 1.1; proxy_buffering off; "
                       f"{' '.join(directives)} }}")  # fmt: skip


def nginx_named_from_turn_2(recording: Path, engine: Managed, nginx: Proxy, tmp: Path) -> dict:
    """`check` of `recording` over `nginx` in front of `engine`: its verdict, once asserted to be nginx
    from turn 2 (exit 1)."""
    status, verdict = checked(recording, write_chain(tmp / "nginx.toml", engine.url, [("nginx", nginx.url)]), tmp)
    assert (status, verdict["verdict"], verdict["culprit"], verdict["first_turn"]) == (1, "proxy", "nginx", 2), \
        verdict["summary"]  # fmt: skip
    return verdict


# Turn 2 pastes a file of about 3k tokens (a word "lineN" is some 2.5 tokens): prefilled without the
# prefix cache, several seconds on two CPU cores (0.26 s for 350 tokens, 4.6 s for 2.6k), against
# turn 1's tenth of a second. The request body is some 12 KB, turn 1's a few hundred bytes.
LONG_PASTE = "2:1200"
READ_TIMEOUT = "2s"  # nginx's proxy_read_timeout: shorter than the long prefill, far longer than turn 1's
BODY_LIMIT = "8k"  # nginx's client_max_body_size: below turn 2's body, far above turn 1's


def test_a_wedge_recorded_through_the_hop_that_cut_a_long_prefill_is_that_hop_not_the_server(
    vllm_uncached: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # As a user meets it: the client talks through nginx, which gives up on turn 2 while the engine is
    # still prefilling; the recording (in front of nginx) holds that cut, not what the engine would
    # have taken. The direct replay must wait the real prefill out, not cut it and blame the engine,
    # and the engine must be let finish what nginx gave up on before the next repetition.
    nginx = nginx_in_front(vllm_uncached, f"proxy_read_timeout {READ_TIMEOUT};")
    try:
        recording = tmp_path / "recording"
        lines = recorded(nginx.proc, mitmdumps, recording, "openai", sessions=1, turns=3, max_tokens=16,
                         paste=LONG_PASTE, max_retries=0)  # fmt: skip
        assert [line["ok"] for line in lines] == [True, False], lines  # nginx ended turn 2's stream unanswered
        verdict = nginx_named_from_turn_2(recording, vllm_uncached, nginx, tmp_path)
    finally:
        nginx.stop()
    # vLLM sends its 200 headers at once and its first byte after the prefill: nginx, silent upstream
    # past its read timeout, can only close the stream it has begun (no 504)
    cut = [f for f in verdict["findings"] if f["route"] == "via:nginx"]
    assert {f["turn"] for f in cut} == {2} and {f["outcome"] for f in cut} == {"reset"}, cut


def test_anthropic_sdk_messages_from_vllm_through_a_hop_are_healthy_and_a_body_limit_is_named_from_its_turn(
    vllm: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    lines = recorded(vllm, mitmdumps, recording, "anthropic", sessions=2, turns=2, max_tokens=24, paste=LONG_PASTE)
    assert len(lines) == 4 and all(line["ok"] and line["text"] for line in lines), lines
    done = run_proxycheck("sessions", str(recording), "--json", timeout=60)
    turns = [t for s in json.loads(done.stdout)["sessions"] for t in s["turns"]]
    assert len(turns) == 4 and all(t["outcome"] == "ok" and t["path"] == "/v1/messages" for t in turns), turns
    hop = mitmdumps.faults(vllm)  # a mitmproxy hop with no fault in front of the engine
    status, verdict = checked(recording, write_chain(tmp_path / "chain.toml", vllm.url, [("edge", hop.url)]), tmp_path)
    assert (status, verdict["verdict"]) == (0, "healthy"), verdict["summary"]

    nginx = nginx_in_front(vllm, f"client_max_body_size {BODY_LIMIT};")
    try:
        verdict = nginx_named_from_turn_2(recording, vllm, nginx, tmp_path)
    finally:
        nginx.stop()
    refused = [f for f in verdict["findings"] if f["route"] == "via:nginx"]
    assert {f["turn"] for f in refused} == {2} and all("413" in f["detail"] for f in refused), refused


def test_greedy_replays_make_the_sampling_engine_answer_alike_so_content_is_compared_again(
    vllm: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    lines = recorded(vllm, mitmdumps, recording, "openai", sessions=2, turns=2, max_tokens=32)
    assert len(lines) == 4 and all(line["ok"] for line in lines), lines
    chain = write_chain(tmp_path / "chain.toml", vllm.url, [])
    # vLLM samples (temperature 1 from the model's generation config): the direct repetitions differ,
    # content is judged by rates only, and the verdict says how to compare it exchange by exchange.
    status, sampled = checked(recording, chain, tmp_path)
    assert (status, sampled["verdict"]) == (0, "healthy"), sampled["summary"]
    assert sampled["noise_floor"]["sampling"] and not sampled["noise_floor"]["deterministic"], sampled["noise_floor"]
    assert any("--greedy" in s for s in sampled["suggestions"]), sampled["suggestions"]
    greedy = write_chain(tmp_path / "greedy.toml", vllm.url, [])
    status, verdict = checked(recording, greedy, tmp_path, "--greedy")
    assert (status, verdict["verdict"]) == (0, "healthy"), verdict["summary"]
    floor = verdict["noise_floor"]
    assert floor["deterministic"] and floor["content_differs"] == 0 and floor["content_compared"] >= 4, floor
    assert not any("--greedy" in s for s in verdict["suggestions"]), verdict["suggestions"]


# -- the same recordings against both engines ---------------------------------------------------


def against(recording: Path, engine: Managed, tmp: Path) -> tuple[int, dict]:
    """`check` of `recording` against a chain that is `engine` alone: its exit status and verdict."""
    tmp.mkdir(exist_ok=True)
    return checked(recording, write_chain(tmp / "chain.toml", engine.url, []), tmp)


def test_a_recording_of_either_engine_replays_healthy_against_the_other(
    vllm: Managed, engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Recorded with the model name vLLM serves: neither the chain file nor the replay maps names.
    reference = engines("--served-model", SERVED_MODEL)
    for name, recorded_on, replayed_on, sdk, usage in (
        ("reference", reference, vllm, "openai", {"include_usage": True}),
        ("vllm-anthropic", vllm, reference, "anthropic", {}),
    ):
        recording = tmp_path / f"{name}-recording"
        lines = recorded(recorded_on, mitmdumps, recording, sdk, sessions=1, turns=2, max_tokens=12, **usage)
        assert [line["ok"] for line in lines] == [True, True], lines
        status, verdict = against(recording, replayed_on, tmp_path / name)
        assert (status, verdict["verdict"]) == (0, "healthy"), (name, verdict["summary"])


def test_what_vllm_refuses_is_reproduced_by_the_reference_engine_told_to_refuse_it(
    vllm: Managed, engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # One recording of three refusals by vLLM: another model name (404, the Anthropic SDK's), the
    # synthetic agent's tools (400: no tool parser), a turn 2 that pastes past the 8,192-token window
    # (400). Three conversations that start apart: the same first turn twice would read as one
    # session's retry.
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(vllm, recording)
    wrong = converse("anthropic", recorder.url, model="test-model", turns=1, timeout=60, within=120).lines
    agent = asyncio.run(run_agent(AgentOptions(base_url=recorder.url, model=SERVED_MODEL, turns=2, max_tokens=8,
                                               think=0.1, read_timeout=60)))  # fmt: skip
    long = converse("openai", recorder.url, model=SERVED_MODEL, turns=2, max_tokens=8, paste="2:4000", timeout=60,
                    within=180).lines  # fmt: skip
    time.sleep(1.2)
    recorder.stop()
    assert [line["ok"] for line in wrong + long] == [False, True, False], wrong + long
    assert [t.status for s in agent.sessions for t in s.turns] == [400]

    # The reference engine as it is answers all of it: the recording's failures are not reproduced.
    status, verdict = against(recording, engines(), tmp_path / "lenient")
    assert (status, verdict["verdict"]) == (0, "not-reproduced"), verdict["summary"]

    # Told to refuse as vLLM does, it refuses the same exchanges with the same statuses and words.
    strict = engines("--served-model", SERVED_MODEL, "--max-model-len", str(MAX_MODEL_LEN), "--no-tool-parser")
    status, verdict = against(recording, strict, tmp_path / "strict")
    assert (status, verdict["verdict"], verdict["culprit"]) == (1, "server", "engine"), verdict["summary"]
    details = " ".join(f["detail"] for f in verdict["findings"] if f["route"] == "direct")
    assert "The model `test-model` does not exist" in details, verdict["findings"]  # in the Anthropic shape
    assert "--enable-auto-tool-choice" in details and "maximum context length is 8192" in details, verdict["findings"]
