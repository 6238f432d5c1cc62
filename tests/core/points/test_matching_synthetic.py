"""The matching rule's claim (proxycheck.core.points.matching), on a few hundred synthetic exchanges
seen at three points: every exchange present at two points is found at both and paired with
itself, nothing is paired with an exchange that never reached a point, and the clocks' offsets
come out of the exchanges, when

* the points' clocks are seconds apart (+0, +2.3, -41 s) and their recorders started at other times,
* groups of parallel agents send identical first turns (one system prompt, the group's task; the
  tasks repeat across groups), started further apart than the hops' jitter,
* a client re-sends the same body (a regenerated answer; the retry after a failure),
* the first hop re-serializes the JSON of half the sessions (other key order, no spaces),
* the second hop answers late joiners' first turns itself (never seen at the innermost point),
* the second hop loses a few answers the engine completed.

Pure: `Seen` values built by hand, no recording on disk (benchmarks/bench_trace.py measures the
same on recordings, with bursts that reorder identical requests, which no request-only rule can
tell apart).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from proxycheck.core.diagnose.verdict import PROXY
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.points.matching import PointLog, match
from proxycheck.core.points.seen import Seen, seen_of
from proxycheck.core.points.trace import LOST, trace
from proxycheck.core.replay.chain import parse_chain

POINTS = ("edge", "mid", "inner")
OFFSETS = {"edge": 0.0, "mid": 2.3, "inner": -41.0}  # each point's clock minus the true time
STARTS = {"edge": -5.0, "mid": -20.0, "inner": -60.0}  # true time each recorder started
EPOCH = 1_800_000_000.0
CHAIN = """engine = "http://127.0.0.1:30000"
[engine_options]
point = "inner"
[[hop]]
name = "gateway"
url = "http://127.0.0.1:4000"
point = "edge"
[[hop]]
name = "router"
url = "http://127.0.0.1:4100"
point = "mid"
"""
pytestmark = pytest.mark.timeout(30)

TASKS = ("fix the failing test", "add type hints")
SYSTEM = "You are a coding agent. Use the tools."


@dataclass
class At:
    """One exchange at one point, on the true clock."""

    body: bytes
    t_request: float
    t_response: float | None = None
    t_end: float = 0.0
    ok: bool = True


@dataclass
class Sent:
    uid: int
    kind: str
    at: dict[str, At] = field(default_factory=dict)


def _reordered(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: _reordered(doc[k]) for k in reversed(list(doc))}
    if isinstance(doc, list):
        return [_reordered(v) for v in doc]
    return doc


def traffic(seed: int = 7) -> list[Sent]:
    rng = random.Random(seed)
    hop = lambda: rng.uniform(0.004, 0.012)  # noqa: E731 - a hop's latency, one way
    out: list[Sent] = []

    def send(kind: str, body: bytes, inner_body: bytes, t: float) -> Sent:
        x = Sent(len(out) + 1, kind)
        t_mid = t + hop()
        x.at["edge"], x.at["mid"] = At(body, t), At(inner_body, t_mid)
        if kind == "cached":  # the router answers at once
            x.at["mid"].t_response, x.at["mid"].t_end = t_mid + 0.003, t_mid + 0.05
        else:
            t_inner = t_mid + hop()
            resp = t_inner + rng.uniform(0.2, 1.0)
            x.at["inner"] = At(inner_body, t_inner, resp, resp + rng.uniform(0.5, 3.0))
            x.at["mid"].t_response, x.at["mid"].t_end = resp + hop(), x.at["inner"].t_end + hop()
        x.at["edge"].t_response, x.at["edge"].t_end = x.at["mid"].t_response + hop(), x.at["mid"].t_end + hop()  # type: ignore[operator]
        if kind == "lost":  # the rest of the answer never leaves the router: the client gives up
            gave_up = x.at["edge"].t_response + rng.uniform(5, 15)  # type: ignore[operator]
            x.at["edge"].t_end, x.at["edge"].ok = gave_up, False
            x.at["mid"].t_end, x.at["mid"].ok = gave_up + hop(), False
        out.append(x)
        return x

    for g in range(8):
        start = g * 40.0 + rng.uniform(0, 20)
        agents = [(f"g{g}-a{i}", start + 0.05 * i + rng.uniform(0, 0.01), rng.randint(4, 9), False) for i in range(5)]
        agents.append((f"g{g}-late", start + 20.0, 3, True))
        for name, t, turns, late in agents:
            reserialize = rng.random() < 0.5
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASKS[g % len(TASKS)]}]
            for k in range(turns):
                doc = {"model": "m", "messages": messages, "stream": True}
                body = json.dumps(doc).encode()
                inner_body = json.dumps(_reordered(doc), separators=(",", ":")).encode() if reserialize else body
                fate = "cached" if late and k == 0 else "ok" if k == 0 else rng.choices(("ok", "again", "lost"), (20, 2, 1))[0]
                kinds = {"again": ["ok", "ok"], "lost": ["lost", "ok"]}.get(fate, [fate])
                for kind in kinds:
                    x = send(kind, body, inner_body, t)
                    t = x.at["edge"].t_end + rng.uniform(0.3, 1.5)
                messages = messages + [{"role": "assistant", "content": f"{name} answer {k}"},
                                       {"role": "user", "content": f"{name} tool output {k}"}]  # fmt: skip
                t += rng.uniform(0.5, 5.0)
    return out


def points_of(sent: list[Sent]) -> tuple[list[PointLog], list[dict[int, int]]]:
    """The three points (their own clocks) and, for each, its exchange numbers -> the client's."""
    logs, truth = [], []
    for position, name in enumerate(POINTS):
        mine = sorted((x for x in sent if name in x.at), key=lambda x: x.at[name].t_request)
        local = lambda t: t - STARTS[name]  # noqa: E731 - true time -> this recording's offsets
        seen: list[Seen] = []
        numbers: dict[int, int] = {}
        for xid, x in enumerate(mine, 1):
            a = x.at[name]
            numbers[xid] = x.uid
            seen.append(seen_of(
                xid=xid, label=f"s{x.uid}", turn=1, method="POST", path="/v1/chat/completions", body=a.body,
                t_request=local(a.t_request), t_response=local(a.t_response) if a.t_response is not None else None,
                t_end=local(a.t_end) if a.ok else None, t_error=None if a.ok else local(a.t_end), status=200,
                streamed=False, analysis=None, outcome=Outcome.OK if a.ok else Outcome.STALL_MID_STREAM, detail="",
                error=None if a.ok else "Client disconnected.", interrupted=False,
                last_byte=local(a.t_end if a.ok else a.t_response),  # type: ignore[arg-type]
            ))  # fmt: skip
        end = max(local(x.at[name].t_end) for x in mine) + 5.0
        logs.append(PointLog(name, EPOCH + STARTS[name] + OFFSETS[name], tuple(seen), ((0.0, end),), position))
        truth.append(numbers)
    return logs, truth


def test_every_exchange_at_two_points_is_paired_with_itself_and_nothing_else() -> None:
    sent = traffic()
    points, truth = points_of(sent)
    kinds = {x.uid: x.kind for x in sent}
    assert len(sent) >= 250 and sum(k == "cached" for k in kinds.values()) == 8 and "lost" in kinds.values()
    identical_first = sum(1 for x in sent if x.at["edge"].body.count(b'"role": "user"') == 1)
    assert identical_first >= 40  # first turns, repeated across the groups' agents
    edge = points[0]
    for j in (1, 2):
        m = match(edge, points[j])
        present = {x.uid for x in sent if POINTS[j] in x.at}
        right = sum(1 for oi, ii in m.pairs.items() if truth[0][edge.seen[oi].xid] == truth[j][points[j].seen[ii].xid])
        wrong = [(truth[0][edge.seen[oi].xid], truth[j][points[j].seen[ii].xid]) for oi, ii in m.pairs.items()
                 if truth[0][edge.seen[oi].xid] != truth[j][points[j].seen[ii].xid]]  # fmt: skip
        assert wrong == [] and m.resent == {}
        assert right == len(present)  # accuracy 1.0
        assert m.inner_only == ()
        true_offset = OFFSETS[POINTS[j]] - OFFSETS["edge"]
        assert m.offset.source == "exchanges" and abs(m.offset.seconds - true_offset) < 0.01


def test_the_trace_places_the_answers_the_router_lost() -> None:
    sent = traffic()
    points, truth = points_of(sent)
    chain = parse_chain(CHAIN, {}, "chain.toml")
    result = trace(points, len(chain.hops), chain.hops_between)
    assert result.verdict == PROXY and result.culprit == "router"
    lost = {x.uid for x in sent if x.kind == "lost"}
    placed = {truth[0][t.seen[0].xid]: (t.locus.kind, t.locus.outer, t.locus.inner) for t in result.tracks if t.seen[0] is not None}
    assert {uid: placed[uid] for uid in lost} == {uid: (LOST, 1, 2) for uid in lost}
    assert [uid for uid, (kind, _, _) in placed.items() if kind != "fine" and uid not in lost] == []
    for track in result.tracks:  # every track holds one exchange, at every point that saw it
        uids = {truth[i][s.xid] for i, s in enumerate(track.seen) if s is not None}
        assert len(uids) == 1 and all(r == () for r in track.resent)
