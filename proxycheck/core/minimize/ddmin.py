"""The search behind `proxycheck minimize`: the smallest part of a recording that still breaks a route.

Owns the pure, sans-IO search and nothing else:

- `DDMin`: Zeller's delta debugging (ddmin) over a sequence of items: the sessions of a
  recording, the turns of a session, the messages of a turn ... It says which subset to test
  next (`Candidate`), the caller replays it and feeds back whether the failure still
  reproduces (`result`), until `Done` carries a 1-minimal failing subset;
- `Bisect`: the smallest value of a numeric trigger that still fails (a message length, a
  think time, a concurrency), to a tolerance;
- `Trials` / `tries_needed`: how many tries a candidate needs when the failure is flaky;
- `Budget`: replays and seconds the whole minimization may spend.

The caller owns the rest: what an item means, replaying a candidate, and what "failed" means
(the failure persists on the culprit route *and* the direct route stays clean). Nothing here
reads a clock: times are passed in (`now`), so every step is tested with outcomes in, steps out.
One candidate is out at a time, on purpose: replaying candidates side by side would change the
load on the very proxy under test.

A caller's loop, for a flaky failure that failed k of n runs of the full input::

    trials = Trials(k, n)
    search = DDMin(sessions, budget=budget)
    while isinstance(step := search.next(now=clock()), Candidate):
        outcomes: list[bool] = []
        while (failed := trials.decide(outcomes)) is None and not budget.exhausted(clock()):
            outcomes.append(replay(step.items))
            budget.spend(1)
        if failed is None:
            continue  # out of budget mid-candidate: the next `next` says Done with the best so far
        search.result(step.id, failed)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Generic, Sequence, TypeVar

T = TypeVar("T")

CONFIDENCE = 0.99  # chance that a candidate failing as often as the original shows it
MAX_TRIES = 20  # tries per candidate, whatever the estimate says (a passing candidate costs all of them)
# One-sided 95% normal quantile: the failure rate is taken as the lower end of its 95% Wilson
# interval, so a lucky streak in few runs of the full input does not make the tries too few.
Z_RATE = 1.6448536269514722

MINIMAL, BUDGET, STOPPED, CONVERGED = "minimal", "budget", "stopped", "converged"


# ---------------------------------------------------------------------------------- budget


@dataclass
class Budget:
    """Replays and/or seconds a search may spend (None: no limit of that kind). The caller
    `spend`s each replay and passes its own clock's time to `exhausted`; `start` is that clock's
    time when the budget began."""

    replays: int | None = None
    seconds: float | None = None
    start: float = 0.0
    spent: int = 0

    def __post_init__(self) -> None:
        if self.replays is not None and self.replays < 0:
            raise ValueError(f"replays must be >= 0, got {self.replays}")
        if self.seconds is not None and self.seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {self.seconds}")

    def spend(self, replays: int = 1) -> None:
        if replays < 0:
            raise ValueError(f"replays must be >= 0, got {replays}")
        self.spent += replays

    def exhausted(self, now: float | None = None) -> bool:
        """Whether the budget is used up. A time budget needs `now`: silently ignoring the time
        limit would let a search run unbounded."""
        if self.replays is not None and self.spent >= self.replays:
            return True
        if self.seconds is None:
            return False
        if now is None:
            raise ValueError("a time budget needs the current time: pass now")
        return now - self.start >= self.seconds

    @property
    def replays_left(self) -> int | None:
        return None if self.replays is None else max(0, self.replays - self.spent)

    def seconds_left(self, now: float) -> float | None:
        return None if self.seconds is None else max(0.0, self.seconds - (now - self.start))


def _out_of_budget(budget: Budget | None, now: float | None) -> bool:
    return budget is not None and budget.exhausted(now)


# ---------------------------------------------------------------------------------- ddmin


@dataclass(frozen=True, slots=True)
class Candidate(Generic[T]):
    """Test these items (in their original order), then `result(id, failed)`. `indices` are
    their positions in the original sequence."""

    id: int
    items: tuple[T, ...]
    indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The search is over. `complete`: `items` is 1-minimal (reason "minimal"); otherwise the
    search stopped early ("budget", "stopped") and `items` is the smallest failing set known."""

    items: tuple[T, ...]
    indices: tuple[int, ...]
    complete: bool
    reason: str
    tests: int


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a search stands, for a progress line."""

    original: int  # items at the start
    size: int  # items in the smallest failing set so far
    granularity: int  # the parts that set is split into now
    tests: int  # candidates tested (results fed back)
    skipped: int  # candidates `keep` rejected, never tested

    def __str__(self) -> str:
        skipped = f", {self.skipped} skipped" if self.skipped else ""
        return f"{self.original} -> {self.size} item(s), {self.tests} test(s){skipped}, granularity {self.granularity}"


@dataclass(frozen=True, slots=True)
class _Entry:
    indices: tuple[int, ...]
    granularity: int  # the granularity to go on with should this candidate fail


class DDMin(Generic[T]):
    """Zeller's ddmin as a sans-IO state machine (see the module docstring).

    The current failing set is split into n parts (n = 2 at first); each part is tested, then
    each complement (all but one part). A failing part becomes the set (n back to 2), a failing
    complement too (n - 1 parts, at least 2). When neither fails, n doubles, up to one item per
    part; when even that reduces nothing, removing any single item makes the failure go away:
    the set is 1-minimal. The empty set is never tested (it is assumed to pass).

    The caller guarantees the full input fails. `keep(items)` may reject a candidate that is not
    valid (it counts as passing, untested), so the result is 1-minimal among valid candidates.
    Outcomes are cached by set: the same set is never asked for twice (with a flaky failure, a
    candidate is as failing as its tries said the first time). `budget` is consulted before each
    step; when it is exhausted `next` says `Done` with the best set so far. `Done` is final.
    """

    def __init__(
        self,
        items: Sequence[T],
        *,
        keep: Callable[[Sequence[T]], bool] | None = None,
        budget: Budget | None = None,
    ) -> None:
        self._items = tuple(items)
        self._keep = keep
        self.budget = budget
        self._current = tuple(range(len(self._items)))
        self._n = 2
        self._round: list[_Entry] = []
        self._at = 0
        # The full input fails (the caller's guarantee): known, so never asked for.
        self._outcomes: dict[frozenset[int], bool] = {frozenset(self._current): True}
        self._pending: tuple[Candidate[T], _Entry] | None = None
        self._last_id = 0
        self._done: Done[T] | None = None
        self.tests = 0
        self.skipped = 0
        self._start_round()

    # ---------------------------------------------------------------------------------- steps

    def next(self, *, now: float | None = None) -> Candidate[T] | Done[T]:
        """The candidate to test (the same one again until its result is in), or Done."""
        if self._done is not None:
            return self._done
        if _out_of_budget(self.budget, now):
            return self._finish(BUDGET)
        if self._pending is not None:
            return self._pending[0]
        while (entry := self._advance()) is not None:
            key = frozenset(entry.indices)
            known = self._outcomes.get(key)
            if known is None and self._keep is not None and not self._keep(self._pick(entry.indices)):
                self._outcomes[key] = False  # invalid: as good as passing, and never asked again
                self.skipped += 1
                continue
            if known is None:
                self._last_id += 1
                candidate = Candidate(self._last_id, self._pick(entry.indices), entry.indices)
                self._pending = (candidate, entry)
                return candidate
            if known:
                self._reduce(entry)
        return self._finish(MINIMAL)

    def result(self, candidate_id: int, failed: bool) -> None:
        """The outcome of testing the pending candidate: `failed` when the failure reproduced."""
        if self._pending is None or self._pending[0].id != candidate_id:
            raise ValueError(f"candidate {candidate_id} is not the one pending")
        candidate, entry = self._pending
        self._pending = None
        self.tests += 1
        self._outcomes[frozenset(candidate.indices)] = failed
        if failed:
            self._reduce(entry)

    def stop(self) -> Done[T]:
        """End the search now (an interrupt): Done with the best set so far."""
        return self._done if self._done is not None else self._finish(STOPPED)

    # ---------------------------------------------------------------------------------- state

    @property
    def best(self) -> tuple[T, ...]:
        """The smallest failing set known (every reduction shrinks it, so the latest is it)."""
        return self._pick(self._current)

    @property
    def best_indices(self) -> tuple[int, ...]:
        return self._current

    @property
    def progress(self) -> Progress:
        return Progress(len(self._items), len(self._current), self._n, self.tests, self.skipped)

    # ---------------------------------------------------------------------------------- internals

    def _pick(self, indices: tuple[int, ...]) -> tuple[T, ...]:
        return tuple(self._items[i] for i in indices)

    def _start_round(self) -> None:
        """The candidates at the current granularity: the parts, then their complements."""
        self._round, self._at = [], 0
        if len(self._current) < 2:
            return  # a single item (or none) is 1-minimal: the empty set is not tested
        parts = _split(self._current, self._n)
        self._round = [_Entry(p, 2) for p in parts]
        if len(parts) > 2:  # with two parts, each complement is the other part
            for part in map(set, parts):
                rest = tuple(i for i in self._current if i not in part)
                self._round.append(_Entry(rest, max(len(parts) - 1, 2)))

    def _advance(self) -> _Entry | None:
        """The next candidate of this round; at its end, a finer round; None when 1-minimal."""
        while self._at >= len(self._round):
            if len(self._current) < 2 or self._n >= len(self._current):
                return None
            self._n = min(2 * self._n, len(self._current))
            self._start_round()
        entry = self._round[self._at]
        self._at += 1
        return entry

    def _reduce(self, entry: _Entry) -> None:
        self._current = entry.indices
        self._n = min(entry.granularity, max(len(entry.indices), 2))
        self._start_round()

    def _finish(self, reason: str) -> Done[T]:
        self._pending = None
        self._done = Done(self.best, self._current, reason == MINIMAL, reason, self.tests)
        return self._done


def _split(indices: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
    """`indices` in min(n, len) contiguous parts of near-equal size (the larger ones last)."""
    n = min(n, len(indices))
    parts, start = [], 0
    for i in range(n):
        stop = start + (len(indices) - start) // (n - i)
        parts.append(indices[start:stop])
        start = stop
    return parts


# ---------------------------------------------------------------------------------- flaky failures


def wilson_lower(k: int, n: int, z: float = Z_RATE) -> float:
    """The lower end of the Wilson score interval for k successes in n trials."""
    _check_counts(k, n)
    p = k / n
    z2 = z * z
    centre = p + z2 / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z2 / n))


def tries_for(p: float, confidence: float = CONFIDENCE, cap: int = MAX_TRIES) -> int:
    """The fewest tries t such that a candidate failing with probability p fails at least once
    with probability >= confidence: 1 - (1 - p)^t >= confidence, i.e. t = ceil(log(1 - confidence)
    / log(1 - p)); at most `cap`."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be within (0, 1], got {p}")
    _check_confidence(confidence, cap)
    if p == 1:
        return 1
    # The slack keeps float rounding from adding a try where the ratio is an exact integer.
    tries = math.ceil(math.log(1 - confidence) / math.log1p(-p) - 1e-9)
    return max(1, min(cap, tries))


