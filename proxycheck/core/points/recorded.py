"""What one point saw of one recorded exchange, as the points compare it: `seen_of_recorded`.

An HTTP exchange is one `Seen`, keyed by its request body. A WebSocket session (the Responses
API's WebSocket mode: `proxycheck.core.recording.websocket`) is one exchange whose request, a
`GET` with no body, is the same at every socket: its turns are what a point sees progress, so
each is a `Seen` of its own (`SOCKET_TURN`, numbered as the socket's turns are):

* its key is its `response.create` message read as the create body it carries
  (`request_key`: what the model sees; `type` is no part of it): a hop that re-serializes the
  JSON does not change it. `previous_response_id` stays in it: the id is the engine's, passed
  out through every hop and sent back by the client, so every point sees the same one, and it
  tells apart the same new input on parallel sockets;
* its times are the create message's, its answer's first message (its "response") and last
  message; its end is its terminal event, else the socket's end while it was open (a close
  frame, which side sent it, or a cut);
* it was ended by its client (`client_ended`) when the socket ended mid-answer by the client
  side's close frame or cut: at a point inside a hop, the hop hanging up on it (mitmproxy, cut
  on one side, closes the other with a close frame of its own).

A socket that ended while it sat idle (every turn answered) has its end as one more part
(`SOCKET_END`, numbered after the last turn, as the replay plans it; keyed by the last turn's
key): ended by the client, it is over (`ok`); ended by the server side, a close frame or a cut,
it is the `reset` the next turn would have met. So a hop that cut an idle socket is seen where
its two sides differ: the outer point saw the socket cut, the inner one saw its client end it.
An upgrade with no turn (refused, never answered, a socket never used) is the exchange itself
(`UPGRADE`), keyed as an upgrade (all upgrades share the key and are matched by time): a hop
that forwards a plain `GET` without the upgrade headers sends another request, which an inner
point does not take for it.

Pure: a recorded exchange and its analysis in, `Seen` values out.
"""

from __future__ import annotations

from dataclasses import replace

from proxycheck.core.exchange.outcomes import CLIENT_LEFT_WORDS, Classified, Outcome
from proxycheck.core.points.seen import HEAD, SOCKET_END, SOCKET_TURN, UPGRADE, RequestKey, Seen, request_key, seen_of
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.summary import ExchangeAnalysis, SocketTurn
from proxycheck.core.recording.websocket import is_upgrade

UPGRADE_KEY = RequestKey("websocket-upgrade", None, "websocket-upgrade")


def is_socket(x: RecordedExchange) -> bool:
    """A WebSocket session, agreed to or not (its request asked for the upgrade): seen by its
    messages, not by a request body."""
    return x.websocket or is_upgrade(x.request_headers)


def last_byte(x: RecordedExchange) -> float | None:
    """When the last response bytes arrived (None: none did)."""
    if x.chunks:
        return x.chunks[-1][0]
    if x.response_body and x.t_end is not None:
        return x.t_end
    return None


def seen_of_recorded(x: RecordedExchange, label: str, turn: int, analysis: ExchangeAnalysis,
                     key: RequestKey | None = None, body: bytes = b"") -> tuple[Seen, ...]:  # fmt: skip
    """What one point saw of `x` (see the module docstring): named `label` and `turn` as that
    point's sessions name it; an HTTP exchange keyed by `key`, else by `body`."""
    classified = analysis.classified
    whole = seen_of(
        xid=x.xid, label=label, turn=turn, method=x.method, path=x.path, body=body, t_request=x.t_request,
        t_response=x.t_response, t_end=x.t_end, t_error=x.t_error, status=x.status, streamed=analysis.streamed,
        analysis=analysis.response, outcome=classified.outcome, detail=classified.detail, error=x.error,
        interrupted=x.interrupted, last_byte=last_byte(x), head=x.response_body[:HEAD],
    )  # fmt: skip
    if not is_socket(x):
        return (whole if key is None else replace(whole, key=key),)
    if not analysis.socket:
        if not x.websocket:
            return (replace(whole, key=UPGRADE_KEY, kind=UPGRADE),)
        # Agreed to, no turn yet: the upgrade is done when the 101 came (an open socket waiting
        # for its client is no exchange in flight).
        done = x.t_response if x.t_response is not None else whole.t_ended
        upgrade = replace(whole, key=UPGRADE_KEY, kind=UPGRADE, streamed=False, t_ended=done, events=0,
                          content_events=0, outcome=Outcome.OK if x.status == 101 else classified.outcome,
                          detail="WebSocket upgrade agreed to (101)" if x.status == 101 else classified.detail)  # fmt: skip
        end = _end(x, label, 1, UPGRADE_KEY)
        return (upgrade,) if end is None else (upgrade, end)
    parts = [_turn(x, label, one) for one in analysis.socket]
    if all(one.turn.terminal is not None for one in analysis.socket):
        last = parts[-1]
        end = _end(x, label, last.part + 1, last.key, after=last.t_ended)
        if end is not None:
            parts.append(end)
    return tuple(parts)


