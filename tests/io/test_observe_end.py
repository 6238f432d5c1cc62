"""How the replayer's observation judges the end of a stream (proxycheck.io.observe), with both
client stacks, against the reference engine and mitmdump fault hops:

- a connection closed right after the terminal marker, before the body's end, is `ok`, the close
  kept in the detail (what was received decides);
- a body held open after its terminal marker, or after its finish reason without the terminator,
  is `held_open` when the stall watchdog fires, never a mid-stream stall with buffering advice;
- a request the client cannot send is a `ClientFault` raised before any traffic, never a reset.
"""

from __future__ import annotations

import asyncio

import pytest
from processes import EngineFactory, MitmdumpFactory
from test_observe import HEADERS, chat, client, observe_one  # noqa: F401  (fixtures and helpers)

from proxycheck.core.errors import ClientFault
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.io.procs import Managed

STALL = 1.0
WATCHDOGS = Watchdogs(connect=5.0, headers=10.0, stall=STALL)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.002")


@pytest.fixture(scope="module")
def closing_engine(module_engines: EngineFactory) -> Managed:
    """Sends every event, [DONE] too, then hangs up before the end of the chunked body."""
    return module_engines("--token-interval", "0.002", "--fault", "close:after=100000")


@pytest.fixture(scope="module")
def holding_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    return module_mitmdumps.faults(engine, "hold_open=true", "stall_seconds=30")


@pytest.fixture(scope="module")
def unterminated_holding_hop(engine: Managed, module_mitmdumps: MitmdumpFactory) -> Managed:
    return module_mitmdumps.faults(engine, "hold_open=true", "drop_terminal=true", "stall_seconds=30")


@pytest.fixture(params=["httpx", "aiohttp"])
def stack(request: pytest.FixtureRequest) -> str:
    return request.param


async def test_a_close_right_after_done_is_ok_with_the_close_kept(closing_engine: Managed, stack: str) -> None:
    obs = await observe_one(stack, closing_engine.url, chat(max_tokens=8), WATCHDOGS)
    assert obs.outcome is Outcome.OK, obs.detail
    assert obs.content_events == 8 and obs.result is not None and obs.result.terminal
    assert "after [DONE], before the end of the body" in obs.detail and obs.error  # the close, as a fact


async def test_a_body_held_open_after_done_is_held_open(holding_hop: Managed, stack: str) -> None:
    obs = await observe_one(stack, holding_hop.url, chat(max_tokens=8), WATCHDOGS)
    assert obs.outcome is Outcome.HELD_OPEN, obs.detail
    assert obs.result is not None and obs.result.terminal and obs.content_events == 8
    assert obs.detail.startswith("held open after its end: [DONE] came at")
    assert obs.end is not None and obs.end >= STALL  # cut by the watchdog, no sooner


async def test_a_finish_reason_held_open_without_done_is_held_open(unterminated_holding_hop: Managed, stack: str) -> None:
    obs = await observe_one(stack, unterminated_holding_hop.url, chat(max_tokens=8), WATCHDOGS)
    assert obs.outcome is Outcome.HELD_OPEN, obs.detail
    assert obs.result is not None and not obs.result.terminal and obs.result.finish_reason == "stop"
    assert "held open after its finish reason (stop" in obs.detail and "without its terminator [DONE]" in obs.detail


async def test_the_same_stall_before_the_answer_is_still_a_mid_stream_stall(engine: Managed, stack: str,
                                                                            engines: EngineFactory) -> None:
    # Fooling the rule the other way: content came but no finish reason, then silence.
    proc = engines("--token-interval", "0.002", "--fault", "stall:after=4")
    obs = await observe_one(stack, proc.url, chat(max_tokens=8), WATCHDOGS)
    assert obs.outcome is Outcome.STALL_MID_STREAM, obs.detail


@pytest.mark.parametrize(
    "headers, problem",
    [
        ({"x api key": "1"}, "not a valid HTTP token"),
        ({"": "1"}, "a header name is empty"),
        ({"x-key": "a\r\nb"}, "holds a line break"),
        ({"x-key": "a\x00b"}, "control character U+0000"),
        ({"x-key": "kéy"}, "not ASCII"),
    ],
)
async def test_a_header_the_client_cannot_send_is_a_client_fault_before_any_traffic(
    stack: str, headers: dict[str, str], problem: str
) -> None:
    connections: list[object] = []

    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)  # nothing may get this far
        writer.close()

    server = await asyncio.start_server(accepted, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    try:
        async with client(stack) as observe:
            with pytest.raises(ClientFault) as raised:
                await observe("POST", url, {**HEADERS, **headers}, chat(), dialect="openai_chat", watchdogs=WATCHDOGS)
    finally:
        server.close()
        await server.wait_closed()
    assert problem in str(raised.value) and f"POST {url}" in str(raised.value)
    assert connections == []
