"""A recording made of part of another: what `minimize` tries and keeps, as an ordinary recording.

`subset_recording` makes it in memory (a `Recording` of the chosen exchanges, their replaced
bodies' pieces beside the original's): `minimize` plans each candidate from it without touching
the disk. It holds what loading the written subset would (times to the microsecond, an exchange
in flight marked interrupted, as a closed journal marks it; one not recorded to the end stays so).

`write_subset` journals the chosen exchanges of a loaded recording into a new recording
directory, byte for byte (request bodies rebuilt from their pieces, responses with their chunk
arrival times, connection facts, errors and interruptions), optionally with some request bodies
replaced (a shortened message) and think times changed (`think`: an exchange's request moved so
that it comes that many seconds after the previous kept exchange of its session ended). The
result is usable by everything that reads recordings: replay, check, engine --replay, export.
A WebSocket session (one exchange) is copied whole, or cut to its first turns (`sockets`: how
many turns of a socket to keep) with waits between its turns changed (`socket_shifts`), as
`proxycheck.core.minimize.sockets.cut_socket` says; other exchanges do not move with those.

Times keep their offsets from the original's start, so sessions keep their recorded start
offsets relative to each other. What was redacted stays redacted: a redaction marker is written
back as the marker, and the redacted names extend the new recording's policy.
"""

from __future__ import annotations

import os
from collections import ChainMap
from dataclasses import replace
from typing import Iterable, Mapping

from proxycheck.core.minimize.sockets import cut_socket
from proxycheck.core.recording.bodies import split_body
from proxycheck.core.recording.journal import DATA_RECORD_MAX, RecordedExchange, what_is_not_recorded
from proxycheck.core.recording.redact import REDACTED_TEXT, Redacted, RedactionPolicy, redact_body
from proxycheck.io.har import Imported, ImportedResponse, ImportResult, write_recording
from proxycheck.io.storage import Recording


def subset_recording(
    recording: Recording,
    xids: Iterable[int],
    *,
    bodies: Mapping[int, bytes] | None = None,
    shifts: Mapping[int, float] | None = None,
    sockets: Mapping[int, int] | None = None,
    socket_shifts: Mapping[int, Mapping[int, float]] | None = None,
) -> Recording:
    """The recording `write_subset` would write, in memory: the exchanges `xids` (keeping their
    numbers), `bodies`, `shifts`, `sockets` and `socket_shifts` as there."""
    keep = set(xids)
    moved = _offsets(recording.exchanges, shifts or {})
    pieces: dict[str, bytes] = {}
    exchanges = [
        _shifted(_socket_cut(x, sockets, socket_shifts), moved.get(x.xid, 0.0), (bodies or {}).get(x.xid), pieces)
        for x in recording.exchanges
        if x.xid in keep
    ]
    exchanges.sort(key=lambda x: (x.t_request, x.xid))
    return Recording(recording.directory, recording.meta, exchanges, ChainMap(pieces, recording.pieces))


def _shifted(x: RecordedExchange, dt: float, body: bytes | None, pieces: dict[str, bytes]) -> RecordedExchange:
    """`x` as the written subset holds it (see `_imported` and the writer): moved by `dt`, with
    `body` (redacted as the writer redacts, its new pieces added to `pieces`)."""

    def at(t: float | None) -> float | None:
        return None if t is None else round(t + dt, 6)

    # Unfinished, the written subset's close record marks it interrupted; one not recorded to the
    # end stays so (the writer notes it in recording.json), so the subset shows no wedge either.
    changes: dict[str, object] = {"t_request": at(x.t_request), "interrupted": x.interrupted or not x.finished}
    if body is not None:
        split = split_body(redact_body(body, RedactionPolicy.default())[0])
        pieces.update(split.pieces)
        changes["body"] = split.body
    if x.status is None:
        changes.update(chunks=(), response_body=b"")
    else:
        # The writer journals a chunk larger than a data record as pieces at its arrival time.
        chunks = [(round(t + dt, 6), c[i : i + DATA_RECORD_MAX]) for t, c in x.timed_chunks()
                  for i in range(0, len(c), DATA_RECORD_MAX)]  # fmt: skip
        changes.update(
            t_response=at(x.t_response) or at(x.t_request) or 0.0, streamed=bool(x.streamed),
            chunks=tuple((t, len(c)) for t, c in chunks), response_body=b"".join(c for _, c in chunks),
        )  # fmt: skip
    if x.error is not None:
        changes.update(t_end=None, t_error=at(x.t_error))
    else:
        changes["t_end"] = at(x.t_end)
    if x.ws or x.ws_close is not None:  # a WebSocket session's messages and end move with it
        changes["ws"] = tuple(replace(m, t=round(m.t + dt, 6)) for m in x.ws)
        changes["ws_close"] = None if x.ws_close is None else replace(x.ws_close, t=round(x.ws_close.t + dt, 6))
    return replace(x, **changes)  # type: ignore[arg-type]


