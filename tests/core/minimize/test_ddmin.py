"""The minimizer's search (proxycheck.core.minimize.ddmin): outcomes in, candidates and values out.

Predicates stand in for replays: a set of items "fails" when the predicate says so, exactly as
`minimize` will feed back whether the failure still reproduced on the culprit route.
"""

from __future__ import annotations

import math
import random
from typing import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.minimize.ddmin import (
    Bisect,
    Budget,
    Candidate,
    DDMin,
    Done,
    Trials,
    tries_for,
    tries_needed,
    wilson_lower,
)

Predicate = Callable[[Sequence[int]], bool]


def run(search: DDMin[int], fails: Predicate, *, budget: Budget | None = None) -> tuple[Done[int], list[tuple]]:
    """Drive a search to the end; the candidates it asked for, in order."""
    asked: list[tuple] = []
    while isinstance(step := search.next(), Candidate):
        asked.append(step.items)
        search.result(step.id, fails(step.items))
        if budget is not None:
            budget.spend(1)
    return step, asked


def contains(*needed: int) -> Predicate:
    return lambda items: set(needed) <= set(items)


# -- ddmin: monotone predicates -----------------------------------------------------------------------


def test_finds_exactly_the_failure_inducing_pair() -> None:
    done, asked = run(DDMin(range(16)), contains(3, 7))
    assert done.items == (3, 7) and done.indices == (3, 7)
    assert done.complete and done.reason == "minimal" and done.tests == len(asked)


@given(st.integers(1, 24).flatmap(lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), min_size=1))))
def test_finds_the_single_minimal_failing_set(case: tuple[int, set[int]]) -> None:
    n, target = case
    done, _ = run(DDMin(range(n)), contains(*target))
    assert set(done.items) == target and done.complete


@given(st.lists(st.sets(st.integers(0, 11), min_size=1, max_size=4), min_size=1, max_size=4))
def test_finds_one_of_several_minimal_failing_sets(bugs: list[set[int]]) -> None:
    # Fails when any bug set is present: the result is one of the minimal bug sets, whole.
    minimal = [b for b in bugs if not any(o < b for o in bugs)]
    done, _ = run(DDMin(range(12)), lambda items: any(b <= set(items) for b in bugs))
    assert set(done.items) in minimal


def test_a_single_failing_item_among_many_takes_few_tests() -> None:
    done, asked = run(DDMin(range(1024)), contains(700))
    assert done.items == (700,)
    assert len(asked) <= 2 * math.log2(1024)  # halving: two candidates per level at most


# -- ddmin: arbitrary predicates ----------------------------------------------------------------------


@st.composite
def tables(draw: st.DrawFn) -> tuple[int, list[bool]]:
    """A predicate over the subsets of range(n), as a truth table by bitmask: the full set
    fails (the caller's guarantee), the empty set passes (ddmin's assumption)."""
    n = draw(st.integers(1, 8))
    table = draw(st.lists(st.booleans(), min_size=2**n, max_size=2**n))
    table[0], table[-1] = False, True
    return n, table


def mask(items: Sequence[int]) -> int:
    return sum(1 << i for i in items)


@given(tables())
def test_result_is_one_minimal_on_any_predicate(case: tuple[int, list[bool]]) -> None:
    n, table = case
    done, _ = run(DDMin(range(n)), lambda items: table[mask(items)])
    assert table[mask(done.items)]
    for drop in done.items:
        assert not table[mask([i for i in done.items if i != drop])]


@given(tables())
def test_never_asks_for_the_same_set_twice_and_only_shrinks(case: tuple[int, list[bool]]) -> None:
    n, table = case
    search = DDMin(range(n))
    seen: set[frozenset[int]] = {frozenset(range(n))}  # the full input is known to fail
    while isinstance(step := search.next(), Candidate):
        assert frozenset(step.items) not in seen
        assert step.items and set(step.items) < set(search.best)
        assert list(step.items) == sorted(step.items)  # original order kept
        seen.add(frozenset(step.items))
        search.result(step.id, table[mask(step.items)])
    assert step.tests == search.tests == len(seen) - 1


@given(tables(), st.randoms(use_true_random=False))
def test_best_always_fails_and_only_shrinks(case: tuple[int, list[bool]], rnd: random.Random) -> None:
    n, table = case
    search = DDMin(range(n))
    sizes = [len(search.best)]
    while isinstance(step := search.next(), Candidate):
        search.result(step.id, table[mask(step.items)])
        assert table[mask(search.best)]
        sizes.append(len(search.best))
        if rnd.random() < 0.1:
            done = search.stop()
            assert not done.complete and done.reason == "stopped" and done.items == search.best
            break
    assert sizes == sorted(sizes, reverse=True)


# -- ddmin: keep ---------------------------------------------------------------------------------------


