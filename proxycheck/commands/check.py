"""`proxycheck check DIR --chain F`: the one-command verdict.

This module owns the command: it replays the recording over the chain's ladder as the localizer
(`proxycheck.core.diagnose.localize`) asks, route by route and repetition by repetition, into one run
directory, and hands the verdict to the reports (`proxycheck.commands.verdicts`). Exit 0 when
the chain is healthy (or the recorded failures do not reproduce), 1 when a fault was found, 2 on
bad input; Ctrl-C keeps what was observed as a loadable run, reports its verdict `incomplete`
(`proxycheck.core.diagnose.runverdict`: the routes missing, what the finished ones show so far) and exits
130.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from typing import Any, Callable

from proxycheck.commands.common import load_sessions, positive_int, reports_bad_input
from proxycheck.commands.replay import (
    Progress,
    add_replay_flags,
    chain_doc,
    check_out,
    check_tls,
    load_chain,
    replay_options,
)
from proxycheck.commands.verdicts import add_report_flags, emit
from proxycheck.core.diagnose.localize import MAX_REPEAT

DEFAULT_MAX_REPEAT = MAX_REPEAT  # the localizer's
EXIT_INTERRUPTED = 130  # as a shell reports a command SIGINT ended


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "check",
        help="find the hop (or the server) that breaks the recorded sessions",
        description="Replay a recording straight to the engine (twice: the noise floor) and through "
        "each hop of the chain, compare every route with the direct one, and name the hop whose entry "
        "turns a clean route into a failing one, or the server. Exit 0 healthy, 1 fault found, 2 bad input; "
        "Ctrl-C reports the verdict incomplete (the routes missing) and exits 130.",
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
    add_replay_flags(p)
    add_report_flags(p)
    p.add_argument("--out", metavar="RUN", help="the run directory to keep (default: a new one in the temp dir)")
    p.set_defaults(run=run)


@reports_bad_input
def run(args: argparse.Namespace) -> int:
    from proxycheck.io.runstore import RunWriter

    if args.out:
        check_out(args.out)
    chain = load_chain(args.chain)
    ladder = chain.ladder()
    routes = {name: chain.route(name) for name in ladder}
    check_tls(list(routes.values()))
    sessions = load_sessions(args.directory)
    options = replay_options(args, sessions, chain=chain)
    out = args.out or tempfile.mkdtemp(prefix="proxycheck-check-")
    localizer = make_localizer(sessions, routes, options, strategy=args.strategy, repeat=args.repeat,
                               max_repeat=args.max_repeat, fail_on=args.fail_on, run=out)  # fmt: skip
    writer = RunWriter(out, chain=chain_doc(chain), routes=ladder, options=_options_doc(args, options, sessions),
                       sessions=[s.name.to_json() for s in sessions])  # fmt: skip
    written: list[Any] = []  # every observation, in the order the run directory holds them

    def keep(obs: Any) -> None:
        writer.add(obs)
        written.append(obs)

    progress = Progress(sys.stderr)
    try:
        verdict = asyncio.run(drive(localizer, sessions, routes, options, writer.run_id, keep, progress))
    except (KeyboardInterrupt, asyncio.CancelledError):
        progress.stop()
        writer.close("interrupted")
        print(f"proxycheck: interrupted; {writer.count} observation(s) kept in {out}", file=sys.stderr)
        return _interrupted(args, sessions, routes, options, written, out)
    except BaseException:
        progress.stop()
        writer.close("failed")
        raise
    progress.stop()
    writer.close("completed")
    print(f"proxycheck: run {writer.run_id}: {writer.count} observation(s) in {out}", file=sys.stderr)
    judged = {name: localizer.judged(name) for name in ladder if localizer.replayed(name)}
    verdict = replace(verdict, sessions=tuple(s.name for s in sessions))
    return emit(verdict, judged, args, keep_in=out)


def _interrupted(args: argparse.Namespace, sessions: list[Any], routes: dict[str, Any], options: Any,
                 written: list[Any], out: str) -> int:  # fmt: skip
    """After Ctrl-C: the `incomplete` verdict of what the run holds, the same `diff` of the run
    gives (the routes missing, what the finished ones show so far), reported as any verdict is;
    the exit status stays an interrupt's."""
    from proxycheck.core.diagnose.runverdict import RunPlan, run_verdict

    localizer = make_localizer(sessions, routes, options, strategy=args.strategy, repeat=args.repeat,
                               max_repeat=args.max_repeat, fail_on=args.fail_on, run=out)  # fmt: skip
    plan = RunPlan(routes=tuple(routes), status="interrupted", driven=True, turns=turns_per_session(sessions),
                   stop_session=options.on_fail == "stop-session")  # fmt: skip
    verdict = replace(run_verdict(localizer, written, plan), sessions=tuple(s.name for s in sessions))
    judged = {name: localizer.judged(name) for name in routes if localizer.replayed(name)}
    try:
        emit(verdict, judged, args, keep_in=out)
    except KeyboardInterrupt:  # a second Ctrl-C while reporting: stop there
        pass
    return EXIT_INTERRUPTED


def turns_per_session(sessions: list[Any]) -> dict[str, int]:
    """The exchanges of one repetition, by session: what tells a whole repetition of a route from
    one the run stopped in (kept in run.json for `diff`)."""
    turns: dict[str, int] = {}
    for s in sessions:
        for t in s.turns:  # observations name a turn's session
            turns[t.session] = turns.get(t.session, 0) + 1
    return turns


