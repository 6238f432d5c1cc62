"""The localizer (proxycheck.core.localize): observations in, replay steps and verdicts out.

A small simulated world stands in for the network: a chain of hops, each with a chance of
breaking an exchange (from some turn on); a route fails an exchange when any hop it passes (or
the engine) does. The localizer drives it exactly as `check` drives the replayer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest

from proxycheck.core.localize import Decided, Localizer, RecordedFailure, Replay
from proxycheck.core.model import Event
from proxycheck.core.observation import Observation, ResultSummary
from proxycheck.core.outcomes import Outcome
from proxycheck.core.verdict import ENGINE, HEALTHY, INCONCLUSIVE, NOT_REPRODUCED, PROXY, SERVER, Verdict

SESSIONS, TURNS = 2, 3


@dataclass
class Fault:
    probability: float = 1.0
    from_turn: int = 1
    outcome: Outcome = Outcome.STALL_MID_STREAM


@dataclass
class World:
    hops: list[str]  # client inward
    faults: dict[str, Fault] = field(default_factory=dict)  # hop name or "engine"
    buffered: set[str] = field(default_factory=set)  # hops that deliver streams in one burst
    seed: int = 0
    replays: list[Replay] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.next_rep: dict[str, int] = {}

    @property
    def ladder(self) -> list[str]:
        return ["direct"] + [f"via:{h}" for h in reversed(self.hops)]

    def route_hops(self, route: str) -> tuple[str, ...]:
        return () if route == "direct" else tuple(self.hops[self.hops.index(route[4:]) :])

    def localizer(self, **kw: object) -> Localizer:
        return Localizer(self.ladder, {r: self.route_hops(r) for r in self.ladder}, **kw)  # type: ignore[arg-type]

    def replay(self, step: Replay) -> list[Observation]:
        self.replays.append(step)
        out = []
        for _ in range(step.repetitions):
            rep = self.next_rep.get(step.route, 0) + 1
            self.next_rep[step.route] = rep
            for s in range(SESSIONS):
                for turn in range(1, TURNS + 1):
                    outcome = Outcome.OK
                    for who in (*self.route_hops(step.route), "engine"):
                        fault = self.faults.get(who)
                        if fault and turn >= fault.from_turn and self.rng.random() < fault.probability:
                            outcome = fault.outcome
                    burst = any(h in self.buffered for h in self.route_hops(step.route))
                    out.append(observation(step.route, rep, f"s{s}", turn, outcome, self.rng, burst))
        return out

    def run(self, localizer: Localizer, limit: int = 200) -> Verdict:
        for _ in range(limit):
            step = localizer.next()
            if isinstance(step, Decided):
                return step.verdict
            localizer.add(self.replay(step))
        raise AssertionError("the localizer never decided")


def observation(route: str, rep: int, session: str, turn: int, outcome: Outcome, rng: random.Random,
                burst: bool = False) -> Observation:  # fmt: skip
    ttft = 0.05 * rng.uniform(0.9, 1.1)
    if burst:
        events = tuple(Event(0.5, 40, "content") for _ in range(20)) + (Event(0.5, 14, "terminal"),)
        ttft = 0.5
    else:
        events = tuple(Event(ttft + 0.01 * i, 40, "content") for i in range(20))
        events += (Event(ttft + 0.2, 14, "terminal"),)
    if outcome is not Outcome.OK:
        events = events[:5]
    result = ResultSummary(f"{session}-{turn}", 80, completion_tokens=20, finish_reason="stop", terminal=True)
    return Observation(
        route=route, repetition=rep, session=session, turn=turn, xid=turn, t_start=rep * 10.0 + turn,
        headers=0.01, first_event=ttft, first_content=ttft, end=events[-1].t, events=events, status=200,
        result=result if outcome is Outcome.OK else None, outcome=outcome,
        detail="" if outcome is Outcome.OK else "no content for 10.0 s after event 5 (200 B received)",
    )  # fmt: skip


# --------------------------------------------------------------------------------------------


def test_direct_goes_first_twice_for_the_noise_floor() -> None:
    world = World(["edge"])
    assert world.localizer().next() == Replay("direct", 2)
    assert world.localizer(repeat=3).next() == Replay("direct", 3)


def test_clean_chain_is_healthy_after_one_replay_of_each_route() -> None:
    world = World(["corp", "edge", "gateway"])
    verdict = world.run(world.localizer())
    assert verdict.verdict == HEALTHY and verdict.culprit is None and not verdict.fault_found
    assert [r.route for r in verdict.routes] == world.ladder
    assert all(r.failures == 0 and r.state == "clean" for r in verdict.routes)
    assert world.replays == [Replay("direct", 2)] + [Replay(r, 1) for r in world.ladder[1:]]
    assert verdict.summary.startswith("every route clean: direct 12/12, via:gateway 6/6")


@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_deterministic_fault_is_pinned_on_its_hop(position: int) -> None:
    hops = ["corp", "edge", "gateway"]
    world = World(hops, {hops[position]: Fault(from_turn=2)})
    verdict = world.run(world.localizer())
    assert verdict.verdict == PROXY and verdict.culprit == hops[position] and verdict.fault_found
    # Decided by Fisher's test when direct's two clean repetitions suffice, else by the same
    # exchanges failing in two repetitions.
    assert verdict.statistics["method"] in ("deterministic", "fisher_exact")
    assert verdict.first_turn == 2
    assert verdict.summary.startswith(f"hop {hops[position]} stalls mid-stream from turn 2 on (")
    # Routes outward of the culprit are not needed for the verdict, and not replayed.
    replayed = {r.route for r in verdict.routes}
    assert f"via:{hops[position]}" in replayed and all(f"via:{h}" not in replayed for h in hops[:position])
    assert verdict.evidence is not None and verdict.evidence.failing.route == f"via:{hops[position]}"
    assert verdict.evidence.reference is not None and verdict.evidence.reference.route == "direct"
    finding = next(f for f in verdict.findings if f.route == f"via:{hops[position]}")
    assert finding.turn >= 2 and f"hop {hops[position]}" in finding.advice


def test_engine_failures_give_server() -> None:
    world = World(["edge"], {"engine": Fault(from_turn=3, outcome=Outcome.RESET)})
    verdict = world.run(world.localizer())
    assert verdict.verdict == SERVER and verdict.culprit == ENGINE and verdict.fault_found
    assert verdict.summary.startswith("the engine cuts connections mid-response on the direct route from turn 3 on")
    assert [r.route for r in verdict.routes] == ["direct"]
    assert all("look at the server" in f.advice for f in verdict.findings)


def test_a_fault_in_30_percent_of_exchanges_is_found_by_repetition() -> None:
    found = 0
    for seed in range(20):
        # --repeat 3: one repetition of 6 exchanges misses a 30% fault 12% of the time (0.7^6).
        world = World(["corp", "edge"], {"edge": Fault(probability=0.3)}, seed=seed)
        verdict = world.run(world.localizer(repeat=3, max_repeat=10))
        assert verdict.verdict in (PROXY, INCONCLUSIVE), verdict.summary
        if verdict.verdict == PROXY:
            assert verdict.culprit == "edge"
            assert verdict.statistics["method"] == "fisher_exact" and verdict.statistics["p_value"] < 0.01
            found += 1
    assert found >= 19  # 6 exchanges a repetition, up to 10 repetitions: nearly always decided


def test_a_rare_difference_stays_inconclusive_rather_than_a_guess() -> None:
    world = World(["edge"], {"edge": Fault(probability=0.04)}, seed=3)
    verdict = world.run(world.localizer(max_repeat=3))
    assert verdict.verdict in (INCONCLUSIVE, HEALTHY)
    if verdict.verdict == INCONCLUSIVE:
        assert verdict.culprit is None and "not a clear difference" in verdict.summary
        assert verdict.fault_found


def test_a_clean_route_that_fails_later_moves_the_candidate_inward() -> None:
    # edge fails always from turn 2; gateway (inner) fails rarely. Whatever the order the
    # failures show up in, the verdict never blames edge for what gateway does.
    world = World(["edge", "gateway"], {"edge": Fault(from_turn=2), "gateway": Fault(probability=0.2)}, seed=1)
    verdict = world.run(world.localizer())
    assert verdict.verdict in (PROXY, INCONCLUSIVE)
    if verdict.verdict == PROXY:
        assert verdict.culprit == "gateway"


def test_bisect_replays_fewer_routes_on_a_long_chain() -> None:
    hops = [f"h{i}" for i in range(8)]
    ladder_world = World(hops, {"h1": Fault(from_turn=2)})
    bisect_world = World(hops, {"h1": Fault(from_turn=2)})
    a = ladder_world.run(ladder_world.localizer())
    b = bisect_world.run(bisect_world.localizer(strategy="bisect"))
    assert a.culprit == b.culprit == "h1"
    assert b.strategy == "bisect"
    assert len({s.route for s in bisect_world.replays}) < len({s.route for s in ladder_world.replays})


def test_bisect_on_a_clean_chain_replays_only_the_outermost_route() -> None:
    world = World(["a", "b", "c", "d"])
    verdict = world.run(world.localizer(strategy="bisect"))
    assert verdict.verdict == HEALTHY
    assert {s.route for s in world.replays} == {"direct", "via:a"}


def test_recorded_failures_no_route_reproduces_are_not_reproduced() -> None:
    world = World(["edge"])
    recorded = [RecordedFailure("s0", 3, "stall_mid_stream", "no content for 30.0 s")]
    verdict = world.run(world.localizer(recorded_failures=recorded, differences=["think times: replayed fast"]))
    assert verdict.verdict == NOT_REPRODUCED and not verdict.fault_found
    assert "1 failed exchange(s) (1 stall_mid_stream)" in verdict.summary
    assert verdict.differences == ("think times: replayed fast",)


def test_buffering_is_a_degradation_unless_fail_on_says_so() -> None:
    world = World(["edge"], buffered={"edge"})
    verdict = world.run(world.localizer())
    assert verdict.verdict == HEALTHY and "degradations seen: buffered" in verdict.summary
    assert any(f.outcome == "buffered" for f in verdict.findings)
    world = World(["edge"], buffered={"edge"})
    verdict = world.run(world.localizer(fail_on=[Outcome.BUFFERED]))
    assert verdict.verdict == PROXY and verdict.culprit == "edge"
    assert verdict.summary.startswith("hop edge buffers streams")


def test_final_mode_judges_what_a_run_holds_without_asking_for_more() -> None:
    world = World(["corp", "edge"], {"edge": Fault(from_turn=2)})
    observations = world.replay(Replay("direct", 2)) + world.replay(Replay("via:corp", 1))
    loc = world.localizer()
    loc.add(observations)
    step = loc.next(final=True)
    # via:edge (inner) was not replayed: via:corp fails where direct does not, but it passes
    # two hops, and nothing tells which of them breaks it.
    assert isinstance(step, Decided) and step.verdict.verdict == INCONCLUSIVE
    assert "one of the hops corp, edge" in step.verdict.summary
    assert [r.route for r in step.verdict.routes] == ["direct", "via:corp"]


def test_final_mode_without_a_direct_route_cannot_blame_a_hop() -> None:
    world = World(["edge"], {"edge": Fault()})
    loc = world.localizer()
    loc.add(world.replay(Replay("via:edge", 2)))
    step = loc.next(final=True)
    assert isinstance(step, Decided) and step.verdict.verdict == INCONCLUSIVE
    assert "no direct route" in step.verdict.summary


def test_added_latency_per_hop() -> None:
    world = World(["edge"])
    verdict = world.run(world.localizer())
    direct, edge = verdict.routes
    assert direct.added_latency is None and edge.added_latency is not None
    assert edge.added_latency == pytest.approx(edge.ttft_p50 - direct.ttft_p50)


def test_verdict_json_follows_the_contract() -> None:
    world = World(["edge"], {"edge": Fault(from_turn=2)})
    doc = world.run(world.localizer()).to_json()
    assert doc["schema"] == "proxycheck.verdict/1"
    assert doc["verdict"] == "proxy" and doc["culprit"] == "edge"
    assert {r["route"] for r in doc["routes"]} == {"direct", "via:edge"}
    assert all({"route", "exchanges", "outcomes"} <= set(r) for r in doc["routes"])
    assert all({"route", "session", "turn", "outcome", "detail"} <= set(f) for f in doc["findings"])
    assert doc["routes"][1]["outcomes"]["stall_mid_stream"] == doc["routes"][1]["failures"]


def test_findings_on_routes_through_the_culprit_advise_about_the_culprit() -> None:
    # bisect replays the outermost route first: it fails through the inner hop, which is blamed.
    world = World(["outer", "inner"], {"inner": Fault(from_turn=2, outcome=Outcome.RESET)})
    verdict = world.run(world.localizer(strategy="bisect"))
    assert verdict.culprit == "inner"
    outer = [f for f in verdict.findings if f.route == "via:outer"]
    assert outer and all("hop inner" in f.advice and "hop outer" not in f.advice for f in outer)


def test_added_latency_compares_the_exchanges_ok_on_both_routes() -> None:
    world = World(["edge"], {"edge": Fault(from_turn=2)})
    loc = world.localizer()
    direct = world.replay(Replay("direct", 2))
    # direct's turns 2 and 3 are slow; on via:edge they failed, so they must not make edge look faster.
    direct = [replace(o, first_content=5.0) if o.turn >= 2 else o for o in direct]
    loc.add(direct + world.replay(Replay("via:edge", 2)))
    verdict = loc.next(final=True).verdict  # type: ignore[union-attr]
    edge = next(r for r in verdict.routes if r.route == "via:edge")
    assert edge.added_latency is not None and abs(edge.added_latency) < 0.02