def tries_needed(k: int, n: int, confidence: float = CONFIDENCE, cap: int = MAX_TRIES) -> int:
    """Tries per candidate when the full input failed k of n runs (see `Trials`)."""
    return Trials(k, n, confidence, cap).tries


@dataclass(frozen=True)
class Trials:
    """How many tries a candidate gets when the full input failed k of n runs.

    The failure rate p is estimated conservatively, as the lower end of its one-sided 95%
    Wilson score interval (Wilson rather than k/n: with few runs k/n is often lucky, and a rate
    overestimated means too few tries; rather than Clopper-Pearson: closed-form, and close to it).
    A candidate that still fails with that probability then shows a failure within `tries`
    tries with probability >= `confidence` (`tries_for`), unless the `cap` bounds the tries:
    `miss` is then the chance of missing it, above 1 - confidence.

    A failure that reproduced in every one of two or more runs is taken as deterministic, as the
    localizer takes one (the same failure in each of two or more repetitions): one try each. A
    single run is no evidence of that, and gets the tries a Wilson estimate asks for.

    A candidate fails as soon as one try fails (`decide`): a passing candidate costs all its
    tries, a failing one 1/p on average. A missed failure costs minimality, never correctness:
    the set kept is one that was seen failing.
    """

    k: int
    n: int
    confidence: float = CONFIDENCE
    cap: int = MAX_TRIES
    p: float = field(init=False)  # the failure rate used (the conservative estimate)
    tries: int = field(init=False)

    def __post_init__(self) -> None:
        _check_counts(self.k, self.n)
        _check_confidence(self.confidence, self.cap)
        if self.k == 0:
            raise ValueError("the full input never failed: nothing to minimize")
        p = 1.0 if self.deterministic else wilson_lower(self.k, self.n)
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "tries", tries_for(p, self.confidence, self.cap))

    @property
    def deterministic(self) -> bool:
        return self.k == self.n >= 2

    @property
    def miss(self) -> float:
        """The chance that a candidate failing with probability `p` passes all its tries."""
        return (1 - self.p) ** self.tries

    @property
    def capped(self) -> bool:
        return self.tries < tries_for(self.p, self.confidence, cap=10**9)

    def decide(self, outcomes: Sequence[bool]) -> bool | None:
        """The verdict on a candidate from its tries so far (True: a try failed): True as soon
        as one failed, False once all `tries` passed, None while another try is needed."""
        if any(outcomes):
            return True
        return False if len(outcomes) >= self.tries else None

    def summary(self) -> str:
        runs = f"{self.k}/{self.n} run(s) of the full input failed"
        if self.deterministic:
            return f"{runs}: deterministic, each candidate tried once"
        text = (f"{runs} (failure rate at least {self.p:.2g} at 95% confidence): each candidate tried up to "
                f"{self.tries} time(s), stopping at its first failure")  # fmt: skip
        if self.capped:
            return f"{text}; capped, so a candidate failing as often is missed with probability {self.miss:.2g}"
        return f"{text}, so a candidate failing as often shows it with probability >= {self.confidence:g}"


