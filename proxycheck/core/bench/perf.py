"""The statistics behind `proxycheck bench` and `proxycheck compare`: a load run's steady state, and
A/B deltas with bootstrap confidence intervals.

Owns the pure, sans-IO arithmetic and nothing else:

- `SLO` / `parse_slo`: per-request latency bounds ("ttft:500,tpot:50", milliseconds), and whether
  one observation met them (`SLO.met`), for goodput;
- `Window`: the measurement window of a run (seconds from its start), which leaves out the
  warm-up and the cool-down;
- `tokens_of` / `tpot_of`: a request's output tokens and time per output token, with a fallback
  for servers that report no usage;
- `steady_state` -> `PerfSummary`: one run's steady-state figures (latency distributions, output
  tokens/s, requests/s, goodput, failures by outcome);
- `compare` -> `Comparison`: run B against run A, each metric's relative delta with a block
  bootstrap confidence interval, failure rates with Fisher's exact test, and the regressions
  worth failing a CI job for (`Comparison.regressions`).

The caller owns the rest: driving the load, the clock, choosing the window, reading runs from
disk, printing. Randomness comes only from a `random.Random` seeded by the caller's `seed`, so a
comparison is reproducible to the digit.

Metrics follow vLLM's definitions (as `Observation` does): TTFT = time to the first content
event; TPOT = (E2E - TTFT) / (output tokens - 1); ITL = the gaps between successive content
events; E2E = time to the terminal event.

Two clocks, on purpose. Latencies and failures belong to the requests *started* inside the
window (a request is measured by when it was sent, so a slow one is never dropped for ending
late). Throughput belongs to what *arrived* inside the window: tokens when their content events
came and completions when they ended, from every observation, including the requests sent during
the warm-up, which still deliver tokens in the window. At a steady state the two agree; near the
edges, counting by arrival is what a server's throughput means.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.stats import fisher_exact, percentile, percentile_of_sorted

BENCH_SCHEMA = "proxycheck.bench/1"
COMPARE_SCHEMA = "proxycheck.compare/1"

HIGHER, LOWER = "higher", "lower"
SLO_KEYS = ("ttft", "tpot", "e2e")


# ---------------------------------------------------------------------------------- SLO


@dataclass(frozen=True, slots=True)
class SLO:
    """Per-request latency bounds in seconds (None: no bound of that kind)."""

    ttft: float | None = None
    tpot: float | None = None
    e2e: float | None = None

    def __post_init__(self) -> None:
        for key in SLO_KEYS:
            v = getattr(self, key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"SLO {key} must be a positive, finite number of seconds, got {v!r}")

    def met(self, obs: Observation) -> bool:
        """Whether `obs` did not fail and its TTFT, TPOT and E2E are known and within each given
        bound. A bound whose metric is unknown for this request fails it, except TPOT for a
        request with fewer than 2 output tokens: it has no time per output token to be late."""
        if obs.outcome.is_failure:
            return False
        if self.ttft is not None and not _within(obs.ttft, self.ttft):
            return False
        if self.e2e is not None and not _within(obs.e2e, self.e2e):
            return False
        if self.tpot is not None and tokens_of(obs) >= 2 and not _within(tpot_of(obs), self.tpot):
            return False
        return True

    def __str__(self) -> str:
        """The `parse_slo` form, e.g. "ttft:500,tpot:50" (milliseconds)."""
        return ",".join(f"{key}:{getattr(self, key) * 1000:g}" for key in SLO_KEYS if getattr(self, key) is not None)

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in SLO_KEYS}


def _within(value: float | None, bound: float) -> bool:
    return value is not None and value <= bound


def parse_slo(text: str) -> SLO:
    """An SLO from "ttft:500,tpot:50,e2e:8000": comma-separated KEY:MILLISECONDS, keys ttft, tpot
    and e2e, each at most once, values positive finite numbers. ValueError naming the bad part."""
    if not text.strip():
        raise ValueError("empty SLO: expected KEY:MILLISECONDS[,...], e.g. ttft:500,tpot:50")
    bounds: dict[str, float] = {}
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            raise ValueError(f"SLO {text!r}: an empty part (a stray comma?)")
        key, sep, value = part.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep:
            raise ValueError(f"SLO part {part!r}: expected KEY:MILLISECONDS, e.g. ttft:500")
        if key not in SLO_KEYS:
            raise ValueError(f"SLO part {part!r}: unknown key {key!r} (expected one of {', '.join(SLO_KEYS)})")
        if key in bounds:
            raise ValueError(f"SLO part {part!r}: {key} is given twice")
        try:
            ms = float(value)
        except ValueError:
            raise ValueError(f"SLO part {part!r}: {value!r} is not a number of milliseconds") from None
        if not math.isfinite(ms) or ms <= 0:
            raise ValueError(f"SLO part {part!r}: milliseconds must be positive and finite, got {value!r}")
        bounds[key] = ms / 1000
    return SLO(**bounds)


# ---------------------------------------------------------------------------------- window


@dataclass(frozen=True, slots=True)
class Window:
    """The measurement window, [start, end) in seconds from the run's start."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start) and math.isfinite(self.end)):
            raise ValueError(f"window bounds must be finite, got {self.start!r}..{self.end!r}")
        if self.end <= self.start:
            raise ValueError(f"window end must be after its start, got {self.start!r}..{self.end!r}")

    @property
    def length(self) -> float:
        return self.end - self.start

    def __contains__(self, t: float) -> bool:
        return self.start <= t < self.end

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end}


