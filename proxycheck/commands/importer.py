"""`proxycheck import FILE(.har|.zhar|.flow) --out DIR`: a HAR file or a mitmproxy dump as a new
recording.

This module owns the arguments, the choice of reader by file extension (`proxycheck.io.har`,
`proxycheck.io.flowfile`), the refusal of an `--out` that already holds something, and the
report. Only LLM generation requests are imported unless `--all`; proxycheck's own replays
(`x-proxycheck-replay`) never are. The file is read completely before the recording is created,
so bad input leaves nothing behind.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from proxycheck.commandline.common import print_warnings
from proxycheck.core.errors import EXIT_OK, BadInput
from proxycheck.io.flowfile import read_flows
from proxycheck.io.har import ImportResult, check_out_directory, read_har, write_recording
from proxycheck.io.outputs import check_outputs, make_dirs

NAME = "import"
# io.flowfile imports mitmproxy only inside read_flows: HAR imports stay light.
READERS: dict[str, Callable[[str], ImportResult]] = {".har": read_har, ".zhar": read_har, ".flow": read_flows}


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        NAME,
        help="import a HAR file or a mitmproxy .flow dump as a recording",
        description="Turn a HAR file (browsers, mitmproxy's hardump, proxycheck export) or a mitmproxy "
        "dump (mitmdump -w FILE) into a recording. Credentials are redacted as when recording. Only "
        "LLM generation requests are imported unless --all.",
    )
    p.add_argument("file", metavar="FILE", help="a .har, .zhar or .flow file")
    p.add_argument("--out", required=True, metavar="DIR", help="the new recording (absent or an empty directory)")
    p.add_argument("--all", action="store_true", help="import every HTTP request, not only LLM requests")
    p.set_defaults(run=run)


def read(path: str) -> ImportResult:
    """The exchanges of FILE by its extension; BadInput for an unknown extension."""
    reader = READERS.get(Path(path).suffix.lower())
    if reader is None:
        raise BadInput(path, f"unknown file type (expected {', '.join(READERS)})")
    if not Path(path).is_file():
        raise BadInput(path, "no such file")
    return reader(path)


def run(args: argparse.Namespace) -> int:
    check_out_directory(args.out)
    check_outputs(directories={"--out": args.out})
    result = read(args.file)
    result.keep(args.all)
    print_warnings(result.warnings)
    make_dirs(args.out)  # 0700, and so is each parent it creates
    count = write_recording(args.out, result)
    print(f"proxycheck import: {args.file} -> {args.out}: {count} exchange(s){_skipped(result)}")
    return EXIT_OK


def _skipped(result: ImportResult) -> str:
    notes = []
    if result.skipped_not_llm:
        notes.append(f"{result.skipped_not_llm} not LLM requests (--all imports them)")
    if result.skipped_replays:
        notes.append(f"{result.skipped_replays} proxycheck replays")
    text = f"; left out: {', '.join(notes)}" if notes else ""
    return text + (f"; {len(result.warnings)} warning(s)" if result.warnings else "")
