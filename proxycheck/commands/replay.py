"""`proxycheck replay DIR --chain F --out RUN`: replay a recording over the routes of a chain.

This module owns the command: its flags, turning bad input into one line and exit status 2,
loading the recording and the chain file, `--dry-run` (print what would be sent), the run
directory (`RunWriter`), the progress display on stderr (rich when stderr is a terminal, plain
lines otherwise), Ctrl-C (the run is closed as "interrupted" and stays loadable) and the exit
status: 0 when every observation is ok, 1 when any is a failure outcome. The replay itself is
`proxycheck.io.replayer`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from proxycheck.commands.common import (
    EXIT_FAULT,
    EXIT_OK,
    load_sessions,
    positive_int,
    positive_seconds,
    print_warnings,
    reports_bad_input,
)
from proxycheck.core.errors import BadInput

ON_FAIL = ("continue", "stop-session")


def _pace(text: str) -> Any:
    from proxycheck.core.replay.plan import parse_pace

    try:
        return parse_pace(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def add_replay_flags(p: argparse.ArgumentParser) -> None:
    """How sessions are replayed: shared by `replay` and `check`."""
    p.add_argument(
        "--concurrency", type=positive_int, metavar="C",
        help="closed loop: at most C sessions at once (default: sessions start at their recorded offsets)",
    )  # fmt: skip
    p.add_argument(
        "--pace", type=_pace, default="recorded", metavar="recorded|fast|X",
        help="think times and starts as recorded, none (fast), or scaled by X",
    )  # fmt: skip
    p.add_argument(
        "--mode", choices=("exact", "chained"), default="exact", help="exact bodies, or replayed replies chained in"
    )
    p.add_argument("--client", choices=("httpx", "aiohttp"), default="httpx", help="the client stack")
    p.add_argument(
        "--on-fail", choices=ON_FAIL, default="continue", help="after a failed turn: go on, or end the session"
    )
    add_greedy_flag(p)
    add_watchdog_flags(p)


def add_greedy_flag(p: argparse.ArgumentParser) -> None:
    """`--greedy`: shared by `replay`, `check` (through `add_replay_flags`) and `minimize`."""
    p.add_argument(
        "--greedy", action="store_true",
        help="send every request with temperature 0 and a fixed seed (on every route alike), so a sampling "
        "engine answers each the same way and content is compared exchange by exchange",
    )  # fmt: skip


def add_watchdog_flags(p: argparse.ArgumentParser) -> None:
    """The watchdog overrides every command that sends a recording's requests takes (`watchdogs_of`)."""
    p.add_argument("--connect-timeout", type=positive_seconds, metavar="S", help="connect watchdog (s)")
    p.add_argument("--header-timeout", type=positive_seconds, metavar="S", help="response headers watchdog (s)")
    p.add_argument("--stall-timeout", type=positive_seconds, metavar="S", help="no-content-progress watchdog (s)")
    p.add_argument("--total-timeout", type=positive_seconds, metavar="S", help="whole-exchange watchdog (s)")


def watchdogs_of(args: argparse.Namespace, sessions: list[Any]) -> Any:
    """The watchdogs derived from the sessions, with the overrides of `add_watchdog_flags`."""
    from proxycheck.core.replay.plan import derive_watchdogs

    try:
        return derive_watchdogs(sessions).with_overrides(connect=args.connect_timeout, headers=args.header_timeout,
                                                         stall=args.stall_timeout, total=args.total_timeout)  # fmt: skip
    except ValueError as exc:
        raise BadInput("watchdogs", str(exc)) from None


@reports_bad_input
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


def check_tls(routes: list[Any]) -> None:
    """A CA file that cannot be loaded is bad input, found before any traffic."""
    from proxycheck.io.replayer import tls_context

    for route in routes:
        if isinstance(route.verify, str):
            tls_context(route.verify)


def replay_options(args: argparse.Namespace, sessions: list[Any], **kw: Any) -> Any:
    """ReplayOptions from the flags of `add_replay_flags`, watchdogs derived from the sessions."""
    from proxycheck.io.replayer import ReplayOptions

    options = ReplayOptions(
        watchdogs=watchdogs_of(args, sessions), concurrency=args.concurrency, pace=args.pace, mode=args.mode, client=args.client,
        on_fail=args.on_fail, greedy=args.greedy, **kw,
    )  # fmt: skip
    if options.client == "aiohttp":
        h2 = sum(1 for s in sessions for t in s.turns if (t.http_version or "").upper().startswith("HTTP/2"))
        if h2:
            print_warnings([f"aiohttp speaks HTTP/1.1 only: {h2} turn(s) recorded over HTTP/2 go over HTTP/1.1 "
                            "(the httpx client keeps HTTP/2)"])  # fmt: skip
    return options


def check_out(out: str | None) -> None:
    from proxycheck.io.runstore import RUN_FILE

    if not out:
        raise BadInput("--out", "give the run directory to write (or --dry-run)")
    path = Path(out)
    if (path / RUN_FILE).exists():
        raise BadInput(out, "already holds a run; give another directory")
    if path.exists() and not path.is_dir():
        raise BadInput(out, "exists and is not a directory")


def load_chain(path: str) -> Any:
    """The chain file at `path`, validated whole (`parse_chain`) before a command sends anything:
    a mistake in it is one BadInput naming the file and line (exit 2)."""
    from proxycheck.core.replay.chain import parse_chain

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadInput(path, f"cannot read the chain file: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")  # the byte order mark some editors write is no mistake
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise BadInput(f"{path}:{line}", "the chain file is not UTF-8 text") from None
    return parse_chain(text, os.environ, path)