def _check_counts(k: int, n: int) -> None:
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")


def _check_confidence(confidence: float, cap: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")


# ---------------------------------------------------------------------------------- numeric triggers


class Bisect:
    """The smallest value of a numeric trigger that still fails, between a value known to pass
    (`lo_pass`) and one known to fail (`hi_fail`), assuming larger values fail once one does.

    Sans-IO like `DDMin`: `next()` gives the value to test (None when the search is over),
    `result(value, failed)` takes the outcome. `value` is the smallest failing value found and
    `lo` the largest passing one: the truth lies in (lo, value]. The search ends when
    value - lo <= max(abs_tol, rel_tol * lo): then `value` is within rel_tol (or abs_tol) of the
    truth, as the truth is above lo. In `integer` mode values are ints and the search also ends
    when they are adjacent (the truth is then exact).

    The midpoint is geometric (sqrt(lo * hi)) while lo > 0, arithmetic from 0: a relative
    tolerance over a wide range (a message of 1 byte to 1 MB) then takes a few steps, not twenty.
    With lo_pass == 0 a relative tolerance alone may never end the search (every value may fail,
    down to nothing), so floats then need an abs_tol.
    """

    def __init__(
        self,
        lo_pass: float,
        hi_fail: float,
        *,
        rel_tol: float = 0.05,
        abs_tol: float = 0.0,
        integer: bool = False,
        budget: Budget | None = None,
    ) -> None:
        if not 0 <= lo_pass < hi_fail:
            raise ValueError(f"need 0 <= lo_pass < hi_fail, got {lo_pass} and {hi_fail}")
        if rel_tol < 0 or abs_tol < 0:
            raise ValueError("tolerances must be >= 0")
        if integer and not (float(lo_pass).is_integer() and float(hi_fail).is_integer()):
            raise ValueError(f"integer mode needs integer bounds, got {lo_pass} and {hi_fail}")
        if not integer and lo_pass == 0 and abs_tol == 0:
            raise ValueError("with lo_pass == 0 a relative tolerance may never end the search: give abs_tol")
        self.integer = integer
        self.lo: float = int(lo_pass) if integer else float(lo_pass)
        self.value: float = int(hi_fail) if integer else float(hi_fail)
        self.rel_tol, self.abs_tol = rel_tol, abs_tol
        self.budget = budget
        self.tests = 0
        self.reason: str | None = None  # "converged", "budget" or "stopped" once over
        self._pending: float | None = None

    @property
    def converged(self) -> bool:
        return self.reason == CONVERGED or self._midpoint() is None

    def next(self, *, now: float | None = None) -> float | None:
        """The value to test (the same one again until its result is in), or None when over."""
        if self.reason is not None:
            return None
        if _out_of_budget(self.budget, now):
            self.reason, self._pending = BUDGET, None
            return None
        if self._pending is None:
            self._pending = self._midpoint()
            if self._pending is None:
                self.reason = CONVERGED
        return self._pending

    def result(self, value: float, failed: bool) -> None:
        if self._pending is None or value != self._pending:
            raise ValueError(f"{value} is not the value pending")
        self._pending = None
        self.tests += 1
        if failed:
            self.value = value
        else:
            self.lo = value

    def stop(self) -> None:
        if self.reason is None:
            self.reason, self._pending = STOPPED, None

    def _midpoint(self) -> float | None:
        """The next value to test, or None when (lo, value] is narrow enough."""
        lo, hi = self.lo, self.value
        if hi - lo <= max(self.abs_tol, self.rel_tol * lo):
            return None
        if self.integer:
            mid = math.isqrt(int(lo) * int(hi)) if lo > 0 else (int(lo) + int(hi)) // 2
            mid = min(max(mid, int(lo) + 1), int(hi) - 1)
        else:
            mid = math.sqrt(lo) * math.sqrt(hi) if lo > 0 else (lo + hi) / 2
            if not lo < mid < hi:  # the geometric mean rounded onto a bound: bounds a float or two apart
                mid = lo + (hi - lo) / 2
        # Adjacent integers, or floats with nothing representable between them: exact already.
        return mid if lo < mid < hi else None
