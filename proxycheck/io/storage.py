"""Recordings on disk: the journal writer the recorder uses, and the loader every command uses.

The format itself (records, body pieces, migrations) is `proxycheck.core.recording.journal`; this module
owns files: permissions (directories 0700, files 0600: recordings may hold private prompts),
appending whole lines with one write each, buffering response chunks and flushing them at least
every second, and reading a journal that a crash or a full disk may have left damaged (the
line-level rules, shared with runs, are `proxycheck.io.jsonl`).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from proxycheck import __version__
from proxycheck.core.errors import BadInput, StorageError
from proxycheck.core.recording import bodies
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording.journal import RecordedExchange, RecordingWarning
from proxycheck.core.recording.redact import RedactionPolicy, redact_body, redact_headers, redact_url
from proxycheck.io.jsonl import atomic_write as _atomic_write
from proxycheck.io.jsonl import ensure_line_end, open_append, read_json_file, read_records
from proxycheck.io.jsonl import write_all as _write_all

DIR_MODE = 0o700
FILE_MODE = 0o600
FLUSH_INTERVAL = 1.0


class RecordingWriter:
    """Appends exchanges to a recording directory, creating it when needed.

    Times are offsets from the recording's `started_at`; pass `t` (e.g. from
    `offset_of_wall(mitmproxy_timestamp)`) or let the writer read its monotonic clock. Response
    chunks are buffered and written by `flush()`, which `data()` calls itself once a second has
    passed or the buffer is large; a caller with a timer calls `flush()` too, so a stalled stream's
    last chunks are on disk within a second. Thread-safe: mitmproxy hooks and a flush timer may
    call it concurrently.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        policy: RedactionPolicy | None = None,
        *,
        source: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.policy = policy or RedactionPolicy.default()
        self._clock = clock
        self._lock = threading.RLock()
        self._pending: dict[int, list[tuple[float, bytes]]] = {}
        self._pending_bytes = 0
        self._last_flush = clock()
        self._inflight: set[int] = set()
        self._closed = False
        # Digest of each journaled history -> its exchange, to find the longest earlier prefix.
        self._histories: dict[bytes, int] = {}
        try:
            self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            meta_path = self.directory / fmt.META_FILE
            if meta_path.exists():
                self.meta = _read_metadata(meta_path)
                existing = _scan_existing(self.directory / fmt.JOURNAL_FILE)
                self._next_xid, self._known = existing
            else:
                now = wall()
                created = _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat()
                self.meta = fmt.new_metadata(now, created, __version__, source=source or {})
                _atomic_write(meta_path, json.dumps(self.meta, indent=2).encode() + b"\n")
                self._next_xid, self._known = 1, set()
            # Offsets are measured on the monotonic clock, anchored to wall time once.
            self._base = clock() - (wall() - float(self.meta["started_at"]))
            self._fd = open_append(self.directory / fmt.JOURNAL_FILE, FILE_MODE)
        except OSError as exc:
            raise StorageError(f"{self.directory}: cannot write a recording here: {exc.strerror or exc}") from exc

    # Clock -----------------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the recording started."""
        return self._clock() - self._base

    def offset_of_wall(self, wall_time: float) -> float:
        """The offset of a wall-clock timestamp (e.g. mitmproxy's `timestamp_start`)."""
        return wall_time - float(self.meta["started_at"])

    # Exchanges -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        url: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        *,
        http_version: str | None = None,
        conn: dict[str, Any] | None = None,
        t: float | None = None,
    ) -> int:
        """Journal a request (redacted) and return its exchange number."""
        url, removed_url = redact_url(url, self.policy)
        headers, removed_headers = redact_headers(headers, self.policy)
        body, removed_body = redact_body(body, self.policy)
        split = bodies.split_body(body)
        with self._lock:
            xid = self._next_xid
            self._next_xid += 1
            lines = [self._piece_line(pid, data) for pid, data in split.pieces.items() if pid not in self._known]
            body_rec = bodies.encode_body(split.body, self._history_base(xid, split.body.messages))
            rec = fmt.request_record(xid, self.now() if t is None else t, method, url, http_version, headers, body_rec,
                                     redacted=removed_url + removed_headers + removed_body, conn=conn)  # fmt: skip
            lines.append(fmt.dumps(rec))
            self._append(b"".join(line for line in lines if line))
            self._known.update(split.pieces)
            self._inflight.add(xid)
            return xid

    def response(
        self,
        xid: int,
        status: int,
        reason: str | None,
        headers: Iterable[tuple[str, str]],
        *,
        streamed: bool,
        http_version: str | None = None,
        conn: dict[str, Any] | None = None,
        t: float | None = None,
        chunk_timing: bool = True,
    ) -> None:
        """Journal the response headers. `chunk_timing=False` says the chunks that follow carry
        no real arrival times (an import from HAR, say), so timing analyses must not trust them."""
        headers, _ = redact_headers(headers, self.policy)
        rec = fmt.response_record(xid, self.now() if t is None else t, status, reason, headers, streamed=streamed,
                                  http_version=http_version, conn=conn, chunk_timing=chunk_timing)  # fmt: skip
        with self._lock:
            self._append(fmt.dumps(rec))

    def data(self, xid: int, chunk: bytes, t: float | None = None) -> None:
        """Buffer one response chunk as it arrived."""
        if not chunk:
            return
        with self._lock:
            self._pending.setdefault(xid, []).append((self.now() if t is None else t, chunk))
            self._pending_bytes += len(chunk)
            if self._pending_bytes >= fmt.DATA_RECORD_MAX or self._clock() - self._last_flush >= FLUSH_INTERVAL:
                self.flush()

    def end(self, xid: int, t: float | None = None) -> None:
        self._finish(xid, lambda at: fmt.end_record(xid, at), t)

    def error(self, xid: int, message: str, t: float | None = None, conn: dict[str, Any] | None = None) -> None:
        """The exchange failed. `conn` adds connection facts learned late: a request that never
        got response headers is exactly the stale-pooled-connection wedge, whose server facts
        would otherwise be missing."""
        self._finish(xid, lambda at: fmt.error_record(xid, at, message, conn), t)

    def _finish(self, xid: int, record: Callable[[float], dict[str, Any]], t: float | None) -> None:
        with self._lock:
            # The time is read under the lock, after the exchange's last chunks are flushed.
            rec = record(self.now() if t is None else t)
            self._flush_exchange(xid)
            self._append(fmt.dumps(rec))
            self._inflight.discard(xid)

    def flush(self) -> None:
        """Write buffered response chunks now."""
        with self._lock:
            for xid in list(self._pending):
                self._flush_exchange(xid)
            self._last_flush = self._clock()

    def close(self, reason: str = "closed") -> None:
        """Flush, mark exchanges still in flight as interrupted, and close the journal."""
        with self._lock:
            if self._closed:
                return
            try:
                self.flush()
                self._append(fmt.dumps(fmt.close_record(self.now(), reason, self._inflight)))
            finally:
                self._closed = True
                os.close(self._fd)

    @property
    def inflight(self) -> frozenset[int]:
        return frozenset(self._inflight)

    # Internals -------------------------------------------------------------------------------

    def _flush_exchange(self, xid: int) -> None:
        chunks = self._pending.pop(xid, None)
        if not chunks:
            return
        self._pending_bytes -= sum(len(c) for _, c in chunks)
        # Keep each data record under DATA_RECORD_MAX so journal lines stay small.
        batch: list[tuple[float, bytes]] = []
        size = 0
        out = []
        for t, c in chunks:
            for i in range(0, len(c), fmt.DATA_RECORD_MAX):
                piece = c[i : i + fmt.DATA_RECORD_MAX]
                if batch and size + len(piece) > fmt.DATA_RECORD_MAX:
                    out.append(fmt.dumps(fmt.data_record(xid, batch)))
                    batch, size = [], 0
                batch.append((t, piece))
                size += len(piece)
        if batch:
            out.append(fmt.dumps(fmt.data_record(xid, batch)))
        self._append(b"".join(out))

    def _history_base(self, xid: int, history: tuple[str, ...] | None) -> tuple[int, int] | None:
        if not history:
            return None
        digests = bodies.prefix_digests(history)
        base = None
        for k in range(len(history), 0, -1):
            earlier = self._histories.get(digests[k])
            if earlier is not None:
                base = (earlier, k)
                break
        self._histories[digests[-1]] = xid
        return base

    def _piece_line(self, pid: str, data: bytes) -> bytes:
        if len(data) > fmt.INLINE_PIECE_MAX:
            blob_dir = self.directory / fmt.BLOB_DIR
            blob_dir.mkdir(mode=DIR_MODE, exist_ok=True)
            target = blob_dir / pid
            if not target.exists():
                _atomic_write(target, data)
            return b""
        return fmt.dumps(fmt.blob_record(pid, data))

    def _append(self, data: bytes) -> None:
        if self._closed:
            raise StorageError(f"{self.directory}: the recording is closed")
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            raise StorageError(f"{self.directory / fmt.JOURNAL_FILE}: write failed: {exc.strerror or exc}") from exc


