"""The watchdogs of one exchange: the timeouts that turn a wedge into an outcome, and the
client's patience that decides when a silence is one.

The exchange machine (`proxycheck.core.exchange.machine`) arms them; the replay plan derives
their defaults from a recording (`proxycheck.core.replay.plan.derive_watchdogs`), the patience
from what the recording shows of its client (`proxycheck.core.replay.patience`).
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

    **Patience.** A replay stands in for a real client, and a silence is a failure only when that
    client would have given up on it. `patience` (seconds, None: none beyond the watchdogs) is how
    long the recorded client sits through a silence before the headers, before the first event
    and between events (`proxycheck.core.replay.patience`); `patience_from` says what it comes
    from. With a patience, `headers` and `stall` no longer cut an exchange: a silence longer than
    them that ends within the patience is a slow answer (outcome `slow`, the silence quoted), one
    that reaches the patience is the stall. A watchdog the user stated (`with_overrides`) is that
    phase's limit, whatever the patience.
    """

    connect: float = DEFAULT_CONNECT
    headers: float = MIN_HEADERS
    stall: float = MIN_STALL
    total: float = MIN_TOTAL
    patience_headers: float | None = None  # the client still waits for the headers until then
    patience_stall: float | None = None  # the same, for the first event and between events
    patience_from: str = ""  # what the patience comes from, in words ("" without one)

    @property
    def headers_limit(self) -> float:
        """When a wait for the response headers fails (the patience, else the watchdog)."""
        return max(self.headers, self.patience_headers) if self.patience_headers is not None else self.headers

    @property
    def stall_limit(self) -> float:
        """When a silence after the headers fails (the patience, else the watchdog)."""
        return max(self.stall, self.patience_stall) if self.patience_stall is not None else self.stall

    @property
    def patient(self) -> bool:
        """Some silence past a watchdog is waited out to the client's patience."""
        return self.headers_limit > self.headers or self.stall_limit > self.stall

    def without_patience(self) -> "Watchdogs":
        """The watchdogs as limits (a load run, which judges no route by a silence)."""
        return replace(self, patience_headers=None, patience_stall=None, patience_from="")

    def with_patience(self, headers: float, stall: float, source: str) -> "Watchdogs":
        """These watchdogs with the client's patience before the headers and after them (said
        as `source`). The total watchdog never cuts a silence short of the patience (the exchange
        machine), so it stays a backstop for streams that progress forever."""
        for name, value in (("patience", headers), ("patience", stall)):
            _check_seconds(name, value)
        return replace(self, patience_headers=float(headers), patience_stall=float(stall), patience_from=source)

    def to_json(self) -> dict[str, float | str | None]:
        """As run.json keeps them ("patience" only when there is one: runs before it had none)."""
        doc: dict[str, float | str | None] = {"connect": self.connect, "headers": self.headers, "stall": self.stall,
                                              "total": self.total}  # fmt: skip
        if self.patience_headers is not None or self.patience_stall is not None:
            doc.update(patience_headers=self.patience_headers, patience_stall=self.patience_stall,
                       patience_from=self.patience_from)  # fmt: skip
        return doc

    def with_overrides(
        self,
        *,
        connect: float | None = None,
        headers: float | None = None,
        stall: float | None = None,
        total: float | None = None,
    ) -> "Watchdogs":
        """These watchdogs with the given ones replaced (None keeps the derived value). A stated
        headers or stall watchdog is that phase's limit: the patience no longer extends it."""
        given = {"connect": connect, "headers": headers, "stall": stall, "total": total}
        changes = {k: v for k, v in given.items() if v is not None}
        for name, value in changes.items():
            _check_seconds(f"{name} timeout", value)
        out = replace(self, **{k: float(v) for k, v in changes.items()})
        if headers is not None:
            out = replace(out, patience_headers=None)
        if stall is not None:
            out = replace(out, patience_stall=None)
        if out.patience_headers is None and out.patience_stall is None:
            out = replace(out, patience_from="")
        return out


def watchdogs_from_json(doc: object) -> Watchdogs | None:
    """The watchdogs run.json keeps (`Watchdogs.to_json`); None when they are not there as written."""
    if not isinstance(doc, dict):
        return None
    try:
        base = Watchdogs(**{k: float(doc[k]) for k in ("connect", "headers", "stall", "total")})
        if doc.get("patience_headers") is None and doc.get("patience_stall") is None:
            return base
        return base.with_patience(float(doc.get("patience_headers") or base.headers),
                                  float(doc.get("patience_stall") or base.stall), str(doc.get("patience_from", "")))
    except (KeyError, TypeError, ValueError):
        return None


def _check_seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {value}")
