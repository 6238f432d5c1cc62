"""`proxycheck minimize DIR --chain F --route via:HOP --out DIR2`: the smallest failing recording.

Delta debugging over the sessions, then the turns of a recording, then the first failing turn's
request size and think time, each step replayed over the route (`proxycheck.io.minimizer`).
Writes an ordinary recording to --out with `minimized.json` (the trigger summary) in it. Exit 0
when it minimized (also when the budget ran out first: the result is then marked incomplete),
1 when the failure does not reproduce, 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from proxycheck.commands.common import EXIT_FAULT, EXIT_OK, positive_int, positive_seconds, reports_bad_input
from proxycheck.core.errors import BadInput

DEFAULT_BUDGET = 200


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "minimize",
        help="reduce a recording to the smallest part that still breaks a route",
        description="Delta debugging over the sessions and turns of a recording, then the failing turn's "
        "request size and think time, replaying each candidate over the route (and direct, which must stay "
        "clean). Writes the result as a recording with minimized.json. Exit 0 minimized, 1 the failure does "
        "not reproduce, 2 bad input.",
    )
    p.add_argument("directory", metavar="DIR", help="a recording directory")
    p.add_argument("--chain", required=True, metavar="F", help="the chain file (TOML)")
    p.add_argument("--route", required=True, metavar="via:HOP", help="the route the failure shows on")
    p.add_argument("--out", required=True, metavar="DIR2", help="the minimized recording (a new or empty directory)")
    p.add_argument("--budget", type=positive_int, default=DEFAULT_BUDGET, metavar="N",
                   help=f"replays allowed in all (default {DEFAULT_BUDGET})")  # fmt: skip
    p.add_argument("--time", type=positive_seconds, metavar="S", help="seconds allowed in all")
    p.add_argument("--header-timeout", type=positive_seconds, metavar="S", help="response headers watchdog (s)")
    p.add_argument("--stall-timeout", type=positive_seconds, metavar="S", help="no-content-progress watchdog (s)")
    p.set_defaults(run=run)


@reports_bad_input
def run(args: argparse.Namespace) -> int:
    import time

    from proxycheck.commands.replay import check_tls, load_chain
    from proxycheck.core.ddmin import Budget
    from proxycheck.io.minimizer import NotReproduced, describe, minimize

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(args.out, "exists and is not an empty directory; give a new one")
    if not args.route.startswith("via:"):
        raise BadInput("--route", f"expected via:HOP, got {args.route!r}")
    chain = load_chain(args.chain)
    check_tls([chain.route(args.route)])
    budget = Budget(replays=args.budget, seconds=args.time, start=time.monotonic())

    def progress(line: str) -> None:
        print(f"proxycheck: minimize: {line}", file=sys.stderr, flush=True)

    try:
        result = asyncio.run(minimize(
            args.directory, chain, args.route, args.out, budget=budget, progress=progress,
            stall_timeout=args.stall_timeout, header_timeout=args.header_timeout,
        ))  # fmt: skip
    except NotReproduced as exc:
        print(f"proxycheck: {exc}", file=sys.stderr)
        return EXIT_FAULT
    for line in describe(result.summary):
        print(line)
    print(f"minimized recording: {result.out}")
    return EXIT_OK
