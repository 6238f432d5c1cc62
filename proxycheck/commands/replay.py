"""`proxycheck replay DIR --chain F --out RUN`: replay a recording over the routes of a chain.

This module owns the command's flags and wiring: the recording, the chain file and --out are
validated before any traffic (`proxycheck.io.inputs`), `--dry-run` prints what would be sent, the
run directory (`RunWriter`: Ctrl-C closes it as "interrupted" and it stays loadable) is filled
with the progress on stderr (`proxycheck.report.progress`), and the exit status is 0 when every
observation is ok, 1 when any is a failure outcome. The replay itself is `proxycheck.io.replayer`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from typing import TYPE_CHECKING

from proxycheck.commandline.common import load_sessions, positive_int
from proxycheck.commandline.flags import add_replay_flags, replay_options
from proxycheck.core.errors import EXIT_FAULT, EXIT_OK
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import attempt_text
from proxycheck.core.replay.chain import Chain, Route
from proxycheck.core.replay.greedy import greedy_sessions
from proxycheck.core.replay.plan import PlannedSession, think_delay
from proxycheck.core.replay.socket import ws_url
from proxycheck.io.inputs import check_out, check_tls, load_chain
from proxycheck.io.runstore import RunWriter, options_doc
from proxycheck.report.progress import ReplayProgress

if TYPE_CHECKING:  # io.replayer loads httpx and aiohttp: imported in the functions that replay
    from proxycheck.io.replayer import ReplayOptions


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "replay",
        help="replay a recording straight to the engine and through each hop",
        description="Replay the sessions of a recording over the routes of a chain file (direct, "
        "then through each hop), faithfully: same requests, think times, connection reuse and "
        "concurrency, streamed. Writes one observation per exchange per route and repetition to --out.",
    )
    p.add_argument("directory", metavar="DIR", help="a recording directory")
    p.add_argument("--chain", required=True, metavar="F", help="the chain file (TOML)")
    p.add_argument("--route", action="append", metavar="R", help="a route to replay (repeatable; default: the ladder)")
    p.add_argument("--repeat", type=positive_int, default=1, metavar="N", help="replay each route N times")
    add_replay_flags(p)
    p.add_argument("--max-requests", type=positive_int, metavar="N", help="send at most N requests in all")
    p.add_argument("--dry-run", action="store_true", help="print the requests that would be sent; send nothing")
    p.add_argument("--out", metavar="RUN", help="the run directory to write (required unless --dry-run)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.dry_run:
        check_out(args.out)
    chain = load_chain(args.chain)
    routes = chain.routes(list(dict.fromkeys(args.route)) if args.route else None)
    check_tls(routes)
    sessions = load_sessions(args.directory)
    options = replay_options(args, sessions, repeat=args.repeat, max_requests=args.max_requests, chain=chain)
    if args.dry_run:
        _dry_run(sessions, routes, options)
        return EXIT_OK
    return _replay(args, chain, routes, sessions, options)


def _dry_run(sessions: list[PlannedSession], routes: list[Route], options: "ReplayOptions") -> None:
    # io.replayer loads httpx and aiohttp (see the TYPE_CHECKING import above).
    from proxycheck.io.replayer import request_headers

    out = sys.stdout
    if options.greedy:  # the bodies as they would be sent
        sessions = greedy_sessions(sessions)
    greedy = ", greedy" if options.greedy else ""
    for route in routes:
        proxy = f" via proxy {route.shown_proxy}" if route.proxy else ""  # userinfo never shown
        print(f"route {route.name}{proxy} (x{options.repeat}, {options.mode}, {options.client}{greedy})", file=out)
        for session in sessions:
            for turn in session.turns:
                names = ", ".join(request_headers(turn, route, "RUN_ID"))
                think = think_delay(turn, options.pace)
                socket = session.transport == "websocket"
                conn = ("new socket" if socket else "new connection") if turn.new_connection else \
                    ("the same socket" if socket else "reused connection")  # fmt: skip
                url = route.url_for(turn.url, shown=True)
                url = ws_url(url) if socket else url
                if turn.left_out:  # recorded forwarding headers: the route's hops add their own
                    names += f"; left out as recorded by a hop: {', '.join(turn.left_out)}"
                print(
                    f"  {session.name.label} {attempt_text(turn.turn, turn.attempt, turn.attempts)}: "
                    f"{turn.method} {url} "
                    f"body {len(turn.body)} B, {'backoff' if turn.attempt > 1 else 'think'} {think:.3f} s, {conn}; "
                    f"headers: {names}",
                    file=out,
                )


def _replay(args: argparse.Namespace, chain: Chain, routes: list[Route], sessions: list[PlannedSession],
            options: "ReplayOptions") -> int:  # fmt: skip
    # io.replayer loads httpx and aiohttp (see the TYPE_CHECKING import above).
    from proxycheck.io.replayer import replay

    settings = {
        "repeat": options.repeat, "concurrency": options.concurrency, "pace": options.pace, "mode": options.mode,
        "client": options.client, "on_fail": options.on_fail, "greedy": options.greedy,
        "max_requests": options.max_requests,
    }  # fmt: skip
    writer = RunWriter(args.out, chain=chain.to_doc(), routes=[r.name for r in routes],
                       options=options_doc(str(args.directory), settings, options.watchdogs),
                       sessions=[s.name.to_json() for s in sessions])  # fmt: skip
    outcomes: Counter[str] = Counter()

    def sink(obs: Observation) -> None:
        writer.add(obs)
        outcomes[obs.outcome.value] += 1

    with writer:  # Ctrl-C: closed as interrupted, Interrupted says what it kept
        with ReplayProgress(sys.stderr) as progress:
            status = asyncio.run(replay(sessions, routes, options, writer.run_id, sink, progress))
        writer.close(status)
    failed = sum(n for outcome, n in outcomes.items() if outcome != "ok")
    limited = " (stopped by --max-requests)" if status == "limited" else ""
    print(
        f"proxycheck: run {writer.run_id}: {writer.count} observation(s), {failed} not ok{limited}; {args.out}",
        file=sys.stderr,
    )
    return EXIT_FAULT if any(Outcome(o).is_failure for o in outcomes) else EXIT_OK
