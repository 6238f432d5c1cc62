"""What the recorder decides, without mitmproxy: which responses to tee as streams, and the
connection facts of each exchange.

The recorder addon (`proxycheck.hops.record`) reads mitmproxy's flows and hands plain values to
the functions here, so the rules can be tested like the rest of the core: values and times in,
decisions out. Times are passed in, never read.

* `tee_response` says whether a response must get a tee as its stream callable: SSE and
  NDJSON-like streams, and anything mitmproxy is going to stream anyway (another addon asked for
  it, or `stream_large_bodies` applies), because once mitmproxy streams a body only a stream
  callable ever sees its bytes.
* `ConnectionBook` remembers, per server connection, how many exchanges it has carried and when
  the last one ended, to say whether the next exchange reused it and how long it sat idle first
  (a pooled connection the upstream has silently closed is a classic wedge).
* `coalesce` merges the chunks of a burst (arrivals within a fraction of a millisecond) before
  they are journaled: every chunk costs the writer a few microseconds, and a proxy under full
  load delivers tens of thousands a second, while no timing analysis resolves below a
  millisecond.
* `header_text` and `safe_mode` make values fit for a recording (valid Unicode; no credentials
  in a proxy mode's URL).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "NDJSON_TYPES",
    "ConnectionBook",
    "ServerUse",
    "coalesce",
    "header_text",
    "media_type",
    "safe_mode",
    "tee_response",
]

SSE_TYPE = "text/event-stream"
# Line-delimited JSON streams (Ollama, some gateways, JSON text sequences).
NDJSON_TYPES = frozenset(
    {
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/jsonlines",
        "application/stream+json",
        "application/json-seq",
    }
)


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type value, lower case, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def tee_response(
    *,
    content_type: str | None,
    content_length: int | None,
    chunked: bool,
    already_streamed: bool,
    stream_large_bodies: int | None,
) -> bool:
    """True when a response's body must be recorded chunk by chunk through a stream callable.

    `content_length` is the declared body size (None when the body is chunked, close-delimited
    or an HTTP/2 stream without the header); `already_streamed` says `flow.response.stream` is
    already set (by mitmproxy's `stream_large_bodies` or another addon); `stream_large_bodies`
    is that option's limit in bytes (None when unset).
    """
    if already_streamed:
        return True  # streamed whatever we do: a tee is the only way to see the bytes
    kind = media_type(content_type)
    if kind == SSE_TYPE:
        return True
    if kind in NDJSON_TYPES and (chunked or content_length is None):
        return True
    # mitmproxy decides to stream a body of unknown size only once more than the limit has come
    # in, and then never shows the bytes to an addon: tee such bodies from the start.
    if stream_large_bodies is not None and (content_length is None or content_length > stream_large_bodies):
        return True
    return False


@dataclass(slots=True)
class ServerUse:
    """What the book knows of one server connection."""

    exchanges: int = 0  # exchanges that have started on it
    active: int = 0  # of those, the ones not ended yet (HTTP/2 multiplexes)
    last_end: float | None = None  # when the last exchange on it ended


class ConnectionBook:
    """Per server connection id: whether the next exchange reuses it, and its idle time.

    Call `begin(server_id, t)` when an exchange is known to ride a server connection (t = when
    its request went out), `end(server_id, t)` when the exchange is over (response complete or
    failed), `forget(server_id)` when the connection closes. Every flow on the connection
    counts, recorded or not, so reuse after an unrecorded request is still reuse.
    """

    def __init__(self) -> None:
        self._servers: dict[str, ServerUse] = {}

    def begin(self, server_id: str, t: float) -> tuple[bool, float | None]:
        """(reused, idle seconds) for an exchange starting at `t`. Idle is None on a fresh
        connection, 0 when another exchange was still in progress on it (HTTP/2)."""
        use = self._servers.setdefault(server_id, ServerUse())
        reused = use.exchanges > 0
        idle: float | None = None
        if use.active > 0:
            idle = 0.0
        elif use.last_end is not None:
            idle = max(0.0, t - use.last_end)
        use.exchanges += 1
        use.active += 1
        return reused, idle if reused else None

    def end(self, server_id: str, t: float) -> None:
        use = self._servers.get(server_id)
        if use is None:
            return  # closed and forgotten already: nothing to remember
        use.active = max(0, use.active - 1)
        use.last_end = t if use.last_end is None else max(use.last_end, t)

    def forget(self, server_id: str) -> None:
        self._servers.pop(server_id, None)

    def __len__(self) -> int:
        return len(self._servers)

    def get(self, server_id: str) -> ServerUse | None:
        return self._servers.get(server_id)


def header_text(value: str) -> str:
    """A header value or URL as valid Unicode.

    mitmproxy decodes header bytes as UTF-8 with `surrogateescape`, so bytes that are not UTF-8
    become lone surrogates, which no UTF-8 file can hold. Such a value is decoded as Latin-1
    instead (HTTP's historical charset): every byte keeps one character.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return value.encode("utf-8", "surrogateescape").decode("latin-1")
        except UnicodeEncodeError:  # a surrogate that no byte produced: keep it visible
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


_USERINFO = re.compile(r"(://)[^/@\s]*@")


def safe_mode(spec: str) -> str:
    """A mitmproxy mode spec without credentials in its URL. As mitmproxy reads it, what follows
    the last `@` is the listen address (`upstream:http://user:pw@proxy:3128@8080`)."""
    head, at, listen = spec.rpartition("@")
    if not head:
        head, at, listen = listen, "", ""
    return _USERINFO.sub(r"\1", head) + at + listen


def coalesce(times: Sequence[float], chunks: Sequence[bytes], span: float) -> list[tuple[float, bytes]]:
    """Merge runs of chunks that arrived within `span` seconds of the run's first chunk.

    `times[i]` is when `chunks[i]` arrived. A merged chunk carries the arrival time of its last
    piece, so a recorded time never precedes the arrival of the bytes it stamps; bytes and their
    order are kept exactly, empty chunks dropped. `span` 0 merges only chunks that arrived at
    the same instant.
    """
    out: list[tuple[float, bytes]] = []
    run: list[bytes] = []
    start = last = 0.0
    for t, data in zip(times, chunks):
        if not data:
            continue
        if run and t - start > span:
            out.append((last, run[0] if len(run) == 1 else b"".join(run)))
            run = []
        if not run:
            start = t
        run.append(data)
        last = t
    if run:
        out.append((last, run[0] if len(run) == 1 else b"".join(run)))
    return out
