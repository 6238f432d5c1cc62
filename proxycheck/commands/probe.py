"""`proxycheck probe --chain F [--json F]`: the limits of every hop, found with synthetic probes.

This module owns the command: its flags, the routes to probe (default: the chain's whole ladder;
`--route` picks some, always probed in ladder order so that each finding can be given to the hop
where it first appears), progress lines on stderr, the limits table on stdout, `--json` (the
`proxycheck.probe/1` document; `-` writes it to stdout instead of the table) and the exit status:

    0  healthy: no hop adds a limit or degrades streams (the engine's own limits are reported,
       as the engine's, and do not count)
    1  a hop owns a finding: a limit below the bounds, buffered SSE, a failing route
    2  bad usage, chain file or CA file

The probes (`--probe` to pick, `--skip` to leave out): body (largest request body accepted),
header (largest header), idle (reuse of a kept-alive connection after an idle gap), gap (a stream
with a long gap between tokens: read timeouts), sse (events delivered as produced, or buffered),
compression (SSE gzip-encoded?), concurrency (streams at once before failures or queueing). The
searches are `proxycheck.core.probe.searches`'s, the network side `proxycheck.io.prober`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys

from rich.console import Console

from proxycheck.commandline.common import positive_int, positive_seconds, print_warnings
from proxycheck.core.errors import EXIT_FAULT, EXIT_OK, BadInput
from proxycheck.core.probe.findings import ProbeReport, document, exit_failed
from proxycheck.core.probe.searches import DIALECTS, PROBES
from proxycheck.io.inputs import check_tls, load_chain
from proxycheck.io.outputs import check_outputs, write_file
from proxycheck.report.probe_view import render_probe
from proxycheck.report.progress import ProbeProgress

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(i?[bB])?\s*$")
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def byte_size(text: str) -> int:
    """A size in bytes: 1048576, 512K, 16M, 1G (binary multiples)."""
    found = _SIZE.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in bytes (e.g. 65536, 64K, 16M)")
    value = int(float(found.group(1)) * _SCALE[found.group(2).lower()])
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive size")
    return value


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "probe",
        help="find each hop's limits (body and header size, idle reuse, read timeout, buffering, concurrency)",
        description="Send synthetic probes over every route of the chain (direct, then through each hop) to a "
        "cooperative engine: the reference engine (proxycheck engine), or a real one asked for fixed-length "
        "answers (max_tokens with ignore_eos). Each limit found is given to the innermost route where it first "
        "appears going outward (direct's are the engine's). Exit 0 healthy (no hop adds a limit), 1 a hop "
        "owns a finding, 2 bad input.",
    )
    p.add_argument("--chain", required=True, metavar="F", help="the chain file (TOML)")
    p.add_argument("--route", action="append", metavar="R", help="a route to probe (repeatable; default: the ladder)")
    p.add_argument("--json", metavar="F", help="write the results as JSON (schema proxycheck.probe/1); - for stdout")
    p.add_argument("--probe", action="append", choices=PROBES, metavar="P",
                   help=f"run only this probe (repeatable): {', '.join(PROBES)}")  # fmt: skip
    p.add_argument("--skip", action="append", choices=PROBES, metavar="P", help="leave this probe out (repeatable)")
    p.add_argument("--max-tokens-total", type=positive_int, metavar="N",
                   help="output tokens the probes may ask for in all (paid engines); probing stops "
                   "short of it")  # fmt: skip
    p.add_argument("--max-body", type=byte_size, default=16 << 20, metavar="BYTES",
                   help="largest request body tried (default 16M)")  # fmt: skip
    p.add_argument("--max-header", type=byte_size, default=64 << 10, metavar="BYTES",
                   help="largest header value tried (default 64K)")  # fmt: skip
    p.add_argument("--max-idle", type=positive_seconds, default=30.0, metavar="S",
                   help="longest idle gap tried before reusing a connection (default 30)")  # fmt: skip
    p.add_argument("--max-gap", type=positive_seconds, default=30.0, metavar="S",
                   help="longest gap between two tokens tried (default 30)")  # fmt: skip
    p.add_argument("--max-concurrency", type=positive_int, default=64, metavar="N",
                   help="most concurrent streams tried (default 64)")  # fmt: skip
    p.add_argument("--timeout", type=positive_seconds, default=10.0, metavar="S",
                   help="silence (no headers, no content) that fails a probe request (default 10)")  # fmt: skip
    p.add_argument("--dialect", choices=DIALECTS, default="openai_chat", help="the API the probes speak")
    p.add_argument("--model", help="the model to ask for (default: the engine's first in /v1/models)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # io.prober loads httpx: imported when probing, not at every command's start.
    from proxycheck.io.prober import ProbeOptions, probe_routes

    chain = load_chain(args.chain)
    ladder = chain.ladder()
    asked = list(dict.fromkeys(args.route or ladder))
    for name in asked:
        chain.route(name)  # an unknown route is bad input, named
    routes = [chain.route(name) for name in ladder if name in asked]
    check_tls(routes)
    check_outputs(files={"--json": args.json})  # before minutes of probing, not after
    probes = tuple(p for p in PROBES if p in (args.probe or PROBES) and p not in (args.skip or ()))
    if not probes:
        raise BadInput("--skip", "leaves no probe to run")
    options = ProbeOptions(
        probes=probes, dialect=args.dialect, model=args.model, max_body=args.max_body, max_header=args.max_header,
        max_idle=args.max_idle, max_gap=args.max_gap, max_concurrency=args.max_concurrency, timeout=args.timeout,
        max_tokens_total=args.max_tokens_total,
    )  # fmt: skip
    report = asyncio.run(probe_routes(routes, options, chain=args.chain, engine=chain.engine, listener=ProbeProgress()))
    print_warnings(list(report.warnings))
    _emit(report, args.json)
    return EXIT_FAULT if exit_failed(report) else EXIT_OK


def _emit(report: ProbeReport, json_to: str | None) -> None:
    text = json.dumps(document(report), indent=2) + "\n"
    if json_to == "-":
        render_probe(report, Console(file=sys.stderr, soft_wrap=False))
        sys.stdout.write(text)
        return
    render_probe(report, Console(file=sys.stdout, soft_wrap=False))
    if json_to:
        write_file(json_to, text)
