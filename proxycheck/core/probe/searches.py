"""Probes, pure: the searches `proxycheck probe` runs, the requests it sends, how it reads them.

This module owns the decisions of the probes that need no network (`proxycheck.io.prober` does
the sending, `proxycheck.core.probe.findings` the results and their owners):

* `Ladder`: a sans-IO search for the largest value that passes (a body size, an idle gap, a gap
  between tokens, a number of concurrent streams). Fed pass/fail for the values it proposes, it
  grows the value by a factor until something fails (or the bound passes: no limit up to it), then
  bisects between the largest pass and the smallest failure until they are within a tolerance
  (relative for sizes, absolute for times). `next(width)` proposes several values at once, so
  slow probes (waits of seconds) can try them side by side on separate connections.
* `TokenBudget`: what the probes may spend on a paid engine. Every probe request costs its
  `max_tokens` (the engine is asked for exactly that many, with `ignore_eos`), charged before it is
  sent; a request the budget cannot pay for is not sent, and the probe says it stopped.
* `request_body`: a valid request body of a dialect, padded to exactly N bytes inside the user
  message, asking for a fixed-length answer; for the reference engine it may carry the timing
  extension (`proxycheck.core.testbed.synth`: `"proxycheck": {"ttft": S, "token_interval": S}`).
* `delivery`: whether the content events of a stream arrived as they were produced, in a few
  batches, or all at once (a buffering hop).

Monotonicity is assumed (what fails at N fails above N); when a result contradicts it the ladder
keeps the smallest failure, so a limit is never hidden by a lucky pass, and says it saw the
contradiction (`Ladder.inconsistent`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

# The probes, in the order they run and are shown.
PROBES = ("body", "header", "idle", "gap", "sse", "compression", "concurrency")

ENDPOINTS = {
    "openai_chat": "/v1/chat/completions",
    "openai_completions": "/v1/completions",
    "anthropic_messages": "/v1/messages",
    "sglang_generate": "/generate",
}
DIALECTS = tuple(ENDPOINTS)

# Content events closer together than this arrived in one read: one "arrival group". A buffered
# stream parsed from one chunk has identical times; events produced 20+ ms apart and forwarded as
# they come are separate reads.
GROUP_GAP = 0.005


# ------------------------------------------------------------------------------------------------
# The search


class Ladder:
    """The largest value that passes, between `floor` (known good) and `bound` (the largest tried).

    Growth phase: `start`, `start x growth`, ... up to `bound` (the last step is `bound` itself),
    until one fails. Then bisection between the largest pass (`lo`) and the smallest failure
    (`hi`) until `hi - lo <= max(abs_tol, rel_tol x lo, quantum)`. Values are multiples of
    `quantum` (1 for sizes and counts, which are then ints). Evidence fed with a result is kept so
    the caller can show what happened at `lo` and at `hi`.

    With `confirm`, the failure that ends the search is tried once more before the ladder is done:
    one unlucky failure (a dropped connection) must not pass for a limit. If it passes the second
    time it counts as a pass (the value is marked flaky) and the search goes on above it."""

    def __init__(
        self,
        start: float,
        bound: float,
        *,
        growth: float = 2.0,
        floor: float = 0.0,
        rel_tol: float = 0.0,
        abs_tol: float = 0.0,
        quantum: float = 1.0,
        confirm: bool = False,
    ) -> None:
        if not (growth > 1 and quantum > 0 and floor >= 0 and bound > floor):
            raise ValueError("a ladder needs growth > 1, quantum > 0 and floor < bound")
        self.quantum = quantum
        self.confirm = confirm
        self.floor = floor
        self.bound = self._q(bound)
        self.growth = growth
        self.rel_tol = rel_tol
        self.abs_tol = abs_tol
        steps = []
        value = max(self._q(start), self._q(floor + quantum))
        while value < self.bound:
            steps.append(value)
            value = self._q(max(value * growth, value + quantum))
        steps.append(self.bound)
        self.steps = tuple(steps)
        self.results: dict[float, bool] = {}
        self.evidence: dict[float, Any] = {}
        self.retried: set[float] = set()
        self.flaky: set[float] = set()  # failed once, passed when tried again
        self._proposed: set[float] = set()

    def _q(self, v: float) -> float:
        """`v` as a multiple of the quantum (an int for a quantum of 1)."""
        if self.quantum == 1.0:
            return int(round(v))
        return round(round(v / self.quantum) * self.quantum, 6)

    # --- state ---------------------------------------------------------------------------------

    @property
    def hi(self) -> float | None:
        """The smallest value that failed (None: nothing failed yet)."""
        return min((v for v, ok in self.results.items() if not ok), default=None)

    @property
    def lo(self) -> float:
        """The largest value that passed below `hi` (`floor` when none did)."""
        hi = self.hi
        return max((v for v, ok in self.results.items() if ok and (hi is None or v < hi)), default=self.floor)

    @property
    def inconsistent(self) -> bool:
        """A value passed above one that failed (a flaky hop, or a limit that is not monotonic)."""
        hi = self.hi
        return bool(self.flaky) or (hi is not None and any(ok and v > hi for v, ok in self.results.items()))

    def tolerance(self, lo: float) -> float:
        return max(self.abs_tol, self.rel_tol * lo, self.quantum)

    @property
    def done(self) -> bool:
        hi = self.hi
        if hi is None:
            return self.lo >= self.bound
        return hi - self.lo <= self.tolerance(self.lo)

    @property
    def tried(self) -> int:
        return len(self.results) + len(self.retried)

    # --- driving -------------------------------------------------------------------------------

    def next(self, width: int = 1) -> list[float]:
        """Up to `width` values to try now (empty when done). Values proposed and not yet fed
        are not proposed again; a caller that gives up on one says so with `forget`."""
        if self.done:
            hi = self.hi
            if self.confirm and hi is not None and hi not in self.retried and hi not in self._proposed:
                self.retried.add(hi)
                self._proposed.add(hi)
                return [hi]
            return []
        hi, lo = self.hi, self.lo
        taken = set(self.results) | self._proposed
        if hi is None:
            candidates = [v for v in self.steps if v > lo and v not in taken]
        else:
            candidates = []
            for k in range(1, width + 1):
                v = self._q(lo + (hi - lo) * k / (width + 1))
                if lo < v < hi and v not in taken and v not in candidates:
                    candidates.append(v)
        out = candidates[:width]
        self._proposed.update(out)
        return out

    def feed(self, value: float, ok: bool, evidence: Any = None) -> None:
        self._proposed.discard(value)
        if ok and self.results.get(value) is False:
            self.flaky.add(value)
        self.results[value] = ok
        if evidence is not None:
            self.evidence[value] = evidence

    def forget(self, value: float) -> None:
        """A proposed value that will not be tried (its trial was cancelled)."""
        self._proposed.discard(value)

    def needless(self, value: float) -> bool:
        """True when trying `value` can no longer change the answer (above a failure)."""
        hi = self.hi
        return hi is not None and value > hi


# ------------------------------------------------------------------------------------------------
# The budget


class TokenBudget:
    """Output tokens the probes may ask for in all (`--max-tokens-total`; None: no limit)."""

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.spent = 0
        self.exhausted = False  # a request was refused: probing stopped short

    def take(self, tokens: int) -> bool:
        """Charge a request of `tokens` max_tokens; False (and nothing charged) when over."""
        if self.total is not None and self.spent + tokens > self.total:
            self.exhausted = True
            return False
        self.spent += tokens
        return True


# ------------------------------------------------------------------------------------------------
# Requests


@dataclass(frozen=True, slots=True)
class Ask:
    """What one probe request asks the engine for: a fixed-length answer and, from the reference
    engine only, its timing (seconds; None: the engine's own)."""

    max_tokens: int
    ttft: float | None = None
    token_interval: float | None = None


# Padding text: ASCII words without characters JSON escapes, so N characters are N bytes.
_FILLER = (
    "proxycheck probe padding: the quick brown fox jumps over the lazy dog while the stream goes on "
    "and every hop in the chain gets to see a request of exactly the size it was asked to carry. "
)


def filler(n: int) -> str:
    """n bytes of ASCII text that needs no JSON escaping."""
    if n <= 0:
        return ""
    reps = n // len(_FILLER) + 1
    return (_FILLER * reps)[:n]


def request_body(
    dialect: str,
    ask: Ask,
    *,
    model: str,
    nonce: str,
    size: int | None = None,
    reference: bool = False,
    ignore_eos: bool = True,
) -> bytes:
    """A streamed request of `dialect` for `ask`, padded to exactly `size` bytes when that is at
    least the unpadded size (else the unpadded body). `nonce` makes every body distinct (no hop or
    engine cache answers a probe). `ignore_eos` (vLLM, SGLang) makes the answer exactly
    `max_tokens` long; it is left out of Anthropic bodies, whose API refuses unknown members. The
    timing extension is added only for the reference engine (`reference`)."""
    if dialect not in ENDPOINTS:
        raise ValueError(f"unknown dialect {dialect!r} (known: {', '.join(DIALECTS)})")
    prompt = f"proxycheck probe {nonce}. Answer with anything."

    def encode(text: str) -> bytes:
        doc = _document(dialect, ask, model, text, ignore_eos)
        if reference and (ask.ttft is not None or ask.token_interval is not None):
            ext: dict[str, float] = {}
            if ask.ttft is not None:
                ext["ttft"] = ask.ttft
            if ask.token_interval is not None:
                ext["token_interval"] = ask.token_interval
            doc["proxycheck"] = ext
        return json.dumps(doc, separators=(",", ":")).encode()

    base = encode(prompt)
    if size is None or size <= len(base):
        return base
    return encode(prompt + " " + filler(size - len(base) - 1))


def _document(dialect: str, ask: Ask, model: str, text: str, ignore_eos: bool) -> dict[str, Any]:
    if dialect == "sglang_generate":
        params: dict[str, Any] = {"max_new_tokens": ask.max_tokens}
        if ignore_eos:
            params["ignore_eos"] = True
        return {"text": text, "sampling_params": params, "stream": True}
    if dialect == "openai_completions":
        doc: dict[str, Any] = {"model": model, "prompt": text, "max_tokens": ask.max_tokens, "stream": True}
    elif dialect == "anthropic_messages":
        return {"model": model, "max_tokens": ask.max_tokens, "stream": True,
                "messages": [{"role": "user", "content": text}]}  # fmt: skip
    else:
        doc = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": ask.max_tokens,
               "stream": True}  # fmt: skip
    if ignore_eos:
        doc["ignore_eos"] = True
    return doc


