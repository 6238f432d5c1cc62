"""`proxycheck engine --replay DIR`: a real engine process answering with a recording's responses,
driven with httpx (the example recording, and recordings written into tmp dirs)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory

from proxycheck.core.protocol.sse import SSEEvent, parse
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.procs import Managed
from proxycheck.io.storage import Recording, RecordingWriter, load

pytestmark = pytest.mark.timeout(60)

EXAMPLE = Path(__file__).resolve().parents[2] / "replays" / "example-agent"
CHAT = "http://gw/openai/v1/chat/completions"


@dataclass
class Received:
    """What a client saw: status and headers (None if none came), bytes with arrival times
    (seconds after the request was sent), and the error that ended the read, if any."""

    status: int | None = None
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    t_headers: float | None = None
    error: Exception | None = None

    @property
    def data(self) -> bytes:
        return b"".join(c for _, c in self.chunks)


def post(url: str, body: bytes, headers: dict[str, str] | None = None, read_timeout: float = 10.0) -> Received:
    out = Received()
    timeout = httpx.Timeout(10.0, read=read_timeout)
    t0 = time.monotonic()
    try:
        with httpx.Client(timeout=timeout) as client:
            with client.stream("POST", url, content=body,
                               headers={"content-type": "application/json", **(headers or {})}) as resp:
                out.status, out.headers, out.t_headers = resp.status_code, resp.headers, time.monotonic() - t0
                for chunk in resp.iter_raw():
                    out.chunks.append((time.monotonic() - t0, chunk))
    except (httpx.ReadTimeout, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        out.error = exc
    return out


def replay(recording: Recording, engine: Managed, ex: RecordedExchange, **kw) -> Received:
    headers = {n: v for n, v in ex.request_headers if isinstance(v, str) and n.lower() == "x-session-id"}
    return post(engine.url + ex.path, recording.request_body(ex), headers, **kw)


# ------------------------------------------------------------------------------------------------
# The example recording


@pytest.fixture(scope="module")
def example() -> Recording:
    return load(EXAMPLE)


@pytest.fixture(scope="module")
def turns(example: Recording) -> dict[tuple[str, int], RecordedExchange]:
    by_xid = {ex.xid: ex for ex in example.exchanges}
    return {(s.id, t.turn): by_xid[t.xid] for s in summarize_sessions(example.exchanges, example.piece) for t in s.turns}


@pytest.fixture(scope="module")
def at_speed_1(module_engines: EngineFactory) -> Managed:
    return module_engines("--replay", str(EXAMPLE))


@pytest.fixture(scope="module")
def at_speed_0(module_engines: EngineFactory) -> Managed:
    return module_engines("--replay", str(EXAMPLE), "--replay-speed", "0")


@pytest.mark.parametrize("speed", [0, 1])
def test_every_finished_turn_gets_exactly_its_recorded_response(example, turns, at_speed_0, at_speed_1, speed) -> None:
    engine = at_speed_0 if speed == 0 else at_speed_1
    finished = {k: ex for k, ex in turns.items() if ex.finished}
    assert sorted(finished) == [("s1", 1), ("s1", 2), ("s1", 3), ("s2", 1), ("s2", 2)]
    for ex in finished.values():
        sent = example.request_body(ex)
        got = replay(example, engine, ex)
        assert got.error is None and got.status == ex.status
        assert got.data == ex.response_body  # the recorded bytes, in the recorded order
        assert got.headers["content-type"] == ex.response_header("content-type")
        assert got.headers["x-proxycheck-replay-match"] == f"session xid={ex.xid}"
        assert got.headers["x-proxycheck-request-sha256"] == hashlib.sha256(sent).hexdigest()
        assert got.headers["x-proxycheck-request-bytes"] == str(len(sent))


def test_speed_1_keeps_at_least_the_recorded_spacing(example, turns, at_speed_1) -> None:
    ex = turns[("s1", 3)]  # 22 events, 0.35 s to the first, 30 ms apart
    got = replay(example, at_speed_1, ex)
    assert got.data == ex.response_body
    # Lower bounds only (shared machines are slow, never fast): the engine writes each chunk no
    # earlier than its recorded offset from the request.
    assert got.t_headers is not None and got.t_headers >= ex.t_response - ex.t_request - 0.005
    assert got.chunks[0][0] >= ex.chunks[0][0] - ex.t_request - 0.005
    assert got.chunks[-1][0] >= ex.chunks[-1][0] - ex.t_request - 0.005
    assert got.chunks[-1][0] - got.chunks[0][0] > 0.2  # spread out, not one burst


def test_the_in_flight_turn_sends_its_12_events_then_holds_the_connection(example, turns, at_speed_0) -> None:
    ex = turns[("s1", 4)]
    assert ex.in_flight
    t0 = time.monotonic()
    got = replay(example, at_speed_0, ex, read_timeout=1.0)
    assert isinstance(got.error, httpx.ReadTimeout)  # silence, not a closed connection
    assert got.status == 200 and got.data == ex.response_body
    assert len([i for i in parse(got.data) if isinstance(i, SSEEvent)]) == 12
    assert time.monotonic() - t0 >= 1.0


def test_unknown_requests_get_404_with_the_reason(at_speed_0) -> None:
    unrelated = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "never recorded"}]})
    got = httpx.post(at_speed_0.url + "/v1/chat/completions", content=unrelated, timeout=10)
    assert got.status_code == 404 and "no recorded POST openai_chat exchange matches" in got.json()["message"]
    assert got.headers["x-proxycheck-request-bytes"] == str(len(unrelated))
    other = httpx.post(at_speed_0.url + "/v1/embeddings", json={"input": "x"}, timeout=10)
    assert other.status_code == 404 and "has no POST /v1/embeddings" in other.json()["message"]


def test_health_and_models_answer_in_replay_mode(at_speed_0) -> None:
    assert httpx.get(at_speed_0.url + "/health", timeout=5).status_code == 200
    assert httpx.get(at_speed_0.url + "/v1/models", timeout=5).json()["object"] == "list"


# ------------------------------------------------------------------------------------------------
# Recordings written for the tests


def chat_body(*contents: str) -> bytes:
    """A chat request whose history alternates user and assistant messages."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": c} for i, c in enumerate(contents)]
    return json.dumps({"model": "m", "stream": True, "messages": msgs}).encode()


