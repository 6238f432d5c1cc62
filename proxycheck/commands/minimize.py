"""`proxycheck minimize DIR --chain F [--route via:HOP] --out DIR2`: the smallest failing recording.

Delta debugging over the sessions, then the turns of a recording, then whether the sessions must
run at once, the first failing turn's history, request size and think time, each step replayed
over the route (`proxycheck.io.minimizer`). Without --route, the route is found first as `check`
finds it (the culprit hop's route, or direct when the engine fails). Writes an ordinary
recording to --out with `minimized.json` (the trigger summary) in it. Exit 0 when it minimized
(also when the budget ran out first: the result is then marked incomplete), 1 when there is no
failure to minimize, 2 on bad input; on Ctrl-C the smallest failing candidate found so far is
written (marked incomplete) and the exit status is 130.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, Callable

from proxycheck.commands.common import EXIT_FAULT, EXIT_OK, load_sessions, positive_int, positive_seconds, reports_bad_input
from proxycheck.commands.replay import add_greedy_flag, add_watchdog_flags
from proxycheck.core.errors import BadInput

DEFAULT_BUDGET = 200
EXIT_INTERRUPTED = 130


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "minimize",
        help="reduce a recording to the smallest part that still breaks a route",
        description="Delta debugging over the sessions and turns of a recording, then the failing turn's "
        "history, request size and think time, replaying each candidate over the route (and direct, which must "
        "stay clean). Without --route, the route is found first as check finds it. Writes the result as a "
        "recording with minimized.json. Exit 0 minimized, 1 no failure to minimize, 2 bad input.",
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
    add_greedy_flag(p)
    add_watchdog_flags(p)
    p.set_defaults(run=run)


@reports_bad_input
def run(args: argparse.Namespace) -> int:
    import time

    from proxycheck.commands.replay import check_tls, load_chain, watchdogs_of
    from proxycheck.core.minimize.ddmin import Budget
    from proxycheck.io.minimizer import NotReproduced, describe, minimize

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(args.out, "exists and is not an empty directory; give a new one")
    if args.route is not None and args.route != "direct" and not args.route.startswith("via:"):
        raise BadInput("--route", f"expected via:HOP or direct, got {args.route!r}")
    chain = load_chain(args.chain)
    check_tls([chain.route(name) for name in chain.ladder()] if args.route is None else [chain.route(args.route)])
    sessions = load_sessions(args.directory)
    watchdogs = watchdogs_of(args, sessions)
    budget = Budget(replays=args.budget, seconds=args.time, start=time.monotonic())

    def progress(line: str) -> None:
        print(f"proxycheck: minimize: {line}", file=sys.stderr, flush=True)

    route, culprit = args.route, None
    try:
        if route is None:
            route, culprit = asyncio.run(find_route(sessions, chain, watchdogs, budget, progress, args.greedy))
            if route is None:
                print(f"proxycheck: {args.directory}: nothing to minimize: {culprit['says']}", file=sys.stderr)
                return EXIT_FAULT
        result = asyncio.run(minimize(
            args.directory, chain, route, args.out, budget=budget, progress=progress, culprit=culprit,
            watchdogs=watchdogs, any_failure=args.any_failure, greedy=args.greedy,
        ))  # fmt: skip
    except NotReproduced as exc:
        print(f"proxycheck: {exc}", file=sys.stderr)
        return EXIT_FAULT
    for line in describe(result.summary):
        print(line)
    print(f"minimized recording: {result.out}")
    return EXIT_INTERRUPTED if result.interrupted else EXIT_OK


async def find_route(sessions: list[Any], chain: Any, watchdogs: Any, budget: Any,
                     progress: Callable[[str], None], greedy: bool = False) -> tuple[str | None, dict[str, Any]]:  # fmt: skip
    """The route to minimize over, found as `check` finds the culprit (replays the ladder at the
    pace minimize replays at): via the culprit hop, or direct for the engine; None when no route
    fails. The replays count against the budget."""
    from proxycheck.commands.check import drive, make_localizer
    from proxycheck.core.diagnose.verdict import ENGINE, PROXY, SERVER
    from proxycheck.io.minimizer import minimize_options

    options = minimize_options(watchdogs, chain, greedy=greedy)
    routes = {name: chain.route(name) for name in chain.ladder()}
    progress(f"no --route: looking for the failing route first, as check does ({len(routes)} routes)")
    localizer = make_localizer(sessions, routes, options)
    replays: set[tuple[str, int]] = set()  # one replay: a route's repetition

    def count(obs: Any) -> None:
        replays.add((obs.route, obs.repetition))

    verdict = await drive(localizer, sessions, routes, options, "minimize-locate", count)
    budget.spend(len(replays))
    doc = {"verdict": verdict.verdict, "culprit": verdict.culprit, "says": verdict.summary, "replays": len(replays)}
    progress(f"{verdict.verdict}: {verdict.summary} ({len(replays)} replays)")
    if verdict.verdict == PROXY and verdict.culprit:
        return f"via:{verdict.culprit}", doc
    if verdict.verdict == SERVER and verdict.culprit == ENGINE:
        return "direct", doc
    return None, doc
