"""Observing one exchange (proxycheck.io.observe) against real processes, with both client stacks:
the reference engine with `--fault` specs, mitmdump hops running addons/faults.py, a closed port.

Times are checked only as orderings and lower bounds (a watchdog fired no earlier than it
should): a loaded machine makes everything slower, never faster."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, AsyncIterator, Awaitable, Callable

import aiohttp
import httpx
import pytest
from processes import EngineFactory, MitmdumpFactory

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.testbed.ssefilter import truncate_messages
from proxycheck.io.observe import ConnState, Observed, aiohttp_trace_config, observe_aiohttp, observe_httpx
from proxycheck.io.procs import Managed, free_port

HEADERS = {"content-type": "application/json", "accept": "text/event-stream"}
WATCHDOGS = Watchdogs(connect=5.0, headers=10.0, stall=10.0)
KEEPALIVE = 0.5  # the engine closes connections idle this long

pytestmark = pytest.mark.timeout(60)


def chat(n_messages: int = 2, max_tokens: int = 16, stream: bool = True, pad: int = 0) -> bytes:
    messages = [{"role": "system", "content": "You are terse." + "x" * pad}]
    for i in range(1, n_messages):
        messages.append({"role": "user" if i % 2 else "assistant", "content": f"message {i}"})
    doc: dict[str, Any] = {"model": "m", "messages": messages, "max_tokens": max_tokens, "stream": stream}
    if stream:
        doc["stream_options"] = {"include_usage": True}
    return json.dumps(doc).encode()


# -- processes --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--keepalive-timeout", str(KEEPALIVE))


@pytest.fixture(scope="module")
def stalling_engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--fault", "stall:after=5")


@pytest.fixture(scope="module")
def contentless_engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--fault", "stall:after=1")  # the role chunk only: no content


@pytest.fixture(scope="module")
def slow_headers_engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--fault", "delay_headers:seconds=3")


@pytest.fixture(scope="module")
def resetting_engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--fault", "close:after=5")


@pytest.fixture(scope="module")
def unterminated_engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--fault", "drop_terminal")


@pytest.fixture(scope="module")
def keepalive_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    """Forwards 6 events, then answers every withheld chunk with a `: keep-alive` comment."""
    return module_mitmdumps.faults(engine, "stall_after=6", "stall_keepalive=true", "stall_seconds=600")


@pytest.fixture(scope="module")
def gateway_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    """Answers 413 to bodies over 2000 bytes and keeps only the last 2 messages of the others."""
    return module_mitmdumps.faults(engine, "max_body=2000", "truncate_messages=2")


@pytest.fixture(scope="module")
def reserializing_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    """Writes every JSON request body another way: the same content, other bytes."""
    return module_mitmdumps.faults(engine, "reserialize=true")


# -- the two client stacks --------------------------------------------------------------------------

Observe = Callable[..., Awaitable[Observed]]


@asynccontextmanager
async def client(stack: str) -> AsyncIterator[Observe]:
    """One pooled client of `stack`, as `observe(method, url, headers, body, **kw)`."""
    if stack == "httpx":
        async with httpx.AsyncClient(trust_env=False) as c:
            yield partial(observe_httpx, c)
    else:
        async with aiohttp.ClientSession(trace_configs=[aiohttp_trace_config()], trust_env=False) as s:
            yield partial(observe_aiohttp, s)


@pytest.fixture(params=["httpx", "aiohttp"])
def stack(request: pytest.FixtureRequest) -> str:
    return request.param


async def observe_one(stack: str, base: str, body: bytes, watchdogs: Watchdogs = WATCHDOGS, **kw: Any) -> Observation:
    async with client(stack) as observe:
        observed = await observe("POST", f"{base}/v1/chat/completions", HEADERS, body, dialect="openai_chat",
                                 watchdogs=watchdogs, **kw)  # fmt: skip
    return observed.observation


def last_content(obs: Observation) -> float:
    return max(obs.content_times)


# -- clean exchanges --------------------------------------------------------------------------------


async def test_ok_with_events_and_ttft(engine: Managed, stack: str) -> None:
    body = chat(max_tokens=16)
    async with client(stack) as observe:
        observed = await observe("POST", f"{engine.url}/v1/chat/completions", HEADERS, body, dialect="openai_chat",
                                 watchdogs=WATCHDOGS)  # fmt: skip
    obs, result = observed.observation, observed.result
    assert obs.outcome is Outcome.OK and obs.detail == "" and obs.error == "" and obs.status == 200
    assert obs.content_events == 16 and obs.events[-1].kind == "terminal"
    assert obs.headers is not None and obs.first_event is not None and obs.ttft is not None and obs.e2e is not None
    assert 0 < obs.headers <= obs.first_event <= obs.ttft <= obs.e2e <= obs.end
    assert len(obs.itl) == 15 and all(gap >= 0 for gap in obs.itl)
    assert obs.output_tokens == 16 and obs.tpot is not None and obs.tpot >= 0
    assert obs.request_bytes == len(body) and obs.request_sha256 == hashlib.sha256(body).hexdigest()
    assert obs.response_header("x-proxycheck-request-sha256") == obs.request_sha256
    assert (obs.response_header("content-type") or "").startswith("text/event-stream")
    assert obs.response_bytes == sum(e.size for e in obs.events)
    assert obs.result is not None and obs.result.terminal and obs.result.text_len > 0
    assert result is not None and obs.result.text_sha256 == hashlib.sha256(result.text.encode()).hexdigest()
    assert obs.reused is False and obs.connect is not None and 0 < obs.connect <= obs.headers
    assert obs.connection == 1 and obs.http_version == "HTTP/1.1" and obs.idle is None


async def test_a_non_streamed_answer_is_read_whole(engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, engine.url, chat(max_tokens=8, stream=False), streamed=False)
    assert obs.outcome is Outcome.OK and not obs.streamed and obs.events == ()
    assert obs.result is not None and obs.result.terminal and obs.result.completion_tokens == 8
    assert obs.headers is not None and obs.ttft is not None and obs.headers <= obs.ttft == obs.e2e == obs.end


async def test_t_start_counts_from_the_clock_origin(engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, engine.url, chat(max_tokens=2), clock_origin=time.monotonic() - 100.0)
    assert obs.t_start >= 100.0


# -- watchdogs --------------------------------------------------------------------------------------


async def test_a_mid_stream_stall_is_cut_by_the_stall_watchdog(stalling_engine: Managed, stack: str) -> None:
    stall = 0.5
    obs = await observe_one(stack, stalling_engine.url, chat(max_tokens=50), Watchdogs(5.0, 5.0, stall))
    assert obs.outcome is Outcome.STALL_MID_STREAM and obs.status == 200
    assert obs.content_events >= 1 and obs.result is not None and not obs.result.terminal
    assert obs.detail.startswith("no content for 0.5 s after event")
    assert obs.end is not None and obs.end - last_content(obs) >= stall
    assert obs.e2e is None


async def test_keep_alive_comments_do_not_hide_a_stall(keepalive_hop: Managed, stack: str) -> None:
    # 400 tokens at 5 ms: for 2 s the hop sends a comment per withheld chunk, so bytes keep
    # coming long after the last content; only the content watchdog can see the stall.
    stall = 0.5
    obs = await observe_one(stack, keepalive_hop.url, chat(max_tokens=400), Watchdogs(5.0, 5.0, stall))
    assert obs.outcome is Outcome.STALL_MID_STREAM
    cut = last_content(obs)
    assert any(e.kind == "comment" and e.t > cut for e in obs.events), "no keep-alive came after the content"
    assert obs.end is not None and obs.end - cut >= stall
    assert f"{obs.comments} comment(s)" in obs.detail


async def test_headers_without_content_stall_before_the_first_event(contentless_engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, contentless_engine.url, chat(), Watchdogs(5.0, 5.0, 0.4))
    assert obs.outcome is Outcome.STALL_BEFORE_FIRST_EVENT and obs.status == 200
    assert obs.content_events == 0 and [e.kind for e in obs.events] == ["meta"]
    assert obs.headers is not None and obs.end is not None and obs.end - obs.headers >= 0.4
    assert obs.detail.startswith("headers came, then no content for 0.4 s (1 event(s)")


async def test_no_headers_is_a_stall_before_headers(slow_headers_engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, slow_headers_engine.url, chat(), Watchdogs(5.0, 0.5, 5.0))
    assert obs.outcome is Outcome.STALL_BEFORE_HEADERS and obs.detail == "no response headers within 0.5 s"
    assert obs.status is None and obs.headers is None and obs.events == ()
    assert obs.end is not None and obs.end >= 0.5
    assert obs.reused is False and obs.connect is not None  # it connected; the answer never came


async def test_the_total_watchdog_is_a_stall_of_the_phase_it_cut(stalling_engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, stalling_engine.url, chat(max_tokens=50), Watchdogs(5.0, 5.0, 30.0, total=1.0))
    assert obs.outcome is Outcome.STALL_MID_STREAM
    assert obs.detail.endswith("; the total timeout of 1 s ended it")
    assert obs.end is not None and obs.end >= 1.0


# -- broken exchanges -------------------------------------------------------------------------------


async def test_a_reset_mid_stream_keeps_what_arrived(resetting_engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, resetting_engine.url, chat(max_tokens=50))
    assert obs.outcome is Outcome.RESET and obs.status == 200
    assert 1 <= obs.content_events < 50 and obs.response_bytes > 0
    assert obs.detail.startswith("connection closed mid-stream after") and obs.error


async def test_a_clean_end_without_terminal_is_truncated(unterminated_engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, unterminated_engine.url, chat(max_tokens=8))
    assert obs.outcome is Outcome.TRUNCATED and obs.status == 200
    assert obs.content_events == 8 and "terminal" not in {e.kind for e in obs.events}
    assert obs.result is not None and not obs.result.terminal and obs.e2e is None


async def test_a_413_is_an_http_error_with_its_status(gateway_hop: Managed, stack: str) -> None:
    obs = await observe_one(stack, gateway_hop.url, chat(pad=3000))
    assert obs.outcome is Outcome.HTTP_ERROR and obs.status == 413
    assert obs.detail.startswith("HTTP 413") and obs.events == () and obs.result is None


async def test_a_hop_that_rewrites_the_request_is_caught_by_the_digest(gateway_hop: Managed, stack: str) -> None:
    body = chat(n_messages=4)  # system, user, assistant, user: the hop keeps the system and the last 2
    obs = await observe_one(stack, gateway_hop.url, body)
    assert obs.outcome is Outcome.REQUEST_MUTATED and obs.status == 200
    cut = truncate_messages(body, 2)
    assert cut is not None
    assert obs.detail == (f"what the model sees changed: messages 4 -> 3: message 2 dropped "
                          f"(the engine received {len(cut)} bytes; {len(body)} were sent)")  # fmt: skip
    assert obs.response_header("x-proxycheck-request-sha256") != obs.request_sha256


async def test_a_hop_that_only_re_serializes_the_request_changes_nothing(reserializing_hop: Managed,
                                                                         stack: str) -> None:
    body = chat(n_messages=5, pad=200).replace(b"You are terse.", "Tu es bref, café.".encode())
    obs = await observe_one(stack, reserializing_hop.url, body)
    # Other bytes reached the engine (the raw digest says so) with the same content: no change.
    assert obs.response_header("x-proxycheck-request-sha256") != obs.request_sha256
    assert obs.outcome is Outcome.OK and obs.detail == ""


async def test_a_closed_port_is_a_connect_error(stack: str) -> None:
    obs = await observe_one(stack, f"http://127.0.0.1:{free_port()}", chat())
    assert obs.outcome is Outcome.CONNECT_ERROR and obs.error and obs.detail
    assert obs.status is None and obs.connection is None and obs.connect is None and obs.reused is False


# -- connections ------------------------------------------------------------------------------------


async def test_connections_are_reused_then_replaced_after_the_keep_alive_timeout(engine: Managed, stack: str) -> None:
    conns = ConnState()
    url = f"{engine.url}/v1/chat/completions"
    kw = dict(dialect="openai_chat", watchdogs=WATCHDOGS, conn_state=conns)
    async with client(stack) as observe:
        first = (await observe("POST", url, HEADERS, chat(max_tokens=2), **kw)).observation
        second = (await observe("POST", url, HEADERS, chat(max_tokens=3), **kw)).observation
        await asyncio.sleep(KEEPALIVE * 3)  # the engine closes the idle connection meanwhile
        third = (await observe("POST", url, HEADERS, chat(max_tokens=4), **kw)).observation
    assert [o.outcome for o in (first, second, third)] == [Outcome.OK] * 3
    assert (first.reused, first.connection, first.idle) == (False, 1, None) and first.connect is not None
    assert (second.reused, second.connection, second.connect) == (True, 1, None)
    assert second.idle is not None and second.idle >= 0
    assert (third.reused, third.connection, third.idle) == (False, 2, None) and third.connect is not None


def test_an_aiohttp_session_without_the_trace_config_is_refused() -> None:
    async def attempt() -> None:
        async with aiohttp.ClientSession() as s:
            await observe_aiohttp(s, "POST", "http://127.0.0.1:9/", HEADERS, b"{}", dialect="openai_chat")

    with pytest.raises(ValueError, match="aiohttp_trace_config"):
        asyncio.run(attempt())
