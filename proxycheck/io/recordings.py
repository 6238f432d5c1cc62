"""A recording on its way to a verdict: loaded once, analysed once, asked by every command.

`open_recording(DIR)` loads the directory (`proxycheck.io.storage.load`) and keeps what the
commands derive from it: the sessions as a user reads them (`summaries`) and the sessions as a
replay sends them (`planned`). Both come from one analysis: each exchange's response is parsed
once, by the summary (`proxycheck.core.recording.summary`), and the plan takes the analysis from
it. A `LoadedRecording` can also be made from exchanges already in memory (`minimize` builds its
candidates that way, `proxycheck.io.subset.subset_recording`) and is asked the same questions.

A recording still being written is followed with `JournalTail` (counts read from what was
appended since the last look) and `LiveSessions` (its sessions, kept up to date by analysing only
the exchanges the new records changed): `proxycheck record`'s live view.

Nothing here prints; the warnings are handed back for the command to show.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from proxycheck.core.errors import BadInput, ProxycheckError
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.sessions import DEFAULT_SESSION_FIELDS, DEFAULT_SESSION_HEADERS
from proxycheck.core.recording.summary import SessionSummarizer, SessionSummary
from proxycheck.core.replay.plan import PlannedSession, plan_sessions
from proxycheck.io.jsonl import loads_strict, read_json_file
from proxycheck.io.storage import Recording, load


def recorded_session_headers(meta: dict[str, Any]) -> tuple[str, ...]:
    """Session headers the recorder was told about (`proxycheck_session_header`), if any."""
    source = meta.get("source")
    names = source.get("session_headers") if isinstance(source, dict) else None
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def session_headers_of(meta: dict[str, Any], given: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The headers that name a session: those given, else the recorded ones and the defaults."""
    return given or recorded_session_headers(meta) + DEFAULT_SESSION_HEADERS


@dataclass
class LoadedRecording:
    """One recording and its analysis, computed when first asked for and kept."""

    recording: Recording
    session_headers: tuple[str, ...] | None = None
    session_fields: tuple[str, ...] | None = None
    where: str = field(default="")

    @property
    def warnings(self) -> list[str]:
        return [str(w) for w in self.recording.warnings]

    @cached_property
    def summaries(self) -> list[SessionSummary]:
        """The sessions as `proxycheck sessions` shows them (each turn keeps its analysis)."""
        summarizer = SessionSummarizer(
            self.recording.piece,
            session_headers=session_headers_of(self.recording.meta, self.session_headers),
            session_fields=self.session_fields or DEFAULT_SESSION_FIELDS,
        )
        summarizer.add(self.recording.exchanges)
        return summarizer.summaries()

    @cached_property
    def planned(self) -> list[PlannedSession]:
        """The sessions as a replay sends them; a recording without one LLM request is bad input."""
        try:
            sessions = plan_sessions(self.recording.exchanges, self.recording.piece, self.summaries)
        except ValueError as exc:
            raise BadInput(self.where, str(exc)) from None
        if not sessions:
            raise BadInput(self.where, "holds no LLM requests to replay")
        return sessions


def open_recording(
    directory: str,
    *,
    session_headers: tuple[str, ...] | None = None,
    session_fields: tuple[str, ...] | None = None,
) -> LoadedRecording:
    """The recording in `directory`, loaded (bad input raises `BadInput` naming the file)."""
    return LoadedRecording(load(directory), session_headers, session_fields, where=directory)


# --------------------------------------------------------------------------------------------
# A recording being written


