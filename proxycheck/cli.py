"""The command line: lists the commands, and owns exit codes and error handling.

Exit status: 0 success (healthy), 1 a fault was found, 2 bad usage, configuration or input.
Bad input is reported as one line, `proxycheck: WHERE: WHAT`, never as a traceback. Each command
lives in `proxycheck.commands.<name>`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from proxycheck import __version__
from proxycheck.commands import (
    agent,
    bench,
    check,
    compare,
    demo,
    diff,
    engine,
    export,
    importer,
    merge,
    minimize,
    probe,
    record,
    replay,
    sessions,
)
from proxycheck.commands.common import EXIT_BAD_INPUT, EXIT_OK
from proxycheck.core.errors import ProxycheckError

COMMANDS = (demo, record, sessions, replay, check, minimize, diff, probe, bench, compare, merge, importer, export, engine, agent)


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
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


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
