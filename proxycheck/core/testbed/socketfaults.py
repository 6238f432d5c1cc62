"""What a fault-injecting hop does to the messages of a WebSocket session (sans-IO).

This module owns the decisions of the fault hop's socket faults (`proxycheck.hops.faults`) that
follow the messages: which turn a message belongs to and when the hop closes the socket. The
hop feeds `SocketFaults.message` every whole message of one socket, in the order they pass, and
does what it answers:

* `PASS`: relay the message;
* `CLOSE`: relay the message, then close the socket (the K-th event of a turn that is cut, the
  terminal event of the K-th turn);
* `DROP`: do not relay it: the hop has decided to close the socket (here, or for a timer of its
  own, `close`), and nothing passes any more either way.

A turn is a client `response.create` message, counted per socket from 1 (Codex's warm-up, a
create with `generate: false`, is a turn too); its events are the server's messages after it,
up to a terminal one (`response.completed`, `response.failed`, `response.incomplete`, `error`).
Turns sent at once on one socket are not told apart: a `response.create` starts the count of
events again. Pure core: no I/O, no clock (the hop keeps the timers).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from proxycheck.core.recording.websocket import CREATE, TERMINAL, WsMessage

__all__ = ["Act", "SocketFaults", "SocketRules", "sendable_close_code"]

# RFC 6455 7.4.1: codes an endpoint must never send in a close frame (1005, 1006 and 1015 only
# say, locally, that no code came, no close frame came, or TLS failed; 1004 is reserved).
_NEVER_SENT = frozenset({1004, 1005, 1006, 1015})


def sendable_close_code(code: int) -> bool:
    """Whether a close frame may carry `code` (1000-4999 less the codes RFC 6455 keeps local)."""
    return 1000 <= code <= 4999 and code not in _NEVER_SENT


class Act(Enum):
    PASS = "pass"
    CLOSE = "close"  # relay this message, then close the socket
    DROP = "drop"  # the socket is being closed: this message is not relayed


@dataclass(frozen=True, slots=True)
class SocketRules:
    """The message-driven socket faults: close after the K-th turn has ended (0: off); cut a
    turn after K of its events (-1: off; 0: right after the client's `response.create`), only
    from turn `from_turn` on and for a create message larger than `min_body` bytes."""

    close_after_turns: int = 0
    cut_after_events: int = -1
    from_turn: int = 1
    min_body: int = 0


class SocketFaults:
    """One socket's turns and events, and whether (and why) the hop closes it."""

    def __init__(self, rules: SocketRules) -> None:
        self.rules = rules
        self.turns = 0  # `response.create` messages so far
        self.ended = 0  # terminal events so far
        self.events = 0  # server messages since the latest `response.create`
        self._cutting = False  # the open turn is one to cut
        self.closing: str | None = None  # the fault that closes the socket, once decided
        self.detail = ""  # what it saw, for the log

    def message(self, from_client: bool, data: bytes, text: bool = True) -> Act:
        """What the hop does with one whole message (see the module docstring)."""
        if self.closing is not None:
            return Act.DROP
        kind = WsMessage(0.0, from_client, data, text).type
        rules = self.rules
        if from_client:
            if kind != CREATE:
                return Act.PASS
            self.turns += 1
            self.events = 0
            self._cutting = (
                rules.cut_after_events >= 0 and self.turns >= rules.from_turn and len(data) > rules.min_body
            )
            if self._cutting and rules.cut_after_events == 0:
                return self.close("ws_cut_after_events", f"turn {self.turns} cut before any event")
            return Act.PASS
        self.events += 1
        if self._cutting and self.events == rules.cut_after_events:
            return self.close("ws_cut_after_events", f"turn {self.turns} cut after {self.events} events")
        if kind in TERMINAL:
            self.ended += 1
            self._cutting = False  # the turn ended before its cut
            if self.ended == rules.close_after_turns:
                return self.close("ws_close_after_turns", f"closed after turn {self.ended} ended ({kind})")
        return Act.PASS

    def close(self, fault: str, detail: str) -> Act:
        """Decide to close the socket for `fault` (the first decision stands); from now on every
        message is dropped."""
        if self.closing is None:
            self.closing, self.detail = fault, detail
        return Act.CLOSE