@dataclass
class JournalTail:
    """Counts from a journal, reading only what was appended since the last `poll()`, which
    returns the records it read (complete lines only) for others to follow the journal too."""

    path: Path
    exchanges: int = 0
    failed: int = 0
    response_bytes: int = 0
    inflight: set[int] = field(default_factory=set)
    offset: int = 0  # bytes of the journal read so far
    _partial: bytes = b""

    def poll(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []  # the recorder has not opened it yet
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for its end
        records = list(_records(lines))
        for rec in records:
            self._count(rec)
        return records

    def _count(self, rec: dict[str, Any]) -> None:
        kind, xid = rec.get("k"), rec.get("x")
        if kind == "req":
            self.exchanges += 1
            self.inflight.add(xid)  # type: ignore[arg-type]
        elif kind == "end":
            self.inflight.discard(xid)  # type: ignore[arg-type]
        elif kind == "error":
            self.inflight.discard(xid)  # type: ignore[arg-type]
            self.failed += 1
        elif kind == "data":
            self.response_bytes += sum(n for _, n in rec.get("c") or () if isinstance(n, int))
        elif kind == "close":
            self.inflight.clear()  # the recorder stopped: what was in flight is interrupted


def _records(lines: list[bytes]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = loads_strict(line.decode("utf-8"))
        except (ValueError, RecursionError):
            continue  # the loader reports damaged lines; a follower just counts
        if isinstance(rec, dict):
            yield rec


class LiveSessions:
    """The sessions of a recording being written, from the journal records handed to `add` (as
    `JournalTail.poll` returns them). Records are rebuilt into exchanges as `load` would; each
    `session_count()` analyses only the exchanges changed since the one before, so a refresh
    costs what is new, not the whole recording. Grouping the analysed exchanges into sessions is
    redone each time (it reads no response)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._builder = fmt.RecordingBuilder()
        self._waiting: list[dict[str, Any]] = []  # records read before the metadata could be
        self._upgrade: Callable[[Any], Any] | None = None
        self._summarizer: SessionSummarizer | None = None
        self._changed: dict[int, RecordedExchange] = {}  # exchanges changed and not yet analysed, by xid
        self._where = str(self.directory / fmt.JOURNAL_FILE)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        self._waiting.extend(records)
        if self._upgrade is None and not self._start():
            return
        assert self._upgrade is not None
        for rec in self._waiting:
            rec = self._upgrade(rec)
            if rec is not None:
                self._builder.add(rec, self._where)
        self._waiting.clear()

    def _start(self) -> bool:
        """Read the metadata (the recorder writes it before the journal); False until it can."""
        try:
            meta = read_json_file(self.directory / fmt.META_FILE)
            fmt.check_metadata(meta, str(self.directory / fmt.META_FILE))
            meta, self._upgrade = fmt.upgrade(meta)
        except (ProxycheckError, OSError):
            return False
        # Pieces as `load` finds them: from the journal, large ones from blobs/.
        pieces = Recording(self.directory, meta, [], self._builder.pieces)
        self._summarizer = SessionSummarizer(pieces.piece, session_headers=session_headers_of(meta))
        return True

    def session_count(self) -> int | None:
        """How many sessions the records so far make (None before the recording can be read)."""
        if self._summarizer is None:
            return None
        self._changed.update((x.xid, x) for x in self._builder.take_changed())
        # Kept until analysed: a piece that cannot be read yet fails this count, not the next.
        self._summarizer.add(self._changed.values())
        self._changed.clear()
        return self._summarizer.session_count()


SESSIONS_EVERY = 2.0  # at least this many seconds between session counts
COUNT_SHARE = 20  # the count may take at most 1/COUNT_SHARE of the time (5%)


@dataclass
class SessionCount:
    """The number of sessions of the recording in `directory`: `add` hands it the journal's new
    records, `maybe_update` recounts when the journal has grown, at most every SESSIONS_EVERY
    seconds (rarer when counting gets slow: at most 5% of the time)."""

    directory: Path
    sessions: int | None = None
    live: LiveSessions | None = field(default=None, repr=False)
    _next: float = 0.0
    _seen: int = -1

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = LiveSessions(self.directory)

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        assert self.live is not None
        self.live.add(records)

    def maybe_update(self, now: float, journal_size: int) -> None:
        assert self.live is not None
        if now < self._next or journal_size == self._seen:
            return
        started = time.monotonic()
        try:
            count = self.live.session_count()
            if count is not None:
                self.sessions, self._seen = count, journal_size
        except ProxycheckError:
            pass  # a half-written recording: try again later
        cost = time.monotonic() - started
        self._next = now + max(SESSIONS_EVERY, COUNT_SHARE * cost)
