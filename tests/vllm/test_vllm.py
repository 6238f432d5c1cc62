"""vLLM on CPU, a real engine, driven by real clients through the recorder and real hops: what
`sessions` reads of its streams, what `check` says of healthy chains and of hops that fail on what
a real engine does (a long prefill, a growing body, a refused context), and the demo told on it.

The same recordings are replayed against the reference engine too: what vLLM does that it did not
is either taught to it (core/testbed/refusals) or written down in docs/design.md.

Every test of the real engine lives in this one file, so that `--dist loadfile` keeps them on one
worker and the session starts its engines once (conftest.py), but for the bench runs that are
compared with each other (test_vllm_ab.py, run `alone`). The engines' start (about a minute) is
counted in the first test's time, hence the generous bound.

The engine is many times slower on one CPU than on another (docs/design.md, "A real engine"), so no
case here assumes a speed: the clients' timeouts, the pasted prompts' sizes and a hop's read timeout
are derived from the speed measured on the engine the case got (`Engine.speed`), and a case that
cannot fit its time bound on this machine skips, saying so with the measured figures.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from demo_story import assert_story_told
from processes import EngineFactory, MitmdumpFactory, write_chain
from sdk import converse
from vllm_engine import MAX_MODEL_LEN, REPO, SERVED_MODEL, Engine, missing

from proxycheck.io.agent import AgentOptions, run_agent

sys.path.insert(0, str(REPO / "tests" / "integration"))
from proxies import Proxy, start_nginx  # noqa: E402  (the proxy matrix's real nginx, stopped by pid)

pytestmark = pytest.mark.timeout(480)


# -- the demo, first: it starts its own engine, before the session's start ----------------------

# The start (about a minute, minutes on a busy machine, at most START_TIMEOUT) and a few minutes of
# story on a slow CPU (its stall watchdog derived from the measured speed).
DEMO_TIMEOUT = 600


@pytest.mark.timeout(DEMO_TIMEOUT + 30)
def test_the_demo_runs_on_vllm(tmp_path: Path) -> None:
    # `proxycheck demo --engine vllm`, run as a user runs it. It starts its own vLLM, not the
    # session's: defined first, it runs while no engine of the session is up yet.
    reason = missing()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "demo"
    # On the last CPU only, as the session's engines are (ENGINE_CORES): a user's demo binds vLLM's
    # threads to every CPU, whose spinning starved the tests beside it (their direct streams bunched).
    # The demo reads the CPUs it may use, so it measures and fits itself to the one it gets.
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(allowed)})  # the demo's processes inherit it
    try:
        done = run_proxycheck("demo", "--engine", "vllm", "--out", str(out), timeout=DEMO_TIMEOUT)
    finally:
        os.sched_setaffinity(0, allowed)
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown
    # It says how long vLLM's start takes before it waits, how long it took once ready, the speed it
    # measured, and the waits it derived from it.
    before = shown.index("starting vLLM")
    assert re.search(r"about \d+ s on 2 cores", shown[before:]), shown[:2000]
    assert re.search(r"vLLM ready in \d+ s", shown[before:]), shown[:2000]
    assert re.search(r"first token [\d.]+ s after \d+ tokens", shown[before:]), shown[:3000]
    assert re.search(r"stalls judged after \d+ s", shown[before:]), shown[:3000]
    assert_story_told(out, shown)


# -- the session's engines --------------------------------------------------------------------

# What a chat request carries beside a turn's pasted words: the template, the question, the earlier
# turns and their answers (a few hundred tokens at most in these conversations).
CHAT_TOKENS = 300


def patience(engine: Engine, words: int = 0, max_tokens: int = 32) -> float:
    """A client's read timeout for a turn pasting `words` words on `engine`: four times the longest
    its answer can take with nothing cached (a whole prefill, `max_tokens` decoded), and a minute at
    least."""
    tokens = engine.speed.tokens_of(words) + CHAT_TOKENS
    return max(60.0, float(round(4 * engine.speed.answer_at_most(tokens, max_tokens))))


def client_bound(timeout: float, turns: int) -> float:
    """The whole client process's bound: every turn at its read timeout, and some to start."""
    return turns * timeout + 60