def renamed(s: Seen, label: str, turn: int) -> Seen:
    """`s` named as its point's sessions name its exchange now: a socket's turn or end keeps its
    number on the socket."""
    turn = s.turn if s.kind in (SOCKET_TURN, SOCKET_END) else turn
    return s if (label, turn) == (s.label, s.turn) else replace(s, label=label, turn=turn)


def _client_ended(x: RecordedExchange) -> bool:
    """Whether the socket's client side ended it: its close frame, or its connection cut."""
    close = x.ws_close
    return (close is not None and close.by == "client") or CLIENT_LEFT_WORDS in (x.error or "").lower()


def _how(x: RecordedExchange) -> str:
    """How the socket ended, in a few words ("cut without a close frame (1006): server disconnected")."""
    close = x.ws_close
    if close is None:
        return x.error or "ended"
    said = close.describe()
    return f"{said}: {x.error}" if x.error and not close.clean else said


def _as_recorded(x: RecordedExchange, state: Classified) -> Classified:
    """A failure the recording may not hold to the end (the writer stopped while the socket was
    open, a damaged line of its journal) is `not_recorded`, as for any exchange: not a wedge."""
    why = x.lost_line if x.lost_line is not None else (x.not_recorded if not x.finished else None)
    if why is None or not state.outcome.is_failure:
        return state
    return Classified(Outcome.NOT_RECORDED, f"{why}; as recorded: {state.outcome.value}, {state.detail}")


def _turn(x: RecordedExchange, label: str, one: SocketTurn) -> Seen:
    turn, answer, classified = one.turn, one.analysis, _as_recorded(x, one.classified)
    open_end = turn.terminal is None
    ended_by_socket = open_end and one.ended_at is not None
    seen = seen_of(
        xid=x.xid, label=label, turn=turn.index, method=x.method, path=x.path, body=turn.body,
        t_request=turn.t_request, t_response=turn.answer[0].t if turn.answer else None,
        t_end=one.ended_at, t_error=None, status=x.status if turn.answer else None, streamed=True,
        analysis=answer, outcome=classified.outcome, detail=classified.detail,
        error=_how(x) if ended_by_socket else None, interrupted=x.interrupted and open_end,
        last_byte=turn.answer[-1].t if turn.answer else None, head=b"".join(m.data for m in turn.answer)[:HEAD],
    )  # fmt: skip
    return replace(seen, kind=SOCKET_TURN, part=turn.index, client_ended=ended_by_socket and _client_ended(x))


def _end(x: RecordedExchange, label: str, number: int, after_key: RequestKey,
         after: float | None = None) -> Seen | None:  # fmt: skip
    """The socket's end while it sat idle (None: it had not ended), `after` the end of its last
    turn (None: its upgrade)."""
    close = x.ws_close
    t = close.t if close is not None else (x.t_error if x.error is not None else x.t_end)
    if t is None:
        return None
    since = after if after is not None else (x.t_response if x.t_response is not None else x.t_request)
    client = _client_ended(x)
    idle = f"{_how(x)}, {max(t - since, 0.0):.1f} s after " + (f"turn {number - 1} ended" if number > 1 else "the upgrade")
    state = Classified(Outcome.OK, f"the client ended the socket: {idle}") if client else \
        _as_recorded(x, Classified(Outcome.RESET, f"between turns the socket was {idle}"))  # fmt: skip
    key = RequestKey("websocket-end:" + after_key.view, None, "websocket-end:" + after_key.raw)
    seen = seen_of(
        xid=x.xid, label=label, turn=number, method=x.method, path=x.path, body=b"", t_request=since,
        t_response=None, t_end=t, t_error=None, status=x.status, streamed=False, analysis=None,
        outcome=state.outcome, detail=state.detail, error=None if client else _how(x), interrupted=False,
        last_byte=None,
    )  # fmt: skip
    return replace(seen, key=key, kind=SOCKET_END, part=number, client_ended=client, ending=idle)