# ------------------------------------------------------------------------------------------------
# Loading


@dataclass
class Recording:
    """A loaded recording: its metadata, exchanges in request order, and what was stepped over."""

    directory: Path
    meta: dict[str, Any]
    exchanges: list[RecordedExchange]
    pieces: Mapping[str, bytes]  # the journal's pieces; large ones are read from blobs/ on demand
    warnings: list[RecordingWarning] = field(default_factory=list)
    closes: list[dict[str, Any]] = field(default_factory=list)

    def piece(self, pid: str) -> bytes:
        """A piece's bytes, from the journal or from blobs/ (read on demand)."""
        data = self.pieces.get(pid)
        if data is not None:
            return data
        path = self.directory / fmt.BLOB_DIR / pid
        try:
            return path.read_bytes()
        except OSError as exc:
            raise BadInput(str(path), f"missing piece of a request body ({exc.strerror})") from exc

    def request_body(self, exchange: RecordedExchange) -> bytes:
        return bodies.join_body(exchange.body, self.piece)

    def piece_size(self, pid: str) -> int:
        data = self.pieces.get(pid)
        if data is not None:
            return len(data)
        try:
            return (self.directory / fmt.BLOB_DIR / pid).stat().st_size
        except OSError:
            return 0


def load(directory: str | os.PathLike[str]) -> Recording:
    """Load a recording directory. BadInput for what cannot be loaded at all; damaged lines are
    skipped and reported in `warnings` (file and line)."""
    root = Path(directory)
    if not root.exists():
        raise BadInput(str(root), "no such directory")
    if not root.is_dir():
        raise BadInput(str(root), "not a directory (a recording is a directory)")
    meta_path = root / fmt.META_FILE
    if not meta_path.exists():
        raise BadInput(str(root), f"not a proxycheck recording (no {fmt.META_FILE})")
    meta = _read_metadata(meta_path)
    journal = root / fmt.JOURNAL_FILE
    builder = fmt.RecordingBuilder()
    try:
        meta, upgrade_record = fmt.upgrade(meta)
    except BadInput as exc:
        raise BadInput(str(meta_path), exc.message) from None
    for where, rec in _journal_records(journal, builder.warnings):
        rec = upgrade_record(rec)
        if rec is not None:
            builder.add(rec, where)
    exchanges = builder.finish()
    return Recording(root, meta, exchanges, builder.pieces, builder.warnings, builder.closed)


def _read_metadata(path: Path) -> dict[str, Any]:
    meta = read_json_file(path)
    fmt.check_metadata(meta, str(path))
    return meta


def _journal_records(path: Path, warnings: list[RecordingWarning]) -> Iterator[tuple[str, Any]]:
    """(where, record) for each readable line; damaged lines become warnings."""
    return read_records(path, warnings, fmt.MAX_LINE)


def _scan_existing(journal: Path) -> tuple[int, set[str]]:
    """The next exchange number and the known piece ids of an existing journal (for appending)."""
    warnings: list[RecordingWarning] = []
    max_xid = 0
    known: set[str] = set()
    for _, rec in _journal_records(journal, warnings):
        if not isinstance(rec, dict):
            continue
        if rec.get("k") == "req" and isinstance(rec.get("x"), int):
            max_xid = max(max_xid, rec["x"])
        elif rec.get("k") == "blob" and isinstance(rec.get("id"), str):
            known.add(rec["id"])
    blob_dir = journal.parent / fmt.BLOB_DIR
    if blob_dir.is_dir():
        known.update(p.name for p in blob_dir.iterdir())
    # A journal cut mid-line must not glue its partial last line to our first record.
    ensure_line_end(journal)
    return max_xid + 1, known
