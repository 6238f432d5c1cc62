"""What a replay of a WebSocket session sends: its handshake's headers and each turn's message.

A recorded socket (`proxycheck.core.replay.plan.plan_socket`) is replayed as one socket per
recorded socket, its turns' `response.create` messages sent as recorded, but for one member:
the server keeps a socket's responses in that socket's memory, and a later turn names the one it
continues (`previous_response_id`), an id the engine replayed against never gave. Each turn's
live response is paired with the id its recorded response carried, and a later turn naming a
recorded id is sent naming the live one (`SocketIds`); an id with no live partner (its turn got
no response live) is sent as recorded: what the engine says to it is a consequence of the replay.
Every other byte of a message is sent as recorded.

The handshake's headers are the recorded request's, kept as for any request
(`plan.replay_headers`), less those the WebSocket client makes for each handshake of its own (the
key, the version, the extensions it offers).

Pure: bytes and ids in, bytes out.
"""

from __future__ import annotations

import json
from typing import Iterable

from proxycheck.core.replay.plan import name_live_response

# Made per handshake by the client (RFC 6455 4.1): never replayed from a recording.
HANDSHAKE_OWN = frozenset({"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                           "sec-websocket-accept", "upgrade", "connection", "host"})  # fmt: skip


def handshake_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers of a replayed handshake (see the module docstring)."""
    return {name: value for name, value in headers if name.lower() not in HANDSHAKE_OWN}


def ws_url(url: str) -> str:
    """The WebSocket URL of an http(s) URL (`ws://`, `wss://`)."""
    if url.startswith("https://"):
        return "wss://" + url[len("https://") :]
    if url.startswith("http://"):
        return "ws://" + url[len("http://") :]
    return url


def upgrade_url(url: str) -> str:
    """The URL a socket is opened with on the wire: the http(s) form of a ws(s) URL. Through a
    forward proxy a client writes its URL in the request line, and `GET ws://...` is refused
    (mitmproxy: "Invalid request scheme: ws"; RFC 9112's absolute-form is an http URI), while `GET
    http://...` with `Upgrade: websocket` is the same upgrade; a wss:// socket is a CONNECT tunnel
    either way. Straight to a server the two forms are the same request."""
    if url.startswith("wss://"):
        return "https://" + url[len("wss://") :]
    if url.startswith("ws://"):
        return "http://" + url[len("ws://") :]
    return url


class SocketIds:
    """Recorded response ids paired with the live ones of one replayed socket."""

    def __init__(self) -> None:
        self._live: dict[str, str] = {}

    def record(self, recorded: str | None, live: str | None) -> None:
        """Turn's recorded response id `recorded` got `live` on the replayed socket."""
        if recorded and live:
            self._live[recorded] = live

    def message(self, body: bytes) -> bytes:
        """The message to send for a turn recorded as `body` (only `previous_response_id` changes,
        byte for byte elsewhere: `plan.name_live_response`, the rule of chained HTTP turns)."""
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return body
        named = doc.get("previous_response_id") if isinstance(doc, dict) else None
        return name_live_response(body, named, self._live) if isinstance(named, str) else body