# ---------------------------------------------------------------------------------- per request


def tokens_of(obs: Observation) -> int:
    """Output tokens: the server's usage completion tokens when it reported them, else the number
    of content events (one token each, which a server that batches tokens into events undercounts)."""
    tokens = obs.output_tokens
    return tokens if tokens is not None else obs.content_events


def tpot_of(obs: Observation) -> float | None:
    """(E2E - TTFT) / (output tokens - 1) with `tokens_of`'s count; None when E2E or TTFT is
    unknown or there are fewer than 2 tokens. (`Observation.tpot` needs reported usage.)"""
    tokens, e2e, ttft = tokens_of(obs), obs.e2e, obs.ttft
    if tokens < 2 or e2e is None or ttft is None:
        return None
    return (e2e - ttft) / (tokens - 1)


def _token_arrivals(obs: Observation) -> list[tuple[float, float]]:
    """(absolute time, tokens) pairs: a request's tokens spread evenly over its content events,
    or, with no content events (a non-streamed answer), all at its terminal event (or its end)."""
    tokens = tokens_of(obs)
    if tokens <= 0:
        return []
    times = obs.content_times
    if times:
        each = tokens / len(times)
        return [(obs.t_start + t, each) for t in times]
    done = obs.e2e if obs.e2e is not None else obs.end
    return [] if done is None else [(obs.t_start + done, float(tokens))]


def _completed_at(obs: Observation) -> float | None:
    """When a non-failing request ended (absolute); None for a failure or an unknown end."""
    if obs.outcome.is_failure or obs.end is None:
        return None
    return obs.t_start + obs.end


# ---------------------------------------------------------------------------------- summary


@dataclass(frozen=True, slots=True)
class Dist:
    """A distribution of values (seconds): count, mean and percentiles; None fields when n == 0."""

    n: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: Sequence[float]) -> "Dist":
        if not values:
            return cls(0)
        xs = sorted(values)
        return cls(
            n=len(xs),
            mean=math.fsum(xs) / len(xs),
            p50=percentile(xs, 50),
            p90=percentile(xs, 90),
            p99=percentile(xs, 99),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "mean": _round(self.mean),
            "p50": _round(self.p50),
            "p90": _round(self.p90),
            "p99": _round(self.p99),
        }


@dataclass(frozen=True, slots=True)
class PerfSummary:
    """One run's steady state over `window` (see `steady_state`)."""

    window: Window
    requests: int  # measured: sent inside the window
    completed: int  # measured and not failing
    failures: dict[str, int]  # outcome value -> count, of the measured requests that failed
    ttft: Dist
    tpot: Dist
    itl: Dist  # all gaps of all measured completed requests, pooled
    e2e: Dist
    output_tokens: float  # tokens that arrived inside the window (fractional: spread over events)
    output_tokens_per_s: float
    requests_per_s: float  # completions that arrived inside the window, per second
    goodput_per_s: float | None = None  # the same, counting only requests that met the SLO
    slo: SLO | None = None

    @property
    def duration(self) -> float:
        return self.window.length

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    @property
    def failure_rate(self) -> float | None:
        """Failed / measured requests; None when no request was measured."""
        return self.failed / self.requests if self.requests else None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": BENCH_SCHEMA,
            "window": self.window.to_json(),
            "duration": self.duration,
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "failure_rate": _round(self.failure_rate),
            "failures": dict(self.failures),
            "ttft": self.ttft.to_json(),
            "tpot": self.tpot.to_json(),
            "itl": self.itl.to_json(),
            "e2e": self.e2e.to_json(),
            "output_tokens": _round(self.output_tokens, 3),
            "output_tokens_per_s": _round(self.output_tokens_per_s, 3),
            "requests_per_s": _round(self.requests_per_s, 6),
            "goodput_per_s": _round(self.goodput_per_s, 6),
            "slo": self.slo.to_json() if self.slo else None,
        }


