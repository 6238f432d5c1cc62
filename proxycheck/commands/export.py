"""`proxycheck export DIR --har FILE`: a recording as a HAR 1.2 file.

This module owns the arguments and the report; the conversion is `proxycheck.io.har`. Every
exchange becomes an entry, in-flight ones with status 0 and `_proxycheck_inflight: true`;
redacted values are written as `[redacted]`. `--har -` writes to standard output.
"""

from __future__ import annotations

import argparse
import sys

from proxycheck.commandline.common import print_warnings
from proxycheck.core.errors import EXIT_OK
from proxycheck.io.har import har_document, write_har
from proxycheck.io.outputs import check_outputs
from proxycheck.io.recordings import open_recording


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "export",
        help="export a recording as a HAR file",
        description="Write every exchange of a recording as a HAR 1.2 entry (browsers' and mitmproxy's "
        "viewers read it; proxycheck import reads it back with exact timings).",
    )
    p.add_argument("directory", metavar="DIR", help="a recording directory")
    p.add_argument("--har", required=True, metavar="FILE", help="the HAR file to write (- for standard output)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outputs(files={"--har": args.har})  # before the recording is read
    loaded = open_recording(args.directory)
    print_warnings(loaded.warnings)
    document = har_document(loaded.recording)
    write_har(document, args.har)
    entries = document["log"]["entries"]
    inflight = sum(1 for e in entries if e.get("_proxycheck_inflight"))
    note = f" ({inflight} in flight)" if inflight else ""
    # With `--har -` the HAR owns standard output; the report goes to stderr.
    out = sys.stderr if args.har == "-" else sys.stdout
    print(f"proxycheck export: {args.directory} -> {args.har}: {len(entries)} entries{note}", file=out)
    return EXIT_OK
