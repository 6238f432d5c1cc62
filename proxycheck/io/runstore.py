"""Runs on disk: a directory with `run.json` and an append-only `observations.jsonl`.

A run (docs/design.md) is what replaying a recording produced: one observation per exchange per route
per repetition. `RunWriter` creates the directory (0700; files 0600, as observations carry
digests and headers of private traffic), writes `run.json` atomically (run id, wall-clock start,
chain, routes, options, the versions of proxycheck, Python, httpx and aiohttp) and appends one
`{"k": "obs", ...}` line per observation with a single write, so a run killed mid-replay keeps
everything observed before the kill; `close()` rewrites `run.json` with the end time and status.
`load_run` reads a run back: a line a crash cut or a disk damaged is skipped with a warning that
names `file:line` (the shared rules of `proxycheck.io.jsonl`); what is not a run at all, or a run
written by a newer proxycheck, is BadInput.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import json
import os
import platform
import secrets
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from proxycheck import __version__
from proxycheck.core.errors import BadInput, Interrupted, StorageError
from proxycheck.core.exchange.observation import Observation, decode, encode
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.recording.journal import MAX_WALL, RecordingWarning
from proxycheck.core.recording.sessions import SessionName
from proxycheck.io.jsonl import atomic_write, open_append, read_json_file, read_records, write_all
from proxycheck.io.outputs import make_dirs

RUN_FILE = "run.json"
OBSERVATIONS_FILE = "observations.jsonl"
FORMAT = "proxycheck.run"
VERSION = 1
DIR_MODE = 0o700
FILE_MODE = 0o600


def new_run_id(wall: float) -> str:
    """`20260509T073525Z-1a2b3c4d`: sortable by start, unique enough to tell replays apart."""
    stamp = _dt.datetime.fromtimestamp(wall, _dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(4)}"


def versions() -> dict[str, str | None]:
    """The versions that can change what a run observes (client stacks included)."""
    found: dict[str, str | None] = {"proxycheck": __version__, "python": platform.python_version()}
    for package in ("httpx", "aiohttp"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _dumps(doc: Mapping[str, Any]) -> bytes:
    # ASCII with escapes: a lone surrogate (JSON allows one in a recorded session id) cannot be
    # written as UTF-8, and an escape reads back exactly. allow_nan=False: NaN is not JSON.
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("ascii") + b"\n"


class RunWriter:
    """Writes one run. Thread-safe: observers on several threads may `add` at once.

    Refuses a directory that already holds a run (a run is never appended to by a second
    replay: its observations would share one start time and one id)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        chain: Mapping[str, Any] | None = None,
        routes: list[str] | tuple[str, ...] = (),
        options: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        wall: Callable[[], float] = time.time,
        started_at: float | None = None,
        sessions: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """`started_at`: the wall-clock start the observations' times count from, when it is not
        now (a run merged from others keeps the earliest of theirs). `sessions`: the names of the
        replayed sessions (`SessionName.to_json`), so `diff RUN` labels them as the recording's
        listing does."""
        self.directory = Path(directory)
        self.named = str(directory)  # as the user gave it, for messages
        self._wall = wall
        self._lock = threading.Lock()
        self._closed = False
        self.count = 0
        started = wall() if started_at is None else started_at
        self.meta: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "run_id": run_id or new_run_id(started),
            "started_at": started,
            "created": _dt.datetime.fromtimestamp(started, _dt.timezone.utc).isoformat(),
            "chain": dict(chain or {}),
            "routes": list(routes),
            "options": dict(options or {}),
            "sessions": [dict(n) for n in sessions],
            "versions": versions(),
            "ended_at": None,
            "status": "running",
        }
        try:
            make_dirs(self.directory)  # 0700, and so is each parent it creates
            if (self.directory / RUN_FILE).exists():
                raise StorageError(f"{self.directory}: already holds a run; give another directory")
            self._write_meta()
            self._fd = open_append(self.directory / OBSERVATIONS_FILE, FILE_MODE)
        except OSError as exc:
            raise StorageError(f"{self.directory}: cannot write a run here: {exc.strerror or exc}") from exc

    @property
    def run_id(self) -> str:
        return str(self.meta["run_id"])

    @property
    def started_at(self) -> float:
        return float(self.meta["started_at"])

    def add(self, obs: Observation) -> None:
        """Append one observation as one line, in one write."""
        line = _dumps({"k": "obs", **encode(obs)})
        with self._lock:
            if self._closed:
                raise StorageError(f"{self.directory}: the run is closed")
            try:
                write_all(self._fd, line)
            except OSError as exc:
                raise StorageError(f"{self.directory / OBSERVATIONS_FILE}: write failed: {exc.strerror or exc}") from exc
            self.count += 1

    def close(self, status: str = "completed") -> None:
        """Record the end time and status in run.json and close the observations file."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self.meta.update(ended_at=self._wall(), status=status, observations=self.count)
                self._write_meta()
            except OSError as exc:
                raise StorageError(f"{self.directory / RUN_FILE}: write failed: {exc.strerror or exc}") from exc
            finally:
                os.close(self._fd)

    def _write_meta(self) -> None:
        atomic_write(self.directory / RUN_FILE, json.dumps(self.meta, indent=2).encode("utf-8") + b"\n", FILE_MODE)

    def __enter__(self) -> "RunWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        """Closes the run as completed (unless closed already, with its own status), failed, or
        interrupted: Ctrl-C becomes `Interrupted`, saying what the run kept (it stays loadable)."""
        if exc_type is None:
            self.close("completed")
        elif issubclass(exc_type, (KeyboardInterrupt, SystemExit, asyncio.CancelledError, Interrupted)):
            self.close("interrupted")
            if not issubclass(exc_type, SystemExit):
                raise Interrupted(f"interrupted; {self.count} observation(s) kept in {self.named}") from None
        else:
            self.close("failed")


def options_doc(recording: str, settings: Mapping[str, Any], watchdogs: Watchdogs, **after: Any) -> dict[str, Any]:
    """run.json's "options": the recording, the command's settings, the watchdogs, then `after`."""
    return {
        "recording": recording,
        **settings,
        "watchdogs": watchdogs.to_json(),
        **after,
    }


# ------------------------------------------------------------------------------------------------
# Loading


@dataclass
class Run:
    """A loaded run: run.json, the observations in the order they were written, what was skipped."""

    directory: Path
    meta: dict[str, Any]
    observations: list[Observation]
    warnings: list[RecordingWarning] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id", ""))

    @property
    def started_at(self) -> float:
        return float(self.meta["started_at"])

    @property
    def routes(self) -> list[str]:
        return list(self.meta.get("routes", []))

    @property
    def status(self) -> str:
        return str(self.meta.get("status", ""))

    @property
    def session_names(self) -> tuple[SessionName, ...]:
        """The names run.json keeps of the replayed sessions (none in runs written before it kept
        them); BadInput for a list that is not made of names."""
        docs = self.meta.get("sessions") or []
        try:
            if not isinstance(docs, list):
                raise ValueError("sessions is not a list")
            return tuple(SessionName.from_json(doc) for doc in docs)
        except ValueError as exc:
            raise BadInput(str(self.directory / RUN_FILE), str(exc)) from None


def load_run(directory: str | os.PathLike[str]) -> Run:
    """Load a run directory. BadInput for what is not a readable run; damaged lines are skipped
    and reported in `warnings`."""
    root = Path(directory)
    if not root.exists():
        raise BadInput(str(root), "no such directory")
    if not root.is_dir():
        raise BadInput(str(root), "not a directory (a run is a directory)")
    meta_path = root / RUN_FILE
    if not meta_path.exists():
        raise BadInput(str(root), f"not a proxycheck run (no {RUN_FILE})")
    meta = _read_meta(meta_path)
    warnings: list[RecordingWarning] = []
    observations = list(_observations(root / OBSERVATIONS_FILE, warnings))
    return Run(root, meta, observations, warnings)


def _read_meta(path: Path) -> dict[str, Any]:
    meta = read_json_file(path)
    _check_meta(meta, str(path))
    return meta


def _check_meta(meta: Any, where: str) -> None:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BadInput(where, f"not a proxycheck run file (no \"format\": \"{FORMAT}\")")
    version = meta.get("version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BadInput(where, f"bad run format version {version!r}")
    if version > VERSION:
        raise BadInput(
            where, f"run format version {version} is newer than this proxycheck reads ({VERSION}); upgrade proxycheck"
        )
    started = meta.get("started_at")
    if isinstance(started, bool) or not isinstance(started, (int, float)) or not 0 <= started <= MAX_WALL:
        raise BadInput(where, "started_at is missing or not a wall-clock time (epoch seconds)")


def _observations(path: Path, warnings: list[RecordingWarning]) -> Iterator[Observation]:
    """Decoded observations; unreadable records become warnings (an unknown kind once per kind:
    a newer writer's extra records are not worth one warning each)."""
    unknown: set[str] = set()
    for where, rec in read_records(path, warnings):
        if not isinstance(rec, dict):
            warnings.append(RecordingWarning(where, "record is not a JSON object; skipped"))
            continue
        kind = rec.get("k")
        if kind != "obs":
            # A kind that is not text is named by its type (a damaged value may be too deep to print).
            kind = kind if isinstance(kind, str) else f"<{type(kind).__name__}>"
            if kind not in unknown:
                unknown.add(kind)
                warnings.append(RecordingWarning(where, f"unknown record kind {kind!r}; skipped"))
            continue
        try:
            yield decode(rec)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
            # A line that parses as JSON yet holds the wrong types is as damaged as one that does not.
            detail = exc.args[0] if exc.args else type(exc).__name__
            warnings.append(RecordingWarning(where, f"bad observation ({detail}); skipped"))