def steady_state(observations: Iterable[Observation], window: Window, slo: SLO | None = None) -> PerfSummary:
    """One run's steady-state figures over `window`.

    - Measured requests are those sent inside the window (`t_start` in [start, end)). Those that
      failed are counted by outcome (`failures`), never dropped; the rest are `completed`.
    - Latency distributions (TTFT, TPOT, E2E one value per request; ITL all gaps pooled) are over
      the measured completed requests: a failed request's timings describe the failure.
    - `output_tokens_per_s`: tokens counted when they arrived (a request's tokens spread evenly
      over its content events), only those arriving inside the window, from *all* observations
      (a request sent during the warm-up still delivers tokens in the window), over the window's
      length. Tokens of failing requests count too: they were delivered.
    - `requests_per_s`: non-failing observations that ended (`t_start + end`) inside the window,
      over its length; `goodput_per_s` (with an SLO only): the same, counting only those that met
      the SLO.
    """
    everything = list(observations)
    measured = [o for o in everything if o.t_start in window]
    completed = [o for o in measured if not o.outcome.is_failure]
    failures = Counter(o.outcome.value for o in measured if o.outcome.is_failure)
    tokens = math.fsum(n for o in everything for t, n in _token_arrivals(o) if t in window)
    ended = [o for o in everything if (t := _completed_at(o)) is not None and t in window]
    length = window.length
    return PerfSummary(
        window=window,
        requests=len(measured),
        completed=len(completed),
        failures=dict(sorted(failures.items())),
        ttft=Dist.of([v for o in completed if (v := o.ttft) is not None]),
        tpot=Dist.of([v for o in completed if (v := tpot_of(o)) is not None]),
        itl=Dist.of([gap for o in completed for gap in o.itl]),
        e2e=Dist.of([v for o in completed if (v := o.e2e) is not None]),
        output_tokens=tokens,
        output_tokens_per_s=tokens / length,
        requests_per_s=len(ended) / length,
        goodput_per_s=None if slo is None else sum(1 for o in ended if slo.met(o)) / length,
        slo=slo,
    )


# ---------------------------------------------------------------------------------- compare


@dataclass(frozen=True, slots=True)
class MetricDelta:
    """One metric of B against A. `delta` = b / a - 1 (None when a is 0 or unknown, or b is
    unknown); [ci_low, ci_high] its bootstrap interval (None when it could not be estimated);
    `significant`: the interval lies wholly beyond the noise band (-noise, +noise) of the
    comparison (with no band: it excludes 0)."""

    name: str
    unit: str
    better: str  # "higher" or "lower"
    headline: bool
    a: float | None
    b: float | None
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    significant: bool

    @property
    def worse(self) -> bool:
        """B is worse than A by this metric's direction (the point estimate; not a verdict)."""
        if self.delta is None:
            return False
        return self.delta < 0 if self.better == HIGHER else self.delta > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "better": self.better,
            "headline": self.headline,
            "a": _round(self.a),
            "b": _round(self.b),
            "delta": _round(self.delta),
            "ci_low": _round(self.ci_low),
            "ci_high": _round(self.ci_high),
            "significant": self.significant,
        }


