"""What every command shares: how warnings are printed, argument types (argparse `type=`
functions: a bad value is one line and exit 2, never a traceback), loading a recording's
sessions, and stopping a command that runs until it is told to (`StopSignal`). Not a command. The exit statuses are `proxycheck.core.errors`'s."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

from proxycheck.core.errors import BadInput
from proxycheck.core.protocol.httpsyntax import HEADER_NAME
from proxycheck.core.replay.plan import PlannedSession
from proxycheck.io.recordings import open_recording

MAX_WARNINGS = 10


def print_warnings(warnings: Sequence[str]) -> None:
    """Warnings on stderr, one line each, the first few only."""
    for w in warnings[:MAX_WARNINGS]:
        print(f"proxycheck: warning: {w}", file=sys.stderr)
    if len(warnings) > MAX_WARNINGS:
        print(f"proxycheck: warning: ... and {len(warnings) - MAX_WARNINGS} more", file=sys.stderr)


# Argument types --------------------------------------------------------------------------------


def _bounded(kind: Callable[[str], float], what: str, ok: Callable[[float], bool]) -> Callable[[str], float]:
    """An argparse `type`: parses with `kind`, refuses NaN, infinities and values not `ok`."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (math.isfinite(value) and ok(value)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


positive_int = _bounded(int, "a positive integer", lambda v: v >= 1)
non_negative_int = _bounded(int, "a non-negative integer", lambda v: v >= 0)
positive_seconds = _bounded(float, "a positive number of seconds", lambda v: v > 0)
non_negative_seconds = _bounded(float, "a non-negative number of seconds", lambda v: v >= 0)
non_negative_number = _bounded(float, "a non-negative number", lambda v: v >= 0)
positive_number = _bounded(float, "a positive number", lambda v: v > 0)
probability = _bounded(float, "a probability between 0 and 1", lambda v: 0 <= v <= 1)


def http_url(text: str) -> str:
    """An http(s) URL with a host (and a valid port, if any)."""
    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or parts.port > 0  # .port raises ValueError when out of range
    except ValueError:
        port_ok = False
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL with a host")
    return text


def header_name(text: str) -> str:
    if not HEADER_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid header name")
    return text


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or `:PORT` (loopback); port 0 lets the system choose."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise BadInput(f"--listen {text}", "expected HOST:PORT, e.g. 127.0.0.1:30000")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def load_sessions(directory: str) -> list[PlannedSession]:
    """The recording's sessions as a replay sends them, its warnings shown (bad input: BadInput)."""
    loaded = open_recording(directory)
    print_warnings(loaded.warnings)
    return loaded.planned


class StopSignal:
    """SIGINT and SIGTERM set an event instead of raising, while a command follows something live (record, watch)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> "StopSignal":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._saved[sig] = signal.signal(sig, lambda *_: self.event.set())
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
