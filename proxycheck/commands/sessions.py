"""`proxycheck sessions DIR`: the sessions of a recording, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from proxycheck.commandline.common import print_warnings
from proxycheck.core.errors import EXIT_OK
from proxycheck.core.recording.sessions import DEFAULT_SESSION_FIELDS, DEFAULT_SESSION_HEADERS
from proxycheck.core.recording.summary import to_json
from proxycheck.io.recordings import open_recording
from proxycheck.report.sessions_view import sessions_view


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "sessions",
        help="list the sessions of a recording",
        description="List the sessions of a recording: turns, request sizes, think times and "
        "the outcome of each recorded turn.",
    )
    p.add_argument("directory", metavar="DIR", help="a recording directory")
    p.add_argument("--json", action="store_true", help="print JSON (schema proxycheck.sessions/1)")
    p.add_argument("--turns", action="store_true", help="also show every turn of every session")
    p.add_argument(
        "--session-header",
        action="append",
        metavar="NAME",
        help=f"a request header that names the session (default: {', '.join(DEFAULT_SESSION_HEADERS)})",
    )
    p.add_argument(
        "--session-field",
        action="append",
        metavar="PATH",
        help=f"a body field that names the session (default: {', '.join(DEFAULT_SESSION_FIELDS)})",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    loaded = open_recording(
        args.directory,
        session_headers=tuple(args.session_header or ()) or None,
        session_fields=tuple(args.session_field or ()) or None,
    )
    sessions = loaded.summaries
    warnings = loaded.warnings
    print_warnings(warnings)
    if args.json:
        # allow_nan=False: what is printed is JSON, which has no NaN or Infinity.
        json.dump(to_json(args.directory, sessions, warnings), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return EXIT_OK
    Console(highlight=False).print(sessions_view(args.directory, sessions, turns=args.turns))
    return EXIT_OK
