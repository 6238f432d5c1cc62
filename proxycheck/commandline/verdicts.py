"""What `check`, `diff` and `demo` share: handing a verdict to its readers, and reporting a check.
Not a command.

A verdict goes to the terminal (rich, on stdout), to `RUN/verdict.json` for a run `check` made
(the run keeps its own conclusion), and to `--json`, `--junit` and `--html` when asked. The exit status follows
the contract: 0 healthy (or not reproduced), 1 a fault was found, or the run is incomplete.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from rich.console import Console

from proxycheck.core.diagnose.verdict import Judged, Verdict
from proxycheck.core.errors import EXIT_FAULT, EXIT_OK, Interrupted
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.io.outputs import write_file
from proxycheck.report.html import html_report
from proxycheck.report.junit import junit_xml
from proxycheck.report.progress import ReplayProgress
from proxycheck.report.verdict_view import render_verdict

if TYPE_CHECKING:  # io.diagnosis loads httpx and aiohttp: a type here, imported where a check runs
    from proxycheck.io.diagnosis import CheckRun

VERDICT_FILE = "verdict.json"


@dataclass(frozen=True)
class Reports:
    """The files a verdict is written to besides the terminal (the flags of `add_report_flags`)."""

    fail_on: frozenset[Outcome] = frozenset()
    json: str | None = None
    junit: str | None = None
    html: str | None = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> "Reports":
        return cls(fail_on=args.fail_on, json=args.json, junit=args.junit, html=args.html)


def emit(verdict: Verdict, judged: Mapping[str, Sequence[Judged]], reports: Reports, keep_in: str | None = None) -> int:
    """Show the verdict, write its files (and `verdict.json` in the run `keep_in`); the exit status."""
    render_verdict(verdict, Console(file=sys.stdout, soft_wrap=False))
    doc = json.dumps(verdict.to_json(), indent=2) + "\n"
    if keep_in:
        _write(Path(keep_in) / VERDICT_FILE, doc)
    if reports.json:
        _write(Path(reports.json), doc)
    if reports.junit:
        _write(Path(reports.junit), junit_xml(verdict, judged, reports.fail_on))
    if reports.html:
        _write(Path(reports.html), html_report(verdict))
    return EXIT_FAULT if verdict.fails else EXIT_OK


def report_check(check: "CheckRun", reports: Reports) -> int:
    """Run `check` with its progress on stderr and report its verdict; the exit status. On Ctrl-C
    the `incomplete` verdict of what the run holds is reported as any verdict is, then the
    interrupt goes on to the CLI (the run stays loadable; EXIT_INTERRUPTED)."""
    try:
        with ReplayProgress(sys.stderr) as progress:
            checked = check.run(progress)
    except Interrupted:
        verdict, judged = check.interrupted_verdict()
        with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while reporting: stop there
            emit(verdict, judged, reports, keep_in=check.out)
        raise
    print(f"proxycheck: run {checked.run_id}: {checked.observations} observation(s) in {checked.out}", file=sys.stderr)
    return emit(checked.verdict, checked.judged, reports, keep_in=checked.out)


def _write(path: Path, text: str) -> None:
    write_file(path, text)  # 0600, atomically; the path was checked before any traffic
