"""The flags several commands share, and what they build: how a recording is replayed (`replay`,
`check`), `--greedy` (also `minimize`), the watchdog overrides (every command that sends a
recording's requests) and the report flags (`check`, `diff`). Not a command."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, Sequence

from proxycheck.commandline.common import positive_int, positive_seconds, print_warnings
from proxycheck.core.errors import BadInput
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.replay.plan import Pace, PlannedSession, derive_watchdogs, parse_pace, responses_warning

if TYPE_CHECKING:
    from proxycheck.io.replayer import ReplayOptions

ON_FAIL = ("continue", "stop-session")
FAIL_ON = ("buffered", "slow")


def _pace(text: str) -> Pace:
    try:
        return parse_pace(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def fail_on(text: str) -> frozenset[Outcome]:
    """`--fail-on buffered,slow`: degradations to count as failures."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in FAIL_ON]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(FAIL_ON)}; got {text!r}")
    return frozenset(Outcome(n) for n in names)


def add_replay_flags(p: argparse.ArgumentParser) -> None:
    """How sessions are replayed: shared by `replay` and `check`."""
    p.add_argument(
        "--concurrency", type=positive_int, metavar="C",
        help="closed loop: at most C sessions at once (default: sessions start at their recorded offsets)",
    )  # fmt: skip
    add_pace_flag(p)
    p.add_argument(
        "--mode", choices=("exact", "chained"), default="exact", help="exact bodies, or replayed replies chained in"
    )
    p.add_argument("--client", choices=("httpx", "aiohttp"), default="httpx", help="the client stack")
    p.add_argument(
        "--on-fail", choices=ON_FAIL, default="continue", help="after a failed turn: go on, or end the session"
    )
    add_greedy_flag(p)
    add_watchdog_flags(p)


def add_pace_flag(p: argparse.ArgumentParser) -> None:
    """`--pace`: shared by `replay`, `check` (through `add_replay_flags`) and `minimize`."""
    p.add_argument(
        "--pace", type=_pace, default="recorded", metavar="recorded|fast|X",
        help="think times and starts as recorded, none (fast), or scaled by X",
    )  # fmt: skip


def add_greedy_flag(p: argparse.ArgumentParser) -> None:
    """`--greedy`: shared by `replay`, `check` (through `add_replay_flags`) and `minimize`."""
    p.add_argument(
        "--greedy", action="store_true",
        help="send every request with temperature 0 and a fixed seed (on every route alike), so a sampling "
        "engine answers each the same way and content is compared exchange by exchange",
    )  # fmt: skip


def add_max_think_flag(p: argparse.ArgumentParser, default: str = "as recorded") -> None:
    """`--max-think S`: think times longer than S seconds shortened to S (`check`, `minimize`)."""
    p.add_argument(
        "--max-think", type=positive_seconds, metavar="S",
        help=f"shorten think times longer than S seconds to S, the failures' own too (default: {default})",
    )  # fmt: skip


def add_watchdog_flags(p: argparse.ArgumentParser) -> None:
    """The watchdog overrides every command that sends a recording's requests takes (`watchdogs_of`)."""
    p.add_argument("--connect-timeout", type=positive_seconds, metavar="S", help="connect watchdog (s)")
    p.add_argument("--header-timeout", type=positive_seconds, metavar="S", help="response headers watchdog (s)")
    p.add_argument("--stall-timeout", type=positive_seconds, metavar="S", help="no-content-progress watchdog (s)")
    p.add_argument("--total-timeout", type=positive_seconds, metavar="S", help="whole-exchange watchdog (s)")
    p.add_argument(
        "--patience", type=positive_seconds, metavar="S",
        help="how long the real client waits through a silence before it gives up (s): a silence past a watchdog "
        "and shorter than this is a slow answer, not a stall (default: what the recording shows or its client is "
        "known for, else 600)",
    )  # fmt: skip


def add_report_flags(p: argparse.ArgumentParser) -> None:
    """Where a verdict goes besides the terminal: `check` and `diff`."""
    p.add_argument(
        "--fail-on", type=fail_on, default=frozenset(), metavar="buffered,slow",
        help="count these degradations as failures (default: reported, not blamed; for diff, as the run's check did)",
    )  # fmt: skip
    p.add_argument("--json", metavar="F", help="write the verdict as JSON (schema proxycheck.verdict/1)")
    p.add_argument("--junit", metavar="F", help="write JUnit XML: a testcase per route and session")
    p.add_argument("--html", metavar="F", help="write a self-contained HTML report")


def report_files(args: argparse.Namespace) -> dict[str, str | None]:
    """The report files of `add_report_flags`, by flag, for `io.outputs.check_outputs`."""
    return {"--json": args.json, "--junit": args.junit, "--html": args.html}


def watchdogs_of(args: argparse.Namespace, sessions: Sequence[PlannedSession], *, patience: bool = True) -> Watchdogs:
    """The watchdogs derived from the sessions, with the client's patience (`--patience`, else
    derived: `proxycheck.core.replay.patience`), then the overrides of `add_watchdog_flags` (a
    stated watchdog is its phase's limit). `patience` False: only a stated patience (a load run)."""
    try:
        derived = derive_watchdogs(sessions)
        if not patience:
            derived = derived.without_patience()
        stated = getattr(args, "patience", None)
        if stated is not None:
            derived = derived.with_patience(stated, stated, f"stated: --patience {stated:g}")
        return derived.with_overrides(connect=args.connect_timeout, headers=args.header_timeout,
                                      stall=args.stall_timeout, total=args.total_timeout)  # fmt: skip
    except ValueError as exc:
        raise BadInput("watchdogs", str(exc)) from None


def replay_options(args: argparse.Namespace, sessions: Sequence[PlannedSession], **kw: Any) -> "ReplayOptions":
    """ReplayOptions from the flags of `add_replay_flags`, watchdogs derived from the sessions."""
    # io.replayer loads httpx and aiohttp: imported when a replay is built, not at every command's start.
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
    stateful = responses_warning(sessions, options.mode)
    if stateful is not None:
        print_warnings([stateful])
    return options