@given(tables())
def test_keep_rejects_candidates_without_testing_them(case: tuple[int, list[bool]]) -> None:
    # An invariant, like "the first turn (the system prompt) stays".
    n, table = case
    search = DDMin(range(n), keep=lambda items: 0 in items)
    done, asked = run(search, lambda items: table[mask(items)])
    assert all(0 in items for items in asked)
    assert 0 in done.items and table[mask(done.items)] and done.complete
    # 1-minimal among valid candidates: dropping an item breaks the invariant or passes.
    for drop in done.items:
        rest = [i for i in done.items if i != drop]
        assert drop == 0 or not table[mask(rest)]


def test_keep_counts_the_candidates_it_rejected() -> None:
    search = DDMin(range(8), keep=lambda items: len(items) >= 3)
    done, asked = run(search, contains(1, 6))
    assert all(len(items) >= 3 for items in asked)
    assert len(done.items) == 3 and {1, 6} <= set(done.items)
    assert search.skipped > 0 and search.progress.skipped == search.skipped


def test_keep_rejecting_everything_leaves_the_full_input() -> None:
    search = DDMin("abcd", keep=lambda items: False)
    done = search.next()
    assert isinstance(done, Done)
    assert done.items == tuple("abcd") and done.complete and done.tests == 0


def test_keep_sees_the_items_not_their_positions() -> None:
    seen: list[Sequence[str]] = []
    search = DDMin(["sys", "u1", "u2", "u3"], keep=lambda items: seen.append(items) or True)
    run(search, lambda items: "u2" in items)  # type: ignore[arg-type]
    assert seen and all(set(items) <= {"sys", "u1", "u2", "u3"} for items in seen)


# -- ddmin: protocol ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("items", [[], ["only"]])
def test_nothing_to_reduce(items: list[str]) -> None:
    done = DDMin(items).next()
    assert isinstance(done, Done) and done.items == tuple(items) and done.complete and done.tests == 0


def test_pending_candidate_is_repeated_until_its_result() -> None:
    search = DDMin(range(6))
    first = search.next()
    assert isinstance(first, Candidate)
    assert search.next() is first
    with pytest.raises(ValueError):
        search.result(first.id + 1, True)
    search.result(first.id, False)
    second = search.next()
    assert isinstance(second, Candidate) and second.id != first.id
    with pytest.raises(ValueError):
        search.result(first.id, False)  # already answered


def test_unhashable_items_and_their_positions() -> None:
    messages = [{"role": "system"}, {"role": "user", "n": 1}, {"role": "user", "n": 2}, {"role": "tool"}]
    done, _ = run(DDMin(messages), lambda items: {"role": "tool"} in items)  # type: ignore[arg-type, return-value]
    assert done.items == ({"role": "tool"},) and done.indices == (3,)


def test_done_is_final() -> None:
    search = DDMin(range(4))
    done, _ = run(search, contains(2))
    assert search.next() is done and search.stop() is done
    with pytest.raises(ValueError):
        search.result(1, True)


def test_progress() -> None:
    search = DDMin(range(16))
    run(search, contains(3, 7))
    progress = search.progress
    assert (progress.original, progress.size, progress.tests) == (16, 2, search.tests)
    assert str(progress).startswith("16 -> 2 item(s), ")


# -- ddmin: budget -----------------------------------------------------------------------------------------


def test_replay_budget_stops_with_the_best_so_far() -> None:
    budget = Budget(replays=5)
    search = DDMin(range(32), budget=budget)
    done, asked = run(search, contains(3, 7), budget=budget)
    assert len(asked) == 5 and budget.exhausted()
    assert not done.complete and done.reason == "budget" and done.tests == 5
    assert done.items == search.best and {3, 7} <= set(done.items) and 2 < len(done.items) < 32


def test_time_budget_uses_the_callers_clock() -> None:
    budget = Budget(seconds=10, start=100.0)
    search = DDMin(range(8), budget=budget)
    step = search.next(now=105.0)
    assert isinstance(step, Candidate)
    search.result(step.id, True)
    done = search.next(now=110.0)
    assert isinstance(done, Done) and done.reason == "budget" and done.items == step.items
    with pytest.raises(ValueError):
        DDMin(range(8), budget=Budget(seconds=10)).next()  # a time budget without the time


def test_budget_abandons_a_pending_candidate() -> None:
    budget = Budget(replays=1)
    search = DDMin(range(8), budget=budget)
    step = search.next()
    assert isinstance(step, Candidate)
    budget.spend(1)  # its one try passed, but the budget ran out before a verdict
    done = search.next()
    assert isinstance(done, Done) and done.items == tuple(range(8)) and done.tests == 0


