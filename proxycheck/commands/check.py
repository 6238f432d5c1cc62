"""`proxycheck check DIR --chain F`: the one-command verdict.

This module owns the command's flags and wiring: the recording and the chain are validated before
any traffic, the diagnosis (`proxycheck.io.diagnosis`: the recording replayed over the chain's ladder
as the localizer asks, pass after pass from its failing sessions to all of it, into one run
directory) runs, and its verdict goes to the reports
(`proxycheck.commandline.verdicts`). Exit 0 when the chain is healthy (or the recorded failures do
not reproduce), 1 when a fault was found, 2 on bad input; Ctrl-C keeps what was observed as a
loadable run, reports its verdict `incomplete` (the routes missing, what the finished ones show so
far) and exits with the interrupt's status.
"""

from __future__ import annotations

import argparse
import tempfile

from proxycheck.commandline.common import load_sessions, positive_int
from proxycheck.commandline.flags import add_max_think_flag, add_replay_flags, add_report_flags, replay_options, report_files
from proxycheck.commandline.verdicts import Reports, report_check
from proxycheck.core.diagnose.localize import MAX_REPEAT
from proxycheck.core.errors import EXIT_INTERRUPTED, BadInput
from proxycheck.core.points.trace import Trace
from proxycheck.core.replay.chain import Chain
from proxycheck.core.replay.plan import turns_naming_responses
from proxycheck.io.inputs import check_out, check_tls, load_chain
from proxycheck.io.outputs import check_outputs

DEFAULT_MAX_REPEAT = MAX_REPEAT  # the localizer's


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "check",
        help="find the hop (or the server) that breaks the recorded sessions",
        description="Replay a recording straight to the engine (twice: the noise floor) and through "
        "each hop of the chain, compare every route with the direct one, and name the hop whose entry "
        "turns a clean route into a failing one, or the server. The sessions that failed are replayed first, "
        "up to their first failure, with a clean sample and think times shortened (the whole recording only "
        "when that does not decide; --full: all of it as recorded). Exit 0 healthy, 1 fault found, 2 bad input; "
        f"Ctrl-C reports the verdict incomplete (the routes missing) and exits {EXIT_INTERRUPTED}.",
    )
    p.add_argument("directory", metavar="DIR", help="a recording directory")
    p.add_argument("--chain", required=True, metavar="F", help="the chain file (TOML)")
    p.add_argument(
        "--strategy", choices=("ladder", "bisect"), default="ladder",
        help="routes outward one by one (ladder), or binary search over them (bisect: long chains)",
    )  # fmt: skip
    p.add_argument(
        "--repeat", type=positive_int, default=1, metavar="N",
        help="repetitions of each route before it is judged (direct gets at least 2: the noise floor)",
    )  # fmt: skip
    p.add_argument(
        "--max-repeat", type=positive_int, default=DEFAULT_MAX_REPEAT, metavar="M",
        help="repetitions allowed to tell a flaky route from the next one inward before giving up "
        f"(inconclusive; default {DEFAULT_MAX_REPEAT})",
    )  # fmt: skip
    p.add_argument(
        "--full", action="store_true",
        help="replay the whole recording at its recorded think times (default: the failing sessions up to their "
        "first failure and a clean sample first, think times over 1 s shortened except the failures' idle, "
        "the whole recording only when that does not decide)",
    )  # fmt: skip
    add_max_think_flag(p, default="1 s, except before a failure after idle")
    p.add_argument(
        "--parallel-routes", action="store_true",
        help="replay the routes at once (more load on the engine; a route found failing is replayed again by "
        "itself to confirm it)",
    )  # fmt: skip
    add_replay_flags(p)
    add_report_flags(p)
    p.add_argument(
        "--with", dest="with_points", action="append", default=[], metavar="REC_DIR",
        help="a recording of the same traffic made at another point of the chain (repeatable): a recorded "
        "failure that does not fail again on replay but that the points show lost between two of them is "
        "blamed on that segment (see `proxycheck trace`)",
    )  # fmt: skip
    p.add_argument("--out", metavar="RUN", help="the run directory to keep (default: a new one in the temp dir)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # io.diagnosis drives replays (httpx, aiohttp): imported when a check runs, not at every command's start.
    from proxycheck.io.diagnosis import CheckRun, CheckSettings

    # Every file the check will write, checked before anything is replayed.
    check_outputs(files=report_files(args), directories={"--out": args.out})
    if args.out:
        check_out(args.out)
    chain = load_chain(args.chain)
    routes = {name: chain.route(name) for name in chain.ladder()}
    check_tls(routes.values())
    sessions = load_sessions(args.directory)
    stateful = turns_naming_responses(sessions) if args.mode == "exact" else 0
    if stateful:
        # Their 400s (previous_response_not_found) would come from replaying, not from a hop or the
        # server: no verdict is made of them (docs/design.md, "Not evidence").
        raise BadInput(str(args.directory), f"{stateful} turn(s) continue a recorded response by previous_response_id, "
                       "which an exact replay sends to a server that never gave it: check with --mode chained")  # fmt: skip
    points = _traced(args, chain)
    options = replay_options(args, sessions, chain=chain)
    out = args.out or tempfile.mkdtemp(prefix="proxycheck-check-")
    settings = CheckSettings(strategy=args.strategy, repeat=args.repeat, max_repeat=args.max_repeat,
                             fail_on=args.fail_on, full=args.full, max_think=args.max_think,
                             routes_at_once=args.parallel_routes)  # fmt: skip
    check = CheckRun(str(args.directory), chain, routes, sessions, options, settings, out, points=points)
    return report_check(check, Reports.of(args))


def _traced(args: argparse.Namespace, chain: Chain) -> Trace | None:
    """`--with`: the trace of the recording and the other points' (read before any traffic, so a
    recording that cannot be used is one line and exit 2 before anything is replayed)."""
    if not args.with_points:
        return None
    from proxycheck.commandline.common import print_warnings
    from proxycheck.core.points.trace import trace
    from proxycheck.io.points import load_points

    points, warnings = load_points([str(args.directory), *args.with_points], chain)
    print_warnings(warnings)
    return trace(points, len(chain.hops), chain.hops_between)
