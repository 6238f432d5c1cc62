"""Small statistics: Fisher's exact test agrees with scipy/R, percentiles with numpy."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxycheck.core.stats import fisher_exact, fisher_greater, median, percentile

# -- Fisher's exact test ------------------------------------------------------------------------------


def brute_force_fisher(a: int, b: int, c: int, d: int) -> float:
    """The definition, spelled out with exact fractions (slow, for small tables only)."""
    row1, row2, col1 = a + b, c + d, a + c
    total = math.comb(row1 + row2, col1)

    def prob(x: int) -> Fraction:
        return Fraction(math.comb(row1, x) * math.comb(row2, col1 - x), total)

    observed = prob(a)
    support = range(max(0, col1 - row2), min(row1, col1) + 1)
    return float(sum(p for p in map(prob, support) if p <= observed * Fraction(10_000_001, 10_000_000)))


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ((8, 2, 1, 5), 0.034965034965034975),  # scipy.stats.fisher_exact docs
        ((6, 2, 1, 4), 0.10256410256410257),  # scipy.stats.fisher_exact docs (newer example)
        ((3, 0, 0, 3), 0.1),
        ((3, 1, 1, 3), 0.4857142857142857),  # R fisher.test, the tea-tasting lady
        ((1, 9, 11, 3), 0.0027594561852200836),  # Wikipedia's worked example, two-sided
        ((10, 0, 0, 10), 1.0825088224469026e-05),  # 2 / C(20, 10)
        ((5, 5, 5, 5), 1.0),
    ],
)
def test_known_values(table: tuple[int, int, int, int], expected: float) -> None:
    assert fisher_exact(*table) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("table", [(0, 0, 0, 0), (5, 0, 0, 0), (0, 0, 0, 7), (3, 4, 0, 0), (2, 0, 9, 0)])
def test_a_table_with_an_empty_row_or_column_shows_nothing(table: tuple[int, int, int, int]) -> None:
    assert fisher_exact(*table) == 1.0


def test_the_localizer_case_zero_failures_against_all_failures() -> None:
    # 0/10 failures on one route, 10/10 on the next: overwhelming; 0/2 against 2/2: not enough.
    assert fisher_exact(0, 10, 10, 0) < 1e-4
    assert fisher_exact(0, 2, 2, 0) > 0.05


def test_counts_in_the_thousands_are_exact_and_fast() -> None:
    p = fisher_exact(3000, 2000, 2500, 2600)
    assert 0 < p < 1e-20  # a real difference at this size: a tiny but non-zero, finite p-value
    assert fisher_exact(2000, 2000, 2000, 2000) == 1.0
    balanced = fisher_exact(2000, 2010, 2010, 2000)
    assert 0.8 < balanced < 1.0


def test_negative_or_non_integer_counts_are_refused() -> None:
    with pytest.raises(ValueError):
        fisher_exact(-1, 2, 3, 4)
    with pytest.raises(TypeError):
        fisher_exact(1.5, 2, 3, 4)  # type: ignore[arg-type]


counts = st.integers(min_value=0, max_value=60)


@given(counts, counts, counts, counts)
def test_p_is_a_probability_and_symmetric(a: int, b: int, c: int, d: int) -> None:
    p = fisher_exact(a, b, c, d)
    assert 0.0 <= p <= 1.0
    assert p > 0.0  # the observed table itself always counts
    assert fisher_exact(c, d, a, b) == p  # rows swapped
    assert fisher_exact(b, a, d, c) == p  # columns swapped
    assert fisher_exact(a, c, b, d) == p  # transposed


@given(st.integers(0, 15), st.integers(0, 15), st.integers(0, 15), st.integers(0, 15))
def test_agrees_with_the_definition(a: int, b: int, c: int, d: int) -> None:
    assert fisher_exact(a, b, c, d) == pytest.approx(brute_force_fisher(a, b, c, d), rel=1e-12)


@given(st.integers(1, 40), st.integers(0, 40))
def test_more_extreme_tables_give_smaller_p(n: int, k: int) -> None:
    # Two routes of n exchanges each; moving one more failure to the failing route never makes
    # the difference look less significant.
    k = min(k, n - 1)
    assert fisher_exact(0, n, k + 1, n - k - 1) <= fisher_exact(0, n, k, n - k)


# -- percentiles ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [  # numpy.percentile(values, q) (method="linear")
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 95, 3.85),
        ([1, 2, 3, 4], 0, 1.0),
        ([1, 2, 3, 4], 100, 4.0),
        ([4, 1, 3, 2], 25, 1.75),
        ([10.0], 95, 10.0),
        ([0.1, 0.5, 0.2, 0.9, 0.3], 95, 0.82),
        ([7, 7, 7], 40, 7.0),
    ],
)
def test_percentile_like_numpy(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected, rel=1e-12)


def test_no_values_no_percentile() -> None:
    assert percentile([], 50) is None
    assert median([]) is None


@pytest.mark.parametrize("q", [-1, 100.5, float("nan")])
def test_q_outside_0_to_100_is_refused(q: float) -> None:
    with pytest.raises(ValueError):
        percentile([1.0], q)


def test_median() -> None:
    assert median([3, 1, 2]) == 2.0
    assert median([4, 1, 3, 2]) == 2.5
    assert median((0.25,)) == 0.25


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=50), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_bounded_monotone_and_order_free(values: list[float], q1: float, q2: float) -> None:
    lo, hi = sorted((q1, q2))
    p_lo, p_hi = percentile(values, lo), percentile(values, hi)
    assert p_lo is not None and p_hi is not None
    assert min(values) <= p_lo <= p_hi <= max(values)
    assert percentile(list(reversed(values)), lo) == p_lo
    assert percentile(values, 0) == min(values) and percentile(values, 100) == max(values)


# -- Fisher's exact test, one-sided ---------------------------------------------------------------


def brute_force_greater(a: int, b: int, c: int, d: int) -> float:
    row1, row2, col1 = a + b, c + d, a + c
    total = math.comb(row1 + row2, col1)
    return float(sum(Fraction(math.comb(row1, x) * math.comb(row2, col1 - x), total)
                     for x in range(a, min(row1, col1) + 1)))  # fmt: skip


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        # The tail P(X >= a) of the hypergeometric, by hand: C(16, 9) = 11440 tables.
        ((8, 2, 1, 5), (45 * 6 + 10 * 1) / 11440),  # x = 8, 9; scipy's alternative="greater" too
        ((1, 5, 8, 2), 1 - 10 / 11440),  # the same margins the other way up: all but x = 0
        ((3, 0, 0, 3), 1 / 20),  # the only table as extreme: 1 / C(6, 3)
        ((5, 5, 5, 5), 1.0 - sum(math.comb(10, x) ** 2 for x in range(5)) / math.comb(20, 10)),
    ],
)
def test_one_sided_known_values(table: tuple[int, int, int, int], expected: float) -> None:
    assert fisher_greater(*table) == pytest.approx(expected, rel=1e-12)


@given(st.integers(0, 12), st.integers(0, 12), st.integers(0, 12), st.integers(0, 12))
def test_one_sided_agrees_with_the_definition_and_never_exceeds_one(a: int, b: int, c: int, d: int) -> None:
    p = fisher_greater(a, b, c, d)
    assert 0.0 < p <= 1.0
    if a + b and c + d and a + c and b + d:
        assert p == pytest.approx(brute_force_greater(a, b, c, d), rel=1e-12)


def test_one_sided_is_about_more_only() -> None:
    # Fewer differences on the route than on the floor is no evidence against the route.
    assert fisher_greater(0, 20, 10, 10) == 1.0
    assert fisher_greater(10, 10, 0, 20) < 1e-3
    with pytest.raises(ValueError):
        fisher_greater(1, -2, 3, 4)
