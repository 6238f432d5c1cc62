"""`proxycheck sessions DIR`: the sessions of a recording, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from proxycheck.commands.common import EXIT_OK, print_warnings
from proxycheck.core.recording.sessions import DEFAULT_SESSION_FIELDS, DEFAULT_SESSION_HEADERS


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


def recorded_session_headers(meta: dict) -> tuple[str, ...]:
    """Session headers the recorder was told about (`proxycheck_session_header`), if any."""
    source = meta.get("source")
    names = source.get("session_headers") if isinstance(source, dict) else None
    return tuple(n for n in names if isinstance(n, str)) if isinstance(names, list) else ()


def run(args: argparse.Namespace) -> int:
    from proxycheck.core.recording.summary import summarize_sessions, to_json
    from proxycheck.io.storage import load

    recording = load(args.directory)
    sessions = summarize_sessions(
        recording.exchanges,
        recording.piece,
        session_headers=args.session_header or recorded_session_headers(recording.meta) + DEFAULT_SESSION_HEADERS,
        session_fields=args.session_field or DEFAULT_SESSION_FIELDS,
    )
    warnings = [str(w) for w in recording.warnings]
    print_warnings(warnings)
    if args.json:
        json.dump(to_json(args.directory, sessions, warnings), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    from rich.console import Console

    from proxycheck.report.sessions_view import sessions_view

    Console(highlight=False).print(sessions_view(args.directory, sessions, turns=args.turns))
    return EXIT_OK
