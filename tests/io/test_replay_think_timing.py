"""How the replayer keeps its sessions' think times (proxycheck.io.replayer's alarms, its garbage
collector freeze) and what observing an exchange leaves to the cyclic collector
(proxycheck.io.observe), in orderings and counts: how close the times come is measured by
benchmarks/bench_replayer.py, not asserted here.

The alarms' ordering is checked on a bare event loop (a deadline passed while the loop was busy,
then a ring, as a read does); the rest against the reference engine."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from typing import Any

import aiohttp
import httpx
import pytest
from processes import EngineFactory

from proxycheck.core.exchange.machine import ExchangeMachine
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.replay.chain import Route
from proxycheck.core.replay.plan import PlannedSession, PlannedTurn, RecordedOutcome
from proxycheck.io import replayer
from proxycheck.io.observe import aiohttp_trace_config, observe_aiohttp, observe_httpx
from proxycheck.io.procs import Managed
from proxycheck.io.replayer import ReplayOptions, collector_out_of_the_way, replay

PATH = "/v1/chat/completions"
HEADERS = {"content-type": "application/json"}
WATCHDOGS = Watchdogs(connect=5.0, headers=10.0, stall=10.0, total=30.0)

pytestmark = pytest.mark.timeout(60)


def body(i: int) -> bytes:
    doc = {"model": "m", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": f"turn {i}"}]}
    return json.dumps(doc).encode()


def plan(sessions: int, turns: int, think: float) -> list[PlannedSession]:
    out = []
    for s in range(sessions):
        planned = tuple(
            PlannedTurn(
                session=f"s{s}", turn=t, xid=s * turns + t, method="POST", url="http://recorded.invalid" + PATH,
                dialect="openai_chat", streamed=True, http_version="HTTP/1.1", headers=tuple(HEADERS.items()),
                body=body(s * turns + t), think_time=None if t == 1 else think, new_connection=t == 1,
                client_id=f"c{s}", recorded=RecordedOutcome(Outcome.OK),
            )  # fmt: skip
            for t in range(1, turns + 1)
        )
        out.append(PlannedSession(f"s{s}", "test", "openai_chat", 0.01 * s, planned))
    return out


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.002", "--ttft-base", "0")


# -- the collector freeze -----------------------------------------------------------------------------


def test_replays_at_once_share_one_freeze() -> None:
    """Entered by a second replay while a first runs, it freezes without collecting (a full
    collection would pause the running replay); the first leaving does not unfreeze the second's."""
    collections: list[int] = []

    def count_full(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            collections.append(1)

    first, second = collector_out_of_the_way(), collector_out_of_the_way()
    gc.callbacks.append(count_full)
    try:
        first.__enter__()
        assert len(collections) == 1 and gc.get_freeze_count() > 0
        second.__enter__()
        assert len(collections) == 1
        first.__exit__(None, None, None)  # not the last in: still frozen
        assert gc.get_freeze_count() > 0
        second.__exit__(None, None, None)
        assert gc.get_freeze_count() == 0
    finally:
        gc.callbacks.remove(count_full)
        gc.unfreeze()


async def test_routes_replayed_at_once_all_complete(engine: Managed) -> None:
    """Two replays gathered on one loop (as routes replayed at once are) share the loop's alarms:
    every turn of both is observed, after its think time, and nothing stays frozen."""
    seen: dict[str, list[Observation]] = {"a": [], "b": []}
    think = 0.05
    runs = [
        replay(plan(3, 3, think), [Route(name, engine.url)], ReplayOptions(watchdogs=WATCHDOGS), "run", seen[name].append)
        for name in seen
    ]
    assert await asyncio.gather(*runs) == ["completed", "completed"]
    assert gc.get_freeze_count() == 0
    for observations in seen.values():
        assert len(observations) == 9 and all(o.outcome is Outcome.OK for o in observations)
        for session in {o.session for o in observations}:
            turns = sorted((o for o in observations if o.session == session), key=lambda o: o.turn)
            for prev, obs in zip(turns, turns[1:]):
                assert obs.t_start - (prev.t_start + (prev.end or 0.0)) >= think - 0.001


# -- the alarms -----------------------------------------------------------------------------------------


async def test_a_due_session_wakes_before_work_already_queued() -> None:
    """A deadline that passed while the loop was busy: the next ring (a read handled) puts the
    sleeping session's wake-up ahead of every callback already queued, instead of after them."""
    loop = asyncio.get_running_loop()
    alarms = replayer._Alarms()
    order: list[str] = []
    when = time.monotonic() + 0.02

    async def session() -> None:
        await alarms.sleep_until(when)
        order.append("session")

    task = asyncio.create_task(session())
    await asyncio.sleep(0)  # it sleeps
    while time.monotonic() < when:  # the loop busy past the deadline (its timer cannot run)
        pass
    for i in range(3):
        loop.call_soon(order.append, f"queued {i}")
    alarms.ring()
    await task
    assert order[0] == "session", order


async def test_due_sessions_wake_in_deadline_order() -> None:
    alarms = replayer._Alarms()
    order: list[int] = []
    now = time.monotonic()

    async def session(i: int, delay: float) -> None:
        await alarms.sleep_until(now + delay)
        order.append(i)

    tasks = [asyncio.create_task(session(i, delay)) for i, delay in enumerate((0.03, 0.01, 0.02))]
    await asyncio.sleep(0)
    while time.monotonic() < now + 0.03:
        pass
    alarms.ring()
    await asyncio.gather(*tasks)
    assert order == [1, 2, 0]


async def test_a_cancelled_wait_leaves_no_deadline() -> None:
    alarms = replayer._Alarms()
    task = asyncio.create_task(alarms.sleep_until(time.monotonic() + 5))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not alarms._due  # nothing left to wake, nor holding on to the loop


async def test_a_wait_ends_no_earlier_than_its_deadline() -> None:
    """The timer is set early (the selector's whole milliseconds); the rest is waited out."""
    alarms = replayer._Alarms()
    for delay in (0.0005, 0.003, 0.012):
        when = time.monotonic() + delay
        await alarms.sleep_until(when)
        assert time.monotonic() >= when


# -- what an exchange leaves behind -------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["httpx", "aiohttp"])
async def test_an_observed_exchange_is_freed_without_the_cyclic_collector(engine: Managed, stack: str) -> None:
    """Its stack, machine and every event it logged go when the observation is handed over, by
    reference counting: left in reference cycles, each exchange's objects waited for collections
    that paused the event loop mid-replay."""
    gc.collect()
    gc.disable()
    try:
        if stack == "httpx":
            async with httpx.AsyncClient(trust_env=False) as client:
                for i in range(3):
                    observed = await observe_httpx(client, "POST", engine.url + PATH, HEADERS, body(i), dialect="openai_chat")
                    assert observed.observation.outcome is Outcome.OK
        else:
            async with aiohttp.ClientSession(trace_configs=[aiohttp_trace_config()], trust_env=False) as session:
                for i in range(3):
                    observed = await observe_aiohttp(session, "POST", engine.url + PATH, HEADERS, body(i), dialect="openai_chat")
                    assert observed.observation.outcome is Outcome.OK
        del observed
        assert not [o for o in gc.get_objects() if isinstance(o, ExchangeMachine)]
    finally:
        gc.enable()
