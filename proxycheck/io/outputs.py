"""The files and directories a command writes: checked before any traffic, written owner-only.

Every command that writes something (`--json`, `--junit`, `--html`, `--out`, `export --har`,
`verdict.json`, `minimized.json`, bench, compare and probe output) calls `check_outputs` from its
argument checking, before it loads, replays or probes anything: a path that cannot be written
(a directory that cannot be created, a path under a file, a file that exists and is a
directory) is one BadInput `PATH: PROBLEM` (exit 2), found before minutes of replaying rather
than after. What proxycheck writes holds prompts, answers and header names of private traffic:
every file is created 0600 and every directory proxycheck creates 0700 (`make_dirs`; a
directory that already exists keeps its mode). `write_file` replaces a file atomically, so a
reader sees the old file or the new one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from proxycheck.core.errors import BadInput, StorageError

FILE_MODE = 0o600
DIR_MODE = 0o700
STDOUT = "-"  # the outputs that take "-" write to standard output instead


def check_outputs(
    *, files: Mapping[str, str | None] | None = None, directories: Mapping[str, str | None] | None = None
) -> None:
    """BadInput for the first output that cannot be written. `files`: flag -> a file path (None:
    not asked; `-`: standard output); `directories`: flag -> a directory the command creates or
    fills. Nothing is created here: only what is already on disk is looked at."""
    for flag, path in (files or {}).items():
        if path is not None and path != STDOUT:
            _check_file(path, flag)
    for flag, path in (directories or {}).items():
        if path is not None:
            _check_directory(path, flag)


def _check_file(path: str, flag: str) -> None:
    if not path:
        raise BadInput(flag, "give a file name")
    target = Path(path)
    if _is_dir(target, path):
        raise BadInput(path, f"is a directory ({flag} takes a file)")
    _check_parent(target.parent, path)
    if _exists(target, path) and not os.access(target, os.W_OK):
        raise BadInput(path, "cannot be written: permission denied")


def _check_directory(path: str, flag: str) -> None:
    if not path:
        raise BadInput(flag, "give a directory name")
    target = Path(path)
    if _exists(target, path):
        if not _is_dir(target, path):
            raise BadInput(path, f"exists and is not a directory ({flag} takes a directory)")
        if not os.access(target, os.W_OK | os.X_OK):
            raise BadInput(path, "cannot be written: permission denied")
        return
    _check_parent(target.parent, path)


def _check_parent(parent: Path, path: str) -> None:
    """The nearest existing ancestor of `parent` is a directory new entries can be made in."""
    existing = parent
    while not _exists(existing, path) and existing != existing.parent:
        existing = existing.parent
    if not _is_dir(existing, path):
        raise BadInput(path, f"cannot be written: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(path, f"cannot be written: {existing} is not writable")


def _exists(path: Path, named: str) -> bool:
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise BadInput(named, f"cannot be written: {path}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the name
        raise BadInput(named, "is not a usable path") from None
    return True


def _is_dir(path: Path, named: str) -> bool:
    return _exists(path, named) and path.is_dir()


def make_dirs(directory: str | os.PathLike[str]) -> Path:
    """`directory` and its missing parents, each created 0700 (existing ones keep their mode)."""
    path = Path(directory)
    missing: list[Path] = []
    at = path
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for new in reversed(missing):
        try:
            new.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not new.is_dir():
                raise
        else:
            os.chmod(new, DIR_MODE)  # mkdir's mode is cut by the umask; 0700 is what is meant
    return path


def write_file(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace `path` with `data` (str: UTF-8), atomically, 0600, its missing directories 0700.
    StorageError naming the path when the disk refuses (the path was checked beforehand)."""
    target = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        make_dirs(target.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)  # an old temporary file keeps its mode through O_CREAT
            view = memoryview(raw)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise StorageError(f"{path}: cannot write: {exc.strerror or exc}") from None


def open_private(path: str | os.PathLike[str]) -> int:
    """A new (or truncated) file for writing, 0600: a descriptor for `os.fdopen`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd
