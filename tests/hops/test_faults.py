"""The fault hop, end to end: a real engine, real mitmdump processes running addons/faults.py, and
an httpx client asserting what a client observes.

One engine serves the module; each fault configuration gets one mitmdump, started the first
time a test asks for it and stopped when the module ends. Times are only ever bounded from
below (a delay of 1 s took at least 1 s): the machines are shared and noisy. Where a test needs
to tell "closed mid-stream" from "silent", it gives the client a read timeout far longer than
the fault needs, so the kind of failure (not its timing) is the proof.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from processes import EngineFactory, MitmdumpFactory

from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.requestparts import canonical_json
from proxycheck.core.protocol.result import Result
from proxycheck.core.protocol.sse import SSEComment, SSEEvent, SSEParser
from proxycheck.core.testbed.ssefilter import coin, truncate_messages
from proxycheck.hops.faults import reserialize_json
from proxycheck.io.procs import Managed, mitmdump_path

ADDON = str(Path(__file__).resolve().parents[2] / "addons" / "faults.py")
CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
TOKEN_INTERVAL = 0.01


# --------------------------------------------------------------------------------------------
# processes


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", str(TOKEN_INTERVAL), "--max-answer-tokens", "0")  # long streams


HopFactory = Callable[..., Managed]


@pytest.fixture(scope="module")
def hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> HopFactory:
    """`hop(stall_after=3, ...)`: a mitmdump with those fault options in front of the engine,
    one process per distinct configuration, shared by the module's tests."""
    started: dict[tuple[tuple[str, str], ...], Managed] = {}

    def get(**options: object) -> Managed:
        key = tuple(sorted((k, _option_text(v)) for k, v in options.items()))
        if key not in started:
            sets = [f"--set=proxycheck_fault_{k}={v}" for k, v in key]
            started[key] = module_mitmdumps(
                "--mode", f"reverse:{engine.url}", "-s", ADDON, "--set", "termlog_verbosity=info", *sets
            )
        return started[key]

    return get


def _option_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def log_of(proc: Managed) -> str:
    return proc.log_path.read_text(errors="replace")


# --------------------------------------------------------------------------------------------
# requests and what the client saw


def chat_body(turn: int = 1, *, pad: int = 0, max_tokens: int = 8, stream: bool = True) -> bytes:
    """An OpenAI chat body of the given turn (turn - 1 assistant messages), padded by `pad`
    bytes of user text."""
    messages = [{"role": "system", "content": "You are terse."}]
    for t in range(1, turn):
        messages += [{"role": "user", "content": f"question {t}"}, {"role": "assistant", "content": f"answer {t}"}]
    messages.append({"role": "user", "content": "go on " + "x" * pad})
    return json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "stream": stream}).encode()


def slow_body(seconds: float, tokens: int = 20) -> bytes:
    """A streamed chat body whose answer the engine spreads over at least `seconds`: the first
    event at once, then `tokens` tokens `seconds / (tokens - 1)` apart (the timing extension)."""
    doc = json.loads(chat_body(max_tokens=tokens))
    doc["proxycheck"] = {"ttft": 0, "token_interval": seconds / (tokens - 1)}
    return json.dumps(doc).encode()