# --------------------------------------------------------------------------------------------
# --dry-run


def _dry_run(sessions: list[Any], routes: list[Any], options: Any) -> None:
    from proxycheck.core.recording.sessions import attempt_text
    from proxycheck.core.replay.plan import think_delay
    from proxycheck.io.replayer import request_headers

    out = sys.stdout
    if options.greedy:  # the bodies as they would be sent
        from proxycheck.core.replay.greedy import greedy_sessions

        sessions = greedy_sessions(sessions)
    greedy = ", greedy" if options.greedy else ""
    for route in routes:
        proxy = f" via proxy {route.proxy}" if route.proxy else ""
        print(f"route {route.name}{proxy} (x{options.repeat}, {options.mode}, {options.client}{greedy})", file=out)
        for session in sessions:
            for turn in session.turns:
                names = ", ".join(request_headers(turn, route, "RUN_ID"))
                think = think_delay(turn, options.pace)
                conn = "new connection" if turn.new_connection else "reused connection"
                print(
                    f"  {session.name.label} {attempt_text(turn.turn, turn.attempt, turn.attempts)}: "
                    f"{turn.method} {route.url_for(turn.url)} "
                    f"body {len(turn.body)} B, {'backoff' if turn.attempt > 1 else 'think'} {think:.3f} s, {conn}; "
                    f"headers: {names}",
                    file=out,
                )


# --------------------------------------------------------------------------------------------
# The replay, with its run directory and progress


def chain_doc(chain: Any) -> dict[str, Any]:
    """The chain as run.json keeps it: URLs and header NAMES only (values may be credentials)."""
    return {
        "source": chain.source,
        "engine": chain.engine,
        "engine_headers": [n for n, _ in chain.engine_headers],
        "hops": [
            {"name": h.name, "url": h.url, "proxy": h.proxy, "headers": [n for n, _ in h.headers]} for h in chain.hops
        ],
    }


def _options_doc(args: argparse.Namespace, options: Any) -> dict[str, Any]:
    wd = options.watchdogs
    return {
        "recording": str(args.directory),
        "repeat": options.repeat,
        "concurrency": options.concurrency,
        "pace": options.pace,
        "mode": options.mode,
        "client": options.client,
        "on_fail": options.on_fail,
        "greedy": options.greedy,
        "max_requests": options.max_requests,
        "watchdogs": {"connect": wd.connect, "headers": wd.headers, "stall": wd.stall, "total": wd.total},
    }


def _replay(args: argparse.Namespace, chain: Any, routes: list[Any], sessions: list[Any], options: Any) -> int:
    from proxycheck.io.replayer import replay
    from proxycheck.io.runstore import RunWriter

    writer = RunWriter(
        args.out, chain=chain_doc(chain), routes=[r.name for r in routes], options=_options_doc(args, options),
        sessions=[s.name.to_json() for s in sessions],
    )
    outcomes: Counter[str] = Counter()

    def sink(obs: Any) -> None:
        writer.add(obs)
        outcomes[obs.outcome.value] += 1

    progress = Progress(sys.stderr)
    try:
        status = asyncio.run(replay(sessions, routes, options, writer.run_id, sink, progress))
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress.stop()
        writer.close("interrupted")
        print(f"proxycheck: interrupted; {writer.count} observation(s) kept in {args.out}", file=sys.stderr)
        return 130
    except BaseException:
        progress.stop()
        writer.close("failed")
        raise
    progress.stop()
    writer.close(status)
    failed = sum(n for outcome, n in outcomes.items() if outcome != "ok")
    limited = " (stopped by --max-requests)" if status == "limited" else ""
    print(
        f"proxycheck: run {writer.run_id}: {writer.count} observation(s), {failed} not ok{limited}; {args.out}",
        file=sys.stderr,
    )
    return _exit_status(outcomes)


def _exit_status(outcomes: Counter[str]) -> int:
    from proxycheck.core.exchange.outcomes import Outcome

    return EXIT_FAULT if any(Outcome(o).is_failure for o in outcomes) else EXIT_OK


class Progress:
    """Per route and repetition: exchanges done of all, and counts by outcome. A rich live
    display when the stream is a terminal, else one plain line per route when it ends."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.counts: Counter[str] = Counter()
        self.total = 0
        self.label = ""
        self.live: Any = None
        if stream.isatty():
            from rich.console import Console
            from rich.live import Live

            self.live = Live(console=Console(file=stream), refresh_per_second=8, transient=False)
            self.live.start()

    def _line(self) -> str:
        done = sum(self.counts.values())
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "-"
        return f"{self.label}: {done}/{self.total} exchanges; {counts}"

    def route_started(self, route: Any, repetition: int, turns: int) -> None:
        self.counts = Counter()
        self.total = turns
        self.label = f"{route.name} #{repetition}"
        self._refresh()

    def request(self, route: Any, turn: Any, url: str, headers: dict[str, str], body: bytes) -> None:
        pass

    def observed(self, obs: Any) -> None:
        self.counts[obs.outcome.value] += 1
        self._refresh()

    def route_ended(self, route: Any, repetition: int) -> None:
        if self.live is not None:
            self.live.console.print(self._line())
        else:
            print(f"proxycheck: {self._line()}", file=self.stream, flush=True)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._line())

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
