"""The JUnit XML report of `check` and `diff` (`--junit F`), for CI systems that show test results.

This module owns the mapping of a verdict onto JUnit's vocabulary: one <testsuite> per route (in
ladder order), one <testcase> per route x session (classname "proxycheck.<route>", name the
session id) covering every repetition and turn of that session on that route. A testcase fails
when any of its exchanges failed (`Judged.failed`, plus the degradations counted as failures with
`--fail-on`): <failure message="outcome: detail" type="outcome"> holds the failing turns and the
advice. Degradations not counted as failures (buffered, slow) are notes in <system-out>.

Properties sit on each <testsuite> (verdict, culprit, summary, statistics, the route's state):
the Ant/Jenkins schemas allow <properties> there and on testcases, not under <testsuites>.
Everything goes through xml.etree.ElementTree, so text is escaped; characters XML 1.0 cannot
carry at all (NUL and other control characters, from an error message say) are replaced.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Collection, Mapping, Sequence

from proxycheck.core.outcomes import Outcome
from proxycheck.core.verdict import ENGINE_ADVICE, Judged, RouteReport, Verdict, advice
from proxycheck.report.verdict_view import headline, statistics_line

SUITES_NAME = "proxycheck check"
# What XML 1.0 cannot hold even escaped.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def _seconds(v: float) -> str:
    return f"{v:.3f}"


def _duration(j: Judged) -> float:
    return max(j.obs.end or 0.0, 0.0)


def _sessions(judged: Sequence[Judged]) -> dict[str, list[Judged]]:
    """A route's exchanges by session, sessions in order of first appearance, exchanges in order
    of repetition and turn."""
    out: dict[str, list[Judged]] = {}
    for j in judged:
        out.setdefault(j.obs.session, []).append(j)
    return {s: sorted(js, key=lambda j: (j.obs.repetition, j.obs.turn, j.obs.t_start)) for s, js in out.items()}


class _Advisor:
    """The advice for an exchange: the verdict's own finding for it when there is one, else the
    setting most likely behind the outcome at the route's entry hop (the engine for direct)."""

    def __init__(self, verdict: Verdict) -> None:
        self.findings = {(f.route, f.session, f.turn, f.outcome): f.advice for f in verdict.findings if f.advice}
        self.entry = {r.route: (r.hops[0] if r.hops else None) for r in verdict.routes}

    def __call__(self, route: str, j: Judged) -> str:
        given = self.findings.get((route, j.obs.session, j.obs.turn, j.outcome.value))
        if given:
            return given
        hop = self.entry.get(route, route[4:] if route.startswith("via:") else None)
        return advice(j.outcome, j.obs, hop) if hop else ENGINE_ADVICE


def _turn_line(j: Judged) -> str:
    detail = j.detail or j.obs.detail
    where = f"repetition {j.obs.repetition}, turn {j.obs.turn}"
    return f"{where}: {j.outcome.value}" + (f" — {detail}" if detail else "")


def _message(j: Judged) -> str:
    detail = j.detail or j.obs.detail
    return f"{j.outcome.value}: {detail}" if detail else j.outcome.value


def _advice_lines(route: str, items: Sequence[Judged], advisor: _Advisor) -> list[str]:
    seen: list[str] = []
    for j in items:
        text = advisor(route, j)
        if text and text not in seen:
            seen.append(text)
    return [f"advice: {a}" for a in seen]


def _testcase(route: str, session: str, items: Sequence[Judged], failing: Collection[Outcome],
              advisor: _Advisor) -> tuple[ET.Element, bool]:  # fmt: skip
    case = ET.Element("testcase", classname=f"proxycheck.{route}", name=_clean(session),
                      time=_seconds(sum(_duration(j) for j in items)))  # fmt: skip
    failed = [j for j in items if j.failed or j.outcome in failing]
    noted = [j for j in items if j.degraded and j not in failed]
    if failed:
        first = failed[0]
        body = [f"{len(failed)} of {len(items)} exchange(s) failed:"] + [_turn_line(j) for j in failed]
        body += [""] + _advice_lines(route, failed, advisor)
        el = ET.SubElement(case, "failure", message=_clean(_message(first)), type=first.outcome.value)
        el.text = _clean("\n".join(body))
    if noted:
        body = [f"{len(noted)} degraded exchange(s), not counted as failures:"] + [_turn_line(j) for j in noted]
        body += [""] + _advice_lines(route, noted, advisor)
        ET.SubElement(case, "system-out").text = _clean("\n".join(body))
    return case, bool(failed)


def _properties(parent: ET.Element, verdict: Verdict, report: RouteReport | None) -> None:
    props = ET.SubElement(parent, "properties")
    values = [
        ("verdict", verdict.verdict),
        ("culprit", verdict.culprit or ""),
        ("headline", headline(verdict)),
        ("summary", verdict.summary),
        ("statistics", statistics_line(verdict) or ""),
    ]
    if report is not None:
        values += [("route.hops", " ".join(report.hops)), ("route.state", report.state)]
    if verdict.run:
        values.append(("run", verdict.run))
    for name, value in values:
        ET.SubElement(props, "property", name=name, value=_clean(value))


def _suite(route: str, judged: Sequence[Judged], verdict: Verdict, report: RouteReport | None,
           failing: Collection[Outcome], advisor: _Advisor) -> tuple[ET.Element, int, int, float]:  # fmt: skip
    suite = ET.Element("testsuite", name=route)
    _properties(suite, verdict, report)
    cases = failures = 0
    for session, items in _sessions(judged).items():
        case, failed = _testcase(route, session, items, failing, advisor)
        suite.append(case)
        cases += 1
        failures += failed
    time = sum(_duration(j) for j in judged)
    suite.attrib.update(tests=str(cases), failures=str(failures), errors="0", skipped="0", time=_seconds(time))
    return suite, cases, failures, time


def junit_xml(verdict: Verdict, judged: Mapping[str, Sequence[Judged]], fail_on: Collection[Outcome] = ()) -> str:
    """The JUnit XML document: a testsuite per route (the verdict's routes in ladder order, then
    any other route `judged` holds), a testcase per route and session. `fail_on` names the
    degradations to count as failures, as `--fail-on` does for the verdict."""
    root = ET.Element("testsuites", name=SUITES_NAME)
    advisor = _Advisor(verdict)
    reports = {r.route: r for r in verdict.routes}
    order = list(reports) + [r for r in judged if r not in reports]
    tests = failures = 0
    total = 0.0
    for route in order:
        suite, n, failed, time = _suite(route, judged.get(route, ()), verdict, reports.get(route), fail_on, advisor)
        root.append(suite)
        tests, failures, total = tests + n, failures + failed, total + time
    root.attrib.update(tests=str(tests), failures=str(failures), errors="0", time=_seconds(total))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
