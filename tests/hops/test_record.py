"""The recorder, end to end: real mitmdump processes running addons/record.py in front of the
reference engine, driven by the synthetic agent (`run_agent`) and by httpx; every assertion is
about what a client saw and what the recording holds once loaded.

Engines and the hops are module-scoped and always stopped at the end of the module; each
scenario gets its own recorder (and recording directory), started when its test first asks.
Times are only bounded from below: the machines are shared and noisy. One temporary mitmproxy
confdir (so one CA) serves every hop; TLS clients trust its `mitmproxy-ca-cert.pem`.
"""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from processes import EngineFactory, MitmdumpFactory

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.sse import SSEEvent, SSEParser
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.redact import TOO_DEEP
from proxycheck.core.recording.summary import SessionSummary, summarize_sessions
from proxycheck.core.testbed.conversation import Conversation, ConversationConfig
from proxycheck.io.agent import AgentOptions, AgentRun, run_agent
from proxycheck.io.procs import Managed, mitmdump_path
from proxycheck.io.storage import Recording, load

REPO = Path(__file__).resolve().parents[2]
ADDON = str(REPO / "addons" / "record.py")
CHAT = "/v1/chat/completions"
THINK = 0.3  # seconds the agents wait between turns
THINK_TOLERANCE = 0.05  # a recorded think time may be this much shorter than the agent's sleep
SLOW_TOKENS = 0.1  # token interval of the slow engine


# --------------------------------------------------------------------------------------------
# processes


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.002", "--ttft-per-kb", "0", "--tool-call-rate", "0.6",
                          "--max-answer-tokens", "0")  # answers as long as asked: large bodies


@pytest.fixture(scope="module")
def slow_engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", str(SLOW_TOKENS), "--ttft-per-kb", "0")


@pytest.fixture(scope="module")
def resetting_engine(module_engines: EngineFactory) -> Managed:
    """An engine that closes the connection after the third event of every stream."""
    return module_engines("--token-interval", "0.01", "--fault", "close:after=3")


@pytest.fixture(scope="module")
def confdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mitmproxy-conf")


@dataclass
class Hop:
    """A running mitmdump and, when it records, its recording directory."""

    proc: Managed
    out: Path | None = None

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def https(self) -> str:
        return f"https://127.0.0.1:{self.proc.port}"

    def recording(self) -> Recording:
        assert self.out is not None
        return load(self.out)

    def log(self) -> str:
        return self.proc.log_path.read_text(errors="replace")


HopFactory = Callable[..., Hop]


@pytest.fixture(scope="module")
def hops(tmp_path_factory: pytest.TempPathFactory, confdir: Path, module_mitmdumps: MitmdumpFactory) -> HopFactory:
    """`hops(mode, *args, record=True, out=None)`: a mitmdump in that mode with the recorder
    (writing to a fresh directory unless `out` is given), sharing the module's CA."""

    def start(mode: str, *args: str, record: bool = True, out: Path | None = None) -> Hop:
        argv = ["--mode", mode, "--set", f"confdir={confdir}", *args]
        if record:
            out = out or tmp_path_factory.mktemp("rec") / "recording"
            argv += ["-s", ADDON, "--set", f"proxycheck_out={out}"]
        return Hop(module_mitmdumps(*argv), out if record else None)

    return start