@dataclass(frozen=True, slots=True)
class FailureDelta:
    """Failure rates of the measured requests of A and B; `p_value` from a two-sided Fisher
    exact test, `significant` when it is below 1 - confidence. Rates are None with no requests."""

    a_failed: int
    a_requests: int
    b_failed: int
    b_requests: int
    a_rate: float | None
    b_rate: float | None
    p_value: float
    significant: bool
    by_outcome_a: dict[str, int]
    by_outcome_b: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {
            "a_failed": self.a_failed,
            "a_requests": self.a_requests,
            "b_failed": self.b_failed,
            "b_requests": self.b_requests,
            "a_rate": _round(self.a_rate),
            "b_rate": _round(self.b_rate),
            "p_value": self.p_value,
            "significant": self.significant,
            "by_outcome_a": dict(self.by_outcome_a),
            "by_outcome_b": dict(self.by_outcome_b),
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    """Run B against run A (see `compare`)."""

    metrics: tuple[MetricDelta, ...]
    failures: FailureDelta
    a: PerfSummary
    b: PerfSummary
    iterations: int
    blocks: int
    confidence: float
    seed: int
    noise: float = 0.0

    def metric(self, name: str) -> MetricDelta:
        for m in self.metrics:
            if m.name == name:
                return m
        raise KeyError(name)

    def regressions(self, max_regression: float) -> list[str]:
        """What makes B a regression of A, one line each, e.g.
        "output_tokens_per_s -12.3% (95% CI -14.0% .. -10.5%)":

        - a headline metric worse in B by its direction, significantly, and by more than
          `max_regression` (a fraction of A's value: 0.05 is 5%);
        - B's failure rate significantly higher than A's, by more than `max_regression` (here an
          absolute difference of rates: 0.05 is five percentage points).
        """
        if not (math.isfinite(max_regression) and max_regression >= 0):
            raise ValueError(f"max_regression must be a non-negative fraction, got {max_regression!r}")
        level = f"{self.confidence:.0%}"
        lines = []
        for m in self.metrics:
            if not (m.headline and m.significant and m.worse) or m.delta is None or abs(m.delta) <= max_regression:
                continue
            assert m.ci_low is not None and m.ci_high is not None  # significant implies an interval
            lines.append(f"{m.name} {m.delta:+.1%} ({level} CI {m.ci_low:+.1%} .. {m.ci_high:+.1%})")
        f = self.failures
        if f.significant and f.a_rate is not None and f.b_rate is not None and f.b_rate - f.a_rate > max_regression:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(f.by_outcome_b.items(), key=lambda kv: (-kv[1], kv[0])))
            lines.append(
                f"failure rate {f.a_rate:.1%} -> {f.b_rate:.1%} ({f.b_failed} of {f.b_requests} requests:"
                f" {kinds}; Fisher exact p = {f.p_value:.2g})"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": COMPARE_SCHEMA,
            "iterations": self.iterations,
            "blocks": self.blocks,
            "confidence": self.confidence,
            "seed": self.seed,
            "noise": self.noise,
            "metrics": [m.to_json() for m in self.metrics],
            "failures": self.failures.to_json(),
            "a": self.a.to_json(),
            "b": self.b.to_json(),
        }


@dataclass(frozen=True, slots=True)
class _Metric:
    name: str
    unit: str
    better: str
    headline: bool


_THROUGHPUT = (
    _Metric("output_tokens_per_s", "tok/s", HIGHER, True),
    _Metric("requests_per_s", "req/s", HIGHER, True),
)
_GOODPUT = _Metric("goodput_per_s", "req/s", HIGHER, True)
_LATENCY = (
    _Metric("ttft_mean", "s", LOWER, False),
    _Metric("ttft_p50", "s", LOWER, True),
    _Metric("ttft_p99", "s", LOWER, False),
    _Metric("tpot_mean", "s", LOWER, False),
    _Metric("tpot_p50", "s", LOWER, True),
    _Metric("tpot_p99", "s", LOWER, False),
    _Metric("itl_mean", "s", LOWER, True),
    _Metric("e2e_mean", "s", LOWER, False),
    _Metric("e2e_p50", "s", LOWER, True),
    _Metric("e2e_p99", "s", LOWER, False),
)


def _metrics(goodput: bool) -> tuple[_Metric, ...]:
    return _THROUGHPUT + ((_GOODPUT,) if goodput else ()) + _LATENCY


def _point(s: PerfSummary, goodput: bool) -> list[float | None]:
    """The point estimates of one run, in `_metrics` order."""
    out: list[float | None] = [s.output_tokens_per_s, s.requests_per_s]
    if goodput:
        out.append(s.goodput_per_s)
    out += [s.ttft.mean, s.ttft.p50, s.ttft.p99, s.tpot.mean, s.tpot.p50, s.tpot.p99, s.itl.mean]
    out += [s.e2e.mean, s.e2e.p50, s.e2e.p99]
    return out