def test_budget_accounting() -> None:
    budget = Budget(replays=3, seconds=60, start=10.0)
    assert budget.replays_left == 3 and budget.seconds_left(40.0) == 30.0
    budget.spend(2)
    assert not budget.exhausted(69.0) and budget.exhausted(70.0)
    budget.spend()
    assert budget.exhausted(11.0) and budget.replays_left == 0
    assert not Budget().exhausted() and Budget().replays_left is None
    for bad in (lambda: Budget(replays=-1), lambda: Budget(seconds=-1), lambda: Budget().spend(-1)):
        with pytest.raises(ValueError):
            bad()


# -- flaky failures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 10, 100])
def test_a_failure_seen_every_time_is_deterministic(n: int) -> None:
    trials = Trials(n, n)
    assert trials.deterministic and trials.tries == tries_needed(n, n) == 1 and trials.p == 1
    assert "deterministic" in trials.summary()


def test_a_single_run_is_no_evidence_of_determinism() -> None:
    assert not Trials(1, 1).deterministic and tries_needed(1, 1) == 15


@pytest.mark.parametrize(
    ("p", "confidence", "tries"),
    [(1.0, 0.99, 1), (0.99, 0.99, 1), (0.9, 0.99, 2), (0.5, 0.99, 7), (0.3, 0.99, 13), (0.3, 0.95, 9), (0.1, 0.99, 20)],
)
def test_tries_for_a_known_rate(p: float, confidence: float, tries: int) -> None:
    # ceil(log(1 - confidence) / log(1 - p)); 0.9 is the case where float rounding could add one.
    assert tries_for(p, confidence) == tries


def test_tries_for_a_rate_of_point_three() -> None:
    # The estimate is the lower end of the Wilson interval: with few runs it is low and the cap
    # decides; with many it approaches 0.3 and the tries approach tries_for(0.3) == 13.
    assert tries_needed(3, 10) == 20
    assert tries_needed(30, 100) == 18
    assert tries_needed(3000, 10000) == 14
    assert tries_needed(3, 10, cap=50) == 34


@pytest.mark.parametrize(("k", "n"), [(1, 2), (1, 3), (2, 5), (1, 10)])
def test_small_n_flaky_hits_the_cap(k: int, n: int) -> None:
    assert tries_needed(k, n) == 20 and tries_needed(k, n, cap=5) == 5
    trials = Trials(k, n)
    assert trials.capped and trials.miss > 0.01 and "capped" in trials.summary()


def test_wilson_lower_bound_matches_the_textbook() -> None:
    assert wilson_lower(3, 10, z=1.96) == pytest.approx(0.1078, abs=1e-4)  # 95% interval 0.108-0.603
    assert wilson_lower(0, 10) == 0 and 0 < wilson_lower(10, 10) < 1


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(1, n), st.just(n))), st.sampled_from([0.9, 0.99]))
def test_tries_keep_the_failure_probability(case: tuple[int, int], confidence: float) -> None:
    k, n = case
    trials = Trials(k, n, confidence)
    assert 1 <= trials.tries <= 20 and 0 < trials.p <= k / n
    if not trials.capped:
        assert 1 - (1 - trials.p) ** trials.tries >= confidence - 1e-12
        # and no more tries than that takes
        assert trials.tries == 1 or 1 - (1 - trials.p) ** (trials.tries - 1) < confidence


@given(st.integers(2, 100).flatmap(lambda n: st.tuples(st.integers(1, n - 1), st.just(n))))
def test_more_evidence_never_asks_for_more_tries(case: tuple[int, int]) -> None:
    k, n = case
    assert tries_needed(k + 1, n) <= tries_needed(k, n)  # a higher rate
    assert tries_needed(2 * k, 2 * n) <= tries_needed(k, n)  # the same rate, known better


def test_a_candidate_fails_at_its_first_failing_try() -> None:
    trials = Trials(9, 10)
    assert trials.tries == 5
    assert trials.decide([]) is None
    assert trials.decide([False] * 4) is None
    assert trials.decide([False] * 5) is False
    assert trials.decide([False, True]) is True
    assert "up to 5 time(s)" in trials.summary()


BAD_TRIALS = [(0, 5, 0.99, 20), (6, 5, 0.99, 20), (1, 0, 0.99, 20), (1, 2, 1.0, 20), (1, 2, 0.0, 20), (1, 2, 0.99, 0)]


@pytest.mark.parametrize(("k", "n", "confidence", "cap"), BAD_TRIALS)
def test_trials_reject_bad_input(k: int, n: int, confidence: float, cap: int) -> None:
    with pytest.raises(ValueError):
        Trials(k, n, confidence, cap)