def header_value(n: int) -> str:
    """A header value of n bytes (the header-size probe's padding)."""
    return "h" * max(n, 0)


# ------------------------------------------------------------------------------------------------
# Delivery: were events forwarded as produced?


@dataclass(frozen=True, slots=True)
class Delivery:
    """How the content events of one stream arrived. `groups` counts arrival groups (events less
    than GROUP_GAP apart arrived in one read); `spread` is last minus first content event."""

    events: int
    groups: int
    spread: float

    @classmethod
    def of(cls, content_times: Iterable[float]) -> "Delivery":
        times = sorted(content_times)
        if not times:
            return cls(0, 0, 0.0)
        groups = 1 + sum(1 for a, b in zip(times, times[1:]) if b - a > GROUP_GAP)
        return cls(len(times), groups, times[-1] - times[0])

    def kind(self, reference_groups: int) -> str:
        """"streamed" (at least half the arrival groups of the reference: direct, or the events
        the engine was asked to space out), "buffered" (one or two groups where the reference had
        many: the whole answer at once) or "batched" (in between: a hop that forwards in chunks);
        "unknown" when the reference shows too few groups to tell."""
        if reference_groups < 4 or self.events == 0:
            return "unknown"
        if self.groups * 2 >= reference_groups:
            return "streamed"
        if self.groups <= 2:
            return "buffered"
        return "batched"


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
