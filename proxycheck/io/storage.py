"""Recordings on disk: the journal writer the recorder uses, and the loader every command uses.

The format itself (records, body pieces, migrations) is `proxycheck.core.recording.journal`; this module
owns files: permissions (directories 0700, files 0600: recordings may hold private prompts),
appending whole lines with one write each, buffering response chunks and flushing them at least
every second, and reading a journal that a crash or a full disk may have left damaged (the
line-level rules, shared with runs, are `proxycheck.io.jsonl`).

Whether a recording can be opened for appending in a directory is one function,
`check_appendable`, which the recorder addon and `proxycheck record` both ask before they write
(it reads and never changes what is there); it also refuses a recording made at another point of
observation than the one that would append (one recording holds one point, recording.json's
`point`). A writer that can no longer write (a full disk, a
read-only one, a file size limit) raises `StorageError` and writes nothing more; on that first
failure it frees the small reserve file it made at open (`RESERVE_FILE`) and notes in
recording.json, under `write_failures`, from when it failed, why, and which exchanges were in
flight then, so the recording says they were not recorded to the end instead of looking like a
wedge.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from proxycheck import __version__
from proxycheck.core.errors import BadInput, StorageError
from proxycheck.core.recording import bodies
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording import websocket
from proxycheck.core.recording.journal import RecordedExchange, RecordingWarning
from proxycheck.core.recording.redact import RedactionPolicy, redact_body, redact_headers, redact_url
from proxycheck.io.jsonl import atomic_write, ensure_line_end, open_append, read_json_file, read_records
from proxycheck.io.jsonl import write_all as _write_all

DIR_MODE = 0o700
FILE_MODE = 0o600
FLUSH_INTERVAL = 1.0
# Space kept at open and freed on the first failed write, so that a full disk still has room for
# the note in recording.json that says where the recording stops; removed on close.
RESERVE_FILE = ".reserve"
RESERVE_BYTES = 16 << 10


def check_appendable(directory: str | os.PathLike[str], *, others_allowed: bool = False, point: str | None = None) -> None:
    """Whether a recording can be created, or appended to, in `directory`: BadInput naming the
    path and the problem when what is there is no recording to append to, StorageError when it
    cannot be written. Reads only: nothing there is created, changed or removed.

    A directory holding other files but no recording.json is refused unless `others_allowed`
    (the recorder and `proxycheck record` never mix a recording into someone else's files).
    `point`: the name of the point that would append; a recording made at another point is
    refused (one recording holds one point), one without a point takes it."""
    root = Path(directory)
    try:
        _check_appendable(root, others_allowed, point)
    except RecursionError:
        raise BadInput(str(root / fmt.META_FILE), "nested too deeply to be read (not a recording)") from None
    except OSError as exc:
        raise StorageError(f"{root}: cannot write a recording here: {exc.strerror or exc}") from None


def _unwritable(path: Path, why: str) -> StorageError:
    return StorageError(f"{path}: cannot write a recording here: {why}")


def other_point(root: Path, recorded_at: str) -> BadInput:
    """The refusal to append to a recording made at another point."""
    return BadInput(str(root), f"recorded at point {recorded_at}; a recording holds one point (give another --out)")


def _check_appendable(root: Path, others_allowed: bool, point: str | None) -> None:
    if not root.exists() and not root.is_symlink():
        ancestor = root.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise _unwritable(root, f"{ancestor} is not a directory")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise _unwritable(root, f"{ancestor} is not writable")
        return
    if not root.is_dir():
        raise BadInput(str(root), "exists and is not a directory (a recording is a directory)")
    if not os.access(root, os.W_OK | os.X_OK):
        raise _unwritable(root, "the directory is not writable")
    meta_path, journal, blobs = root / fmt.META_FILE, root / fmt.JOURNAL_FILE, root / fmt.BLOB_DIR
    if not meta_path.exists():
        if journal.exists() or journal.is_symlink():
            raise BadInput(str(root), f"has a {fmt.JOURNAL_FILE} but no {fmt.META_FILE}: not a recording to append to")
        if not others_allowed and any(root.iterdir()):
            raise BadInput(str(root), f"holds other files and no {fmt.META_FILE}: not a recording "
                                      "(choose a new directory)")  # fmt: skip
        return
    if not meta_path.is_file():
        raise BadInput(str(meta_path), "is not a file")
    meta = _read_metadata(meta_path)
    if meta.get("format") != fmt.FORMAT:
        raise BadInput(str(meta_path), f"recording format {meta.get('format')!r}: this proxycheck appends only to "
                                       f"format {fmt.FORMAT} (record into a new directory)")  # fmt: skip
    recorded_at = fmt.point_of(meta, str(meta_path))
    if point is not None and recorded_at is not None and recorded_at["name"] != point:
        raise other_point(root, recorded_at["name"])
    if journal.exists() or journal.is_symlink():
        if not journal.is_file():
            raise BadInput(str(journal), "is not a file")
        if not os.access(journal, os.R_OK | os.W_OK):
            raise _unwritable(journal, "it cannot be read and appended to")
    if blobs.exists() or blobs.is_symlink():
        if not blobs.is_dir():
            raise BadInput(str(blobs), "exists and is not a directory")
        if not os.access(blobs, os.W_OK | os.X_OK):
            raise _unwritable(blobs, "the directory is not writable")


class RecordingWriter:
    """Appends exchanges to a recording directory, creating it when needed.

    Times are offsets from the recording's `started_at`; pass `t` (e.g. from
    `offset_of_wall(mitmproxy_timestamp)`) or let the writer read its monotonic clock. Response
    chunks are buffered and written by `flush()`, which `data()` calls itself once a second has
    passed or the buffer is large; a caller with a timer calls `flush()` too, so a stalled stream's
    last chunks are on disk within a second. Thread-safe: mitmproxy hooks and a flush timer may
    call it concurrently.

    A write that fails (`OSError`) is a `StorageError`; the first one is noted in recording.json
    (`write_failures`, in the space the reserve file frees) and every later write refuses at once.

    `point` (and `host`, default the machine's name): the point of observation recording. A new
    recording's recording.json says it; an existing one without a point gets it, atomically, at
    open; one made at another point is refused (BadInput, before anything there changes). A
    recorder that learns its point's name only from its first request opens without one and calls
    `name_point`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        policy: RedactionPolicy | None = None,
        *,
        source: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        point: str | None = None,
        host: str | None = None,
    ) -> None:
        self.directory = Path(directory)
        entry = None if point is None else fmt.point_entry(point, socket.gethostname() if host is None else host)
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
        self._failure: StorageError | None = None  # the first failed write: nothing is written after it
        self._reserve: Path | None = None
        check_appendable(self.directory, others_allowed=True, point=point)
        try:
            self.directory.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            meta_path = self.directory / fmt.META_FILE
            if meta_path.exists():
                self.meta = _read_metadata(meta_path)
                existing = _scan_existing(self.directory / fmt.JOURNAL_FILE)
                self._next_xid, self._known = existing
                if entry is not None and fmt.point_of(self.meta, str(meta_path)) is None:
                    # An older recording takes the point of its first append (check_appendable
                    # refused one made at another point).
                    self.meta = {**self.meta, fmt.POINT: entry}
                    atomic_write(meta_path, _metadata_bytes(self.meta))
            else:
                now = wall()
                created = _dt.datetime.fromtimestamp(now, _dt.timezone.utc).isoformat()
                extra: dict[str, Any] = {} if entry is None else {fmt.POINT: entry}
                self.meta = fmt.new_metadata(now, created, __version__, source=source or {}, **extra)
                atomic_write(meta_path, _metadata_bytes(self.meta))
                self._next_xid, self._known = 1, set()
            # Offsets are measured on the monotonic clock, anchored to wall time once.
            self._base = clock() - (wall() - float(self.meta["started_at"]))
            self._fd = open_append(self.directory / fmt.JOURNAL_FILE, FILE_MODE)
        except OSError as exc:
            raise StorageError(f"{self.directory}: cannot write a recording here: {exc.strerror or exc}") from exc
        except RecursionError:
            raise BadInput(str(self.directory / fmt.JOURNAL_FILE), "nested too deeply to be read") from None
        self._reserve = _make_reserve(self.directory / RESERVE_FILE)

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

    def ws_message(self, xid: int, data: bytes, *, from_client: bool, text: bool = True, t: float | None = None) -> None:
        """Journal one whole WebSocket message of exchange `xid` (its upgrade). A client's JSON
        message has its credentials redacted as a request body's are (every other byte kept)."""
        if from_client and text:
            data, _ = redact_body(data, self.policy)
        with self._lock:
            self._append(fmt.dumps(websocket.message_record(xid, self.now() if t is None else t, from_client, data, text)))

    def ws_close(self, xid: int, by: str | None, code: int | None, reason: str = "", t: float | None = None) -> None:
        """Journal how the socket of exchange `xid` ended (`by` None: no close frame came)."""
        with self._lock:
            self._append(fmt.dumps(websocket.close_record(xid, self.now() if t is None else t, by, code, reason)))

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

    def copied_not_recorded(self, xid: int, t: float, detail: str) -> None:
        """Note in recording.json that exchange `xid`, copied from a recording that had not
        recorded it to the end (a subset, an import of an export), is not recorded to the end here
        either, for `detail`: without the note it would load as a wedge."""
        with self._lock:
            self._refuse_if_failed()
            entry = fmt.write_failure_entry(t, "copied", (xid,), detail)
            earlier = self.meta.get(fmt.WRITE_FAILURES)
            meta = {**self.meta, fmt.WRITE_FAILURES: [*(earlier if isinstance(earlier, list) else ()), entry]}
            try:
                atomic_write(self.directory / fmt.META_FILE, _metadata_bytes(meta))
            except OSError as exc:
                raise self._failed(self.directory / fmt.META_FILE, exc) from exc
            self.meta = meta

    def close(self, reason: str = "closed") -> None:
        """Flush, mark exchanges still in flight as interrupted, and close the journal (after a
        failed write nothing more is written: recording.json already says what is missing)."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._failure is None:
                    self.flush()
                    self._append(fmt.dumps(fmt.close_record(self.now(), reason, self._inflight)))
            finally:
                self._closed = True
                os.close(self._fd)
                self._free_reserve()

    def name_point(self, name: str, host: str | None = None) -> None:
        """Name the recording's point, for a recorder that learns its name only from its first
        request (its listen address): written once, atomically, when the recording has no point
        yet; nothing when it has this one; BadInput (nothing written) when it holds another's."""
        with self._lock:
            meta_path = self.directory / fmt.META_FILE
            recorded_at = fmt.point_of(self.meta, str(meta_path))
            if recorded_at is not None:
                if recorded_at["name"] != name:
                    raise other_point(self.directory, recorded_at["name"])
                return
            self._refuse_if_failed()
            meta = {**self.meta, fmt.POINT: fmt.point_entry(name, socket.gethostname() if host is None else host)}
            try:
                atomic_write(meta_path, _metadata_bytes(meta))
            except OSError as exc:
                raise self._failed(meta_path, exc) from exc
            self.meta = meta

    @property
    def point(self) -> dict[str, str] | None:
        """The recording's point (`{"name", "host"}`), None while it has none."""
        return fmt.point_of(self.meta, str(self.directory / fmt.META_FILE))

    def discard(self) -> None:
        """Close without writing another record: the recording was refused after it was opened
        (its point turned out to be another's), so nothing of this writer's stays in it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._pending.clear()
            os.close(self._fd)
            self._free_reserve()

    @property
    def inflight(self) -> frozenset[int]:
        return frozenset(self._inflight)

    @property
    def failure(self) -> StorageError | None:
        """The first write that failed (None while every write succeeded)."""
        return self._failure

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
            self._refuse_if_failed()
            blob_dir = self.directory / fmt.BLOB_DIR
            target = blob_dir / pid
            try:
                blob_dir.mkdir(mode=DIR_MODE, exist_ok=True)
                if not target.exists():
                    atomic_write(target, data)
            except OSError as exc:
                raise self._failed(target, exc) from exc
            return b""
        return fmt.dumps(fmt.blob_record(pid, data))

    def _append(self, data: bytes) -> None:
        self._refuse_if_failed()
        try:
            _write_all(self._fd, data)
        except OSError as exc:
            raise self._failed(self.directory / fmt.JOURNAL_FILE, exc) from exc

    def _refuse_if_failed(self) -> None:
        if self._closed:
            raise StorageError(f"{self.directory}: the recording is closed")
        if self._failure is not None:
            raise self._failure

    def _failed(self, path: Path, exc: OSError) -> StorageError:
        """The StorageError for a failed write; the first one is noted in recording.json (in the
        space the reserve frees) with the exchanges it leaves incomplete."""
        why = exc.strerror or str(exc)
        error = StorageError(f"{path}: write failed: {why}")
        if self._failure is not None:
            return error
        self._free_reserve()
        entry = fmt.write_failure_entry(self.now(), why, self._inflight)
        earlier = self.meta.get(fmt.WRITE_FAILURES)
        meta = {**self.meta, fmt.WRITE_FAILURES: [*(earlier if isinstance(earlier, list) else ()), entry]}
        try:
            atomic_write(self.directory / fmt.META_FILE, _metadata_bytes(meta))
            self.meta = meta
        except OSError as again:
            error = StorageError(f"{path}: write failed: {why}; {fmt.META_FILE} could not say where the recording "
                                 f"stops either ({again.strerror or again}): {len(self._inflight)} exchange(s) "
                                 "in flight will look unfinished")  # fmt: skip
        self._failure = error
        return error

    def _free_reserve(self) -> None:
        reserve, self._reserve = self._reserve, None
        if reserve is not None:
            try:
                reserve.unlink()
            except OSError:
                pass


def _metadata_bytes(meta: Mapping[str, Any]) -> bytes:
    return json.dumps(meta, indent=2).encode() + b"\n"


def _make_reserve(path: Path) -> Path | None:
    """A file of RESERVE_BYTES real bytes (not a sparse hole, which would free nothing); None
    when there is no room for it, which only means there is no reserve to free."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            _write_all(fd, bytes(RESERVE_BYTES))
        finally:
            os.close(fd)
        return path
    except OSError:
        try:
            path.unlink()
        except OSError:
            pass
        return None


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
    skipped and reported in `warnings` (file and line).

    Damage loses only what it touches: an exchange whose request body cannot be rebuilt exactly
    (a piece lost with a damaged line or a missing blobs/ file, a damaged request line, a history
    built on a request that was skipped) is skipped with a warning at its request's line saying
    what was lost, and everything else loads, lists and replays."""
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
    for where, rec in read_records(journal, builder.warnings, fmt.MAX_LINE, builder.lost_line):
        rec = upgrade_record(rec)
        if rec is not None:
            builder.add(rec, where)
    builder.add_write_failures(meta, str(meta_path))  # the writer's note of where it could write no more
    exchanges = _rebuildable(root, builder.finish(), builder, journal)
    return Recording(root, meta, exchanges, builder.pieces, builder.warnings, builder.closed)


def _rebuildable(
    root: Path, exchanges: list[RecordedExchange], builder: fmt.RecordingBuilder, journal: Path
) -> list[RecordedExchange]:
    """The exchanges whose request bodies join back to their recorded SHA-256; each other one is
    skipped with a warning at its request line that says what was lost and, for a missing piece,
    the damaged journal line that probably held it (pieces are journaled just before the first
    request that uses them). Blob files are hashed in blocks: a large body is never held whole."""
    damaged = _damaged_lines(builder.warnings, journal)
    pieces = builder.pieces
    blob_dir = root / fmt.BLOB_DIR
    kept: list[RecordedExchange] = []
    for ex in exchanges:
        where = builder.where_of(ex.xid)
        line = _line_of(where)

        def blocks_of(pid: str) -> Iterator[bytes]:
            data = pieces.get(pid)
            if data is not None:
                yield data
                return
            yield from _blob_blocks(blob_dir / pid, pid, _nearest_before(damaged, line, journal))

        problem = bodies.unrebuildable(ex.body, blocks_of)
        if problem is None:
            kept.append(ex)
            continue
        builder.warnings.append(RecordingWarning(
            where or str(journal), f"exchange {ex.xid} ({ex.method} {ex.path}) skipped: its request body cannot "
                                   f"be rebuilt, {problem}",
        ))  # fmt: skip
    return kept


def _blob_blocks(path: Path, pid: str, damaged_line: str | None) -> Iterator[bytes]:
    """A blob file's bytes in blocks; MissingPiece saying where the piece should have been, or
    that the file's bytes are not the piece's (checked against its id once all are read)."""
    if damaged_line is not None and not path.exists():
        raise bodies.MissingPiece(pid, f": no readable journal line holds it ({damaged_line}, before this request, "
                                       "is damaged) and it is not in blobs/")  # fmt: skip
    if path.exists() and not path.is_file():  # a directory, a FIFO, a device: reading one could block
        raise bodies.MissingPiece(pid, f": not in the journal, and {path} is not a file")
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise bodies.MissingPiece(pid, f": not in the journal, and {path}: {exc.strerror or exc}") from None
    digest = hashlib.sha256()
    with f:
        while True:
            try:
                block = f.read(1 << 20)
            except OSError as exc:
                raise bodies.MissingPiece(pid, f": {path}: {exc.strerror or exc}") from None
            if not block:
                break
            digest.update(block)
            yield block
    if digest.hexdigest()[:32] != pid:  # a piece's id is its SHA-256's first 128 bits (bodies.piece_id)
        raise bodies.MissingPiece(pid, f": {path} is damaged (its bytes are not the piece's)")


def _damaged_lines(warnings: list[RecordingWarning], journal: Path) -> list[int]:
    """The journal lines the warnings so far skipped, in order."""
    prefix = f"{journal}:"
    return [n for w in warnings if w.where.startswith(prefix) and _could_hold_a_piece(w.message)
            and (n := _line_of(w.where)) is not None]  # fmt: skip


def _could_hold_a_piece(message: str) -> bool:
    """A line too damaged to say what it was, or a damaged piece; not a record of another kind."""
    return not message.startswith("bad '") or message.startswith("bad 'blob'")


def _line_of(where: str) -> int | None:
    number = where.rsplit(":", 1)[-1]
    return int(number) if number.isdigit() else None


def _nearest_before(damaged: list[int], line: int | None, journal: Path) -> str | None:
    before = [n for n in damaged if line is None or n < line]
    return f"{journal}:{before[-1]}" if before else None


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
