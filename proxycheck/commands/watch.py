"""`proxycheck watch REC_DIR... [--stall S] [--json-lines] [--for S]`: where a stream is held back, live.

This module owns the command's flags and its loop: the recordings being written at one or several
points are followed (`proxycheck.io.watching`: only the new bytes of each journal, each poll), a
snapshot of the points is made (`proxycheck.core.points.watching`: the exchanges matched across
the points, now on each point's clock), and its findings are said the moment they are raised or
recovered:

* a line that stays, on stderr, above a live view (rich, transient, about once a second; as
  `proxycheck record`'s) of the points and the exchanges in flight
  (`proxycheck.report.watch_view`);
* with `--json-lines`, one JSON object per finding on stdout, flushed, for alerting scripts.

`--for S` stops after S seconds; Ctrl-C (or SIGTERM) stops it with exit status 0: the findings
were the output, and the last line on stderr counts them. Bad input (a path that is not a
recording directory, a directory given twice, two recordings of one point) is one line, exit 2;
a directory that does not exist yet, or has no recording.json yet, is waited for (its recorder
has not started), and the view says so. Nothing is sent anywhere: it reads recordings only.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from proxycheck.commandline.common import StopSignal, positive_seconds, print_warnings
from proxycheck.core.errors import EXIT_OK

POLL = 0.25  # seconds between reads of the journals (the recorders flush at least once a second)
REFRESH = 1.0  # seconds between live-view updates
POLL_SHARE = 5  # reading and matching may take at most 1/POLL_SHARE of the time (20%)


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "watch",
        help="follow recordings while they are written and say at once where a stream is held back",
        description="Tail one or several recordings while their recorders write them (the same traffic seen at "
        "several points of a chain), show the exchanges in flight with the age of their last event at each point, "
        "and raise a finding the moment a stream has gone further at one point than at another for longer than "
        "--stall seconds (with one point: an exchange that made no progress for that long). Findings are lines "
        "on stderr that stay, and with --json-lines JSON objects on stdout. Ctrl-C stops it (exit 0).",
    )
    p.add_argument("directories", nargs="+", metavar="REC_DIR",
                   help="recordings being written (a directory that does not exist yet is waited for)")
    p.add_argument("--stall", type=positive_seconds, default=10.0, metavar="S",
                   help="seconds a point may lead another, or an exchange go without progress, before it is a "
                   "finding (default: 10)")
    p.add_argument("--json-lines", action="store_true",
                   help="write one JSON object per finding to stdout (raised and recovered), flushed at once")
    p.add_argument("--for", dest="duration", type=positive_seconds, metavar="S", help="stop after S seconds")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from proxycheck.io.watching import WatchedRecordings

    watched = WatchedRecordings(args.directories)  # bad input: one line, before anything is shown
    with StopSignal() as stop:
        raised, recovered, still = _watch(watched, args, stop.event)
    print_warnings(watched.warnings)
    waiting = [r.directory for r in watched.recordings if not r.following]
    note = f"; still waiting for {', '.join(waiting)}" if waiting else ""
    print(f"proxycheck watch: {raised} finding(s), {recovered} recovered, {len(still)} still open{note}",
          file=sys.stderr, flush=True)  # fmt: skip
    for line in still:
        print(f"  open: {line}", file=sys.stderr)
    return EXIT_OK


def _watch(watched: Any, args: argparse.Namespace, stop: threading.Event) -> tuple[int, int, list[str]]:
    """Follow, snapshot and say the findings until stopped; (raised, recovered, the lines still open)."""
    # Imported here, as rich is: they load only once a watch runs, not with every command.
    from rich.console import Console
    from rich.live import Live

    from proxycheck.core.points.watching import Findings, raised_line, snapshot
    from proxycheck.report.watch_view import finding_text, watch_view

    findings = Findings()
    console = Console(stderr=True, highlight=False)
    started = time.monotonic()
    deadline = started + args.duration if args.duration else None
    next_view = 0.0
    snap = None
    # Transient: once stopped, the summary replaces the view; stdout stays the JSON lines' alone.
    with Live(console=console, auto_refresh=False, transient=True, redirect_stdout=False, redirect_stderr=False) as live:
        while not stop.is_set():
            begun = time.monotonic()
            if deadline is not None and begun >= deadline:
                break
            watched.poll()
            points, local = watched.points()
            wall = time.time()
            snap = snapshot(points, wall, args.stall, local, snap)
            for f in findings.update(snap, wall):
                live.console.print(finding_text(f), soft_wrap=True)  # a log line: never wrapped
                if args.json_lines:
                    sys.stdout.write(json.dumps(f.to_json()) + "\n")
                    sys.stdout.flush()
            now = time.monotonic()
            if now >= next_view:
                live.update(watch_view(snap, watched.recordings, findings.active, findings.raised, findings.recovered,
                                       now - started, args.stall), refresh=True)  # fmt: skip
                next_view = now + REFRESH
            cost = time.monotonic() - begun
            wait = max(POLL, POLL_SHARE * cost) - cost
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if wait > 0:
                stop.wait(wait)
    still = [raised_line(lag, args.stall) for lag in findings.active]
    return findings.raised, findings.recovered, still
