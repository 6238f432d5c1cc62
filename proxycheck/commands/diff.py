"""`proxycheck diff RUN`: the verdict of an existing run, without replaying anything.

The run's own observations are judged against its `direct` route and localized as `check` would,
with what is there: routes the run did not replay are skipped, and a difference that more
repetitions would have been needed to confirm is `inconclusive`. Same reports and exit status as
`check` (0 healthy, 1 fault found, 2 bad input).
"""

from __future__ import annotations

import argparse

from proxycheck.commands.common import print_warnings, reports_bad_input
from proxycheck.commands.verdicts import add_report_flags, emit, hops_by_route, ladder_of
from proxycheck.core.errors import BadInput


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "diff",
        help="the verdict of an existing run (from replay or check)",
        description="Compare every route of a run with its direct route, against the noise floor of "
        "direct's repetitions, and localize the failing hop. Exit 0 healthy, 1 fault found, 2 bad input.",
    )
    p.add_argument("run_dir", metavar="RUN", help="a run directory")
    add_report_flags(p)
    p.set_defaults(run=run)


@reports_bad_input
def run(args: argparse.Namespace) -> int:
    from proxycheck.core.localize import Decided, Localizer
    from proxycheck.io.runstore import load_run

    run_ = load_run(args.run_dir)
    print_warnings([str(w) for w in run_.warnings])
    chain = run_.meta.get("chain") or {}
    routes = sorted({o.route for o in run_.observations})
    if not routes:
        raise BadInput(args.run_dir, "holds no observations")
    ladder = ladder_of(chain, routes, args.run_dir)
    options = run_.meta.get("options") or {}
    localizer = Localizer(
        ladder, hops_by_route(chain, ladder), strategy=str(options.get("strategy", "ladder")),
        repeat=1, fail_on=args.fail_on, run=str(args.run_dir),
    )  # fmt: skip
    localizer.add(run_.observations)
    step = localizer.next(final=True)
    assert isinstance(step, Decided)  # final: it never asks for a replay
    judged = {name: localizer.judged(name) for name in ladder if localizer.replayed(name)}
    return emit(step.verdict, judged, args)
