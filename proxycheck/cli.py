"""The command line: lists the commands, and is the one place that turns an error into an exit status.

A command returns its status (0 success or healthy, 1 a fault was found); whatever stops it is a
`ProxycheckError` (`proxycheck.core.errors` draws the tree and gives each kind its status: 2 bad
usage, configuration or input, EXIT_INTERRUPTED on Ctrl-C, ...), printed here as one line, `proxycheck:
WHERE: WHAT`, never as a traceback. Each command lives in `proxycheck.commands.<name>`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from proxycheck import __version__
from proxycheck.core.errors import EXIT_BAD_INPUT, EXIT_OK, Interrupted, ProxycheckError

# The commands, in the order `proxycheck --help` lists them: each is `proxycheck.commands.<module>`.
# Only the chosen command's module is imported (the others would cost every run their start-up).
COMMANDS = {"demo": "demo", "record": "record", "sessions": "sessions", "replay": "replay", "check": "check",
            "trace": "trace", "watch": "watch",
            "minimize": "minimize", "diff": "diff", "probe": "probe", "bench": "bench", "compare": "compare",
            "merge": "merge", "import": "importer", "export": "export", "engine": "engine",
            "agent": "agent", "addon-path": "addon_path"}  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"proxycheck: {message} (see {self.prog} --help)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the command `argv` names (of every command when it names none it knows)."""
    parser = _Parser(
        prog="proxycheck",
        description="Find which hop of a proxy chain wedges streamed, multi-turn LLM traffic.",
    )
    parser.add_argument("--version", action="version", version=f"proxycheck {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    chosen = _chosen(argv)
    for name, module in COMMANDS.items():
        if chosen is None or name == chosen:
            importlib.import_module(f"proxycheck.commands.{module}").add_parser(commands)
    return parser


def _chosen(argv: Sequence[str] | None) -> str | None:
    """The command `argv` names: its first word, when that is a command (None: every command)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """Run the parsed command; its error, if any, as one line on stderr and its exit status."""
    try:
        return int(args.run(args))
    except BrokenPipeError:
        # `proxycheck sessions DIR | head`: the reader left; that is not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    except KeyboardInterrupt:
        error: ProxycheckError = Interrupted()
    except ProxycheckError as exc:
        error = exc
    except ExceptionGroup as group:  # raised inside a task group, as when a replay meets a full disk
        mine, _ = group.split(ProxycheckError)
        if mine is None:
            raise
        first: BaseException = mine
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        assert isinstance(first, ProxycheckError)
        error = first
    print(f"proxycheck: {error}", file=sys.stderr)
    return error.exit_status
