"""`proxycheck diff RUN`: the verdict of an existing run, without replaying anything.

The run's own observations are judged against its `direct` route and localized as `check` would
(`proxycheck.core.diagnose.runverdict`). A run `check` made is fed to the localizer step by step with the
check's own settings (strategy, repetitions, `--fail-on` unless given here), so it gives the
check's verdict; a run `replay` made is judged as it is, routes it did not replay skipped, and
a difference more repetitions would have been needed to confirm is `inconclusive`. A run that
lacks what its plan needed (interrupted, killed, a route cut short) is `incomplete`, never a
verdict from part of the evidence. Same reports and exit status as `check` (0 healthy, 1 fault
found or incomplete, 2 bad input).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from proxycheck.commandline.common import print_warnings
from proxycheck.commandline.flags import FAIL_ON, add_report_flags, report_files
from proxycheck.commandline.verdicts import Reports, emit
from proxycheck.core.diagnose.localize import MAX_REPEAT, Decided, Localizer
from proxycheck.core.diagnose.runverdict import RunPlan, holdings, run_verdict
from proxycheck.core.diagnose.waits import waits_of
from proxycheck.core.exchange.watchdogs import watchdogs_from_json
from proxycheck.core.diagnose.verdict import INCOMPLETE
from proxycheck.core.errors import BadInput
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.replay.chain import doc_hops_by_route, doc_ladder, doc_socks_hops
from proxycheck.io.outputs import check_outputs
from proxycheck.io.runstore import RUN_FILE, load_run


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "diff",
        help="the verdict of an existing run (from replay or check)",
        description="Compare every route of a run with its direct route, against the noise floor of "
        "direct's repetitions, and localize the failing hop; a run that stopped before the check was done "
        "is incomplete. Exit 0 healthy, 1 fault found or incomplete, 2 bad input.",
    )
    p.add_argument("run_dir", metavar="RUN", help="a run directory")
    add_report_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_outputs(files=report_files(args))
    run_ = load_run(args.run_dir)
    print_warnings([str(w) for w in run_.warnings])
    where = str(Path(args.run_dir) / RUN_FILE)
    plan = run_plan(run_.meta, where)
    settings = _settings(run_.meta.get("options") or {}, plan.driven, where)
    chain = run_.meta.get("chain") or {}
    observed = {o.route for o in run_.observations}
    if not observed and plan.finished:
        raise BadInput(args.run_dir, "holds no observations")
    ladder = doc_ladder(chain, sorted(observed | set(plan.routes)), args.run_dir)

    def localizer(fail_on: frozenset[Outcome]) -> Localizer:
        return Localizer(ladder, doc_hops_by_route(chain, ladder), strategy=settings["strategy"],
                         repeat=settings["repeat"], max_repeat=settings["max_repeat"], fail_on=fail_on,
                         run=str(args.run_dir), greedy=settings["greedy"], socks_hops=doc_socks_hops(chain))  # fmt: skip

    # Whether the run holds what it was to hold is judged as it was made (a check's --fail-on
    # decided which repetitions it replayed).
    made_with = settings["fail_on"] if plan.driven else args.fail_on
    loc = localizer(made_with)
    verdict = run_verdict(loc, run_.observations, plan)
    fail_on = args.fail_on or made_with
    if verdict.verdict != INCOMPLETE and fail_on != made_with:
        # Asked with other degradations counted as failures: the whole evidence, as it is.
        held = holdings(run_.observations, plan)
        loc = localizer(fail_on)
        loc.add(o for g, obs in held.groups.items() if g in held.whole for o in obs)
        step = loc.next(final=True)
        assert isinstance(step, Decided)  # final: it never asks for a replay
        verdict = step.verdict
    judged = {name: loc.judged(name) for name in ladder if loc.replayed(name)}
    verdict = replace(verdict, sessions=run_.session_names)
    watchdogs = watchdogs_from_json((run_.meta.get("options") or {}).get("watchdogs"))
    if watchdogs is not None:  # the waits the run was replayed with, as it kept them
        verdict = replace(verdict, waits=waits_of(watchdogs, run_.observations, verdict.session_label))
    return emit(verdict, judged, Reports.of(args))


def run_plan(meta: Mapping[str, Any], where: str) -> RunPlan:
    """What a run was to hold, from its run.json: its routes and status, whether `check` made it,
    the repetitions `replay` was asked for, the turns of each session (runs made before run.json
    kept them have none: their last repetition then counts as whole only in a finished run)."""
    options = meta.get("options") or {}
    if not isinstance(options, Mapping):
        raise BadInput(where, "options is not an object")
    routes = meta.get("routes") or []
    if not isinstance(routes, list) or not all(isinstance(r, str) for r in routes):
        raise BadInput(where, "routes is not a list of route names")
    turns = options.get("turns")
    if turns is not None and not (
        isinstance(turns, Mapping) and all(isinstance(k, str) and _count(v) for k, v in turns.items())
    ):
        raise BadInput(where, "options.turns is not an object of session ids and turn counts")
    driven = options.get("command") == "check"
    repeat = options.get("repeat", 1)
    if not driven and not _count(repeat):
        raise BadInput(where, f"options.repeat {repeat!r} is not a positive integer")
    return RunPlan(routes=tuple(routes), status=str(meta.get("status") or ""), driven=driven,
                   repeat=1 if driven else int(repeat), turns=dict(turns) if turns is not None else None,
                   stop_session=options.get("on_fail") == "stop-session")  # fmt: skip


def _settings(options: Mapping[str, Any], driven: bool, where: str) -> dict[str, Any]:
    """The localizer's settings the run was made with (a check's; defaults for other runs)."""
    strategy = options.get("strategy", "ladder")
    if strategy not in ("ladder", "bisect"):
        raise BadInput(where, f"options.strategy {strategy!r} is not ladder or bisect")
    out: dict[str, Any] = {"strategy": strategy, "repeat": 1, "max_repeat": MAX_REPEAT}
    for name in ("repeat", "max_repeat") if driven else ():
        value = options.get(name, out[name])
        if not _count(value):
            raise BadInput(where, f"options.{name} {value!r} is not a positive integer")
        out[name] = int(value)
    names = options.get("fail_on", []) if driven else []
    if not isinstance(names, list) or not all(n in FAIL_ON for n in names):
        raise BadInput(where, f"options.fail_on {names!r} is not a list of {', '.join(FAIL_ON)}")
    out["fail_on"] = frozenset(Outcome(n) for n in names)
    out["greedy"] = options.get("greedy", False)  # replayed with --greedy (runs before it: no)
    if not isinstance(out["greedy"], bool):
        raise BadInput(where, f"options.greedy {out['greedy']!r} is not true or false")
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
