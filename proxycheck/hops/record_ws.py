"""The recorder's WebSocket part: a recorded upgrade's messages and how its socket ended.

The recorder (`proxycheck.hops.record`) journals a WebSocket session's handshake as it journals
any exchange (the `GET` as the request, the 101, or the status that refused the upgrade, as the
response); once mitmproxy has agreed to the upgrade (`flow.websocket` is set before the
`response` hook), the exchange is not ended there but by the socket's end, and this part
journals what happens on the socket in the format of `proxycheck.core.recording.websocket`:

* `websocket_message`: mitmproxy calls it for every whole message, from either side, before it
  relays the message on; the message is written as it is (the writer redacts a client message's
  credentials in the journal only), with the time it arrived. Nothing is held back or changed:
  the relaying is mitmproxy's, and this hook only reads `flow.websocket.messages[-1]`.
* `websocket_end`: the close frame (which side sent it, its code and reason), or a cut: wsproto
  reports a connection that closed without a close frame as code 1006 from the side whose
  connection it was, written with no side (`by` null); then the exchange's `end` (a close frame)
  or `error` ("client disconnected" / "server disconnected": the words the recorder's outcome
  rules read, as for a cut HTTP stream).

Never breaks traffic: the recorder wraps these hooks as it wraps its others (an exception stops
the recording of that flow, which goes on).
"""

from dataclasses import dataclass
from typing import Any

from mitmproxy import http

from proxycheck.core.recording.websocket import ABNORMAL
from proxycheck.io.storage import RecordingWriter

__all__ = ["SocketEnd", "socket_end", "write_end", "write_message"]


@dataclass(frozen=True)
class SocketEnd:
    """How a recorded socket ended, as the journal says it."""

    by: str | None
    code: int | None
    reason: str
    clean: bool
    error: str


def socket_end(flow: http.HTTPFlow) -> SocketEnd:
    """What `flow.websocket` says of the socket's end (see the module docstring)."""
    ws = flow.websocket
    assert ws is not None
    code = ws.close_code
    side = "client" if ws.closed_by_client else "server"
    if code is None or code == ABNORMAL:
        return SocketEnd(None, ABNORMAL, ws.close_reason or "", False, f"{side} disconnected")
    return SocketEnd(side, code, ws.close_reason or "", True, "")


def write_message(writer: RecordingWriter, xid: int, flow: http.HTTPFlow, offset: Any) -> None:
    """Journal the message mitmproxy just received whole (`offset`: wall clock -> recording time)."""
    ws = flow.websocket
    assert ws is not None and ws.messages
    message = ws.messages[-1]
    writer.ws_message(xid, bytes(message.content), from_client=message.from_client, text=message.is_text,
                      t=offset(writer, message.timestamp))  # fmt: skip


def write_end(writer: RecordingWriter, xid: int, flow: http.HTTPFlow, offset: Any) -> None:
    """Journal the socket's end, then end the exchange (a close frame) or fail it (a cut)."""
    ws = flow.websocket
    assert ws is not None
    end = socket_end(flow)
    t = offset(writer, ws.timestamp_end) if ws.timestamp_end is not None else writer.now()
    writer.ws_close(xid, end.by, end.code, end.reason, t=t)
    if end.clean:
        writer.end(xid, t=t)
    else:
        writer.error(xid, end.error, t=t)