def test_openai_sdk_streams_from_vllm_are_read_whole_and_a_chain_of_just_the_engine_is_healthy(
    vllm: Engine, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(vllm.url, recording)
    timeout = patience(vllm, max_tokens=24)
    client = converse("openai", recorder.url, model=SERVED_MODEL, sessions=2, turns=3, max_tokens=24,
                      include_usage=True, timeout=timeout, within=client_bound(timeout, 6))  # fmt: skip
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


def recorded(upstream: str, mitmdumps: MitmdumpFactory, out: Path, sdk: str, timeout: float = 60.0,
             **options: object) -> list[dict]:  # fmt: skip
    """A recording in `out` of `sdk`'s conversations with `upstream` (the URL of vLLM, of a hop in
    front of it, or of the reference engine) through the recorder, asking for the model vLLM serves,
    the SDK's read timeout `timeout`; the client's lines."""
    recorder = mitmdumps.recorder(upstream, out)
    turns = int(options.get("sessions", 2)) * int(options.get("turns", 3))  # type: ignore[call-overload]
    client = converse(sdk, recorder.url, model=SERVED_MODEL, timeout=timeout, within=client_bound(timeout, turns),
                      **options)  # fmt: skip
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
    vllm: Engine, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Turn 2 pastes a file of some 15k tokens: past the model's 8,192-token window, vLLM answers 400
    # before any prefill.
    recording = tmp_path / "recording"
    lines = recorded(vllm.url, mitmdumps, recording, "openai", patience(vllm, max_tokens=16), sessions=1, turns=3,
                     max_tokens=16, paste="2:4000")  # fmt: skip
    assert [line["ok"] for line in lines] == [True, False] and "400" in lines[1]["error"], lines
    hop = mitmdumps.faults(vllm.url)
    status, verdict = checked(recording, write_chain(tmp_path / "chain.toml", vllm.url, [("edge", hop.url)]), tmp_path)
    assert status == 1 and (verdict["verdict"], verdict["first_turn"]) == ("server", 2), verdict["summary"]
    assert verdict["culprit"] != "edge"
    refused = [f for f in verdict["findings"] if f["turn"] == 2 and f["route"] == "direct"]
    assert refused and all(f["outcome"] == "http_error" and "maximum context length" in f["detail"] for f in refused), \
        refused  # vLLM's own words, quoted  # fmt: skip


def nginx_in_front(engine: Engine, *directives: str) -> Proxy:
    """A real nginx streaming to `engine` (vLLM sends no X-Accel-Buffering: buffering is turned off
    here, as its users must), with `directives` more in its location."""
    return start_nginx(f"location / {{ proxy_pass {engine.url}; proxy_http_version 1.1; proxy_buffering off; "
                       f"{' '.join(directives)} }}")  # fmt: skip


def nginx_named_from_turn_2(recording: Path, engine: Engine, nginx: Proxy, tmp: Path) -> dict:
    """`check` of `recording` over `nginx` in front of `engine`: its verdict, once asserted to be nginx
    from turn 2 (exit 1)."""
    status, verdict = checked(recording, write_chain(tmp / "nginx.toml", engine.url, [("nginx", nginx.url)]), tmp)
    assert (status, verdict["verdict"], verdict["culprit"], verdict["first_turn"]) == (1, "proxy", "nginx", 2), \
        verdict["summary"]  # fmt: skip
    return verdict


# A hop's read timeout shorter than a real long prefill: nginx's proxy_read_timeout is READ_MARGIN
# times what turn 1 (TURN_1_TOKENS at most, its template included) can take to its first token and
# next token, and a second at least; turn 2 pastes enough words ("lineN", some 3.5 tokens each) for a
# prefill, with the prefix cache off, of PREFILL_OVER times that timeout. On one AVX2 core (float32,
# first token 0.32 s, 5.3 s per 1k tokens, 10 tokens/s): 3 s and about 480 words; where a core
# prefills 1k tokens in 1 s: 1 s and some 800 words.
TURN_1_TOKENS = 100
READ_MARGIN = 4.0
PREFILL_OVER = 3.0
PREFILL_BOUND = 60.0  # s: a case whose prefill would take longer is too long for `make test` (paid several times)


def long_prefill_case(engine: Engine) -> tuple[float, int]:
    """(nginx's read timeout in seconds, turn 2's pasted words) on `engine`; a skip, saying the
    measured figures, where the prefill would not fit the model's window or the time bound."""
    speed = engine.speed
    read = max(1.0, READ_MARGIN * (speed.first_token_at_most(TURN_1_TOKENS) + speed.per_token))
    read = math.ceil(read * 2) / 2
    words = speed.words_for(PREFILL_OVER * read)
    tokens = speed.tokens_of(words) + CHAT_TOKENS
    longest = speed.first_token_at_most(tokens)
    if tokens > MAX_MODEL_LEN - 200 or longest > PREFILL_BOUND:
        pytest.skip(f"a prefill of {PREFILL_OVER:g} x a {read:g} s read timeout needs {tokens} tokens, up to "
                    f"{longest:.0f} s on this engine ({speed.describe()}): past the window or the "
                    f"{PREFILL_BOUND:.0f} s bound")  # fmt: skip
    return read, words


# Turn 2's paste in the Anthropic SDK's conversation: some 4.8 KB of text, 2k tokens (its prefill
# once, in the recording; replays hit the prefix cache), against nginx's client_max_body_size: turn
# 1's body is a few hundred bytes.
BODY_PASTE_WORDS = 600
BODY_LIMIT = "2k"


def test_a_wedge_recorded_through_the_hop_that_cut_a_long_prefill_is_that_hop_not_the_server(
    vllm_uncached: Engine, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # As a user meets it: the client talks through nginx, which gives up on turn 2 while the engine is
    # still prefilling; the recording (in front of nginx) holds that cut, not what the engine would
    # have taken. The direct replay must wait the real prefill out, not cut it and blame the engine,
    # and the engine must be let finish what nginx gave up on before the next repetition.
    read, words = long_prefill_case(vllm_uncached)
    nginx = nginx_in_front(vllm_uncached, f"proxy_read_timeout {round(read * 1000)}ms;")
    try:
        recording = tmp_path / "recording"
        lines = recorded(nginx.url, mitmdumps, recording, "openai", patience(vllm_uncached, words, 16), sessions=1,
                         turns=3, max_tokens=16, paste=f"2:{words}", max_retries=0)  # fmt: skip
        # nginx ended turn 2's stream unanswered
        assert [line["ok"] for line in lines] == [True, False], (lines, read, words, vllm_uncached.speed.describe())
        verdict = nginx_named_from_turn_2(recording, vllm_uncached, nginx, tmp_path)
    finally:
        nginx.stop()
    # vLLM sends its 200 headers at once and its first byte after the prefill: nginx, silent upstream
    # past its read timeout, can only close the stream it has begun (no 504)
    cut = [f for f in verdict["findings"] if f["route"] == "via:nginx"]
    assert {f["turn"] for f in cut} == {2} and {f["outcome"] for f in cut} == {"reset"}, cut


def test_anthropic_sdk_messages_from_vllm_through_a_hop_are_healthy_and_a_body_limit_is_named_from_its_turn(
    vllm: Engine, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    lines = recorded(vllm.url, mitmdumps, recording, "anthropic", patience(vllm, BODY_PASTE_WORDS, 24), sessions=2,
                     turns=2, max_tokens=24, paste=f"2:{BODY_PASTE_WORDS}")  # fmt: skip
    assert len(lines) == 4 and all(line["ok"] and line["text"] for line in lines), lines
    done = run_proxycheck("sessions", str(recording), "--json", timeout=60)
    turns = [t for s in json.loads(done.stdout)["sessions"] for t in s["turns"]]
    assert len(turns) == 4 and all(t["outcome"] == "ok" and t["path"] == "/v1/messages" for t in turns), turns
    hop = mitmdumps.faults(vllm.url)  # a mitmproxy hop with no fault in front of the engine
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
    vllm: Engine, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "recording"
    lines = recorded(vllm.url, mitmdumps, recording, "openai", patience(vllm), sessions=2, turns=2, max_tokens=32)
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


def against(recording: Path, engine: str, tmp: Path) -> tuple[int, dict]:
    """`check` of `recording` against a chain that is the engine at URL `engine` alone: its exit
    status and verdict."""
    tmp.mkdir(exist_ok=True)
    return checked(recording, write_chain(tmp / "chain.toml", engine, []), tmp)


def test_a_recording_of_either_engine_replays_healthy_against_the_other(
    vllm: Engine, engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # Recorded with the model name vLLM serves: neither the chain file nor the replay maps names.
    reference = engines("--served-model", SERVED_MODEL).url
    for name, recorded_on, replayed_on, sdk, usage in (
        ("reference", reference, vllm.url, "openai", {"include_usage": True}),
        ("vllm-anthropic", vllm.url, reference, "anthropic", {}),
    ):
        recording = tmp_path / f"{name}-recording"
        lines = recorded(recorded_on, mitmdumps, recording, sdk, patience(vllm, max_tokens=12), sessions=1, turns=2,
                         max_tokens=12, **usage)  # fmt: skip
        assert [line["ok"] for line in lines] == [True, True], lines
        status, verdict = against(recording, replayed_on, tmp_path / name)
        assert (status, verdict["verdict"]) == (0, "healthy"), (name, verdict["summary"])


def test_what_vllm_refuses_is_reproduced_by_the_reference_engine_told_to_refuse_it(
    vllm: Engine, engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # One recording of three refusals by vLLM: another model name (404, the Anthropic SDK's), the
    # synthetic agent's tools (400: no tool parser), a turn 2 that pastes past the 8,192-token window
    # (400). Three conversations that start apart: the same first turn twice would read as one
    # session's retry.
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(vllm.url, recording)
    timeout = patience(vllm, max_tokens=8)
    wrong = converse("anthropic", recorder.url, model="test-model", turns=1, timeout=timeout,
                     within=client_bound(timeout, 1)).lines  # fmt: skip
    agent = asyncio.run(run_agent(AgentOptions(base_url=recorder.url, model=SERVED_MODEL, turns=2, max_tokens=8,
                                               think=0.1, read_timeout=timeout)))  # fmt: skip
    long = converse("openai", recorder.url, model=SERVED_MODEL, turns=2, max_tokens=8, paste="2:4000", timeout=timeout,
                    within=client_bound(timeout, 2)).lines  # fmt: skip
    time.sleep(1.2)
    recorder.stop()
    assert [line["ok"] for line in wrong + long] == [False, True, False], wrong + long
    assert [t.status for s in agent.sessions for t in s.turns] == [400]

    # The reference engine as it is answers all of it: the recording's failures are not reproduced.
    status, verdict = against(recording, engines().url, tmp_path / "lenient")
    assert (status, verdict["verdict"]) == (0, "not-reproduced"), verdict["summary"]

    # Told to refuse as vLLM does, it refuses the same exchanges with the same statuses and words.
    strict = engines("--served-model", SERVED_MODEL, "--max-model-len", str(MAX_MODEL_LEN), "--no-tool-parser")
    status, verdict = against(recording, strict.url, tmp_path / "strict")
    assert (status, verdict["verdict"], verdict["culprit"]) == (1, "server", "engine"), verdict["summary"]
    details = " ".join(f["detail"] for f in verdict["findings"] if f["route"] == "direct")
    assert "The model `test-model` does not exist" in details, verdict["findings"]  # in the Anthropic shape
    assert "--enable-auto-tool-choice" in details and "maximum context length is 8192" in details, verdict["findings"]