def ca_context(confdir: Path) -> ssl.SSLContext:
    """A client TLS context that trusts the hops' CA and offers h2 before http/1.1."""
    context = _H2First(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(confdir / "mitmproxy-ca-cert.pem")
    return context


class _H2First(ssl.SSLContext):
    """httpx offers ALPN ["http/1.1", "h2"] and mitmproxy honours the client's order, so an
    httpx client with http2=True gets HTTP/1.1 through mitmproxy; browsers and most SDKs put h2
    first, as this context does (see docs/mitmproxy.md)."""

    def set_alpn_protocols(self, protocols):  # type: ignore[no-untyped-def]
        super().set_alpn_protocols(sorted(protocols, key=lambda p: p != "h2"))


# --------------------------------------------------------------------------------------------
# requests and what the client saw


def chat_body(*, max_tokens: int = 8, stream: bool = True, content: str = "hello", **extra: object) -> bytes:
    doc = {"model": "m", "max_tokens": max_tokens, "stream": stream,
           "messages": [{"role": "user", "content": content}], **extra}
    return json.dumps(doc).encode()


@dataclass
class Seen:
    """One exchange as the client saw it; `end` is "clean", "closed" (the connection went
    before the body was complete) or "no_response"."""

    end: str = "no_response"
    status: int | None = None
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    http_version: str = ""
    raw: bytes = b""
    events: list[SSEEvent] = field(default_factory=list)


def observe(
    url: str,
    body: bytes | Iterator[bytes],
    *,
    client: httpx.Client | None = None,
    headers: dict[str, str] | None = None,
    on_chunk: Callable[[bytes], None] | None = None,
) -> Seen:
    """POST `body` and read the response to its end, whatever that end is."""
    own = client is None
    client = client or httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0), trust_env=False)
    seen = Seen()
    parser = SSEParser()
    start = time.monotonic()
    items = []
    try:
        with client.stream("POST", url, content=body,
                           headers={"content-type": "application/json", **(headers or {})}) as response:
            seen.status, seen.headers, seen.http_version = response.status_code, response.headers, response.http_version
            seen.end = "open"
            for chunk in response.iter_raw():
                seen.raw += chunk
                items += parser.feed(chunk, time.monotonic() - start)
                if on_chunk is not None:
                    on_chunk(chunk)
        seen.end = "clean"
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ReadTimeout):
        seen.end = "closed" if seen.end == "open" else "no_response"
    finally:
        if own:
            client.close()
    items += parser.close(time.monotonic() - start)
    seen.events = [i for i in items if isinstance(i, SSEEvent)]
    return seen


def normalized(raw: bytes) -> bytes:
    """A response without the engine's `created` timestamp, the one thing that may differ
    between two identical requests."""
    return re.sub(rb'"created": ?\d+', b'"created":0', raw)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sessions_of(rec: Recording) -> list[SessionSummary]:
    headers = rec.meta.get("source", {}).get("session_headers") or ()
    return summarize_sessions(rec.exchanges, rec.piece, **({"session_headers": headers} if headers else {}))


def only(exchanges: list[RecordedExchange]) -> RecordedExchange:
    assert len(exchanges) == 1, [(x.xid, x.url) for x in exchanges]
    return exchanges[0]


# --------------------------------------------------------------------------------------------
# sessions: what the recording shows matches what the agent did


def agent_options(base_url: str, **kw: object) -> AgentOptions:
    defaults = dict(sessions=2, turns=4, think=THINK, read_timeout=15.0, connect_timeout=5.0, max_tokens=16,
                    tool_result_bytes=1500)
    return AgentOptions(base_url, **{**defaults, **kw})  # type: ignore[arg-type]


def assert_recorded_like(run: AgentRun, rec: Recording, *, server_peer: str) -> list[SessionSummary]:
    """The recording holds the agent's sessions: same turns and request sizes, every response
    byte for byte as long as the agent's, think times no shorter than the agent waited, and the
    connection facts of one kept-alive client per session."""
    assert run.ok, [[t.outcome.value for t in s.turns] for s in run.sessions]
    assert rec.warnings == []
    sessions = sessions_of(rec)
    by_sizes = {tuple(t.request_bytes for t in s.turns): s for s in sessions}
    assert len(sessions) == len(run.sessions)
    exchanges = {x.xid: x for x in rec.exchanges}
    for agent_session in run.sessions:
        sizes = tuple(t.request_bytes for t in agent_session.turns)
        recorded = by_sizes[sizes]  # KeyError: no recorded session has the agent's request sizes
        assert [t.turn for t in recorded.turns] == list(range(1, len(sizes) + 1))
        assert all(t.outcome.value == "ok" and t.streamed for t in recorded.turns)
        assert [t.think_time for t in recorded.turns][0] is None
        assert all(t.think_time >= THINK - THINK_TOLERANCE for t in recorded.turns[1:]), recorded.turns
        turns = [exchanges[t.xid] for t in recorded.turns]
        assert [len(x.response_body) for x in turns] == [t.response_bytes for t in agent_session.turns]
        conns = [x.conn for x in turns]
        assert all(c is not None for c in conns)
        assert len({c.client_id for c in conns}) == 1  # one kept-alive client connection per session
        assert [c.server_reused for c in conns] == [False] + [True] * (len(conns) - 1)
        assert all(c.server_idle >= THINK - THINK_TOLERANCE for c in conns[1:])
        assert {c.peer for c in conns} == {server_peer}
        assert {c.http_version for c in conns} == {"HTTP/1.1"} and {c.tls for c in conns} == {False}
    client_ids = {exchanges[s.turns[0].xid].conn.client_id for s in sessions}
    assert len(client_ids) == len(sessions)
    return sessions


