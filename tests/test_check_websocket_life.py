"""`check` on sockets a hop ends at one time after they opened (a cap on a connection's life, the
fault hop's `ws_max_life`), against sockets a hop ends after one silence (`ws_idle_close`): both
are named at the turn the end fell before, and the advice tells the two apart by what the
replayed sockets show (the time since each opened, the silence each had sat through).

Two sockets are recorded with different think times (1.0 s and 1.7 s between turns), so a cap on
their life ends them after different silences, and an idle timeout at different times after they
opened."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest
from processes import EngineFactory, MitmdumpFactory, write_chain
from test_check_websocket import FAST, check
from websocket_clients import converse, ws_url

pytestmark = pytest.mark.timeout(150)


@pytest.fixture
def two_paces(engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path) -> Path:
    engine = engines(*FAST)
    out = tmp_path / "rec"
    recorder = mitmdumps.recorder(engine, out)

    async def both() -> None:
        await asyncio.wait_for(asyncio.gather(converse(ws_url(recorder), 4, think=1.0),
                                              converse(ws_url(recorder), 3, think=1.7)), timeout=60)  # fmt: skip

    asyncio.run(both())
    time.sleep(0.5)
    recorder.stop()
    return out


def test_a_cap_on_a_sockets_life_is_named_as_one(engines: EngineFactory, mitmdumps: MitmdumpFactory, two_paces: Path,
                                                tmp_path: Path) -> None:  # fmt: skip
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine, "ws_max_life=2.5")
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("lb", hop.url)])
    status, doc = check(tmp_path, two_paces, chain, "--full")  # the recorded think times, as they were
    assert status == 1 and (doc["verdict"], doc["culprit"]) == ("proxy", "lb"), doc["summary"]
    assert doc["summary"].startswith("hop lb ends WebSockets while they sit idle between turns"), doc["summary"]
    assert next(r for r in doc["routes"] if r["route"] == "direct")["failures"] == 0
    said = [a for a in doc["advice"] if a["hop"] == "lb" and a["kind"] != "ws_not_sent"]
    # the life named is the hop's 2.5 s (as measured on the replayed sockets: a range where they differ)
    assert said and all(2.0 <= low <= high < 3.0 for low, high in seconds("a cap on a WebSocket's life of about", said,
                                                                         "likely")), said  # fmt: skip


def test_an_idle_timeout_is_not_taken_for_a_cap(engines: EngineFactory, mitmdumps: MitmdumpFactory, two_paces: Path,
                                               tmp_path: Path) -> None:  # fmt: skip
    engine = engines(*FAST)
    hop = mitmdumps.faults(engine, "ws_idle_close=1.3")  # between the two think times: one socket cut, at turn 2
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("lb", hop.url)])
    status, doc = check(tmp_path, two_paces, chain, "--full")
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "lb", 2), doc["summary"]
    (said,) = [a for a in doc["advice"] if a["hop"] == "lb" and a["kind"] == "ws_idle_cut"]
    # the silence named is the hop's 1.3 s, between the two think times (as measured on the replayed
    # socket: a range where its cuts differ)
    ((low, high),) = seconds("after", [said], "seen", "of silence")
    assert 1.0 < low <= high < 1.7 and "cap" not in said["likely"], said


def seconds(before: str, advice: list[dict], field: str, after: str = "") -> list[tuple[float, float]]:
    """The seconds written in each piece of `advice`'s `field` between `before` and `after`, as
    (low, high): "1.3 s" and "1.2-1.3 s" alike; a piece without them fails the test."""
    pattern = re.compile(re.escape(before) + r" ([\d.]+)(?:-([\d.]+))? s" + (" " + re.escape(after) if after else ""))
    found = [pattern.search(a[field]) for a in advice]
    assert all(found), [a[field] for a in advice]
    return [(float(m[1]), float(m[2] or m[1])) for m in found if m]