class _Bins:
    """One run's window cut into equal time bins, precomputed for the bootstrap. A bin holds the
    measured completed requests *started* in it (latencies: per-bin sorted lists; ITL: a sum and a
    count) and the tokens and completions *arriving* in it (throughput)."""

    __slots__ = ("length", "tokens", "done", "good", "ttft", "tpot", "e2e", "itl_sum", "itl_n")

    def __init__(self, observations: Sequence[Observation], window: Window, blocks: int, slo: SLO | None) -> None:
        self.length = window.length
        start, end = window.start, window.end
        scale = blocks / window.length
        last = blocks - 1
        tokens: list[list[float]] = [[] for _ in range(blocks)]
        self.done = [0] * blocks
        self.good = [0] * blocks
        ttft: list[list[float]] = [[] for _ in range(blocks)]
        tpot: list[list[float]] = [[] for _ in range(blocks)]
        e2e: list[list[float]] = [[] for _ in range(blocks)]
        itl: list[list[float]] = [[] for _ in range(blocks)]
        for o in observations:
            for t, n in _token_arrivals(o):
                if start <= t < end:
                    tokens[min(last, int((t - start) * scale))].append(n)  # min(): float rounding
            if (t := _completed_at(o)) is not None and start <= t < end:
                i = min(last, int((t - start) * scale))
                self.done[i] += 1
                if slo is not None and slo.met(o):
                    self.good[i] += 1
            if start <= o.t_start < end and not o.outcome.is_failure:
                i = min(last, int((o.t_start - start) * scale))
                if (v := o.ttft) is not None:
                    ttft[i].append(v)
                if (v := tpot_of(o)) is not None:
                    tpot[i].append(v)
                if (v := o.e2e) is not None:
                    e2e[i].append(v)
                itl[i].extend(o.itl)
        self.tokens = [math.fsum(b) for b in tokens]
        self.ttft = _Values(ttft)
        self.tpot = _Values(tpot)
        self.e2e = _Values(e2e)
        self.itl_sum = [math.fsum(b) for b in itl]
        self.itl_n = [len(b) for b in itl]

    def values(self, chosen: Sequence[int], goodput: bool) -> list[float | None]:
        """Every metric (in `_metrics` order) of the run made of the `chosen` bins."""
        length = self.length
        out: list[float | None] = [sum([self.tokens[i] for i in chosen]) / length]
        out.append(sum([self.done[i] for i in chosen]) / length)
        if goodput:
            out.append(sum([self.good[i] for i in chosen]) / length)
        out += self.ttft.mean_p50_p99(chosen)
        out += self.tpot.mean_p50_p99(chosen)
        n = sum([self.itl_n[i] for i in chosen])
        out.append(sum([self.itl_sum[i] for i in chosen]) / n if n else None)
        out += self.e2e.mean_p50_p99(chosen)
        return out


class _Values:
    """One latency's values per bin: each bin's values sorted, and their sum."""

    __slots__ = ("sorted", "sums")

    def __init__(self, bins: list[list[float]]) -> None:
        self.sorted = [sorted(b) for b in bins]
        self.sums = [math.fsum(b) for b in bins]

    def mean_p50_p99(self, chosen: Sequence[int]) -> list[float | None]:
        xs: list[float] = []
        for i in chosen:
            xs += self.sorted[i]
        if not xs:
            return [None, None, None]
        xs.sort()  # a concatenation of sorted runs: Timsort merges them, far cheaper than a full sort
        mean = sum([self.sums[i] for i in chosen]) / len(xs)
        return [mean, percentile_of_sorted(xs, 50), percentile_of_sorted(xs, 99)]


def _relative(a: float | None, b: float | None) -> float | None:
    """b / a - 1, or None when it is undefined: a is 0 or unknown, or so near 0 that the ratio
    overflows (an infinite change would make the bootstrap interval NaN)."""
    if a is None or b is None or a == 0:
        return None
    ratio = b / a
    return ratio - 1 if math.isfinite(ratio) else None