@pytest.mark.timeout(60)
async def test_reverse_mode_records_the_agent_sessions(engine: Managed, hops: HopFactory) -> None:
    hop = hops(f"reverse:{engine.url}")
    run = await run_agent(agent_options(hop.url))
    rec = hop.recording()
    sessions = assert_recorded_like(run, rec, server_peer=f"127.0.0.1:{engine.port}")
    assert {s.grouped_by for s in sessions} == {"continuity"}
    meta = rec.meta["source"]
    assert meta["mode"] == [f"reverse:{engine.url}"] and meta["mitmproxy"]
    assert all(x.url.startswith(f"{engine.url}/v1/chat/completions") for x in rec.exchanges)


@pytest.mark.timeout(60)
async def test_forward_mode_groups_sessions_by_the_configured_header(engine: Managed, hops: HopFactory) -> None:
    hop = hops("regular", "--set", "proxycheck_session_header=x-agent-session")
    run = await run_agent(agent_options(engine.url, proxy=hop.url, session_id_header="x-agent-session",
                                        dialect="anthropic_messages"))
    rec = hop.recording()
    assert rec.meta["source"]["session_headers"] == ["x-agent-session"]
    sessions = assert_recorded_like(run, rec, server_peer=f"127.0.0.1:{engine.port}")
    assert sorted(s.id for s in sessions) == ["s1", "s2"]
    assert {s.grouped_by for s in sessions} == {"header:x-agent-session"}
    assert {s.dialect for s in sessions} == {"anthropic_messages"}


@pytest.mark.timeout(60)
async def test_upstream_mode_records_in_front_of_another_proxy(engine: Managed, hops: HopFactory) -> None:
    inner = hops("regular", "--set", "stream_large_bodies=1", record=False)
    hop = hops(f"upstream:{inner.url}")
    run = await run_agent(agent_options(engine.url, proxy=hop.url, sessions=2, turns=3))
    rec = hop.recording()
    assert_recorded_like(run, rec, server_peer=f"127.0.0.1:{inner.proc.port}")
    assert rec.meta["source"]["mode"] == [f"upstream:{inner.url}"]


