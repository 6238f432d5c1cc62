"""A recorded WebSocket session made smaller for `minimize`: its first k turns, its waits moved.

A socket's turns continue its memory (the engine keeps a socket's responses, and a later turn
names one with `previous_response_id`), so a turn cannot be replayed without the turns before it
on the same socket: minimize keeps a prefix of each socket's turns, never a middle turn, never a
history cut within one. `cut_socket` owns that cut and the moving of a socket's think times:

- the messages of the turns kept, and those belonging to no turn (a session event) that came
  before the last kept turn ended; a socket's `response.create` messages are kept as recorded;
- the socket's end (its close record, and the exchange's end or error) moved back by as much as
  the turns left out took: it follows the last kept turn after the wait it followed the last
  recorded turn. So a recorded idle end (the chain closing or cutting the socket while it sat
  idle after its last turn, which the plan replays as `socket_end`) stays an idle end, of the
  same length, after the turns kept; a client's own close stays the client leaving;
- `shifts`: a turn's request moved by that many seconds, and everything after it on the socket
  with it (its answer, the later turns, the end), so the wait before that turn changes and no
  other. A shift keyed by the turn after the last kept one moves the end alone: the wait before
  an idle end.

Pure: messages in, messages out (times are offsets from the recording's start).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from proxycheck.core.recording.websocket import WsClose, WsMessage, WsTurn, turns


@dataclass(frozen=True, slots=True)
class SocketCut:
    """A socket's messages and close as the smaller recording holds them; `end_shift`: how far
    its end moved (the exchange's end or error time moves by it too, as its close did)."""

    messages: tuple[WsMessage, ...]
    close: WsClose | None
    end_shift: float
    turns: int  # the turns kept


def count_turns(messages: Sequence[WsMessage]) -> int:
    """How many turns a socket's messages hold (`proxycheck.core.recording.websocket.turns`)."""
    return len(turns(messages))


def cut_socket(
    messages: Sequence[WsMessage],
    close: WsClose | None,
    *,
    keep: int | None = None,
    shifts: Mapping[int, float] | None = None,
) -> SocketCut:
    """The socket's first `keep` turns (None, or more than it has: all), its turns' requests
    moved by `shifts` (turn number -> seconds; see the module docstring). ValueError for a
    `keep` below 1: a socket without its first turn is another conversation."""
    found = turns(messages)
    if keep is not None and keep < 1:
        raise ValueError(f"a socket keeps at least its first turn, not {keep}")
    kept = found if keep is None or keep >= len(found) else found[:keep]
    shifts = shifts or {}
    owner = {id(m): turn.index for turn in found for m in (turn.request, *turn.answer)}
    # The end follows the last kept turn as it followed the last recorded one.
    back = _ended(found[-1]) - _ended(kept[-1]) if kept else 0.0
    horizon = _ended(kept[-1]) if kept else None

    def moved(turn: int) -> float:
        return sum(dt for number, dt in shifts.items() if number <= turn)

    out = []
    for m in messages:
        turn = owner.get(id(m))
        if turn is None:
            if horizon is not None and m.t > horizon and len(kept) < len(found):
                continue  # after the last kept turn: it belonged to the part left out
            # A message of no turn moves with the turns that began before it.
            turn = max((t.index for t in kept if t.t_request <= m.t), default=0)
        elif turn > len(kept):
            continue
        out.append(replace(m, t=round(m.t + moved(turn), 6)))
    end_shift = round(moved(len(kept) + 1) - back, 6)
    close = None if close is None else replace(close, t=round(close.t + end_shift, 6))
    return SocketCut(tuple(out), close, end_shift, len(kept))


def _ended(turn: WsTurn) -> float:
    """When a turn ended as far as its messages say: its terminal event, else its last message."""
    if turn.t_end is not None:
        return turn.t_end
    return turn.answer[-1].t if turn.answer else turn.t_request
