"""What `check` and `diff` share: the report flags, and handing a verdict to its readers.

A verdict goes to the terminal (rich, on stdout), to `RUN/verdict.json` for a run `check` made
(the run keeps its own conclusion), and to `--json`, `--junit` and `--html` when asked. The exit status follows
the contract: 0 healthy (or not reproduced), 1 a fault was found, or the run is incomplete.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from proxycheck.commands.common import EXIT_FAULT, EXIT_OK
from proxycheck.core.diagnose.verdict import Judged, Verdict
from proxycheck.core.errors import BadInput, StorageError
from proxycheck.core.exchange.outcomes import Outcome

VERDICT_FILE = "verdict.json"
FAIL_ON = ("buffered", "slow")


def fail_on(text: str) -> frozenset[Outcome]:
    """`--fail-on buffered,slow`: degradations to count as failures."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in FAIL_ON]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(FAIL_ON)}; got {text!r}")
    return frozenset(Outcome(n) for n in names)


def add_report_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--fail-on", type=fail_on, default=frozenset(), metavar="buffered,slow",
        help="count these degradations as failures (default: reported, not blamed; for diff, as the run's check did)",
    )  # fmt: skip
    p.add_argument("--json", metavar="F", help="write the verdict as JSON (schema proxycheck.verdict/1)")
    p.add_argument("--junit", metavar="F", help="write JUnit XML: a testcase per route and session")
    p.add_argument("--html", metavar="F", help="write a self-contained HTML report")


def emit(
    verdict: Verdict, judged: Mapping[str, Sequence[Judged]], args: argparse.Namespace, keep_in: str | None = None
) -> int:
    """Show the verdict, write its files (and `verdict.json` in the run `keep_in`); the exit status."""
    from rich.console import Console

    from proxycheck.report.verdict_view import render_verdict

    render_verdict(verdict, Console(file=sys.stdout, soft_wrap=False))
    doc = json.dumps(verdict.to_json(), indent=2) + "\n"
    if keep_in:
        _write(Path(keep_in) / VERDICT_FILE, doc)
    if args.json:
        _write(Path(args.json), doc)
    if args.junit:
        from proxycheck.report.junit import junit_xml

        _write(Path(args.junit), junit_xml(verdict, judged, args.fail_on))
    if args.html:
        from proxycheck.report.html import html_report

        _write(Path(args.html), html_report(verdict))
    return EXIT_FAULT if verdict.fails else EXIT_OK


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"{path}: cannot write: {exc.strerror or exc}") from None


def hops_by_route(chain_doc: Mapping[str, Any], routes: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The hops each route passes, from a run's chain document (hop names, client inward)."""
    names = [str(h.get("name")) for h in chain_doc.get("hops", []) if isinstance(h, Mapping)]
    out: dict[str, tuple[str, ...]] = {}
    for route in routes:
        if route.startswith("via:") and route[4:] in names:
            out[route] = tuple(names[names.index(route[4:]) :])
        else:
            out[route] = ()
    return out


def ladder_of(chain_doc: Mapping[str, Any], routes: Sequence[str], where: str) -> list[str]:
    """`direct` first, then the routes of the run from the engine outward."""
    names = [str(h.get("name")) for h in chain_doc.get("hops", []) if isinstance(h, Mapping)]
    order = ["direct"] + [f"via:{n}" for n in reversed(names)]
    unknown = [r for r in routes if r not in order]
    if unknown:
        raise BadInput(where, f"routes {', '.join(unknown)} are not in the run's chain")
    return ["direct"] + [r for r in order[1:] if r in routes]