def converse(client: httpx.Client, url: str, turns: int, session: str) -> list[Seen]:
    """A multi-turn agent conversation over one httpx client (one connection), think time
    THINK between turns."""
    conversation = Conversation(ConversationConfig("openai_chat", session, "m", 12, 800, 0))
    seen = []
    for turn in range(turns):
        if turn:
            time.sleep(THINK)
        got = observe(url, conversation.encode(), client=client)
        assert got.end == "clean" and got.status == 200, got
        result = dialects.parse_events("openai_chat", [(e.type, e.data) for e in got.events])
        conversation.add_reply(result.text, result.tool_calls)
        seen.append(got)
    return seen


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_tls_and_http2_on_the_client_side(
    mode: str, engine: Managed, hops: HopFactory, confdir: Path
) -> None:
    if mode == "reverse":
        hop = hops(f"reverse:{engine.url}")
        url, proxy = hop.https + CHAT, None
    else:
        # Through the recorder as a forward proxy (CONNECT) to a TLS-terminating reverse hop.
        target = hops(f"reverse:{engine.url}", "--set", "stream_large_bodies=1", record=False)
        ca = str(confdir / "mitmproxy-ca-cert.pem")
        hop = hops("regular", "--set", f"ssl_verify_upstream_trusted_ca={ca}")
        url, proxy = target.https + CHAT, hop.url
    context = ca_context(confdir)  # the first mitmdump in confdir made the CA: read it after one started
    with httpx.Client(http2=True, verify=context, proxy=proxy, timeout=30.0, trust_env=False) as client:
        seen = converse(client, url, 3, "tls")
    assert {s.http_version for s in seen} == {"HTTP/2"}
    rec = hop.recording()
    assert rec.warnings == []
    assert [x.response_body for x in rec.exchanges] == [s.raw for s in seen]
    assert {x.http_version for x in rec.exchanges} == {"HTTP/2.0"}
    assert {(x.conn.http_version, x.conn.tls) for x in rec.exchanges} == {("HTTP/2.0", True)}
    assert all(x.url.startswith("https://" if mode == "forward" else "http://") for x in rec.exchanges)
    [session] = sessions_of(rec)
    assert len(session.turns) == 3 and all(t.outcome.value == "ok" for t in session.turns)
    assert all(t.think_time >= THINK - THINK_TOLERANCE for t in session.turns[1:])


# --------------------------------------------------------------------------------------------
# streams pass through untouched


BODIES = {
    "chat stream": (CHAT, chat_body(max_tokens=30)),
    "chat json": (CHAT, chat_body(max_tokens=30, stream=False)),
    "messages stream": ("/v1/messages", chat_body(max_tokens=20)),
    "generate stream": ("/generate", json.dumps({"text": "hi", "stream": True,
                                                 "sampling_params": {"max_new_tokens": 12}}).encode()),
}


@pytest.mark.timeout(60)
def test_clients_get_the_same_bytes_with_and_without_the_recorder(engine: Managed, hops: HopFactory) -> None:
    hop = hops(f"reverse:{engine.url}")
    plain = hops(f"reverse:{engine.url}", "--set", "stream_large_bodies=1", record=False)
    for name, (path, body) in BODIES.items():
        direct = observe(engine.url + path, body)
        via_plain = observe(plain.url + path, body)
        via = observe(hop.url + path, body)
        assert direct.status == via.status == via_plain.status == 200, name
        assert via.end == "clean", name
        assert normalized(via.raw) == normalized(direct.raw) == normalized(via_plain.raw), name
        assert via.headers["x-proxycheck-request-sha256"] == sha(body), name
    rec = hop.recording()
    assert [x.path for x in rec.exchanges] == [path for path, _ in BODIES.values()]
    assert [x.streamed for x in rec.exchanges] == [True, False, True, True]
    assert all(x.t_end is not None and x.error is None for x in rec.exchanges)


# An addon that rewrites streamed chunks, to be loaded before the recorder: the recorder must
# compose with its stream callable and record what the client actually gets.
_REWRITER = '''
def responseheaders(flow):
    if "event-stream" in flow.response.headers.get("content-type", ""):
        flow.response.stream = lambda chunk: [chunk.replace(b"data: ", b"data:")] if chunk else []
'''


