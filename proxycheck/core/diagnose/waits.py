"""Which wait decided: the watchdogs and the client's patience a verdict was reached with.

A stall is evidence only at the real client's patience (`proxycheck.core.exchange.watchdogs`),
so a verdict says what that patience was and what it came from, which silences past a watchdog
the replay waited out (slow answers, not stalls), and how many stalls it counted at that
patience, or at a watchdog without one (a stated `--stall-timeout`, a load run). Pure: the
watchdogs and the judged observations in, `Waits` out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs

SHOWN = 3  # silences named in the words


@dataclass(frozen=True, slots=True)
class Silence:
    """One exchange silent past its watchdog that went on within the patience."""

    route: str
    repetition: int
    session: str
    turn: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"route": self.route, "repetition": self.repetition, "session": self.session, "turn": self.turn,
                "seconds": self.seconds}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Waits:
    """The waits of a replay (`watchdogs` as they were) and what they decided (`said`: words)."""

    watchdogs: Watchdogs
    waited_out: tuple[Silence, ...] = ()  # silences past a watchdog that ended within the patience
    stalls: int = 0  # stalls counted (each at the limit of its phase)
    stalls_at_patience: int = 0  # of those, cut at the client's patience
    said: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            **self.watchdogs.to_json(),
            "headers_limit": self.watchdogs.headers_limit,
            "stall_limit": self.watchdogs.stall_limit,
            "waited_out": [s.to_json() for s in self.waited_out],
            "stalls": self.stalls,
            "stalls_at_patience": self.stalls_at_patience,
            "said": list(self.said),
        }


_STALLS = (Outcome.STALL_BEFORE_HEADERS, Outcome.STALL_BEFORE_FIRST_EVENT, Outcome.STALL_MID_STREAM)


def waits_of(watchdogs: Watchdogs, observations: Iterable[Observation], label: Any = None) -> Waits:
    """The waits of a replay with `watchdogs`, from what it observed. `label` names a session as
    a user knows it (s1, s2 ...; the session id without it)."""
    name = label or (lambda session: session)
    waited: list[Silence] = []
    stalls = at_patience = 0
    for obs in observations:
        if obs.outcome in _STALLS:
            stalls += 1
            headers = obs.outcome is Outcome.STALL_BEFORE_HEADERS
            patient = watchdogs.headers_limit > watchdogs.headers if headers else watchdogs.stall_limit > watchdogs.stall
            at_patience += patient
        elif obs.waited is not None and obs.outcome.answered:
            waited.append(Silence(obs.route, obs.repetition, obs.session, obs.turn, obs.waited))
    waited.sort(key=lambda s: -s.seconds)
    said = [_limits(watchdogs)]
    if waited:
        shown = "; ".join(f"{s.route} {name(s.session)} turn {s.turn} ({s.seconds:.1f} s)" for s in waited[:SHOWN])
        more = f" and {len(waited) - SHOWN} more" if len(waited) > SHOWN else ""
        said.append(f"{len(waited)} exchange(s) went silent past a watchdog and then went on: slow answers the client "
                    f"would have waited for, not stalls: {shown}{more}")  # fmt: skip
    if stalls:
        if at_patience == stalls:
            said.append(f"every stall counted ({stalls}) was waited out to the client's patience")
        elif at_patience:
            said.append(f"{at_patience} of {stalls} stall(s) counted were waited out to the client's patience, the "
                        "others to a watchdog stated for their phase")  # fmt: skip
        else:
            said.append(f"the {stalls} stall(s) counted were cut at a watchdog, not at the client's patience"
                        + ("" if watchdogs.patient else " (a stated watchdog, or no patience)"))  # fmt: skip
    return Waits(watchdogs, tuple(waited), stalls, at_patience, tuple(said))


def _limits(w: Watchdogs) -> str:
    if not w.patient:
        return (f"a silence fails at the watchdogs: {w.headers:g} s before the response headers, {w.stall:g} s "
                "after them (no client patience beyond them: stated, or a load run)")  # fmt: skip
    if w.headers_limit == w.stall_limit:
        limit = f"{w.stall_limit:g} s"
    else:
        limit = f"{w.headers_limit:g} s before the response headers, {w.stall_limit:g} s after them"
    return (f"a silence fails at the client's patience, {limit} ({w.patience_from}); the watchdogs "
            f"({w.headers:g} s before the headers, {w.stall:g} s after) mark a longer silence as a slow answer")