def test_ddmin_with_a_flaky_failure() -> None:
    # The full input fails half the time; with the tries `Trials` asks for, ddmin still finds
    # the pair, and every set it kept was seen failing.
    rnd = random.Random(7)
    runs = [rnd.random() < 0.5 for _ in range(20)]
    trials = Trials(sum(runs), len(runs))
    budget = Budget(replays=2000)
    search = DDMin(range(16), budget=budget)
    while isinstance(step := search.next(), Candidate):
        outcomes: list[bool] = []
        while (failed := trials.decide(outcomes)) is None:
            outcomes.append(contains(3, 7)(step.items) and rnd.random() < 0.5)
            budget.spend(1)
        search.result(step.id, failed)
    assert step.items == (3, 7) and step.complete
    assert budget.spent < 2000


# -- bisect -------------------------------------------------------------------------------------------------


def bisect(search: Bisect, truth: float) -> list[float]:
    tested = []
    while (value := search.next()) is not None:
        tested.append(value)
        search.result(value, value >= truth)
    return tested


@given(st.floats(0.01, 1e6), st.floats(1.001, 1e4), st.floats(0.01, 0.999), st.sampled_from([0.01, 0.05, 0.1]))
def test_converges_within_the_relative_tolerance(lo: float, span: float, where: float, tol: float) -> None:
    hi = lo * span
    truth = lo + (hi - lo) * where
    search = Bisect(lo, hi, rel_tol=tol)
    tested = bisect(search, truth)
    assert search.converged and search.reason == "converged"
    assert search.lo < truth <= search.value <= truth * (1 + tol)
    assert len(tested) == search.tests <= 20


@given(st.integers(0, 10_000), st.integers(1, 10**6), st.data())
def test_integer_mode_finds_the_exact_trigger(lo: int, span: int, data: st.DataObject) -> None:
    hi = lo + span
    truth = data.draw(st.integers(lo + 1, hi))
    search = Bisect(lo, hi, rel_tol=0, integer=True)
    tested = bisect(search, truth)
    assert search.value == truth and search.lo == truth - 1 and isinstance(search.value, int)
    assert all(isinstance(v, int) and lo < v < hi for v in tested)
    assert len(tested) <= 2 * math.ceil(math.log2(span + 1)) + 2


def test_shortest_failing_message_length() -> None:
    # A body limit: messages of 65537 bytes and more fail; 1 byte passes, 1 MB fails.
    search = Bisect(1, 1_000_000, rel_tol=0.05, integer=True)
    tested = bisect(search, 65_537)
    assert 65_537 <= search.value <= 65_537 * 1.05 and len(tested) <= 12


def test_smallest_think_time_from_zero() -> None:
    # An idle timeout of 7.3 s; a think time of 0 passes, 30 s fails.
    search = Bisect(0, 30, rel_tol=0.1, abs_tol=0.25)
    bisect(search, 7.3)
    assert 7.3 <= search.value <= 7.3 * 1.1
    with pytest.raises(ValueError):
        Bisect(0, 30)  # a relative tolerance alone may never end a search from 0
    assert Bisect(0, 30, integer=True).next() == 15


def test_already_narrow_enough() -> None:
    search = Bisect(100, 104, rel_tol=0.05)
    assert search.next() is None and search.converged and search.value == 104 and search.tests == 0
    assert Bisect(4, 5, rel_tol=0, integer=True).next() is None


def test_bisect_protocol() -> None:
    search = Bisect(1, 100)
    value = search.next()
    assert value is not None and search.next() == value
    with pytest.raises(ValueError):
        search.result(value + 1, True)
    search.result(value, True)
    assert search.value == value
    search.stop()
    assert search.next() is None and search.reason == "stopped" and not search.converged


def test_bisect_budget_stops_with_a_failing_value() -> None:
    budget = Budget(replays=3)
    search = Bisect(1, 1_000_000, rel_tol=0.001, budget=budget)
    while (value := search.next()) is not None:
        search.result(value, value >= 1234.5)
        budget.spend(1)
    assert search.reason == "budget" and search.tests == 3 and not search.converged
    assert search.lo < 1234.5 <= search.value


@pytest.mark.parametrize("args", [(5, 5), (6, 5), (-1, 5), (1.5, 5)])
def test_bisect_rejects_bad_bounds(args: tuple[float, float]) -> None:
    with pytest.raises(ValueError):
        Bisect(*args, integer=args == (1.5, 5))


@settings(max_examples=50)
@given(st.floats(1, 1e3), st.floats(0.0, 1.0))
def test_float_search_ends_even_with_zero_tolerance(lo: float, where: float) -> None:
    # With no tolerance it stops when no float lies between the bounds.
    hi = lo * 2
    truth = lo + (hi - lo) * where if where > 0 else hi
    search = Bisect(lo, hi, rel_tol=0)
    tested = bisect(search, max(truth, math.nextafter(lo, math.inf)))
    assert len(tested) <= 64 and search.converged
    assert math.nextafter(search.lo, math.inf) == search.value
