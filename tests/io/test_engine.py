"""The reference engine as a real process on a loopback port, driven with httpx."""

from __future__ import annotations

import hashlib
import json
import socket
import time

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.analysis import StreamTracker
from proxycheck.core.protocol.requestparts import HEADER_LIMIT, decode_parts
from proxycheck.io.procs import Managed, start_engine

pytestmark = pytest.mark.timeout(60)

PATHS = {
    "openai_chat": "/v1/chat/completions",
    "openai_completions": "/v1/completions",
    "anthropic_messages": "/v1/messages",
    "sglang_generate": "/generate",
}


def body_for(dialect: str, n: int = 6, stream: bool = True, **extra) -> dict:
    if dialect == "openai_completions":
        base = {"prompt": "Once", "max_tokens": n}
    elif dialect == "sglang_generate":
        base = {"text": "Once", "sampling_params": {"max_new_tokens": n}}
    else:
        base = {"model": "m", "messages": [{"role": "user", "content": "Once"}], "max_tokens": n}
    return {**base, "stream": stream, **extra}


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.01", "--ttft-base", "0.05", "--keepalive-timeout", "1")


def stream(url: str, path: str, doc: dict, client: httpx.Client | None = None, dialect: str | None = None):
    """POST and read the stream as a client would: (response, analysis, chunk times)."""
    own = client is None
    client = client or httpx.Client(timeout=10)
    raw = json.dumps(doc).encode()
    tracker = StreamTracker(dialect or dialects.detect(path))
    t0 = time.monotonic()
    try:
        with client.stream("POST", url + path, content=raw, headers={"content-type": "application/json"}) as resp:
            for chunk in resp.iter_raw():
                tracker.feed(chunk, time.monotonic() - t0)
            tracker.close(time.monotonic() - t0)
    finally:
        if own:
            client.close()
    return resp, tracker.analysis(), raw


@pytest.mark.parametrize("dialect", list(PATHS))
def test_streams_in_every_dialect_are_complete_and_paced(engine, dialect: str) -> None:
    resp, analysis, raw = stream(engine.url, PATHS[dialect], body_for(dialect, 6, stream_options={"include_usage": True}))
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["x-proxycheck-request-sha256"] == hashlib.sha256(raw).hexdigest()
    assert resp.headers["x-proxycheck-request-bytes"] == str(len(raw))
    result = analysis.result
    assert result.terminal and result.malformed == 0 and not analysis.incomplete_tail
    assert analysis.content_events == 6 and len(result.text.split()) == 6
    assert result.usage is not None and result.usage.completion_tokens == 6
    # TTFT >= base, and 6 tokens 10 ms apart are spread over about 50 ms after the first (the
    # engine schedules from its own clock, so the client may see the first one a little late).
    assert analysis.first_content >= 0.05
    assert analysis.last_content - analysis.first_content >= 0.04


@pytest.mark.parametrize("dialect", list(PATHS))
def test_non_streamed_answers_are_whole_documents(engine, dialect: str) -> None:
    raw = json.dumps(body_for(dialect, 5, stream=False)).encode()
    resp = httpx.post(engine.url + PATHS[dialect], content=raw, timeout=10)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
    result = dialects.parse_body(dialect, resp.content)
    assert result.terminal and len(result.text.split()) == 5
    assert resp.headers["x-proxycheck-request-sha256"] == hashlib.sha256(raw).hexdigest()


def test_answers_are_deterministic_per_body(engine) -> None:
    path = PATHS["openai_chat"]
    first = stream(engine.url, path, body_for("openai_chat", 8))[1].result.text
    again = stream(engine.url, path, body_for("openai_chat", 8))[1].result.text
    other = stream(engine.url, path, body_for("openai_chat", 8, temperature=0.5))[1].result.text
    assert first == again and first != other


def post_raw(url: str, path: str, raw: bytes) -> httpx.Response:
    return httpx.post(url + path, content=raw, headers={"content-type": "application/json"}, timeout=10)


def test_the_same_content_in_other_bytes_gets_the_same_answer(engine) -> None:
    path = PATHS["openai_chat"]
    doc = body_for("openai_chat", 8, stream=False, temperature=0.5)
    doc["messages"][0]["content"] = "Once, in Zürich"
    plain = json.dumps(doc, ensure_ascii=False).encode()
    # A gateway's re-serialization: other member order, spacing, escapes, 0.5 as 5e-1; and
    # members the model does not see (the model name it maps, stream options).
    respelled = json.dumps(dict(reversed(list(doc.items()))), indent=2).replace('"temperature": 0.5', '"temperature": 5e-1')
    gateway = {**doc, "model": "alias", "stream_options": {"include_usage": False}}
    answers = [post_raw(engine.url, path, raw) for raw in (plain, respelled.encode(), json.dumps(gateway).encode())]
    assert all(r.status_code == 200 for r in answers)
    texts = {dialects.parse_body("openai_chat", r.content).text for r in answers}
    assert len(texts) == 1
    raw_digests = {r.headers["x-proxycheck-request-sha256"] for r in answers}
    assert len(raw_digests) == 3  # the engine did see three different bodies
    assert answers[0].headers["x-proxycheck-request-canonical-sha256"] == answers[1].headers[
        "x-proxycheck-request-canonical-sha256"]
    parts = [decode_parts(r.headers["x-proxycheck-request-parts"]) for r in answers]
    assert parts[0].view == parts[1].view == parts[2].view and parts[2].model == "alias"
    # What the model sees, changed: another answer, and another view in the header.
    other = post_raw(engine.url, path, json.dumps({**doc, "temperature": 0.6}).encode())
    assert dialects.parse_body("openai_chat", other.content).text not in texts
    assert decode_parts(other.headers["x-proxycheck-request-parts"]).view != parts[0].view


def test_the_parts_header_describes_the_request_within_bounds(engine) -> None:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(400)]
    doc = body_for("anthropic_messages", 2, stream=False, messages=messages, system="Be brief.", temperature=0.2)
    resp = post_raw(engine.url, PATHS["anthropic_messages"], json.dumps(doc).encode())
    assert resp.status_code == 200
    value = resp.headers["x-proxycheck-request-parts"]
    assert len(value) <= HEADER_LIMIT
    parts = decode_parts(value)
    assert parts.message_count == 400 and parts.system is not None and ("temperature", "0.2") in parts.params
    assert ("max_tokens", "2") in parts.params and parts.model == "m"


def test_tools_offered_give_tool_calls_on_some_turns(engine) -> None:
    tools = [{"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object",
                                                                                   "properties": {"k": {"type": "string"}}}}}]
    names = []
    for i in range(12):
        doc = body_for("openai_chat", 4, tools=tools, messages=[{"role": "user", "content": f"task {i}"}])
        result = stream(engine.url, PATHS["openai_chat"], doc)[1].result
        names.extend(c.name for c in result.tool_calls)
        assert result.terminal and all(c.arguments_valid for c in result.tool_calls)
    assert 0 < len(names) < 12 and set(names) == {"run_tests"}


def test_models_and_health(engine) -> None:
    assert httpx.get(engine.url + "/health", timeout=5).status_code == 200
    models = httpx.get(engine.url + "/v1/models", timeout=5).json()
    assert models["data"][0]["id"] == "proxycheck-reference"


def test_bad_bodies_get_400_with_the_digest(engine) -> None:
    resp = httpx.post(engine.url + PATHS["openai_chat"], content=b"{oops", timeout=5)
    assert resp.status_code == 400 and resp.headers["x-proxycheck-request-bytes"] == "5"
    # Not JSON: the raw digest only (there is no canonical form, nor parts, to report).
    assert "x-proxycheck-request-canonical-sha256" not in resp.headers
    assert "x-proxycheck-request-parts" not in resp.headers


def test_idle_keepalive_connections_are_closed(engine) -> None:
    # --keepalive-timeout 1: an idle connection is closed by the engine after about a second.
    with socket.create_connection((engine.host, engine.port), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(1.6)
        s.settimeout(5)
        assert s.recv(4096) == b""  # EOF: the engine hung up


@pytest.fixture(scope="module")
def faulty(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.01", "--fault", "stall:after=4,from_turn=2,seconds=30",
                          "--fault", "delay_headers:seconds=0.5,from_turn=3")  # fmt: skip


def turn(n: int) -> list[dict]:
    msgs = [{"role": "user", "content": "q0"}]
    for i in range(1, n):
        msgs += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": f"q{i}"}]
    return msgs


def test_stall_fault_fires_from_its_turn(faulty) -> None:
    ok = stream(faulty.url, PATHS["openai_chat"], body_for("openai_chat", 8, messages=turn(1)))[1]
    assert ok.result.terminal
    client = httpx.Client(timeout=httpx.Timeout(10, read=1.0))
    with pytest.raises(httpx.ReadTimeout):
        stream(faulty.url, PATHS["openai_chat"], body_for("openai_chat", 8, messages=turn(2)), client=client)
    client.close()


def test_delay_headers_fault(faulty) -> None:
    t0 = time.monotonic()
    resp = httpx.post(faulty.url + PATHS["openai_chat"], json=body_for("openai_chat", 2, stream=False, messages=turn(3)),
                      timeout=10)
    assert resp.status_code == 200 and time.monotonic() - t0 >= 0.5


def test_a_pause_is_a_silence_then_the_whole_answer() -> None:
    # A healthy engine's long silence: 3 events, nothing for 1.5 s, then the rest to the end.
    with start_engine("--token-interval", "0.01", "--fault", "pause:after=3,seconds=1.5") as proc:
        analysis = stream(proc.url, PATHS["openai_chat"], body_for("openai_chat", 8))[1]
    times = analysis.content_times
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert analysis.result.terminal and len(times) == 8
    assert max(gaps) >= 1.5 and sorted(gaps)[-2] < 1.0  # one silence only, then the rest of the answer
    assert 1 <= gaps.index(max(gaps)) <= 2  # after the first events (the first may be a role-only chunk)


@pytest.mark.parametrize(
    "spec,check",
    [
        ("close:after=3", "reset"),
        ("status:code=503", "status"),
        ("drop_terminal", "truncated"),
    ],
)
def test_other_faults(spec: str, check: str) -> None:
    with start_engine("--token-interval", "0.01", "--fault", spec) as proc:
        if check == "reset":
            with pytest.raises(httpx.RemoteProtocolError):
                stream(proc.url, PATHS["openai_chat"], body_for("openai_chat", 8))
        elif check == "status":
            resp = httpx.post(proc.url + PATHS["openai_chat"], json=body_for("openai_chat", 3), timeout=10)
            assert resp.status_code == 503 and "injected fault" in resp.json()["message"]
        else:
            analysis = stream(proc.url, PATHS["anthropic_messages"], body_for("anthropic_messages", 3))[1]
            assert analysis.content_events == 3 and not analysis.result.terminal


def test_bad_arguments_are_one_line_and_exit_2() -> None:
    for args in (["--listen", "nowhere"], ["--listen", "127.0.0.1:0", "--fault", "stall"],
                 ["--listen", "127.0.0.1:0", "--token-interval", "-1"]):
        result = run_proxycheck("engine", *args, timeout=30)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_jitter_varies_timing_between_identical_requests_but_not_content() -> None:
    proc = start_engine("--token-interval", "0.01", "--ttft-base", "0.05", "--ttft-per-kb", "0", "--jitter", "0.5")
    try:
        doc = body_for("openai_chat", n=10)
        seen = [stream(proc.url, "/v1/chat/completions", doc)[1] for _ in range(6)]
    finally:
        proc.stop()
    assert len({a.result.text for a in seen}) == 1  # the same answer every time
    durations = [a.last_content - a.first_content for a in seen]
    ttfts = [a.first_content for a in seen]
    # 9 gaps of 10 ms scaled by 0.5-1.5 each time: six draws do not all land within 10% of each other.
    assert max(durations) > 1.1 * min(durations) and max(ttfts) > 1.1 * min(ttfts)
