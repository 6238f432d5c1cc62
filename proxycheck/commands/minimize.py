"""`proxycheck minimize DIR --chain F [--route via:HOP] --out DIR2`: the smallest failing recording.

Delta debugging over the sessions, then the turns of a recording (a WebSocket session kept whole,
then cut to its first turns), then whether the sessions must run at once, the first failing
turn's history, request size and think time, each step replayed over the route
(`proxycheck.io.minimizer`). Without --route, the route is found first as `check` finds it (the
culprit hop's route, or direct when the engine fails). Every replay, those locating
the route too, waits as `--pace` and `--max-think` say. Writes an ordinary recording to --out
with `minimized.json` (the trigger summary) in it. Exit 0 when it minimized (also when the budget
ran out first: the result is then marked incomplete), 1 when there is no failure to minimize or
nothing was removed (one line says why; nothing is written, so the same --out serves the next
try), 2 on bad input; on Ctrl-C the smallest failing candidate found so far is written (marked
incomplete) and the exit status is the interrupt's. The route is found by
`proxycheck.io.diagnosis.locate_route`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from proxycheck.commandline.common import positive_int, positive_seconds, print_warnings
from proxycheck.commandline.flags import add_greedy_flag, add_max_think_flag, add_pace_flag, add_watchdog_flags, watchdogs_of
from proxycheck.core.errors import EXIT_FAULT, EXIT_INTERRUPTED, EXIT_OK, BadInput
from proxycheck.core.minimize.ddmin import Budget
from proxycheck.io.inputs import check_tls, load_chain
from proxycheck.io.minimizer import cap_sessions, describe, minimize
from proxycheck.io.outputs import check_outputs
from proxycheck.io.recordings import open_recording
from proxycheck.report.progress import minimize_progress

DEFAULT_BUDGET = 200


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "minimize",
        help="reduce a recording to the smallest part that still breaks a route",
        description="Delta debugging over the sessions and turns of a recording, then the failing turn's "
        "history, request size and think time, replaying each candidate over the route (and direct, which must "
        "stay clean). Without --route, the route is found first as check finds it. Writes the result as a "
        "recording with minimized.json. Exit 0 minimized, 1 no failure to minimize or nothing removed (nothing is "
        "written then), 2 bad input.",
    )
    p.add_argument("directory", metavar="DIR", help="a recording directory")
    p.add_argument("--chain", required=True, metavar="F", help="the chain file (TOML)")
    p.add_argument("--route", metavar="via:HOP",
                   help="the route the failure shows on (direct: an engine failure; default: found as check does)")
    p.add_argument("--any-failure", action="store_true",
                   help="keep a candidate that fails in any way (default: only as the whole recording failed, "
                   "e.g. the same stall, not another error)")  # fmt: skip
    p.add_argument("--out", required=True, metavar="DIR2", help="the minimized recording (a new or empty directory)")
    p.add_argument("--budget", type=positive_int, default=DEFAULT_BUDGET, metavar="N",
                   help=f"replays allowed in all (default {DEFAULT_BUDGET})")  # fmt: skip
    p.add_argument("--time", type=positive_seconds, metavar="S", help="seconds allowed in all")
    # As replay and check take them (the same types and words), for every replay minimize makes.
    add_pace_flag(p)
    add_max_think_flag(p)
    add_greedy_flag(p)
    add_watchdog_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # io.diagnosis drives replays (httpx, aiohttp): imported when a route is looked for.
    from proxycheck.io.diagnosis import locate_route

    check_outputs(directories={"--out": args.out})
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(args.out, "exists and is not an empty directory; give a new one")
    if args.route is not None and args.route != "direct" and not args.route.startswith("via:"):
        raise BadInput("--route", f"expected via:HOP or direct, got {args.route!r}")
    chain = load_chain(args.chain)
    check_tls([chain.route(name) for name in chain.ladder()] if args.route is None else [chain.route(args.route)])
    loaded = open_recording(args.directory)  # opened once: planned here, its candidates built from it
    print_warnings(loaded.warnings)
    sessions = loaded.planned
    watchdogs = watchdogs_of(args, sessions)
    budget = Budget(replays=args.budget, seconds=args.time, start=time.monotonic())
    route, culprit = args.route, None
    if route is None:
        # Located as minimize then replays: at its pace, think times capped alike.
        located = cap_sessions(sessions, args.max_think)[0]
        route, culprit = asyncio.run(locate_route(located, chain, watchdogs, budget, minimize_progress, args.greedy,
                                                  pace=args.pace))  # fmt: skip
        if route is None:
            print(f"proxycheck: {args.directory}: nothing to minimize: {culprit['says']}", file=sys.stderr)
            return EXIT_FAULT
    result = asyncio.run(minimize(
        args.directory, chain, route, args.out, budget=budget, progress=minimize_progress, culprit=culprit,
        watchdogs=watchdogs, any_failure=args.any_failure, greedy=args.greedy, recording=loaded,
        pace=args.pace, max_think=args.max_think,
    ))  # fmt: skip
    if not result.removed:
        # No reproducer smaller than the input: no claim of one, and --out left as it was.
        print(f"proxycheck: {args.directory}: nothing removed: {result.reason}", file=sys.stderr)
        return EXIT_INTERRUPTED if result.interrupted else EXIT_FAULT
    for line in describe(result.summary):
        print(line)
    print(f"minimized recording: {result.out}")
    return EXIT_INTERRUPTED if result.interrupted else EXIT_OK
