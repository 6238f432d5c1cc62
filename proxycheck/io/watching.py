"""Recordings being written, followed as points: `proxycheck watch`'s reading side.

Each REC_DIR is a `FollowedRecording`: its journal is read incrementally
(`proxycheck.io.recordings.JournalTail`: only the bytes appended since the last poll, complete
lines only), its records rebuilt into exchanges as the loader rebuilds them
(`proxycheck.core.recording.journal.RecordingBuilder`, asked for the exchanges the new records
changed), those exchanges analysed and grouped into sessions (`SessionSummarizer`, as
`proxycheck.io.recordings.LiveSessions` does: only what changed is analysed) and turned into
`Seen` values (`proxycheck.core.points.recorded`, as `proxycheck.io.points.point_of_recording`
does for a whole recording; each request body is joined and keyed once; a WebSocket session is
one per turn, a turn in flight as its messages pass), and the point as it stands now is a
`PointLog` whose last stretch is open while the recorder records.

A directory that does not exist yet, or has no recording.json yet, is waited for (its recorder
has not started); what can never become a recording is refused by `check_watchable` before the
watch starts: a path that is not a directory, a directory of other files, a recording.json that is
not a recording's. recording.json is read again whenever it changes: the recorder names its point
at its first request when it derives the name from its listen address, and notes there what it
could no longer write (those exchanges are not recorded to the end, not stuck).

`WatchedRecordings` holds them all and refuses (one line, `BadInput`) a directory given twice and
two recordings of one point, also when the second names its point only later.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from proxycheck.core.errors import BadInput, ProxycheckError
from proxycheck.core.points.matching import PointLog
from proxycheck.core.points.recorded import is_socket, renamed, seen_of_recorded
from proxycheck.core.points.seen import RequestKey, Seen, request_key
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.summary import SessionSummarizer, analyze
from proxycheck.io.jsonl import read_json_file
from proxycheck.io.points import covered_stretches, point_name
from proxycheck.io.recordings import JournalTail, session_headers_of
from proxycheck.io.storage import Recording

NO_DIRECTORY = "no directory yet"
NO_METADATA = f"no {fmt.META_FILE} yet"
FOLLOWING = "following"
_TEMPORARY = f".{fmt.META_FILE}."  # atomic_write's temporary file, there for a moment
GROUP_EVERY = 1.0  # at least this many seconds between groupings into sessions
GROUP_SHARE = 10  # grouping may take at most 1/GROUP_SHARE of the time
BULK = 64  # this many changed exchanges at once are grouped at once (their analysis comes with it)


def _metadata(path: Path) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """A recording's metadata, upgraded, and its records' upgrade; BadInput naming the file."""
    meta = read_json_file(path)
    fmt.check_metadata(meta, str(path))
    fmt.point_of(meta, str(path))
    try:
        return fmt.upgrade(meta)
    except BadInput as exc:
        raise BadInput(str(path), exc.message) from None


def check_watchable(directory: str) -> None:
    """BadInput when `directory` is not, and will not become, a recording (see the module docstring)."""
    root = Path(directory)
    if not root.exists() and not root.is_symlink():
        ancestor = root.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise BadInput(directory, f"cannot become a recording: {ancestor} is not a directory")
        return  # waited for: its recorder has not started
    if not root.is_dir():
        raise BadInput(directory, "exists and is not a directory (a recording is a directory)")
    meta, journal, blobs = root / fmt.META_FILE, root / fmt.JOURNAL_FILE, root / fmt.BLOB_DIR
    if meta.exists():
        _metadata(meta)
    elif journal.exists():
        raise BadInput(directory, f"has a {fmt.JOURNAL_FILE} but no {fmt.META_FILE}: not a recording")
    else:
        try:
            others = [p.name for p in root.iterdir() if not p.name.startswith(_TEMPORARY)]
        except OSError as exc:
            raise BadInput(directory, f"cannot be read: {exc.strerror or exc}") from None
        if others:
            raise BadInput(directory, f"holds other files and no {fmt.META_FILE}: not a recording (a recorder "
                                      "would not write there)")  # fmt: skip
    if journal.exists() and not journal.is_file():
        raise BadInput(str(journal), "is not a file")
    if blobs.exists() and not blobs.is_dir():
        raise BadInput(str(blobs), "exists and is not a directory")


class FollowedRecording:
    """One REC_DIR as it is written (see the module docstring). `poll()` reads what is new;
    `point()` is the point as it stands (None until recording.json can be read)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.root = Path(directory)
        self.state = NO_DIRECTORY
        self.name = point_name({}, directory)
        self.named = False  # recording.json names the point (else it is named after the directory)
        self.host: str | None = None
        self.started_at: float | None = None
        self.warnings: list[str] = []
        self._tail = JournalTail(self.root / fmt.JOURNAL_FILE)
        self._builder = fmt.RecordingBuilder()
        self._where = str(self.root / fmt.JOURNAL_FILE)
        self._upgrade: Callable[[Any], Any] | None = None
        self._summarizer: SessionSummarizer | None = None
        self._pieces: Recording | None = None
        self._meta: dict[str, Any] = {}
        self._meta_stamp: tuple[int, int] | None = None
        self._failures_read = 0
        self._pending: dict[int, RecordedExchange] = {}  # changed, not yet a Seen (a piece not readable yet)
        self._seen: dict[int, tuple[Seen, ...]] = {}  # an exchange's parts (a socket's turns: one each)
        self._ended: set[int] = set()  # exchanges whose end was read
        self._keys: dict[int, RequestKey] = {}
        self._light: dict[int, RecordedExchange] = {}  # what the covered stretches need of each exchange
        self._point: PointLog | None = None
        self._warned = 0
        self._names: dict[int, tuple[str, int]] = {}  # session label and turn, by the last grouping
        self._grouped: dict[int, RecordedExchange] = {}  # changed since the last grouping
        self._regroup: set[int] = set()  # new or ended since the last grouping
        self._next_group = 0.0

    # Reading ------------------------------------------------------------------------------

    def poll(self) -> bool:
        """Read what was appended since the last poll; True when the point changed."""
        if self._upgrade is None and not self._start():
            return False
        changed = self._reread_metadata()
        assert self._upgrade is not None
        try:
            records = self._tail.poll()
        except OSError as exc:
            raise BadInput(self._where, f"cannot be read: {exc.strerror or exc}") from None
        for rec in records:
            rec = self._upgrade(rec)
            if rec is not None:
                self._builder.add(rec, self._where)
        self._apply_write_failures()
        for x in self._builder.take_changed():
            self._pending[x.xid] = x
            self._light[x.xid] = replace(x, response_body=b"", chunks=x.chunks[-1:], ws=x.ws[-1:])
        if self._pending:
            changed |= self._turn_into_seen()
        changed |= self._group() is not None
        if len(self._builder.warnings) > self._warned:
            self.warnings += [str(w) for w in self._builder.warnings[self._warned:]]
            self._warned = len(self._builder.warnings)
        if changed or self._point is None:
            self._point = self._make_point()
        return changed

    def _start(self) -> bool:
        """Read the metadata (the recorder writes it before the journal); False until it can."""
        if not self.root.is_dir():
            if self.root.exists():
                raise BadInput(self.directory, "exists and is not a directory (a recording is a directory)")
            self.state = NO_DIRECTORY
            return False
        path = self.root / fmt.META_FILE
        if not path.exists():
            self.state = NO_METADATA
            return False
        meta, self._upgrade = _metadata(path)
        self._meta_stamp = _stamp(path)
        self._take_metadata(meta)
        self.started_at = float(meta["started_at"])
        # Pieces as `load` finds them: from the journal, large ones from blobs/.
        self._pieces = Recording(self.root, meta, [], self._builder.pieces)
        self._summarizer = SessionSummarizer(self._pieces.piece, session_headers=session_headers_of(meta))
        self.state = FOLLOWING
        return True

    def _take_metadata(self, meta: dict[str, Any]) -> None:
        self._meta = meta
        point = fmt.point_of(meta, str(self.root / fmt.META_FILE))
        self.named = point is not None
        self.name = point_name(meta, self.directory)
        self.host = point["host"] if point is not None else None

    def _reread_metadata(self) -> bool:
        """recording.json again when it changed (a point named at the first request, write failures)."""
        path = self.root / fmt.META_FILE
        stamp = _stamp(path)
        if stamp is None or stamp == self._meta_stamp:
            return False
        self._meta_stamp = stamp
        try:
            meta, _ = _metadata(path)
        except ProxycheckError:
            return False  # the recorder replaces it whole; what it was stays what is known
        before = (self.name, self.host)
        self._take_metadata(meta)
        return before != (self.name, self.host)

    def _apply_write_failures(self) -> None:
        entries = self._meta.get(fmt.WRITE_FAILURES)
        if isinstance(entries, list) and len(entries) > self._failures_read:
            self._builder.add_write_failures({fmt.WRITE_FAILURES: entries[self._failures_read:]}, str(self.root / fmt.META_FILE))
            self._failures_read = len(entries)

    def _turn_into_seen(self) -> bool:
        """The changed exchanges analysed now (their progress is what the watch compares); their
        names (session, turn) from the last grouping, redone when new exchanges or ends came, at
        most every GROUP_EVERY seconds (rarer when grouping gets slow: it reads every exchange).
        Many at once (a recording that was there before the watch) are grouped at once, and their
        analysis taken from the grouping: each response is parsed once."""
        assert self._pieces is not None
        analyses = (self._group(force=True, also=self._pending) if len(self._pending) >= BULK else None) or {}
        done = []
        for xid, x in self._pending.items():
            key = self._keys.get(xid)
            if key is None and not is_socket(x):  # a socket's turns are keyed by their messages
                try:
                    key = request_key(self._pieces.request_body(x))
                except BadInput:
                    continue  # a piece not on disk yet: keyed at a later poll
                self._keys[xid] = key
            analysis = analyses.get(xid) or analyze(x)
            ended = x.finished
            if xid not in analyses:
                if xid not in self._seen or (xid in self._ended) != ended:
                    self._regroup.add(xid)  # a new exchange, or an end: either may change the grouping
                self._grouped[xid] = x
            if ended:
                self._ended.add(xid)
            label, turn = self._names.get(xid, ("?", 0))
            self._seen[xid] = seen_of_recorded(x, label, turn, analysis, key=key)
            done.append(xid)
        for xid in done:
            del self._pending[xid]
        return bool(done)

    def _group(self, force: bool = False, also: dict[int, RecordedExchange] | None = None) -> dict[int, Any] | None:
        """Group into sessions again when due (`force`: now, with the exchanges `also` too); the
        analyses of `also` it made, None when it did not group."""
        now = time.monotonic()
        if not force and (not self._regroup or now < self._next_group):
            return None
        assert self._summarizer is not None
        started = time.monotonic()
        try:
            self._summarizer.add([*self._grouped.values(), *(also or {}).values()])
        except ProxycheckError:
            return None  # a piece not on disk yet: grouped at a later poll
        self._grouped.clear()
        self._regroup.clear()
        analyses = {}
        for session in self._summarizer.summaries():
            for turn in session.turns:
                self._names[turn.xid] = (session.label or session.id, turn.turn)
                if also is not None and turn.xid in also:
                    analyses[turn.xid] = turn.analysis
        # Grouping may rename an exchange a later one joined (a retry makes it an attempt).
        for xid, parts in self._seen.items():
            if xid in self._names:
                self._seen[xid] = tuple(renamed(s, *self._names[xid]) for s in parts)
        self._next_group = now + max(GROUP_EVERY, GROUP_SHARE * (time.monotonic() - started))
        return analyses

    def _make_point(self) -> PointLog | None:
        if self.started_at is None:
            return None
        seen = tuple(sorted((s for parts in self._seen.values() for s in parts), key=lambda s: (s.t_request, s.ident)))
        covered = covered_stretches(list(self._light.values()), self._builder.closed, live=True)
        return PointLog(name=self.name, started_at=self.started_at, seen=seen, covered=covered, directory=self.directory,
                        host=self.host)  # fmt: skip

    # Asking -------------------------------------------------------------------------------

    def point(self) -> PointLog | None:
        return self._point

    @property
    def following(self) -> bool:
        return self.state == FOLLOWING

    @property
    def exchanges(self) -> int:
        return len(self._seen)

    @property
    def in_flight(self) -> int:
        return len(self._tail.inflight)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class WatchedRecordings:
    """Every REC_DIR of a watch (see the module docstring)."""

    def __init__(self, directories: Sequence[str]) -> None:
        if not directories:
            raise BadInput("watch", "needs at least one recording (REC_DIR ...)")
        given: dict[str, str] = {}
        for d in directories:
            real = os.path.realpath(d)
            if real in given:
                raise BadInput(d, f"given twice (as {given[real]} too): give each recording once")
            given[real] = d
            check_watchable(d)
        self.recordings = [FollowedRecording(d) for d in directories]
        self.hostname = socket.gethostname()

    def poll(self) -> bool:
        changed = False
        for r in self.recordings:
            changed |= r.poll()
        self._check_points()
        return changed

    def _check_points(self) -> None:
        named: dict[str, str] = {}
        for r in self.recordings:
            if r.following and r.named:
                if r.name in named:
                    raise BadInput(r.directory, f"is point {r.name!r} too, as {named[r.name]} is: give one recording per point")
                named[r.name] = r.directory

    def points(self) -> tuple[list[PointLog], list[bool]]:
        """The points that can be read so far (a directory named like another point is named by its
        path), and whether each was recorded on this machine (its clock is the watcher's)."""
        points: list[PointLog] = []
        local: list[bool] = []
        taken = {r.name for r in self.recordings if r.following and r.named}
        for r in self.recordings:
            p = r.point()
            if p is None:
                continue
            if not r.named and (r.name in taken or sum(1 for o in self.recordings if o.name == r.name) > 1):
                p = replace(p, name=r.directory)
            taken.add(p.name)
            points.append(p)
            local.append(r.host is None or r.host == self.hostname)
        return points, local

    @property
    def warnings(self) -> list[str]:
        return [f"{r.directory}: {w}" if not w.startswith(r.directory) else w for r in self.recordings for w in r.warnings]