@pytest.mark.timeout(60)
def test_a_stream_callable_of_another_addon_is_composed_with(
    engine: Managed, hops: HopFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    rewriter = tmp_path_factory.mktemp("addon") / "rewriter.py"
    rewriter.write_text(_REWRITER)
    hop = hops(f"reverse:{engine.url}", "-s", str(rewriter))
    body = chat_body(max_tokens=20)
    direct = observe(engine.url + CHAT, body)
    via = observe(hop.url + CHAT, body)
    assert via.end == "clean" and b"data: " not in via.raw
    assert normalized(via.raw) == normalized(direct.raw).replace(b"data: ", b"data:")
    assert only(hop.recording().exchanges).response_body == via.raw


@pytest.mark.timeout(60)
def test_the_first_event_reaches_the_client_before_the_stream_ends(
    slow_engine: Managed, hops: HopFactory
) -> None:
    hop = hops(f"reverse:{slow_engine.url}")
    seen = observe(hop.url + CHAT, chat_body(max_tokens=15))
    assert seen.end == "clean" and seen.events[-1].data == "[DONE]"
    # 15 tokens 0.1 s apart: a buffering hop would hand them all over at once, at the end.
    assert seen.events[-1].time - seen.events[0].time >= 1.0
    ex = only(hop.recording().exchanges)
    assert ex.response_body == seen.raw
    assert ex.chunks[-1][0] - ex.chunks[0][0] >= 1.0


@pytest.mark.timeout(60)
def test_bodies_mitmproxy_streams_itself_are_recorded_whole(engine: Managed, hops: HopFactory) -> None:
    # stream_large_bodies makes mitmproxy stream bodies over 2 KB, keeping none of their bytes:
    # a request announced as large (Content-Length), a chunked one (mitmproxy only finds out
    # mid-body), and a large non-streamed JSON answer.
    hop = hops(f"reverse:{engine.url}", "--set", "stream_large_bodies=2k")
    sized = chat_body(max_tokens=400, stream=False, content="sized " + "z" * 100_000)
    chunked = chat_body(max_tokens=6, content="chunked " + "w" * 100_000)
    with httpx.Client(timeout=30.0, trust_env=False) as client:
        seen = [observe(hop.url + CHAT, sized, client=client),
                observe(hop.url + CHAT, iter([chunked[:5000], chunked[5000:]]), client=client)]  # type: ignore[arg-type]
    direct = observe(engine.url + CHAT, sized)
    assert normalized(seen[0].raw) == normalized(direct.raw) and len(direct.raw) > 2048
    assert seen[1].end == "clean" and seen[1].events[-1].data == "[DONE]"
    assert [s.headers["x-proxycheck-request-sha256"] for s in seen] == [sha(sized), sha(chunked)]
    rec = hop.recording()
    assert [rec.request_body(x) for x in rec.exchanges] == [sized, chunked]
    assert [x.response_body for x in rec.exchanges] == [s.raw for s in seen]
    assert [x.streamed for x in rec.exchanges] == [True, True]


# --------------------------------------------------------------------------------------------
# crashes and shutdowns


class StreamReader(threading.Thread):
    """Reads one long stream in the background, noting when each byte count was reached."""

    def __init__(self, url: str, body: bytes) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.progress: list[tuple[float, int]] = []
        self.raw = b""
        self.seen: Seen | None = None

    def on_chunk(self, chunk: bytes) -> None:
        self.raw += chunk
        self.progress.append((time.monotonic(), len(self.raw)))

    def run(self) -> None:
        self.seen = observe(self.url, self.body, on_chunk=self.on_chunk)

    def wait_for(self, seconds_of_stream: float) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.progress and time.monotonic() - self.progress[0][0] >= seconds_of_stream:
                return
            time.sleep(0.05)
        raise AssertionError("the stream did not start")

    def received_by(self, when: float) -> int:
        return max((n for t, n in self.progress if t <= when), default=0)


@pytest.mark.timeout(60)
def test_kill_9_mid_stream_leaves_the_exchange_in_flight_with_its_chunks(
    slow_engine: Managed, hops: HopFactory
) -> None:
    hop = hops(f"reverse:{slow_engine.url}")
    reader = StreamReader(hop.url + CHAT, chat_body(max_tokens=400))
    reader.start()
    reader.wait_for(3.0)
    killed_at = time.monotonic()
    hop.proc.kill()
    reader.join(15)
    assert reader.seen is not None and reader.seen.end == "closed"
    rec = hop.recording()
    ex = only(rec.exchanges)
    assert ex.status == 200 and ex.in_flight and not ex.interrupted and rec.closes == []
    # Chunk timings are flushed at least every second: what the client had a second and a half
    # before the kill is on disk.
    assert len(ex.response_body) >= reader.received_by(killed_at - 1.5) > 0
    shorter, longer = sorted((ex.response_body, reader.raw), key=len)
    assert longer.startswith(shorter)
    assert len(ex.chunks) > 1 and ex.chunks[-1][0] - ex.chunks[0][0] >= 1.0


@pytest.mark.timeout(60)
def test_sigterm_marks_in_flight_exchanges_and_only_llm_traffic_is_recorded(
    slow_engine: Managed, hops: HopFactory
) -> None:
    hop = hops(f"reverse:{slow_engine.url}")
    with httpx.Client(timeout=10.0, trust_env=False) as client:
        assert client.get(hop.url + "/v1/models").status_code == 200
        assert client.get(hop.url + "/health").status_code == 200
        assert client.post(hop.url + "/v1/embeddings", json={"input": "x"}).status_code == 404
        replayed = client.post(hop.url + CHAT, content=chat_body(max_tokens=2, stream=False),
                               headers={"content-type": "application/json", "x-proxycheck-replay": "run-1"})
        assert replayed.status_code == 200
    reader = StreamReader(hop.url + CHAT, chat_body(max_tokens=400))
    reader.start()
    reader.wait_for(1.0)
    hop.proc.stop()
    reader.join(15)
    rec = hop.recording()
    ex = only(rec.exchanges)  # neither the non-LLM paths nor the replayed request
    assert ex.in_flight and ex.interrupted and ex.status == 200 and ex.response_body
    assert reader.raw.startswith(ex.response_body) or ex.response_body.startswith(reader.raw)
    assert [(c["reason"], c["inflight"]) for c in rec.closes] == [("mitmproxy stopped", [ex.xid])]
    [session] = sessions_of(rec)
    assert session.turns[0].outcome.value == "in_flight"
    assert "proxycheck recorder: 1 replayed request(s) (x-proxycheck-replay) passed through unrecorded" in hop.log()


@pytest.mark.timeout(60)
def test_a_replayed_stream_passes_through_unbuffered(slow_engine: Managed, hops: HopFactory) -> None:
    # A replay through a chain the recorder stays in: not recorded, and still streamed as it
    # comes (mitmproxy buffers any response no addon marks as streamed).
    hop = hops(f"reverse:{slow_engine.url}")
    arrivals: list[float] = []
    with httpx.Client(timeout=10.0, trust_env=False) as client:
        t0 = time.monotonic()
        with client.stream("POST", hop.url + CHAT, content=chat_body(max_tokens=20),
                           headers={"content-type": "application/json", "x-proxycheck-replay": "run-1"}) as resp:
            for _ in resp.iter_raw():
                arrivals.append(time.monotonic() - t0)
    assert resp.status_code == 200 and len(arrivals) > 1
    # 20 tokens SLOW_TOKENS apart: the first bytes come long before the last.
    assert arrivals[0] < arrivals[-1] - 10 * SLOW_TOKENS
    assert hop.recording().exchanges == []


# --------------------------------------------------------------------------------------------
# errors


@pytest.mark.timeout(60)
def test_a_reset_mid_stream_is_recorded_as_an_error(resetting_engine: Managed, hops: HopFactory) -> None:
    hop = hops(f"reverse:{resetting_engine.url}")
    seen = observe(hop.url + CHAT, chat_body(max_tokens=20))
    assert seen.status == 200 and seen.end == "closed"
    ex = only(hop.recording().exchanges)
    assert ex.status == 200 and ex.error and ex.t_error is not None and ex.t_end is None
    assert ex.response_body and seen.raw.startswith(ex.response_body)
    [session] = sessions_of(hop.recording())
    assert session.turns[0].outcome.value == "reset"


SECRETS = {
    "authorization": "Bearer secret-auth-1",
    "x-api-key": "secret-xkey-2",
    "cookie": "sid=secret-cookie-3",
    "x-custom-secret": "secret-custom-4",
}


@pytest.fixture(scope="module")
def redacting_hop(engine: Managed, hops: HopFactory) -> Hop:
    return hops(
        f"reverse:{engine.url}",
        "--set", "proxycheck_redact_headers=x-custom-secret",
        "--set", "proxycheck_redact_query=sessiontoken",
        "--set", "proxycheck_redact_body=metadata.api_key",
    )  # fmt: skip


@pytest.mark.timeout(60)
def test_secrets_never_reach_the_recording_and_files_are_private(redacting_hop: Hop) -> None:
    # One message over 1 MiB makes the writer put it in blobs/ (a worker thread journals it).
    big = "x" * (1100 << 10)
    bodies = [
        chat_body(max_tokens=4, stream=False, metadata={"api_key": "secret-body-5", "user": "u1"}),
        chat_body(max_tokens=4, content=big, metadata={"api_key": "secret-body-5"}),
    ]
    query = "?key=secret-query-6&sessiontoken=secret-query-7&api_key=secret-query-8&keep=1"
    for body in bodies:
        seen = observe(redacting_hop.url + CHAT + query, body, headers=SECRETS)
        assert seen.status == 200 and seen.end == "clean"
        assert seen.headers["x-proxycheck-request-sha256"] == sha(body)  # upstream got it unredacted
    out = redacting_hop.out
    assert out is not None
    paths = [out, *out.rglob("*")]
    assert {p.name for p in paths} >= {"journal.jsonl", "recording.json", "blobs"}
    for path in paths:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
        if path.is_file():
            assert b"secret-" not in path.read_bytes(), path
    rec = redacting_hop.recording()
    for ex in rec.exchanges[:2]:
        assert set(ex.redacted) >= {"header:authorization", "header:x-api-key", "header:cookie",
                                    "header:x-custom-secret", "query:key", "query:sessiontoken",
                                    "query:api_key", "body:metadata.api_key"}
        assert "keep=1" in ex.url
    assert len(rec.request_body(rec.exchanges[1])) > len(big)


@pytest.mark.timeout(60)
def test_a_body_too_deep_to_redact_is_not_kept_and_the_flow_goes_through(engine: Managed, redacting_hop: Hop) -> None:
    # JSON nested deeper than Python's recursion limit: redacting its body paths cannot walk it,
    # so the recording keeps none of it (a configured secret could hide in it).
    depth = 50_000
    body = b'{"model":"m","messages":' + b"[" * depth + b"]" * depth + b"}"
    marker = f"after the deep body {time.monotonic()}"
    direct = observe(engine.url + CHAT, body)
    via = observe(redacting_hop.url + CHAT, body)
    assert via.status == direct.status and normalized(via.raw) == normalized(direct.raw)
    after = observe(redacting_hop.url + CHAT, chat_body(max_tokens=3, content=marker))
    assert after.status == 200 and after.end == "clean"
    rec = redacting_hop.recording()
    (deep,) = [x for x in rec.exchanges if "body:*" in x.redacted]
    assert rec.request_body(deep) == TOO_DEEP.encode() and deep.response_body == via.raw
    later = [x for x in rec.exchanges if marker.encode() in rec.request_body(x)]
    assert len(later) == 1 and later[0].response_body == after.raw


@pytest.mark.timeout(60)
def test_a_filter_expression_chooses_the_flows_and_redaction_can_be_off(engine: Managed, hops: HopFactory) -> None:
    hop = hops(f"reverse:{engine.url}", "--set", "proxycheck_filter=~u /v1/models & ~m GET",
               "--set", "proxycheck_redact=false")
    with httpx.Client(timeout=10.0, trust_env=False) as client:
        assert client.get(hop.url + "/v1/models", headers={"authorization": "Bearer kept"}).status_code == 200
        assert client.get(hop.url + "/health").status_code == 200
    assert observe(hop.url + CHAT, chat_body(max_tokens=3)).end == "clean"
    rec = hop.recording()
    ex = only(rec.exchanges)
    assert (ex.method, ex.path, ex.status, ex.streamed) == ("GET", "/v1/models", 200, False)
    assert ex.request_header("authorization") == "Bearer kept" and ex.redacted == ()
    assert b'"object": "list"' in ex.response_body
    assert "flows matching '~u /v1/models & ~m GET' to" in hop.log() and "(redaction OFF)" in hop.log()


def unwritable_dir(base: Path) -> Path:
    """A directory path this process cannot create (root ignores permission bits, so a
    read-only pseudo file system is tried too)."""
    locked = base / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    for candidate in (locked / "recording", Path("/sys/proxycheck-unwritable"), Path("/proc/proxycheck-unwritable")):
        try:
            candidate.mkdir()
        except OSError:
            return candidate
        candidate.rmdir()
    raise AssertionError("found no directory this process cannot create")


@pytest.mark.timeout(60)
def test_an_unwritable_directory_warns_once_and_traffic_flows(
    engine: Managed, hops: HopFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = unwritable_dir(tmp_path_factory.mktemp("unwritable"))
    hop = hops(f"reverse:{engine.url}", out=out)
    body = chat_body(max_tokens=10)
    for _ in range(2):
        via = observe(hop.url + CHAT, body)
        assert via.end == "clean" and normalized(via.raw) == normalized(observe(engine.url + CHAT, body).raw)
    log = hop.log()
    assert log.count(f"{out}: cannot write a recording here") == 1, log
    assert "traffic passes unrecorded" in log


@pytest.mark.timeout(60)
def test_without_an_output_directory_the_recorder_is_idle(engine: Managed, hops: HopFactory) -> None:
    hop = hops(f"reverse:{engine.url}", "-s", ADDON, record=False)
    via = observe(hop.url + CHAT, chat_body(max_tokens=5))
    assert via.end == "clean" and via.events[-1].data == "[DONE]"
    assert hop.log().count("proxycheck_out is not set; nothing is recorded") == 1


# A mitmdump whose files may not grow past FILE_LIMIT bytes (RLIMIT_FSIZE; Python ignores
# SIGXFSZ, so a write past the limit fails with EFBIG, as on a full disk).
FILE_LIMIT = 48 << 10
_LIMITED = (
    "import os, resource, sys\n"
    f"resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_LIMIT}, {FILE_LIMIT}))\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


@pytest.mark.timeout(60)
def test_a_full_disk_stops_recording_with_one_warning_and_traffic_flows(
    engine: Managed, tmp_path_factory: pytest.TempPathFactory, confdir: Path
) -> None:
    out = tmp_path_factory.mktemp("full") / "recording"
    argv = [sys.executable, "-c", _LIMITED, mitmdump_path(), "--listen-host", "127.0.0.1", "--listen-port", "0",
            "--set", "flow_detail=0", "--set", "connection_strategy=lazy", "--set", f"confdir={confdir}",
            "--mode", f"reverse:{engine.url}", "-s", ADDON, "--set", f"proxycheck_out={out}"]
    proc = Managed(argv, "127.0.0.1", 0, name="mitmdump-full", port_pattern=r"listening at \S+:(\d+)")
    try:
        proc.wait_ready(60)
        for i in range(12):  # each request adds about 8 KB of new messages to the journal
            body = chat_body(max_tokens=4, content=f"request {i} " + "y" * 8000)
            seen = observe(proc.url + CHAT, body)
            assert seen.status == 200 and seen.end == "clean" and seen.events[-1].data == "[DONE]"
            assert seen.headers["x-proxycheck-request-sha256"] == sha(body)
    finally:
        proc.stop()
    log = proc.log_path.read_text(errors="replace")
    assert log.count("recording stopped, traffic goes on") == 1, log
    rec = load(out)
    assert 0 < len(rec.exchanges) < 12
    assert all(x.finished for x in rec.exchanges[:-1])


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "option,message",
    [
        ("proxycheck_filter=~q ~~", "proxycheck_filter: '~q ~~' is not a mitmproxy filter expression"),
        ("proxycheck_session_header=bad header", "proxycheck_session_header: 'bad header' is not a header name"),
        ("proxycheck_redact_body=metadata..key", "proxycheck_redact_body: 'metadata..key' is not a dotted JSON path"),
    ],
)
def test_a_bad_option_value_stops_mitmdump_with_a_clear_message(option: str, message: str, engine: Managed) -> None:
    # A value that does not parse, known before listening (what the output directory holds is no
    # option value: it never stops mitmdump, tests/hops/test_record_disk.py).
    argv = [mitmdump_path(), "-q", "--listen-host", "127.0.0.1", "--listen-port", "0",
            "--mode", f"reverse:{engine.url}", "-s", ADDON, "--set", option]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=50)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr
