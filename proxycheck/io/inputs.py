"""The inputs every command that sends traffic validates before the first byte: the chain file
(read and validated whole), the run directory `--out` names (`proxycheck.io.outputs` checks it can
be created), and the CA files of the routes. Each mistake is one BadInput naming the file (and
line), exit status 2, with nothing sent or written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from proxycheck.core.errors import BadInput
from proxycheck.core.replay.chain import Chain, Route, parse_chain
from proxycheck.io.outputs import check_outputs
from proxycheck.io.runstore import RUN_FILE


def load_chain(path: str) -> Chain:
    """The chain file at `path`, validated whole (`parse_chain`) before a command sends anything:
    a mistake in it is one BadInput naming the file and line (exit 2)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(path, f"cannot read the chain file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")  # the byte order mark some editors write is no mistake
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BadInput(f"{path}:{line}", "the chain file is not UTF-8 text") from None
    return parse_chain(text, os.environ, path)


def check_out(out: str | None) -> None:
    """`--out RUN`: given, and a directory that holds no run yet (a run is never appended to)."""
    if not out:
        raise BadInput("--out", "give the run directory to write (or --dry-run)")
    path = Path(out)
    if (path / RUN_FILE).exists():
        raise BadInput(out, "already holds a run; give another directory")
    if path.exists() and not path.is_dir():
        raise BadInput(out, "exists and is not a directory")
    check_outputs(directories={"--out": out})  # a directory that cannot be created, found now


def check_tls(routes: Iterable[Route]) -> None:
    """A CA file that cannot be loaded is bad input, found before any traffic."""
    # io.replayer loads httpx and aiohttp: imported here, off the start-up path of `merge` (check_out).
    from proxycheck.io.replayer import tls_context

    for route in routes:
        if isinstance(route.verify, str):
            tls_context(route.verify)