def anthropic_body(max_tokens: int = 6) -> bytes:
    doc = {"model": "m", "max_tokens": max_tokens, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    return json.dumps(doc).encode()


@dataclass
class Seen:
    """One exchange as the client saw it. `end` is how the body ended: "clean", "timeout"
    (silence longer than the read timeout) or "closed" (the connection went before the body
    was complete); "no_response" when even the headers never came."""

    end: str
    status: int | None = None
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    headers_at: float = 0.0
    events: list[SSEEvent] = field(default_factory=list)
    comments: list[SSEComment] = field(default_factory=list)
    raw: bytes = b""

    @property
    def data(self) -> list[str]:
        return [e.data for e in self.events]

    def result(self, dialect: str = "openai_chat") -> Result:
        return dialects.parse_events(dialect, [(e.type, e.data) for e in self.events])


def observe(
    base: str,
    body: bytes | Iterator[bytes],
    *,
    path: str = CHAT,
    read_timeout: float = 10.0,
    client: httpx.Client | None = None,
    headers: dict[str, str] | None = None,
) -> Seen:
    """POST `body` and read the response to its end, whatever that end is. `read_timeout` is for
    the client made here; a given `client` brings its own timeouts."""
    own = client is None
    client = client or httpx.Client(timeout=httpx.Timeout(read_timeout, connect=5.0))
    parser = SSEParser()
    items: list[SSEEvent | SSEComment] = []
    seen = Seen(end="no_response")
    start = time.monotonic()
    try:
        with client.stream(
            "POST", base + path, content=body, headers={"content-type": "application/json", **(headers or {})}
        ) as response:
            seen.status, seen.headers = response.status_code, response.headers
            seen.headers_at = time.monotonic() - start
            seen.end = "open"
            for chunk in response.iter_raw():
                seen.raw += chunk
                items += parser.feed(chunk, time.monotonic() - start)
        seen.end = "clean"
    except httpx.TimeoutException:
        seen.end = "timeout" if seen.end == "open" else "no_response"
    except (httpx.RemoteProtocolError, httpx.ReadError):
        seen.end = "closed" if seen.end == "open" else "no_response"
    finally:
        if own:
            client.close()
    items += parser.close(time.monotonic() - start)
    seen.events = [i for i in items if isinstance(i, SSEEvent)]
    seen.comments = [i for i in items if isinstance(i, SSEComment)]
    return seen


def concurrently(base: str, bodies: list[bytes]) -> list[Seen]:
    """POST the bodies at the same moment, each from its own thread and client (so its own
    connection), and read every response to its end."""
    barrier = threading.Barrier(len(bodies))

    def one(body: bytes) -> Seen:
        barrier.wait()
        return observe(base, body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(one, bodies))


def wait_for_log(proc: Managed, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in log_of(proc):
        assert time.monotonic() < deadline, f"not in the log of {proc}: {text!r}"
        time.sleep(0.05)


def normalized(data: list[str]) -> list[str]:
    """Event data without the `created` timestamp, which may differ between two requests."""
    return [re.sub(r'"created":\d+', '"created":0', d) for d in data]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------
# no fault: a correct proxy


class TestPassThrough:
    @pytest.mark.timeout(30)
    def test_streams_sse_unchanged_as_it_arrives(self, engine: Managed, hop: HopFactory) -> None:
        body = chat_body(max_tokens=40)
        direct = observe(engine.url, body)
        via = observe(hop().url, body)
        assert direct.end == via.end == "clean"
        assert normalized(via.data) == normalized(direct.data)
        assert via.data[-1] == "[DONE]"
        # 40 tokens 10 ms apart took at least 0.39 s to make; a streaming hop spreads them out
        # like that, where a buffering one would deliver them all at once.
        content = [e.time for e in via.events[1:-2]]
        assert content[-1] - content[0] >= 0.3

    @pytest.mark.timeout(30)
    def test_request_reaches_the_engine_unchanged(self, hop: HopFactory) -> None:
        body = chat_body(turn=4, stream=False)
        seen = observe(hop().url, body)
        assert seen.status == 200
        assert seen.headers["x-proxycheck-request-sha256"] == sha(body)

    @pytest.mark.timeout(30)
    def test_anthropic_stream_keeps_its_terminal(self, hop: HopFactory) -> None:
        seen = observe(hop().url, anthropic_body(), path=MESSAGES)
        assert seen.end == "clean"
        assert [e.type for e in seen.events][-1] == "message_stop"


# --------------------------------------------------------------------------------------------
# buffer


class TestBuffer:
    @pytest.mark.timeout(30)
    def test_events_arrive_only_once_the_whole_stream_was_made(self, hop: HopFactory) -> None:
        seen = observe(hop(buffer=True).url, chat_body(max_tokens=40))
        assert seen.end == "clean" and seen.data[-1] == "[DONE]"
        assert seen.result().content_events == 40
        # The engine needs at least ttft + 39 intervals (> 0.44 s) for the last token; the first
        # event can only arrive after it when the hop buffers.
        assert seen.events[0].time >= 0.4
        assert "proxycheck fault buffer" in log_of(hop(buffer=True))


# --------------------------------------------------------------------------------------------
# stall mid-stream, gated by turn and body size


STALL = {"stall_after": 3, "from_turn": 3, "min_body": 600, "stall_seconds": 2}


class TestStall:
    @pytest.mark.timeout(30)
    def test_stalls_after_k_events_from_the_turn_on(self, hop: HopFactory) -> None:
        seen = observe(hop(**STALL).url, chat_body(turn=3, pad=1000, max_tokens=20), read_timeout=1.0)
        assert seen.status == 200
        assert seen.end == "timeout"  # silence, not a clean end
        assert len(seen.events) == 3
        assert "[DONE]" not in seen.data
        assert "proxycheck fault stall_after" in log_of(hop(**STALL))

    @pytest.mark.timeout(30)
    def test_earlier_turns_are_not_stalled(self, hop: HopFactory) -> None:
        seen = observe(hop(**STALL).url, chat_body(turn=2, pad=1000, max_tokens=20))
        assert seen.end == "clean" and seen.data[-1] == "[DONE]"

    @pytest.mark.timeout(30)
    def test_small_bodies_are_not_stalled(self, hop: HopFactory) -> None:
        body = chat_body(turn=5, max_tokens=20)
        assert len(body) <= STALL["min_body"]
        seen = observe(hop(**STALL).url, body)
        assert seen.end == "clean" and seen.data[-1] == "[DONE]"

    @pytest.mark.timeout(30)
    def test_the_held_end_is_dropped_after_stall_seconds(self, hop: HopFactory) -> None:
        start = time.monotonic()
        seen = observe(hop(**STALL).url, chat_body(turn=3, pad=1000, max_tokens=20), read_timeout=20.0)
        assert seen.end == "closed"  # a cut body, never a clean end
        assert len(seen.events) == 3
        assert time.monotonic() - start >= STALL["stall_seconds"]


# --------------------------------------------------------------------------------------------
# stall with keep-alive comments


class TestKeepaliveStall:
    @pytest.mark.timeout(30)
    def test_keepalives_flow_while_content_does_not(self, hop: HopFactory) -> None:
        proc = hop(stall_after=2, stall_keepalive=True)
        seen = observe(proc.url, chat_body(max_tokens=30), read_timeout=1.0)
        assert seen.end == "timeout"
        assert len(seen.events) == 2
        assert len(seen.comments) >= 1
        assert {c.text for c in seen.comments} == {"keep-alive"}
        # A watchdog counting bytes sees progress after the last content event; one counting
        # content events does not.
        assert min(c.start for c in seen.comments) >= seen.events[-1].end
        assert max(c.time for c in seen.comments) >= seen.events[-1].time
        assert "proxycheck fault stall_keepalive" in log_of(proc)


# --------------------------------------------------------------------------------------------
# drop the terminal marker


class TestDropTerminal:
    @pytest.mark.timeout(30)
    def test_openai_stream_ends_cleanly_without_done(self, hop: HopFactory) -> None:
        seen = observe(hop(drop_terminal=True).url, chat_body(max_tokens=10))
        assert seen.end == "clean"
        assert "[DONE]" not in seen.data
        result = seen.result()
        assert result.content_events == 10
        assert result.first.finish_reason == "stop"  # everything but the marker came
        assert not result.terminal

    @pytest.mark.timeout(30)
    def test_anthropic_stream_ends_without_message_stop(self, hop: HopFactory) -> None:
        seen = observe(hop(drop_terminal=True).url, anthropic_body(), path=MESSAGES)
        assert seen.end == "clean"
        types = [e.type for e in seen.events]
        assert "message_stop" not in types
        assert types[-1] == "message_delta"


# --------------------------------------------------------------------------------------------
# reset mid-stream


class TestReset:
    @pytest.mark.timeout(40)
    def test_client_connection_is_closed_right_after_k_events(self, hop: HopFactory) -> None:
        # 1500 tokens take the engine at least 15 s. A hop that only acted at the end of the
        # upstream body would leave the client in silence until its 10 s read timeout; "closed"
        # proves the reset came mid-stream.
        seen = observe(hop(reset_after=3).url, chat_body(max_tokens=1500), read_timeout=10.0)
        assert seen.status == 200
        assert seen.end == "closed"
        assert len(seen.events) == 3

    @pytest.mark.timeout(40)
    def test_an_answer_sent_at_once_is_cut_too(self, module_engines: EngineFactory,
                                               module_mitmdumps: MitmdumpFactory) -> None:  # fmt: skip
        # The whole answer comes from the upstream in one go: the chunk that holds the K-th event
        # also ends the body. The client must still see a cut body, never a clean end.
        engine = module_engines("--token-interval", "0", "--ttft-base", "0")
        quick = module_mitmdumps("--mode", f"reverse:{engine.url}", "-s", ADDON, "--set=proxycheck_fault_reset_after=3")
        for _ in range(3):
            seen = observe(quick.url, chat_body(max_tokens=40), read_timeout=10.0)
            assert seen.status == 200
            assert seen.end == "closed", (seen.end, len(seen.events))
            assert "[DONE]" not in seen.data

    @pytest.mark.timeout(30)
    def test_hop_keeps_serving_after_a_reset(self, hop: HopFactory) -> None:
        seen = observe(hop(reset_after=3).url, chat_body(max_tokens=5, stream=False))
        assert seen.status == 200  # a JSON answer has no events to count: untouched
        assert json.loads(seen.raw)["choices"][0]["message"]["content"]


# --------------------------------------------------------------------------------------------
# 413 for large bodies


class TestMaxBody:
    LIMIT = 2000

    @pytest.mark.timeout(30)
    def test_large_body_gets_413_from_the_hop(self, hop: HopFactory) -> None:
        seen = observe(hop(max_body=self.LIMIT).url, chat_body(pad=3000))
        assert seen.status == 413
        assert "x-proxycheck-request-sha256" not in seen.headers  # the engine never saw it
        assert "larger than 2000 bytes" in json.loads(seen.raw)["error"]["message"]

    @pytest.mark.timeout(30)
    def test_large_chunked_body_gets_413_too(self, hop: HopFactory) -> None:
        body = chat_body(pad=3000)
        # A generator makes httpx send the body chunked: no Content-Length to judge it by early.
        seen = observe(hop(max_body=self.LIMIT).url, iter([body[:1000], body[1000:]]))
        assert seen.status == 413
        assert "x-proxycheck-request-sha256" not in seen.headers

    @pytest.mark.timeout(30)
    def test_small_body_passes(self, hop: HopFactory) -> None:
        body = chat_body(pad=100)
        seen = observe(hop(max_body=self.LIMIT).url, body)
        assert seen.status == 200 and seen.end == "clean"
        assert seen.headers["x-proxycheck-request-sha256"] == sha(body)

    @pytest.mark.timeout(30)
    def test_non_llm_paths_are_untouched(self, hop: HopFactory) -> None:
        url = hop(max_body=self.LIMIT).url
        seen = observe(url, json.dumps({"input": "x" * 5000}).encode(), path="/v1/embeddings")
        assert seen.status != 413  # the engine's own answer (it has no embeddings)
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 200


# --------------------------------------------------------------------------------------------
# 429 over a limit of concurrent requests


class TestMaxConcurrent:
    LIMIT = 2

    @pytest.mark.timeout(40)
    def test_a_request_over_the_limit_gets_429_and_the_slots_come_back(self, hop: HopFactory) -> None:
        proc = hop(max_concurrent=self.LIMIT)
        # Three streams of 2 s each, sent at once: all three overlap.
        seen = concurrently(proc.url, [slow_body(2.0)] * 3)
        assert sorted(s.status for s in seen) == [200, 200, 429]
        refused = next(s for s in seen if s.status == 429)
        assert refused.headers["retry-after"] == "1"
        assert "x-proxycheck-request-sha256" not in refused.headers  # the engine never saw it
        error = json.loads(refused.raw)["error"]
        assert error["code"] == 429
        assert "2 requests already in flight, the limit is 2" in error["message"]
        for served in (s for s in seen if s.status == 200):
            assert served.end == "clean" and served.data[-1] == "[DONE]"
        assert "proxycheck fault max_concurrent" in log_of(proc)
        # The hop frees a slot before it ends the response, and the 429 never took one: two at
        # once are served again.
        again = concurrently(proc.url, [slow_body(1.0)] * 2)
        assert [(s.status, s.end) for s in again] == [(200, "clean")] * 2

    @pytest.mark.timeout(40)
    def test_clients_that_leave_mid_stream_free_their_slots(self, hop: HopFactory) -> None:
        proc = hop(max_concurrent=self.LIMIT)
        peers = []
        with contextlib.ExitStack() as stack:
            for _ in range(self.LIMIT):  # both in flight at once, each on its own connection
                client = stack.enter_context(httpx.Client(timeout=httpx.Timeout(10.0, connect=5.0)))
                response = stack.enter_context(
                    client.stream(
                        "POST", proc.url + CHAT, content=slow_body(30.0), headers={"content-type": "application/json"}
                    )
                )
                assert response.status_code == 200
                host, port = response.extensions["network_stream"].get_extra_info("client_addr")
                peers.append(f"{host}:{port}")
                chunks = stack.enter_context(contextlib.closing(response.iter_raw()))
                assert b"data:" in next(chunks)  # mid-stream: the engine takes 30 s for the rest
        # Both clients went away mid-stream (the responses and clients are closed). Once the hop
        # has seen them go, their slots must be free although no response hook ever ran.
        for peer in peers:
            wait_for_log(proc, f"[{peer}] client disconnect")
        again = concurrently(proc.url, [slow_body(1.0)] * 2)
        assert [(s.status, s.end) for s in again] == [(200, "clean")] * 2


# --------------------------------------------------------------------------------------------
# delayed response headers


class TestDelayHeaders:
    @pytest.mark.timeout(30)
    def test_headers_come_after_the_delay(self, hop: HopFactory) -> None:
        seen = observe(hop(delay_headers="1").url, chat_body())
        assert seen.headers_at >= 1.0
        assert seen.end == "clean" and seen.data[-1] == "[DONE]"


# --------------------------------------------------------------------------------------------
# blackhole after an idle keep-alive connection


class TestIdleBlackhole:
    IDLE = 2.0

    @pytest.mark.timeout(40)
    def test_request_on_a_connection_idle_too_long_is_never_answered(self, hop: HopFactory) -> None:
        proc = hop(idle_blackhole=self.IDLE)
        with httpx.Client(timeout=httpx.Timeout(2.0, connect=5.0)) as client:
            assert observe(proc.url, chat_body(), client=client).end == "clean"
            assert observe(proc.url, chat_body(), client=client).end == "clean"  # not idle yet
            time.sleep(self.IDLE + 0.5)
            seen = observe(proc.url, chat_body(), client=client)
        assert seen.end == "no_response"
        assert seen.status is None
        assert "proxycheck fault idle_blackhole" in log_of(proc)
        # A new connection is not idle: served.
        assert observe(proc.url, chat_body()).end == "clean"


# --------------------------------------------------------------------------------------------
# truncated history


class TestTruncateMessages:
    @pytest.mark.timeout(30)
    def test_engine_receives_a_shorter_history(self, hop: HopFactory) -> None:
        body = chat_body(turn=4, stream=False)
        seen = observe(hop(truncate_messages=2).url, body)
        assert seen.status == 200
        received = seen.headers["x-proxycheck-request-sha256"]
        assert received != sha(body)
        cut = truncate_messages(body, 2)
        assert cut is not None
        assert received == sha(cut)
        assert int(seen.headers["x-proxycheck-request-bytes"]) == len(cut)

    @pytest.mark.timeout(30)
    def test_short_history_is_left_alone(self, hop: HopFactory) -> None:
        body = chat_body(turn=1, stream=False)  # system + one user message
        seen = observe(hop(truncate_messages=2).url, body)
        assert seen.headers["x-proxycheck-request-sha256"] == sha(body)

    @pytest.mark.timeout(30)
    def test_a_failing_hook_leaves_the_flow_unfaulted(self, hop: HopFactory) -> None:
        proc = hop(truncate_messages=2)
        # Labelled gzip but not gzip: reading the body fails inside the addon. The flow must go on
        # to the engine as it was, and the hop must keep working.
        garbage = b"this is not gzip"
        seen = observe(proc.url, garbage, headers={"content-encoding": "gzip"})
        # The engine's HTTP server (aiohttp) cannot gunzip it either and answers an error itself:
        # the request went through, no 502 or error page from mitmproxy.
        assert seen.status is not None and seen.status != 502
        assert "aiohttp" in seen.headers.get("server", "")
        assert log_of(proc).count("the request hook failed") == 1
        body = chat_body(turn=4, stream=False)
        cut = truncate_messages(body, 2)
        assert cut is not None
        assert observe(proc.url, body).headers["x-proxycheck-request-sha256"] == sha(cut)
        # A real gzip body is decoded, cut and encoded again (the engine's server gunzips it).
        zipped = observe(proc.url, gzip.compress(body), headers={"content-encoding": "gzip"})
        assert zipped.headers["x-proxycheck-request-sha256"] == sha(cut)


# --------------------------------------------------------------------------------------------
# re-serialized bodies


class TestReserialize:
    @pytest.mark.timeout(30)
    def test_the_engine_gets_the_same_json_in_other_bytes(self, hop: HopFactory) -> None:
        doc = json.loads(chat_body(turn=3, stream=False))
        doc["temperature"] = 1
        doc["messages"][0]["content"] = "Sé breve."
        body = json.dumps(doc, ensure_ascii=False).encode()
        seen = observe(hop(reserialize=True).url, body)
        assert seen.status == 200
        assert seen.headers["x-proxycheck-request-sha256"] != sha(body)
        assert int(seen.headers["x-proxycheck-request-bytes"]) != len(body)
        canonical = hashlib.sha256(canonical_json(doc)).hexdigest()
        assert seen.headers["x-proxycheck-request-canonical-sha256"] == canonical
        # What the engine received, exactly: the hop's own rewrite of the body.
        again = reserialize_json(body)
        assert again is not None and seen.headers["x-proxycheck-request-sha256"] == sha(again)
        assert b'"temperature": 1.0' in again and b"\\u00e9" in again
        assert list(json.loads(again)) == list(reversed(list(doc)))

    @pytest.mark.timeout(30)
    def test_after_a_truncation_and_never_on_what_is_not_json(self, hop: HopFactory) -> None:
        proc = hop(reserialize=True, truncate_messages=2)
        body = chat_body(turn=4, stream=False)
        cut = truncate_messages(body, 2)
        again = reserialize_json(cut or b"")
        assert again is not None
        assert observe(proc.url, body).headers["x-proxycheck-request-sha256"] == sha(again)
        garbage = b"[1, 2"  # not JSON: passed on as it came (the engine answers it 400)
        seen = observe(proc.url, garbage)
        assert seen.status == 400 and seen.headers["x-proxycheck-request-sha256"] == sha(garbage)


# --------------------------------------------------------------------------------------------
# probability and seed


class TestProbability:
    @pytest.mark.timeout(60)
    def test_faults_fire_on_the_flows_the_seeded_coin_picks(self, hop: HopFactory) -> None:
        proc = hop(truncate_messages=1, probability="0.5", seed=7)
        body = chat_body(turn=2, max_tokens=1, stream=False)
        fired = []
        with httpx.Client(timeout=10.0) as client:
            for _ in range(12):
                seen = observe(proc.url, body, client=client)
                fired.append(seen.headers["x-proxycheck-request-sha256"] != sha(body))
        assert fired == [coin(0.5, 7, i) for i in range(12)]
        assert True in fired and False in fired


# --------------------------------------------------------------------------------------------
# options


class TestOptions:
    @pytest.mark.timeout(60)
    def test_bad_values_stop_mitmdump_with_a_clear_message(self, engine: Managed) -> None:
        argv = [mitmdump_path(), "-q", "--listen-host", "127.0.0.1", "--listen-port", "0"]
        argv += ["--mode", f"reverse:{engine.url}", "-s", ADDON]
        argv += ["--set", "proxycheck_fault_probability=1.5", "--set", "proxycheck_fault_stall_seconds=soon"]
        argv += ["--set", "proxycheck_fault_max_concurrent=-1"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=50)
        assert done.returncode != 0
        output = done.stdout + done.stderr
        assert "proxycheck_fault_probability must be a number >= 0 and <= 1, not '1.5'" in output
        assert "proxycheck_fault_stall_seconds must be a number, not 'soon'" in output
        assert "proxycheck_fault_max_concurrent must be >= 0, not -1" in output
