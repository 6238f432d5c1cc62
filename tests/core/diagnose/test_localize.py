"""The localizer (proxycheck.core.diagnose.localize): observations in, replay steps and verdicts out.

A small simulated world stands in for the network: a chain of hops, each with a chance of
breaking an exchange (from some turn on); a route fails an exchange when any hop it passes (or
the engine) does. The localizer drives it exactly as `check` drives the replayer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Callable

import pytest

from proxycheck.core.diagnose.localize import Decided, Localizer, RecordedFailure, Replay
from proxycheck.core.diagnose.runverdict import FINISHED, RunPlan, run_verdict
from proxycheck.core.diagnose.verdict import (
    CUT_SHORT,
    ENGINE,
    HEALTHY,
    INCOMPLETE,
    INCONCLUSIVE,
    NOT_REPLAYED,
    NOT_REPRODUCED,
    PROXY,
    SERVER,
    Verdict,
)
from proxycheck.core.exchange.observation import Observation, ResultSummary
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol.result import Event

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


def test_the_statistics_name_the_deterministic_rule_when_it_decided() -> None:
    # From turn 3 on: 2 of 6 exchanges in every repetition, none on direct. Two repetitions each
    # decide by the deterministic rule, while Fisher's test alone gives p=0.093: the rule's words
    # carry no p-value, which would read as having decided.
    world = World(["edge"], {"edge": Fault(from_turn=3)})
    verdict = world.run(world.localizer())
    stats = verdict.statistics
    assert verdict.verdict == PROXY and stats["decided_by"] == stats["method"] == "deterministic"
    assert stats["p_value"] > stats["alpha"]  # Fisher's test did not decide, and is not said to
    assert stats["rule"] == ("the deterministic rule decided: the same 2 exchange(s) failed in each of the 2 "
                             "repetitions of via:edge and none in the 2 of direct")  # fmt: skip
    assert "p=" not in stats["rule"] and "decided" not in stats


def test_the_statistics_give_fishers_p_value_when_it_decided() -> None:
    world = World(["corp", "edge"], {"edge": Fault(probability=0.3)}, seed=0)
    verdict = world.run(world.localizer(repeat=3, max_repeat=10))
    stats = verdict.statistics
    assert verdict.verdict == PROXY and stats["decided_by"] == "fisher_exact"
    assert stats["p_value"] < stats["alpha"]
    assert stats["rule"] == f"Fisher's exact test decided: p={stats['p_value']:.2g} < 0.01"


def test_undecided_statistics_say_why_neither_rule_held() -> None:
    world = World(["edge"], {"edge": Fault(probability=0.1)}, seed=1)
    verdict = world.run(world.localizer(max_repeat=3))
    stats = verdict.statistics
    assert verdict.verdict == INCONCLUSIVE and stats["decided_by"] is None
    assert stats["rule"].startswith(f"neither rule decided: Fisher's exact test p={stats['p_value']:.2g}, not under 0.01")
    assert "the failing exchanges differ between the repetitions of via:edge" in stats["rule"]


def test_a_server_verdict_says_the_direct_route_decided() -> None:
    world = World(["edge"], {"engine": Fault(from_turn=3, outcome=Outcome.RESET)})
    stats = world.run(world.localizer()).statistics
    assert stats["decided_by"] == "direct" and stats["rule"] == "the direct route fails"


def test_findings_list_every_exchange_and_advice_is_given_once_per_hop_and_kind() -> None:
    world = World(["edge"], {"edge": Fault(from_turn=2, outcome=Outcome.RESET)})
    verdict = world.run(world.localizer())
    edge = next(r for r in verdict.routes if r.route == "via:edge")
    assert len(verdict.findings) == edge.failures
    (a,) = verdict.advice
    assert (a.hop, a.outcome, a.exchanges, a.routes) == ("edge", "reset", edge.failures, ("via:edge",))
    assert all(f.advice == a.text for f in verdict.findings)
    assert verdict.to_json()["advice"] == [a.to_json()]


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


def test_without_a_culprit_advice_does_not_blame_the_entry_hop_of_a_longer_route() -> None:
    # edge buffers; via:corp passes corp and edge, and buffers too. Degradations name no
    # culprit: via:corp's advice must not say that corp buffers.
    world = World(["corp", "edge"], buffered={"edge"})
    verdict = world.run(world.localizer())
    assert verdict.verdict == HEALTHY
    by_route = {a.routes: a for a in verdict.advice}
    edge, corp = by_route[("via:edge",)], by_route[("via:corp",)]
    assert edge.about == "hop edge" and edge.seen.startswith("hop edge delivers streams in bursts")
    assert corp.about == "via:corp (its hops corp → edge)" and "hop corp" not in corp.text
    assert corp.seen.startswith("via:corp (its hops corp → edge) delivers streams in bursts")


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


# -- a stored run: a verdict only from whole evidence (proxycheck.core.diagnose.runverdict) --------------

PLAN_TURNS = {f"s{s}": TURNS for s in range(SESSIONS)}


def drive(world: World, localizer: Localizer) -> tuple[Verdict, list[Observation]]:
    """Run the world as `check` does, keeping every observation in the order it was written."""
    written: list[Observation] = []
    for _ in range(200):
        step = localizer.next()
        if isinstance(step, Decided):
            return step.verdict, written
        got = world.replay(step)
        written += got
        localizer.add(got)
    raise AssertionError("the localizer never decided")


def check_plan(world: World, status: str = FINISHED, turns: dict[str, int] | None = PLAN_TURNS,
               **kw: object) -> RunPlan:  # fmt: skip
    return RunPlan(routes=tuple(world.ladder), status=status, driven=True, turns=turns, **kw)  # type: ignore[arg-type]


def test_a_run_holding_only_direct_is_incomplete_not_healthy() -> None:
    # A check interrupted once direct was done: the faulty hop's route was never replayed.
    world = World(["corp", "edge"], {"edge": Fault(from_turn=2)})
    held = world.replay(Replay("direct", 2))
    for status in ("interrupted", "running", FINISHED):  # FINISHED: the rest lost from the file
        verdict = run_verdict(world.localizer(), held, check_plan(world, status))
        assert verdict.verdict == INCOMPLETE and verdict.culprit is None, verdict.summary
        assert verdict.fails and not verdict.fault_found
        assert verdict.missing_routes == ["via:edge", "via:corp"]
        assert {m.state for m in verdict.missing} == {NOT_REPLAYED}
        assert [r.route for r in verdict.routes] == ["direct"] and verdict.routes[0].exchanges == 12
        assert verdict.so_far is not None and verdict.so_far.points_to == HEALTHY
        assert "via:edge and via:corp not replayed" in verdict.summary
        assert "so far no finished route fails: direct 12/12" in verdict.summary
        doc = verdict.to_json()
        assert doc["verdict"] == "incomplete" and doc["culprit"] is None
        assert doc["missing_routes"] == ["via:edge", "via:corp"] and doc["run_status"] == status
        assert doc["routes"][0]["route"] == "direct" and doc["so_far"]["points_to"] == "healthy"
        assert doc["so_far"]["summary"] == "so far no finished route fails: direct 12/12"


def test_a_route_cut_in_the_middle_is_no_evidence() -> None:
    # Every route was begun, the last one cut after its clean first turns: fed to the localizer,
    # those would read healthy. It must say which route was cut and judge nothing of it.
    world = World(["edge"], {"edge": Fault(from_turn=2)})
    direct = world.replay(Replay("direct", 2))
    edge = world.replay(Replay("via:edge", 1))
    cut = [o for o in edge if o.turn == 1]
    for status in ("interrupted", FINISHED):
        verdict = run_verdict(world.localizer(), direct + cut, check_plan(world, status))
        assert verdict.verdict == INCOMPLETE, verdict.summary
        (missing,) = verdict.missing
        assert (missing.route, missing.state, missing.repetition, missing.observed, missing.planned) == (
            "via:edge", CUT_SHORT, 1, 2, 6)  # fmt: skip
        assert [r.route for r in verdict.routes] == ["direct"]
        assert "via:edge cut short (repetition 1: 2 of 6 exchanges)" in verdict.summary
    # Cut after its first failures: still no culprit, though the so-far says where it points.
    failing = [o for o in edge if o.session == "s0"]
    verdict = run_verdict(world.localizer(), direct + failing, check_plan(world, "interrupted"))
    assert verdict.verdict == INCOMPLETE and verdict.culprit is None and verdict.missing_routes == ["via:edge"]


def test_without_a_plan_the_last_repetition_of_an_unfinished_run_counts_as_cut() -> None:
    # An older run (no turns in run.json) killed with -9: status "running", nothing says how
    # many exchanges a repetition has, so the repetition being written last is not evidence.
    world = World(["edge"], {"edge": Fault(from_turn=2)})
    held = world.replay(Replay("direct", 2)) + world.replay(Replay("via:edge", 1))
    verdict = run_verdict(world.localizer(), held, check_plan(world, "running", turns=None))
    assert verdict.verdict == INCOMPLETE and verdict.missing_routes == ["via:edge"]
    assert verdict.missing[0].state == CUT_SHORT and verdict.missing[0].planned is None
    assert "the run never finished" in verdict.summary
    # The same observations in a finished run are its verdict.
    verdict = run_verdict(world.localizer(), held, check_plan(world, FINISHED, turns=None))
    assert verdict.verdict == PROXY and verdict.culprit == "edge"


@pytest.mark.parametrize(
    "hops, faults, kw",
    [
        (["corp", "edge", "gateway"], {}, {}),
        (["corp", "edge", "gateway"], {"edge": Fault(from_turn=2)}, {}),
        (["corp", "edge"], {"edge": Fault(probability=0.3)}, {"repeat": 3}),
        ([f"h{i}" for i in range(6)], {"h1": Fault(from_turn=2)}, {"strategy": "bisect"}),
        (["edge"], {"engine": Fault(from_turn=2, outcome=Outcome.RESET)}, {}),
    ],
)
def test_a_whole_run_gives_the_verdict_check_gave(hops: list[str], faults: dict[str, Fault],
                                                  kw: dict[str, object]) -> None:  # fmt: skip
    world = World(hops, faults, seed=2)
    live, written = drive(world, world.localizer(**kw))
    rebuilt = run_verdict(world.localizer(**kw), written, check_plan(world))
    assert rebuilt.verdict != INCOMPLETE
    assert rebuilt.to_json() == live.to_json()


def test_a_server_verdict_needs_no_other_route() -> None:
    # direct failed: the localizer decided with it alone, so the hops' routes are not missing.
    world = World(["corp", "edge"], {"engine": Fault(from_turn=3, outcome=Outcome.RESET)})
    live, written = drive(world, world.localizer())
    assert {o.route for o in written} == {"direct"}
    verdict = run_verdict(world.localizer(), written, check_plan(world))
    assert verdict.verdict == SERVER and verdict.culprit == ENGINE and verdict.missing == ()
    # But a run that says it did not finish is not a verdict, whatever it holds.
    verdict = run_verdict(world.localizer(), written, check_plan(world, "interrupted"))
    assert verdict.verdict == INCOMPLETE and verdict.missing == ()
    assert verdict.so_far is not None and verdict.so_far.points_to == SERVER
    assert verdict.summary.startswith("the run was interrupted before its end; so far the engine")


def test_a_flaky_route_whose_next_repetition_is_missing_is_incomplete() -> None:
    # The localizer wanted more repetitions to tell the flaky hop apart; the run stopped first.
    world = World(["edge"], {"edge": Fault(probability=0.3)}, seed=4)
    live, written = drive(world, world.localizer(repeat=3, max_repeat=10))
    last = written[-1].route, written[-1].repetition
    assert last[1] > 3, "the fault was told apart without more repetitions"
    held = [o for o in written if (o.route, o.repetition) != last]
    verdict = run_verdict(world.localizer(repeat=3, max_repeat=10), held, check_plan(world, FINISHED))
    assert verdict.verdict == INCOMPLETE and verdict.missing_routes == [last[0]]
    assert verdict.missing[0].state == NOT_REPLAYED and verdict.missing[0].repetition == last[1]
    assert f"{last[0]} (repetition {last[1]}) not replayed" in verdict.summary
    assert live.verdict in (PROXY, INCONCLUSIVE)


def test_stop_session_ends_a_whole_repetition_at_its_first_failure() -> None:
    # --on-fail stop-session: a session's turns after a failure were never sent.
    world = World(["edge"], {"edge": Fault(from_turn=2)})
    direct = world.replay(Replay("direct", 2))
    edge = [o for o in world.replay(Replay("via:edge", 2)) if o.turn <= 2]  # stopped at turn 2
    verdict = run_verdict(world.localizer(), direct + edge, check_plan(world, stop_session=True))
    assert verdict.verdict == PROXY and verdict.culprit == "edge", verdict.summary
    # Without stop-session the same run lacks turn 3 of every session: cut short.
    verdict = run_verdict(world.localizer(), direct + edge, check_plan(world))
    assert verdict.verdict == INCOMPLETE and verdict.missing[0].state == CUT_SHORT
    # A session that stopped on a clean turn was cut, stop-session or not.
    clean_cut = [o for o in world.replay(Replay("direct", 2)) if o.turn <= 2]
    verdict = run_verdict(world.localizer(), clean_cut, check_plan(world, stop_session=True))
    assert verdict.verdict == INCOMPLETE and verdict.missing_routes[0] == "direct"


def test_a_route_missing_from_the_middle_of_a_finished_run_is_named() -> None:
    # Lines of one route removed by hand: the evidence of the routes after it is still shown.
    world = World(["corp", "edge", "gateway"], {"corp": Fault(from_turn=2)})
    live, written = drive(world, world.localizer())
    assert live.culprit == "corp"
    held = [o for o in written if o.route != "via:edge"]
    verdict = run_verdict(world.localizer(), held, check_plan(world))
    assert verdict.verdict == INCOMPLETE and verdict.missing_routes == ["via:edge"]
    assert [r.route for r in verdict.routes] == ["direct", "via:gateway", "via:corp"]
    assert verdict.so_far is not None and verdict.so_far.points_to == INCONCLUSIVE  # corp or edge: not told


def test_a_replay_run_must_hold_every_route_of_its_plan() -> None:
    # A run `replay` made: every route of its plan, `repeat` times, judged as it is when whole.
    world = World(["edge"], {"edge": Fault(from_turn=2)})
    direct = world.replay(Replay("direct", 2))
    edge = world.replay(Replay("via:edge", 2))
    plan = RunPlan(routes=tuple(world.ladder), status=FINISHED, repeat=2, turns=PLAN_TURNS)
    assert run_verdict(world.localizer(), direct + edge, plan).culprit == "edge"
    one_rep = [o for o in edge if o.repetition == 1]
    verdict = run_verdict(world.localizer(), direct + one_rep, plan)
    assert verdict.verdict == INCOMPLETE and verdict.missing[0].repetition == 2
    for status in ("interrupted", "limited", "failed"):
        verdict = run_verdict(world.localizer(), direct + edge, replace(plan, status=status))
        assert verdict.verdict == INCOMPLETE and verdict.run_status == status


def test_a_run_with_nothing_whole_says_there_is_nothing_to_go_on() -> None:
    world = World(["edge"])
    first = world.replay(Replay("direct", 1))[:3]
    verdict = run_verdict(world.localizer(), first, check_plan(world, "interrupted"))
    assert verdict.verdict == INCOMPLETE and verdict.routes == () and verdict.so_far is None
    assert verdict.missing_routes == ["direct", "via:edge"] and verdict.missing[0].state == CUT_SHORT
    assert "no route was replayed in full" in verdict.summary
    verdict = run_verdict(world.localizer(), [], check_plan(world, "interrupted"))
    assert verdict.verdict == INCOMPLETE and [m.state for m in verdict.missing] == [NOT_REPLAYED] * 2


# -- where the failures start: a turn that failed once before the steady start -------------------


def run_scripted(hops: list[str], fails: Callable[[str, int, str, int], bool], **kw: object) -> Verdict:
    """The localizer's verdict on replays where exchange (route, repetition, session, turn) fails
    (a stall) exactly when `fails` says so."""
    world = World(hops)
    localizer = world.localizer(**kw)
    reps: dict[str, int] = {}
    rng = random.Random(0)
    for _ in range(100):
        step = localizer.next()
        if isinstance(step, Decided):
            return step.verdict
        seen = []
        for _ in range(step.repetitions):
            rep = reps[step.route] = reps.get(step.route, 0) + 1
            for s in range(SESSIONS):
                for turn in range(1, TURNS + 1):
                    outcome = Outcome.STALL_MID_STREAM if fails(step.route, rep, f"s{s}", turn) else Outcome.OK
                    seen.append(observation(step.route, rep, f"s{s}", turn, outcome, rng))
        localizer.add(seen)
    raise AssertionError("the localizer never decided")


def test_a_turn_that_failed_in_one_repetition_only_does_not_move_where_the_wedge_starts() -> None:
    # On a real engine a prefill the hop gave up on goes on after it hung up: the next repetition's
    # turn 1 waits behind it and meets the hop's timeout, once. The wedge starts at turn 2.
    def fails(route: str, rep: int, session: str, turn: int) -> bool:
        return route == "via:edge" and (turn >= 2 or (rep == 2 and session == "s0"))

    verdict = run_scripted(["edge"], fails, repeat=3)
    assert (verdict.verdict, verdict.culprit, verdict.first_turn) == (PROXY, "edge", 2), verdict.summary
    assert "from turn 2 on; also at turn 1 in 1 of 3 repetitions (" in verdict.summary, verdict.summary


def test_a_turn_that_failed_in_most_repetitions_is_where_the_wedge_starts() -> None:
    # Trying to fool it the other way: turn 1 failed in 2 of 3 repetitions of a session, and a tie
    # (1 of 2) goes to the earlier turn as well: neither is an outlier.
    def most(route: str, rep: int, session: str, turn: int) -> bool:
        return route == "via:edge" and (turn >= 2 or rep != 2)

    verdict = run_scripted(["edge"], most, repeat=3)
    assert verdict.first_turn == 1 and "first at turn 1" in verdict.summary, verdict.summary

    def tie(route: str, rep: int, session: str, turn: int) -> bool:
        return route == "via:edge" and (turn >= 2 or (rep == 1 and session == "s0"))

    verdict = run_scripted(["edge"], tie, repeat=2)
    assert verdict.first_turn == 1, verdict.summary


def test_sessions_that_start_failing_at_different_turns_start_at_the_earliest() -> None:
    # Each session's steady start counts: one that starts failing at turn 3 every time is not
    # outvoted by the others starting later.
    def fails(route: str, rep: int, session: str, turn: int) -> bool:
        return route == "via:edge" and turn >= (3 if session == "s0" else 4)

    verdict = run_scripted(["edge"], fails, repeat=3)
    assert verdict.first_turn == 3 and "also at" not in verdict.summary, verdict.summary


def test_failures_that_do_not_hold_from_a_turn_on_start_at_the_earliest_one() -> None:
    # Not failing from a turn on (turn 3 passes in repetition 1): the steady rule does not apply, and
    # the first failing turn, wherever it is, is where they start.
    def fails(route: str, rep: int, session: str, turn: int) -> bool:
        return route == "via:edge" and session == "s0" and (turn == 2 if rep == 1 else turn == 3)

    verdict = run_scripted(["edge"], fails, repeat=3)
    assert verdict.verdict == PROXY and verdict.first_turn == 2, verdict.summary
    assert "in some exchanges, first at turn 2" in verdict.summary, verdict.summary