def sse(*texts: str) -> list[bytes]:
    events = [b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": t}}]}).encode() + b"\n\n"
              for t in texts]
    return events + [b"data: [DONE]\n\n"]


class Writer:
    """Exchanges with explicit times, one second apart."""

    def __init__(self, path: Path) -> None:
        self.w = RecordingWriter(path)
        self.t = 0.0

    def exchange(self, body: bytes, *, headers=(), status: int | None = 200, resp_headers=(), streamed: bool = True,
                 chunks=(), gap: float = 0.02, ttfb: float = 0.05, end: bool = True, error: str | None = None) -> int:
        self.t += 1.0
        x = self.w.request("POST", CHAT, [("content-type", "application/json"), *headers], body, t=self.t)
        if status is not None:
            self.w.response(x, status, "", list(resp_headers), streamed=streamed, t=self.t + ttfb)
        t = self.t + ttfb
        for c in chunks:
            t += gap
            self.w.data(x, c, t=t)
        if error is not None:
            self.w.error(x, error, t=t + gap)
        elif end:
            self.w.end(x, t=t)
        return x


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Recording:
    path = tmp_path_factory.mktemp("replay") / "rec"
    w = Writer(path)
    json_answer = json.dumps({"choices": [{"index": 0, "message": {"content": "whole"}, "finish_reason": "stop"}]})
    w.exchange(chat_body("non-streamed"), streamed=False, ttfb=0.3, chunks=[json_answer.encode()], gap=0.0,
               resp_headers=[("content-type", "application/json"), ("content-length", "999"),
                             ("connection", "keep-alive"), ("keep-alive", "timeout=5"), ("x-request-id", "req-1"),
                             ("set-cookie", "secret=1")])
    w.exchange(chat_body("rate limited"), status=429, streamed=False, chunks=[b'{"error": "slow down"}'],
               resp_headers=[("content-type", "application/json"), ("retry-after", "7")])
    w.exchange(chat_body("reset"), chunks=sse("a", "b", "c")[:3], error="peer closed connection",
               resp_headers=[("content-type", "text/event-stream")])
    for key in ("alpha", "beta"):
        w.exchange(chat_body("same question"), headers=[("x-session-id", key)], chunks=sse(f"answer {key}"),
                   resp_headers=[("content-type", "text/event-stream")])
    w.exchange(chat_body("no headers ever"), status=None, end=False)
    w.exchange(chat_body("refused"), status=None, error="connection refused")
    w.w.close()
    return load(path)


@pytest.fixture(scope="module")
def written_engine(written: Recording, module_engines: EngineFactory) -> Managed:
    return module_engines("--replay", str(written.directory))


def by_text(recording: Recording, text: str) -> RecordedExchange:
    return next(ex for ex in recording.exchanges if text.encode() in recording.request_body(ex))


