"""Output directories a recording cannot be opened in, as users' disks hold them: each case makes one
under a base directory and says what the one line about it must name. The recorder addon (a warning,
traffic goes on), `proxycheck record` (exit 2 before mitmdump starts) and `check_appendable` itself
are tested on the same cases; `snapshot` tells whether anything there was touched."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

_META = {"format": 1, "kind": "proxycheck.recording", "started_at": 1_700_000_000.0,
         "created": "2023-11-14T22:13:20+00:00", "proxycheck": "0"}  # fmt: skip


@dataclass(frozen=True)
class BadOut:
    """`make(base)` builds the case and returns the output path to give; the one line must contain
    `names` (a path relative to that output path, "" for itself) and `problem`."""

    make: Callable[[Path], Path]
    names: str
    problem: str


def _recording(base: Path, meta: object = _META) -> Path:
    out = base / "rec"
    out.mkdir()
    (out / "recording.json").write_text(json.dumps(meta) if not isinstance(meta, str) else meta)
    return out


def _newer(base: Path) -> Path:
    return _recording(base, {**_META, "format": 99})


def _corrupt(base: Path) -> Path:
    return _recording(base, '{"format": 1, "kind": "proxycheck.rec')


def _deep(base: Path) -> Path:
    return _recording(base, "[" * 100_000 + "]" * 100_000)


def _other_kind(base: Path) -> Path:
    return _recording(base, {**_META, "kind": "something.else"})


def _journal_dir(base: Path) -> Path:
    out = _recording(base)
    (out / "journal.jsonl").mkdir()
    return out


def _blobs_file(base: Path) -> Path:
    out = _recording(base)
    (out / "journal.jsonl").write_text("")
    (out / "blobs").write_text("not a directory")
    return out


def _a_file(base: Path) -> Path:
    out = base / "rec"
    out.write_text("a file, not a directory")
    return out


def _foreign(base: Path) -> Path:
    out = base / "rec"
    out.mkdir()
    (out / "notes.txt").write_text("someone else's")
    return out


def _under_a_file(base: Path) -> Path:
    (base / "file").write_text("a file")
    return base / "file" / "rec"


def _journal_without_meta(base: Path) -> Path:
    out = base / "rec"
    out.mkdir()
    (out / "journal.jsonl").write_text('{"k":"req"}\n')
    return out


BAD_OUTS: dict[str, BadOut] = {
    "newer-format": BadOut(_newer, "recording.json", "recording format 99 is newer than this proxycheck reads"),
    "corrupt-metadata": BadOut(_corrupt, "recording.json", "invalid JSON"),
    "deeply-nested-metadata": BadOut(_deep, "recording.json", "nested too deeply"),
    "not-a-recording": BadOut(_other_kind, "recording.json", "not a proxycheck recording"),
    "journal-is-a-directory": BadOut(_journal_dir, "journal.jsonl", "is not a file"),
    "blobs-is-a-file": BadOut(_blobs_file, "blobs", "exists and is not a directory"),
    "out-is-a-file": BadOut(_a_file, "", "exists and is not a directory"),
    "someone-elses-files": BadOut(_foreign, "", "holds other files and no recording.json"),
    "under-a-file": BadOut(_under_a_file, "", "is not a directory"),
    "journal-without-metadata": BadOut(_journal_without_meta, "", "has a journal.jsonl but no recording.json"),
}


def named(out: Path, case: BadOut) -> str:
    """The path the one line must name."""
    return str(out / case.names) if case.names else str(out)


def snapshot(base: Path) -> dict[str, tuple[bool, bytes | None, int]]:
    """Everything under `base`: directory or not, contents, mode (what "untouched" compares)."""
    out: dict[str, tuple[bool, bytes | None, int]] = {}
    for path in sorted(base.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(base))] = (path.is_dir(), None if path.is_dir() else path.read_bytes(), st.st_mode)
    return out
