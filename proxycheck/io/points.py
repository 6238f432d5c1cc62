"""Recordings as points of the chain: each recording directory loaded into a `PointLog`.

A recording made by a named recorder carries its point in recording.json (`"point": {"name",
"host"}`); an older one, or an import, is the point named after its directory. Every exchange
becomes a `Seen` (`proxycheck.core.points.seen`), named by that recording's own sessions and
keyed by its request body (a WebSocket session becomes a `Seen` per turn:
`proxycheck.core.points.recorded`); the stretches in which the recorder was recording come from its
journal (it recorded from its start to each `close` record, and again from the first request
after one). `load_points` refuses, in one line, two recordings of one point, fewer than two
points, and a chain file that places none of them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from proxycheck.core.errors import BadInput
from proxycheck.core.points.matching import PointLog
from proxycheck.core.points.recorded import is_socket, seen_of_recorded
from proxycheck.core.points.seen import Seen
from proxycheck.core.recording.journal import META_FILE, RecordedExchange, point_of
from proxycheck.core.replay.chain import Chain
from proxycheck.io.recordings import LoadedRecording, open_recording


def point_name(meta: dict[str, Any], directory: str) -> str:
    """The point's name: recording.json's, else the directory's base name."""
    point = point_of(meta, str(Path(directory) / META_FILE))
    return point["name"] if point else (Path(os.path.normpath(directory)).name or directory)


def _host(meta: dict[str, Any], directory: str) -> str | None:
    point = point_of(meta, str(Path(directory) / META_FILE))
    return point["host"] if point else None


def _last_time(x: RecordedExchange) -> float:
    times = [x.t_request] + [t for t in (x.t_response, x.t_end, x.t_error) if t is not None]
    if x.chunks:
        times.append(x.chunks[-1][0])
    if x.ws:  # a socket's messages come after its 101
        times.append(x.ws[-1].t)
    return max(times)


def covered_stretches(exchanges: Sequence[RecordedExchange], closes: Sequence[dict[str, Any]],
                      live: bool = False) -> tuple[tuple[float, float | None], ...]:  # fmt: skip
    """When the recorder was recording, on its clock (see the module docstring). `live`: the last
    stretch is open (the recording may still grow)."""
    close_times = sorted(float(c["t"]) for c in closes if isinstance(c.get("t"), (int, float)))
    stretches: list[tuple[float, float | None]] = []
    start: float | None = 0.0
    pending = sorted(exchanges, key=lambda x: x.t_request)
    k = 0
    for c in close_times:
        if start is None:
            later = [x.t_request for x in pending[k:] if x.t_request < c]
            start = later[0] if later else None
        if start is not None:
            stretches.append((start, c))
        while k < len(pending) and pending[k].t_request <= c:
            k += 1
        start = None
    rest = pending[k:]
    if start is not None or rest:
        begin = start if start is not None else rest[0].t_request
        end = None if live else max((_last_time(x) for x in exchanges), default=begin)
        if end is not None and stretches and end < begin:
            end = begin
        stretches.append((begin, end))
    return tuple(stretches)


def point_of_recording(loaded: LoadedRecording, directory: str, position: int | None = None,
                       live: bool = False) -> PointLog:  # fmt: skip
    recording = loaded.recording
    names: dict[int, tuple[str, int, Any]] = {}
    for session in loaded.summaries:
        for turn in session.turns:
            names[turn.xid] = (session.label or session.id, turn.turn, turn.analysis)
    seen: list[Seen] = []
    for x in recording.exchanges:
        if x.xid not in names:
            continue
        label, turn, analysis = names[x.xid]
        if analysis is None or analysis.classified is None:
            continue
        body = b""
        if not is_socket(x):  # a socket's turns are keyed by their messages, in the journal
            try:
                body = recording.request_body(x)
            except BadInput:
                continue  # a body that cannot be rebuilt cannot be matched (the loader warned)
        seen += seen_of_recorded(x, label, turn, analysis, body=body)
    meta = recording.meta
    return PointLog(
        name=point_name(meta, directory), started_at=float(meta["started_at"]), seen=tuple(seen),
        covered=covered_stretches(recording.exchanges, recording.closes, live), position=position,
        directory=directory, host=_host(meta, directory),
    )  # fmt: skip


def load_point(directory: str, position: int | None = None) -> tuple[PointLog, list[str]]:
    """One recording as a point, and the loader's warnings."""
    loaded = open_recording(directory)
    return point_of_recording(loaded, directory, position), loaded.warnings


def load_points(directories: Sequence[str], chain: Chain | None = None) -> tuple[list[PointLog], list[str]]:
    """The recordings as points, placed by the chain file when it says where they stand, and
    the loaders' warnings (each prefixed with its directory)."""
    if len(directories) < 2:
        raise BadInput("trace", "needs the recordings of at least two points (REC_DIR REC_DIR ...)")
    points, warnings = [], []
    by_name: dict[str, str] = {}
    for directory in directories:
        point, said = load_point(directory)
        if point.name in by_name:
            raise BadInput(directory, f"is point {point.name!r} too, as {by_name[point.name]} is: give one recording per point")
        by_name[point.name] = directory
        position = chain.point_position(point.name) if chain is not None else None
        if position is not None:
            point = PointLog(point.name, point.started_at, point.seen, point.covered, position, point.directory, point.host)
        points.append(point)
        warnings += [f"{directory}: {w}" if not w.startswith(directory) else w for w in said]
    if chain is not None:
        placed = [p.name for p in points if p.position is not None]
        where = chain.source or "the chain file"
        if not chain.points:
            warnings.append(f"{where} places no point (`point = NAME` on a [[hop]] or in [engine_options]): the "
                            "segments name no hops")  # fmt: skip
        elif not placed:
            names = ", ".join(name for name, _ in chain.points)
            raise BadInput(chain.source, f"places the points {names}, none of the recordings' ({', '.join(by_name)})")
        else:
            for p in points:
                if p.position is None:
                    warnings.append(f"{p.directory}: point {p.name!r} is not placed by {where}: the segments it "
                                    "bounds name no hops")  # fmt: skip
    return points, warnings
