"""Faults the reference engine can inject (`proxycheck engine --fault SPEC`), for the `server`
verdict: the engine itself wedges, so no hop is to blame.

A spec is `KIND[:key=value,...]`:

    stall:after=K[,seconds=S]     send K events, then hold the connection open and silent for S
                                  seconds (default 600), then drop it
    close:after=K                 send K events, then drop the connection (a reset mid-stream)
    pause:after=K,seconds=S       send K events, then nothing for S seconds, then the rest: a
                                  healthy engine's long silence (a tool call's arguments being
                                  generated, a request queued), not a wedge
    delay_headers:seconds=S       wait S seconds before the response headers
    status:code=C                 answer with HTTP status C (an error body, no stream)
    drop_terminal                 end the stream cleanly without its terminal marker
    ws_close:after=K,code=C       WebSocket only (the Responses API's WebSocket mode): send K events,
                                  then a close frame with code C (1011: the server failed); an
                                  HTTP request is answered as if it were not there

Every kind also takes `from_turn=T` (only requests of turn T and later; the turn is the number of
assistant messages in the request plus one) and `p=P` (fire with probability P, for flaky faults).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

from proxycheck.core.errors import BadInput

_KEYS: dict[str, dict[str, type]] = {
    "stall": {"after": int, "seconds": float},
    "close": {"after": int},
    "pause": {"after": int, "seconds": float},
    "delay_headers": {"seconds": float},
    "status": {"code": int},
    "drop_terminal": {},
    "ws_close": {"after": int, "code": int},
}
_REQUIRED = {"stall": ("after",), "close": ("after",), "pause": ("after", "seconds"), "delay_headers": ("seconds",),
             "status": ("code",), "ws_close": ("after", "code")}  # fmt: skip
# Close codes a server may send (RFC 6455 7.4): 1005, 1006 and 1015 are never on the wire.
_UNSENDABLE_CLOSE_CODES = (1004, 1005, 1006, 1015)


@dataclass(frozen=True, slots=True)
class FaultSpec:
    kind: str
    params: dict[str, float] = field(default_factory=dict)
    from_turn: int = 1
    p: float = 1.0
    text: str = ""


def parse_fault(text: str) -> FaultSpec:
    """One `--fault` value; BadInput naming the spec when it is wrong."""
    where = f"--fault {text}"
    kind, _, rest = text.strip().partition(":")
    if kind not in _KEYS:
        raise BadInput(where, f"unknown fault {kind!r} (one of: {', '.join(_KEYS)})")
    params: dict[str, float] = {}
    from_turn, p = 1, 1.0
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise BadInput(where, f"{item!r} is not key=value")
        try:
            if key == "from_turn":
                from_turn = int(value)
            elif key == "p":
                p = float(value)
            elif key in _KEYS[kind]:
                params[key] = _KEYS[kind][key](value)
            else:
                allowed = [*_KEYS[kind], "from_turn", "p"]
                raise BadInput(where, f"{kind} takes {', '.join(allowed)}, not {key!r}")
        except ValueError:
            raise BadInput(where, f"{key} must be a number, not {value!r}") from None
    for key in _REQUIRED.get(kind, ()):
        if key not in params:
            raise BadInput(where, f"{kind} needs {key}=...")
    if not 0.0 <= p <= 1.0:
        raise BadInput(where, "p must be between 0 and 1")
    if from_turn < 1 or any(v < 0 for v in params.values()):
        raise BadInput(where, "numbers must not be negative (and from_turn starts at 1)")
    if kind == "status" and not 400 <= params["code"] <= 599:
        raise BadInput(where, "code must be an HTTP error status (400-599)")
    if kind == "ws_close" and not (1000 <= params["code"] <= 4999 and params["code"] not in _UNSENDABLE_CLOSE_CODES):
        raise BadInput(where, "code must be a WebSocket close code a server may send (1000-4999, not 1004-1006 or 1015)")
    return FaultSpec(kind, params, from_turn, p, text)


@dataclass(frozen=True, slots=True)
class ActiveFaults:
    """The faults that fire for one request."""

    stall_after: int | None = None
    stall_seconds: float = 600.0
    close_after: int | None = None
    pause_after: int | None = None
    pause_seconds: float = 0.0
    delay_headers: float = 0.0
    status: int | None = None
    drop_terminal: bool = False
    ws_close_after: int | None = None  # WebSocket only
    ws_close_code: int = 1011
    fired: tuple[str, ...] = ()


def active_faults(specs: Sequence[FaultSpec], *, turn: int, draw: int) -> ActiveFaults:
    """Which faults fire for a request of this turn; `draw` seeds the probability coins."""
    values: dict[str, object] = {}
    fired = []
    coin = random.Random(draw)
    for spec in specs:
        hit = coin.random() < spec.p  # drawn for every spec so each keeps its own sequence
        if turn < spec.from_turn or not hit:
            continue
        fired.append(spec.text or spec.kind)
        if spec.kind == "stall":
            values["stall_after"] = int(spec.params["after"])
            values["stall_seconds"] = spec.params.get("seconds", 600.0)
        elif spec.kind == "close":
            values["close_after"] = int(spec.params["after"])
        elif spec.kind == "pause":
            values["pause_after"] = int(spec.params["after"])
            values["pause_seconds"] = spec.params["seconds"]
        elif spec.kind == "delay_headers":
            values["delay_headers"] = spec.params["seconds"]
        elif spec.kind == "status":
            values["status"] = int(spec.params["code"])
        elif spec.kind == "drop_terminal":
            values["drop_terminal"] = True
        elif spec.kind == "ws_close":
            values["ws_close_after"] = int(spec.params["after"])
            values["ws_close_code"] = int(spec.params["code"])
    return ActiveFaults(**values, fired=tuple(fired))  # type: ignore[arg-type]