def write_subset(
    recording: Recording,
    xids: Iterable[int],
    out: str | os.PathLike[str],
    *,
    bodies: Mapping[int, bytes] | None = None,
    shifts: Mapping[int, float] | None = None,
    source: Mapping[str, object] | None = None,
    sockets: Mapping[int, int] | None = None,
    socket_shifts: Mapping[int, Mapping[int, float]] | None = None,
) -> int:
    """Write the exchanges `xids` of `recording` to the new recording `out`; how many. `bodies`
    replaces request bodies by xid; `shifts` moves an exchange (request, response and end) by
    that many seconds, and every later exchange of the recording with it, so think times change
    where the caller says and nowhere else. `sockets` keeps a WebSocket session's first turns
    (xid -> how many), `socket_shifts` moves its turns (xid -> turn -> seconds): `cut_socket`."""
    keep = set(xids)
    chosen = [_socket_cut(x, sockets, socket_shifts) for x in recording.exchanges if x.xid in keep]
    moved = _offsets(recording.exchanges, shifts or {})
    redacted = {name.lower() for x in chosen for name, value in x.request_headers if isinstance(value, Redacted)}
    result = ImportResult(
        started_at=float(recording.meta.get("started_at", 0.0)),
        exchanges=[_imported(recording, x, (bodies or {}).get(x.xid), moved.get(x.xid, 0.0)) for x in chosen],
        source={"kind": "subset", "of": str(recording.directory), **(source or {})},
        redacted_headers=redacted,
    )
    return write_recording(out, result)


def _socket_cut(x: RecordedExchange, sockets: Mapping[int, int] | None,
                shifts: Mapping[int, Mapping[int, float]] | None) -> RecordedExchange:  # fmt: skip
    """`x` with its socket cut to the turns kept and its waits moved (`cut_socket`); `x` itself
    when it is no socket, or one kept whole as recorded."""
    keep, moves = (sockets or {}).get(x.xid), (shifts or {}).get(x.xid)
    if not (x.ws or x.ws_close is not None) or (keep is None and not moves):
        return x
    cut = cut_socket(x.ws, x.ws_close, keep=keep, shifts=moves)

    def at(t: float | None) -> float | None:
        return None if t is None else round(t + cut.end_shift, 6)

    return replace(x, ws=cut.messages, ws_close=cut.close, t_end=at(x.t_end), t_error=at(x.t_error))


def _offsets(exchanges: list[RecordedExchange], shifts: Mapping[int, float]) -> dict[int, float]:
    """Each exchange's total shift: the sum of the shifts at or before it in request order."""
    total, out = 0.0, {}
    for x in sorted(exchanges, key=lambda x: (x.t_request, x.xid)):
        total += shifts.get(x.xid, 0.0)
        out[x.xid] = total
    return out


def _imported(recording: Recording, x: RecordedExchange, body: bytes | None, dt: float) -> Imported:
    def at(t: float | None) -> float | None:
        return None if t is None else t + dt

    response = None
    if x.status is not None:
        response = ImportedResponse(
            t=at(x.t_response) or at(x.t_request) or 0.0, status=x.status, reason=x.reason,
            headers=_text_headers(x.response_headers), http_version=x.http_version, streamed=bool(x.streamed),
        )  # fmt: skip
    conn = None
    if x.conn is not None:
        conn = {k: getattr(x.conn, k) for k in type(x.conn).__slots__}  # type: ignore[attr-defined]
    return Imported(
        where=f"exchange {x.xid}",
        t_request=x.t_request + dt,
        method=x.method,
        url=x.url,
        http_version=x.http_version,
        headers=_text_headers(x.request_headers),
        body=recording.request_body(x) if body is None else body,
        conn=conn,
        response=response,
        chunks=[(t + dt, c) for t, c in x.timed_chunks()],
        chunk_timing=x.chunk_timing,
        t_end=at(x.t_end),
        error=x.error,
        t_error=at(x.t_error),
        xid=x.xid,
        not_recorded=what_is_not_recorded(x),
        ws=[replace(m, t=m.t + dt) for m in x.ws],
        ws_close=None if x.ws_close is None else replace(x.ws_close, t=x.ws_close.t + dt),
    )


def _text_headers(headers: Iterable[tuple[str, object]]) -> list[tuple[str, str]]:
    return [(name, REDACTED_TEXT if isinstance(value, Redacted) else str(value)) for name, value in headers]
