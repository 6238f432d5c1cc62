"""The watchdogs of one exchange: the timeouts that turn a wedge into an outcome.

The exchange machine (`proxycheck.core.exchange.machine`) arms them; the replay plan derives
their defaults from a recording (`proxycheck.core.replay.plan.derive_watchdogs`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

DEFAULT_CONNECT = 10.0
MIN_HEADERS = 30.0
MIN_STALL = 10.0
MIN_TOTAL = 300.0
MIN_CLIENT_WAIT = 2.0  # the shortest wait of a recorded client that counts as its patience


@dataclass(frozen=True, slots=True)
class Watchdogs:
    """The timeouts that turn a wedge into an outcome, in seconds.

    * `connect` (10 s): a connection to a local engine or hop opens in milliseconds; ten seconds
      leaves room for TLS to a distant gateway and still reports a dead hop quickly.
    * `headers` (max(30 s, 3 x the largest recorded time to response headers)): before headers
      the engine is queueing and prefilling, which grows with the prompt; three times the worst
      the recording saw tolerates a busier engine, and 30 s covers recordings too short to show
      a long prefill.
    * `stall` (max(10 s, 5 x the recorded p99 gap between content events)): the wedge detector.
      Keep-alive comments do not count (a hop that pings while the stream is dead is still
      stalled). Five times the p99 gap rides out the engine's scheduling hiccups; the 10 s floor
      keeps a fast engine's 20 ms gaps from making every GC pause a "stall".
    * `total` (max(300 s, 3 x the longest recorded exchange)): a backstop for streams that make
      progress forever (a hop replaying a loop); the longest generation times three, and at
      least five minutes, so a long answer is never cut.

    Only exchanges that completed normally feed the derivation: a recorded wedge must not widen
    the timeouts meant to catch it. Where the recording shows its client giving up on a silent
    exchange after a wait (at least `MIN_CLIENT_WAIT`, and well beyond any recorded gap: not a
    person cancelling), `headers` and `stall` are no longer than that wait: the replay judges
    silence as the client did (`proxycheck.core.replay.plan.derive_watchdogs`).
    """

    connect: float = DEFAULT_CONNECT
    headers: float = MIN_HEADERS
    stall: float = MIN_STALL
    total: float = MIN_TOTAL

    def with_overrides(
        self,
        *,
        connect: float | None = None,
        headers: float | None = None,
        stall: float | None = None,
        total: float | None = None,
    ) -> "Watchdogs":
        """These watchdogs with the given ones replaced (None keeps the derived value)."""
        given = {"connect": connect, "headers": headers, "stall": stall, "total": total}
        changes = {k: v for k, v in given.items() if v is not None}
        for name, value in changes.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} timeout must be a number of seconds, not {value!r}")
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} timeout must be a positive number of seconds, not {value}")
        return replace(self, **{k: float(v) for k, v in changes.items()})
