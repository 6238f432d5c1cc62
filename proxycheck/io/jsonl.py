"""JSON Lines files that survive crashes: whole-line appends, atomic replacement, tolerant reading.

Recordings (`proxycheck.io.storage`) and runs (`proxycheck.io.runstore`) are both an append-only
`*.jsonl` next to a small JSON file that is replaced atomically. This module owns the file-level
rules they share: a record is one line written with one `write` on an `O_APPEND` descriptor (so a
crash leaves at most one damaged line, at the end), metadata is replaced through a temporary file
and `rename`, and a reader steps over any line it cannot read (cut by a crash, overwritten by a
full disk, not UTF-8, not JSON, absurdly long, nested too deeply to parse) with a warning that
names `file:line`, instead of giving up on everything that was recorded before it. Reading is
strict JSON: `NaN`, `Infinity` and numbers too large for a float (`1e309`) are not JSON values a
proxycheck writer produces, so a line holding one is damaged, and nothing read can carry them on
into a document proxycheck writes.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from proxycheck.core.errors import BadInput
from proxycheck.core.recording.journal import MAX_LINE, RecordingWarning

FILE_MODE = 0o600


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is too large")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_STRICT = json.JSONDecoder(parse_float=_finite_float, parse_constant=_no_constant)


def loads_strict(text: str) -> Any:
    """One JSON value, strictly: ValueError for NaN, Infinity, a float that overflows, or bad
    JSON; RecursionError for nesting deeper than the parser goes."""
    return _STRICT.decode(text)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def atomic_write(path: Path, data: bytes, mode: int = FILE_MODE) -> None:
    """Replace `path` with `data`: readers see the old file or the new one, never a mix. A write
    that fails leaves no temporary file behind (on a full disk it would only fill it further);
    the temporary name is the process's and the thread's, so concurrent writers never share one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            os.fchmod(fd, mode)  # a temporary file left by a crash keeps its mode through O_CREAT
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise


def open_append(path: Path, mode: int = FILE_MODE) -> int:
    """A descriptor that appends to `path` (created with `mode`): each write lands at the end."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)


def read_records(
    path: Path,
    warnings: list[RecordingWarning],
    max_line: int = MAX_LINE,
    on_damaged: Callable[[str, bytes], None] | None = None,
) -> Iterator[tuple[str, Any]]:
    """(where, record) for each readable line of `path`, `where` being `file:line`.

    A missing file has no records. A file that exists but cannot be opened is BadInput. Damaged
    lines are skipped and described in `warnings`, and handed to `on_damaged` (where, the line's
    first bytes) for a reader that must know what a lost line may have held; blank lines are
    skipped silently."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadInput(str(path), f"cannot read: {exc.strerror}") from exc
    with f:
        lineno = 0
        while True:
            # Bounded: one huge line (a damaged file) must not be read into memory whole.
            line = f.readline(max_line + 1)
            if not line:
                return
            lineno += 1
            where = f"{path}:{lineno}"
            if len(line) > max_line and not line.endswith(b"\n"):
                _skip_rest_of_line(f)
                warnings.append(RecordingWarning(where, f"line longer than {max_line >> 20} MiB; skipped"))
                if on_damaged is not None:
                    on_damaged(where, line[:DAMAGED_HEAD])
                continue
            if not line.strip():
                continue
            rec = _parse_line(line, where, warnings)
            if rec is not _DAMAGED:
                yield where, rec
            elif on_damaged is not None:
                on_damaged(where, line[:DAMAGED_HEAD])


_DAMAGED = object()
DAMAGED_HEAD = 4096  # bytes of a damaged line handed on: enough for the fields a record begins with


def _parse_line(line: bytes, where: str, warnings: list[RecordingWarning]) -> Any:
    try:
        # Decode first: json.loads(bytes) would guess UTF-16/32 for some garbage.
        return loads_strict(line.decode("utf-8"))
    except UnicodeDecodeError:
        warnings.append(RecordingWarning(where, "line is not UTF-8; skipped"))
    except RecursionError:
        warnings.append(RecordingWarning(where, "JSON nested too deeply; skipped"))
    except ValueError as exc:
        if not line.endswith(b"\n"):
            warnings.append(RecordingWarning(where, "last line is incomplete (the writer stopped mid-line); skipped"))
        else:
            warnings.append(RecordingWarning(where, f"invalid JSON{_constant_detail(exc)}; skipped"))
    return _DAMAGED


def _constant_detail(exc: ValueError) -> str:
    """What was wrong, when it was a value JSON does not have (NaN, Infinity, a huge number)."""
    if isinstance(exc, json.JSONDecodeError):
        return ""
    return f" ({exc})"


def _skip_rest_of_line(f: BinaryIO) -> None:
    while True:
        block = f.readline(1 << 20)
        if not block or block.endswith(b"\n"):
            return


def ensure_line_end(path: Path) -> None:
    """Terminate a last line that a crash left unfinished, so the next append starts a new line
    instead of being glued to the damaged one (and lost with it)."""
    if not path.exists() or not path.stat().st_size:
        return
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
    with open(path, "ab") as g:
        g.write(b"\n")


def read_json_file(path: Path) -> Any:
    """A whole JSON document (metadata files); BadInput naming the file when it cannot be read."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(str(path), f"cannot read: {exc.strerror}") from exc
    try:
        return loads_strict(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(str(path), "not UTF-8 text") from None
    except RecursionError:
        raise BadInput(str(path), "invalid JSON (nested too deeply)") from None
    except ValueError as exc:
        raise BadInput(str(path), f"invalid JSON ({exc})") from None