def test_non_streamed_answers_are_whole_with_cleaned_headers(written, written_engine) -> None:
    ex = by_text(written, "non-streamed")
    got = replay(written, written_engine, ex)
    assert got.status == 200 and got.data == ex.response_body
    assert got.headers["content-type"] == "application/json" and got.headers["x-request-id"] == "req-1"
    assert got.headers["content-length"] == str(len(ex.response_body))  # not the recorded 999
    assert "keep-alive" not in got.headers and "set-cookie" not in got.headers  # hop-by-hop, redacted
    assert got.t_headers is not None and got.t_headers >= 0.3  # after the recorded delay


def test_recorded_statuses_and_headers_come_back(written, written_engine) -> None:
    ex = by_text(written, "rate limited")
    got = replay(written, written_engine, ex)
    assert got.status == 429 and got.headers["retry-after"] == "7" and got.data == ex.response_body


def test_any_api_prefix_reaches_the_same_recording(written, written_engine) -> None:
    ex = by_text(written, "rate limited")
    got = post(written_engine.url + "/v1/chat/completions", written.request_body(ex))
    assert got.status == 429 and got.headers["x-proxycheck-replay-match"] == f"session xid={ex.xid}"


def test_a_recorded_reset_sends_its_bytes_then_closes(written, written_engine) -> None:
    ex = by_text(written, "reset")
    got = replay(written, written_engine, ex)
    assert isinstance(got.error, httpx.RemoteProtocolError)
    assert got.status == 200 and got.data == ex.response_body and ex.response_body


def test_session_keys_tell_identical_requests_apart(written, written_engine) -> None:
    for key in ("alpha", "beta", "beta", "alpha"):
        url = written_engine.url + "/openai/v1/chat/completions"
        got = post(url, chat_body("same question"), {"x-session-id": key})
        assert f"answer {key}".encode() in got.data


def test_no_recorded_headers_means_none_are_sent(written, written_engine) -> None:
    held = replay(written, written_engine, by_text(written, "no headers ever"), read_timeout=1.0)
    assert isinstance(held.error, httpx.ReadTimeout) and held.status is None
    refused = replay(written, written_engine, by_text(written, "refused"))
    assert isinstance(refused.error, httpx.RemoteProtocolError) and refused.status is None


# ------------------------------------------------------------------------------------------------
# Faults on top of a replay


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Recording:
    """One chat session of three turns, six events each."""
    path = tmp_path_factory.mktemp("replay") / "session"
    w = Writer(path)
    history: list[str] = []
    for turn in (1, 2, 3):
        history = history + [f"question {turn}"]
        w.exchange(chat_body(*history), chunks=sse(*(f"t{turn}w{i} " for i in range(5))),
                   resp_headers=[("content-type", "text/event-stream")])
        history = history + [f"answer {turn}"]
    w.w.close()
    return load(path)


@pytest.fixture(scope="module")
def faulty(session: Recording, module_engines: EngineFactory) -> Managed:
    return module_engines("--replay", str(session.directory), "--replay-speed", "0",
                          "--fault", "delay_headers:seconds=0.3,from_turn=2",
                          "--fault", "stall:after=2,from_turn=2,seconds=30",
                          "--fault", "status:code=503,from_turn=3")  # fmt: skip


def test_faults_apply_to_replayed_turns(session, faulty) -> None:
    first, second, third = session.exchanges
    clean = replay(session, faulty, first)
    assert clean.error is None and clean.data == first.response_body
    stalled = replay(session, faulty, second, read_timeout=1.0)
    assert isinstance(stalled.error, httpx.ReadTimeout) and stalled.t_headers is not None and stalled.t_headers >= 0.3
    cut = sum(n for _, n in second.chunks[:2])
    assert stalled.data == second.response_body[:cut]  # two recorded chunks, then silence
    failed = replay(session, faulty, third)
    assert failed.status == 503 and failed.t_headers is not None and failed.t_headers >= 0.3


# ------------------------------------------------------------------------------------------------
# Bad input


def test_bad_replay_arguments_are_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    RecordingWriter(empty).close()
    for args in (["--replay", str(tmp_path / "missing")], ["--replay", str(tmp_path)], ["--replay", str(empty)],
                 ["--replay-speed", "2"], ["--replay", str(EXAMPLE), "--replay-speed", "-1"]):
        result = run_proxycheck("engine", "--listen", "127.0.0.1:0", *args, timeout=30)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("proxycheck: ") and "Traceback" not in result.stderr
        assert "listening" not in result.stdout  # refused before any server started
