"""Small statistics for the differ and the localizer: Fisher's exact test (two-sided, and
one-sided for "more than"), and percentiles.

Pure and dependency-free on purpose (no scipy/numpy in the core): the localizer needs one exact
test on a 2x2 table of failure counts (route A vs route B, failed vs not), and the differ needs
percentiles of timing differences and a one-sided test on counts of content differences (a route
against direct, direct against itself, when the engine samples). They follow the well-known
reference implementations (scipy.stats.fisher_exact's two-sided and `alternative="greater"`
p-values, numpy.percentile's default "linear" method) so figures in a report can be checked with
either.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

# scipy's relative tolerance for "as probable as the observed table": tables whose probability
# equals the observed one's but differs by float rounding must count. We compute exactly, so
# ties are exact anyway; the tolerance is kept so the p-values agree with scipy's to the digit.
_TIE_NUM, _TIE_DEN = 10_000_001, 10_000_000  # 1 + 1e-7


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test for the 2x2 table [[a, b], [c, d]].

    The sum of the probabilities of all tables with the same margins that are no more probable
    than the observed one (within a relative 1e-7, as scipy does). Computed exactly with
    integers (hypergeometric weights built up term by term), so it is right for counts in the
    thousands; ValueError for a negative count.
    """
    _check_counts(a, b, c, d)
    row1, row2, col1 = a + b, c + d, a + c
    lo, hi = max(0, col1 - row2), min(row1, col1)
    if lo == hi:  # one possible table (an empty row or column): it is the observed one
        return 1.0
    # Weight of the table whose top-left cell is x: C(row1, x) * C(row2, col1 - x); the
    # probability is that over C(n, col1). Successive weights differ by an exact rational factor,
    # so the whole support costs one multiplication and one (exact) division per table.
    weights = []
    w = math.comb(row1, lo) * math.comb(row2, col1 - lo)
    for x in range(lo, hi + 1):
        weights.append(w)
        if x < hi:
            w = w * (row1 - x) * (col1 - x) // ((x + 1) * (row2 - col1 + x + 1))
    observed = weights[a - lo]
    limit = observed * _TIE_NUM  # w <= observed * (1 + 1e-7)  <=>  w * DEN <= observed * NUM
    tail = sum(w for w in weights if w * _TIE_DEN <= limit)
    total = sum(weights)  # == C(n, col1), summed rather than recomputed
    return min(1.0, float(Fraction(tail, total)))


def fisher_greater(a: int, b: int, c: int, d: int) -> float:
    """One-sided p-value of Fisher's exact test for [[a, b], [c, d]]: the probability, with the
    same margins, of a top-left cell of `a` or more, i.e. that the first row's share a/(a+b)
    is this much above the second's by chance (scipy's `alternative="greater"`). The differ
    asks it of content differences: a route against direct, direct against itself."""
    _check_counts(a, b, c, d)
    row1, row2, col1 = a + b, c + d, a + c
    hi = min(row1, col1)
    if max(0, col1 - row2) == hi:
        return 1.0
    # The weights C(row1, x) * C(row2, col1 - x) from x = a up, built term by term as above.
    w = math.comb(row1, a) * math.comb(row2, col1 - a)
    tail = 0
    for x in range(a, hi + 1):
        tail += w
        if x < hi:
            w = w * (row1 - x) * (col1 - x) // ((x + 1) * (row2 - col1 + x + 1))
    return min(1.0, float(Fraction(tail, math.comb(row1 + row2, col1))))


def _check_counts(*counts: int) -> None:
    for name, v in zip("abcd", counts):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (q in 0..100) with linear interpolation between the closest ranks,
    as numpy.percentile's default; None for no values. ValueError for q outside 0..100."""
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    if not values:
        return None
    return percentile_of_sorted(sorted(values), q)


def percentile_of_sorted(xs: Sequence[float], q: float) -> float:
    """`percentile` of values already sorted (not empty), without sorting them again: for inner
    loops such as a bootstrap's. q is not checked."""
    h = (len(xs) - 1) * (q / 100)
    lo = math.floor(h)
    if lo >= len(xs) - 1:
        return float(xs[-1])
    t = h - lo
    a, b = xs[lo], xs[lo + 1]
    # numpy's lerp: from whichever end is nearer, which keeps the result within [a, b] and
    # monotone in q despite rounding.
    return float(a + (b - a) * t) if t < 0.5 else float(b - (b - a) * (1 - t))


def median(values: Sequence[float]) -> float | None:
    """The median (the 50th percentile, the mean of the middle two for an even count); None
    for no values."""
    return percentile(values, 50)