def make_localizer(sessions: list[Any], routes: dict[str, Any], options: Any, *, strategy: str = "ladder",
                   repeat: int = 1, max_repeat: int = DEFAULT_MAX_REPEAT, fail_on: Any = (), run: str = "") -> Any:
    """The localizer for a recording over the chain's ladder `routes` (name -> route, inward first)."""
    from proxycheck.core.diagnose.localize import Localizer, RecordedFailure

    recorded = [
        RecordedFailure(t.session, t.turn, t.recorded.outcome.value, t.recorded.detail)
        for s in sessions for t in s.turns if t.recorded.outcome.is_failure
    ]  # fmt: skip
    return Localizer(
        list(routes), {name: r.hops for name, r in routes.items()}, strategy=strategy, repeat=repeat,
        max_repeat=max_repeat, fail_on=fail_on, recorded_failures=recorded,
        differences=differences(sessions, options, recorded), run=run, greedy=options.greedy,
    )  # fmt: skip


async def drive(localizer: Any, sessions: list[Any], routes: dict[str, Any], options: Any, run_id: str,
                sink: Callable[[Any], None], progress: Any = None) -> Any:  # fmt: skip
    """Replay what the localizer asks until it decides; every observation also goes to `sink`.
    Returns the verdict."""
    from proxycheck.core.diagnose.localize import Decided
    from proxycheck.io.replayer import replay

    next_repetition: Counter[str] = Counter()
    while True:
        step = localizer.next()
        if isinstance(step, Decided):
            return step.verdict
        first = next_repetition[step.route] + 1
        got: list[Any] = []
        step_options = replace(options, repeat=step.repetitions, first_repetition=first)
        await replay(sessions, [routes[step.route]], step_options, run_id, _tee(sink, got), progress)
        next_repetition[step.route] += step.repetitions
        localizer.add(got)


def _tee(sink: Callable[[Any], None], got: list[Any]) -> Callable[[Any], None]:
    """A replay sink: to `sink` (the run directory), and kept for the localizer."""

    def both(obs: Any) -> None:
        sink(obs)
        got.append(obs)

    return both


def _options_doc(args: argparse.Namespace, options: Any, sessions: list[Any]) -> dict[str, Any]:
    wd = options.watchdogs
    return {
        "recording": str(args.directory),
        "command": "check",
        "strategy": args.strategy,
        "repeat": args.repeat,
        "max_repeat": args.max_repeat,
        "fail_on": sorted(o.value for o in args.fail_on),
        "concurrency": options.concurrency,
        "pace": options.pace,
        "mode": options.mode,
        "client": options.client,
        "on_fail": options.on_fail,
        "greedy": options.greedy,
        "watchdogs": {"connect": wd.connect, "headers": wd.headers, "stall": wd.stall, "total": wd.total},
        "turns": turns_per_session(sessions),
    }


def differences(sessions: list[Any], options: Any, recorded: list[Any]) -> list[str]:
    """What differs between the recording and its replay, said when the recorded failures do not
    reproduce (a verdict of not-reproduced): those are the conditions worth replaying again."""
    if not recorded:
        return []
    from proxycheck.core.recording.sessions import attempt_text

    # The recorded failures as `proxycheck sessions` names them: by label, retries as attempts.
    failed = [(s.name.label, t) for s in sessions for t in s.turns if t.recorded.outcome.is_failure]
    shown = "; ".join(f"{label} {attempt_text(t.turn, t.attempt, t.attempts)}: {t.recorded.outcome.value}"
                      + (f" ({t.recorded.detail})" if t.recorded.detail else "") for label, t in failed[:3])  # fmt: skip
    more = f" and {len(recorded) - 3} more" if len(recorded) > 3 else ""
    out = [f"recorded failures: {shown}{more}"]
    # A retried turn's think time is its first attempt's (later attempts wait their backoff).
    turns = {(t.session, t.turn): t for s in sessions for t in reversed(s.turns)}
    thinks = [turns[(f.session, f.turn)].think_time for f in recorded if (f.session, f.turn) in turns]
    thinks = [t for t in thinks if t]
    if options.pace != "recorded":
        listed = ", ".join(f"{t:.1f} s" for t in thinks[:3])
        before = f" (recorded before the failing turns: {listed})" if thinks else ""
        out.append(f"think times: replayed at pace {options.pace}, not as recorded{before}")
    elif thinks and max(thinks) >= 5:
        out.append(f"idle: the failing turns came after {max(thinks):.1f} s of think time; a hop's or the engine's "
                   "keep-alive timeout may have changed since")  # fmt: skip
    overlap = _recorded_overlap(sessions)
    if options.concurrency is not None and options.concurrency < overlap:
        out.append(f"concurrency: replayed at most {options.concurrency} sessions at once; "
                   f"the recording had {overlap} at once")  # fmt: skip
    agents = sorted({v for s in sessions for t in s.turns for k, v in t.headers if k.lower() == "user-agent"})
    if agents:
        out.append(f"client: replayed with {options.client}; recorded from {', '.join(agents[:2])}")
    out.append("conditions the replay cannot bring back: load on the engine at the time, a hop restarted or "
               "reconfigured since, network trouble")  # fmt: skip
    return out


def _recorded_overlap(sessions: list[Any]) -> int:
    """The most sessions the recording had in progress at one time."""
    spans = []
    for s in sessions:
        end = s.start + sum((t.think_time or t.backoff or 0.0) + (t.recorded.duration or 0.0) for t in s.turns)
        spans += [(s.start, 1), (end, -1)]
    best = now = 0
    for _, step in sorted(spans):
        now += step
        best = max(best, now)
    return best
