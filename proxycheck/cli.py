"""The command line: parses arguments, wires the layers together, and owns exit codes.

Exit status: 0 success (healthy), 1 a fault was found, 2 bad usage, configuration or input.
Bad input is reported as one line, `proxycheck: WHERE: WHAT`, never as a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from proxycheck import __version__
from proxycheck.core.errors import ProxycheckError
from proxycheck.core.sessions import DEFAULT_SESSION_FIELDS, DEFAULT_SESSION_HEADERS

EXIT_OK, EXIT_FAULT, EXIT_BAD_INPUT = 0, 1, 2
_MAX_WARNINGS = 10


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"proxycheck: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="proxycheck",
        description="Find which hop of a proxy chain wedges streamed, multi-turn LLM traffic.",
    )
    parser.add_argument("--version", action="version", version=f"proxycheck {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    sessions = commands.add_parser(
        "sessions",
        help="list the sessions of a recording",
        description="List the sessions of a recording: turns, request sizes, think times and "
        "the outcome of each recorded turn.",
    )
    sessions.add_argument("directory", metavar="DIR", help="a recording directory")
    sessions.add_argument("--json", action="store_true", help="print JSON (schema proxycheck.sessions/1)")
    sessions.add_argument(
        "--session-header",
        action="append",
        metavar="NAME",
        help=f"a request header that names the session (default: {', '.join(DEFAULT_SESSION_HEADERS)})",
    )
    sessions.add_argument(
        "--session-field",
        action="append",
        metavar="PATH",
        help=f"a body field that names the session (default: {', '.join(DEFAULT_SESSION_FIELDS)})",
    )
    sessions.add_argument("--turns", action="store_true", help="also show every turn of every session")
    sessions.set_defaults(run=_cmd_sessions)
    return parser


def _cmd_sessions(args: argparse.Namespace) -> int:
    from proxycheck.core.summary import summarize, to_json
    from proxycheck.io.storage import load

    recording = load(args.directory)
    sessions = summarize(
        recording.exchanges,
        recording.piece,
        session_headers=args.session_header or DEFAULT_SESSION_HEADERS,
        session_fields=args.session_field or DEFAULT_SESSION_FIELDS,
    )
    warnings = [str(w) for w in recording.warnings]
    _print_warnings(warnings)
    if args.json:
        json.dump(to_json(args.directory, sessions, warnings), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    from rich.console import Console

    from proxycheck.report.terminal import sessions_view

    Console(highlight=False).print(sessions_view(args.directory, sessions, turns=args.turns))
    return EXIT_OK


def _print_warnings(warnings: Sequence[str]) -> None:
    for w in warnings[:_MAX_WARNINGS]:
        print(f"proxycheck: warning: {w}", file=sys.stderr)
    if len(warnings) > _MAX_WARNINGS:
        print(f"proxycheck: warning: ... and {len(warnings) - _MAX_WARNINGS} more", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ProxycheckError as exc:
        print(f"proxycheck: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("proxycheck: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `proxycheck sessions DIR | head`: the reader left; that is not an error of ours.
        sys.stderr.close()
        return EXIT_OK