def compare(
    a_obs: Iterable[Observation],
    a_window: Window,
    b_obs: Iterable[Observation],
    b_window: Window,
    *,
    slo: SLO | None = None,
    blocks: int = 20,
    iterations: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    noise: float = 0.0,
) -> Comparison:
    """Run B against run A: each metric's relative delta (b / a - 1) with a block bootstrap
    percentile interval at `confidence`, and failure rates by Fisher's exact test.

    Each run's window is cut into `blocks` equal time bins; a bin holds the requests started in it
    (latencies) and the tokens and completions arriving in it (throughput). Each of `iterations`
    resamples draws `blocks` bins of A with replacement and, independently, `blocks` bins of B,
    recomputes every metric of both, and records the relative delta. Bins rather than single
    requests: requests close in time share the server's state (a batch, a noisy neighbour on a
    shared machine), so a slow drift within a run widens the interval instead of hiding in it.

    A resample where a metric is undefined (no completed request among the chosen bins, A's value
    0) is skipped for that metric; when more than 1 - confidence of them are, or the point delta is
    undefined, the metric has no interval and is not significant. `iterations` = 0 gives point
    estimates only. The point estimates `a` and `b` are those of `steady_state`.

    `noise` (a fraction, e.g. 0.02): a change counts as significant only when its whole interval
    lies beyond +-noise. Two runs of one configuration on a shared machine differ by a percent or
    two for real (what else ran, where the scheduler put the processes), which no resampling
    within a run can see; below the band a difference is real but not worth a verdict (the
    approach of Criterion.rs's noise threshold).
    """
    if not 0 <= noise < 1:
        raise ValueError(f"noise must be within [0, 1), got {noise!r}")
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"blocks must be a positive integer, got {blocks!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be a non-negative integer, got {iterations!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be within (0, 1), got {confidence!r}")
    a_list, b_list = list(a_obs), list(b_obs)
    a_sum, b_sum = steady_state(a_list, a_window, slo), steady_state(b_list, b_window, slo)
    goodput = slo is not None
    specs = _metrics(goodput)
    a_point, b_point = _point(a_sum, goodput), _point(b_sum, goodput)
    deltas = [_relative(x, y) for x, y in zip(a_point, b_point)]

    samples: list[list[float]] = [[] for _ in specs]
    undefined = [0] * len(specs)
    if iterations:
        a_bins = _Bins(a_list, a_window, blocks, slo)
        b_bins = _Bins(b_list, b_window, blocks, slo)
        rng = random.Random(seed)
        population = range(blocks)
        for _ in range(iterations):
            va = a_bins.values(rng.choices(population, k=blocks), goodput)
            vb = b_bins.values(rng.choices(population, k=blocks), goodput)
            for m, (x, y) in enumerate(zip(va, vb)):
                d = _relative(x, y)
                if d is None:
                    undefined[m] += 1
                else:
                    samples[m].append(d)

    tail = 100 * (1 - confidence) / 2
    metrics = []
    for m, spec in enumerate(specs):
        lo = hi = None
        if deltas[m] is not None and samples[m] and undefined[m] <= (1 - confidence) * iterations:
            ordered = sorted(samples[m])
            lo, hi = percentile_of_sorted(ordered, tail), percentile_of_sorted(ordered, 100 - tail)
        significant = lo is not None and hi is not None and (lo > noise or hi < -noise)
        metrics.append(
            MetricDelta(
                name=spec.name,
                unit=spec.unit,
                better=spec.better,
                headline=spec.headline,
                a=a_point[m],
                b=b_point[m],
                delta=deltas[m],
                ci_low=lo,
                ci_high=hi,
                significant=significant,
            )
        )

    p = fisher_exact(a_sum.failed, a_sum.completed, b_sum.failed, b_sum.completed)
    failures = FailureDelta(
        a_failed=a_sum.failed,
        a_requests=a_sum.requests,
        b_failed=b_sum.failed,
        b_requests=b_sum.requests,
        a_rate=a_sum.failure_rate,
        b_rate=b_sum.failure_rate,
        p_value=p,
        significant=p < 1 - confidence,
        by_outcome_a=dict(a_sum.failures),
        by_outcome_b=dict(b_sum.failures),
    )
    return Comparison(
        metrics=tuple(metrics),
        failures=failures,
        a=a_sum,
        b=b_sum,
        iterations=iterations,
        blocks=blocks,
        confidence=confidence,
        seed=seed,
        noise=noise,
    )


def _round(v: float | None, digits: int = 6) -> float | None:
    return None if v is None else round(v, digits)
