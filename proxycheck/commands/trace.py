"""`proxycheck trace REC_DIR REC_DIR... [--chain F] [--json F] [--html F]`: where the wedge happened.

This module owns the command's flags and wiring: the recordings of several points of one chain
are loaded as points (`proxycheck.io.points`), the chain file (when given) places them, the core
(`proxycheck.core.points.trace`) matches every exchange across them and says where each failure
was lost, and the trace goes to the terminal, `--json` (schema proxycheck.trace/1) and `--html`.
Exit statuses as `check`'s: 0 healthy, 1 a failure placed (proxy, server) or not placeable
(inconclusive), 2 bad input. Nothing is sent anywhere: it reads recordings only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from proxycheck.commandline.common import print_warnings
from proxycheck.core.errors import EXIT_FAULT, EXIT_OK


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "trace",
        help="find where a wedge happened from recordings made at several points of the chain",
        description="Match the same exchanges across recordings made at several points of one chain (by what "
        "the model sees, order and time; the clocks' offsets are estimated from the exchanges) and say, for "
        "every exchange that failed, where it was last seen progressing: lost between two points (proxy: that "
        "segment), or already failing at the innermost point. Exit 0 healthy, 1 a failure found, 2 bad input.",
    )
    p.add_argument("directories", nargs="+", metavar="REC_DIR", help="recordings of the same traffic at different points")
    p.add_argument("--chain", metavar="F", help="the chain file: its `point` keys say where each point stands")
    p.add_argument("--json", metavar="F", help="write the trace as JSON (schema proxycheck.trace/1)")
    p.add_argument("--html", metavar="F", help="write the trace as a self-contained HTML page")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from proxycheck.core.points.trace import trace
    from proxycheck.io.inputs import load_chain
    from proxycheck.io.outputs import check_outputs, write_file
    from proxycheck.io.points import load_points
    from proxycheck.report.trace_view import render_trace, trace_html

    check_outputs(files={"--json": args.json, "--html": args.html})
    chain = load_chain(args.chain) if args.chain else None
    points, warnings = load_points(args.directories, chain)
    print_warnings(warnings)
    result = trace(points, len(chain.hops) if chain else None, chain.hops_between if chain else None)
    render_trace(result, Console(file=sys.stdout, soft_wrap=False, highlight=False))
    if args.json:
        write_file(Path(args.json), json.dumps(result.to_json(), indent=2) + "\n")
    if args.html:
        write_file(Path(args.html), trace_html(result))
    return EXIT_FAULT if result.fails else EXIT_OK
