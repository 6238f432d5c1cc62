"""The JUnit XML report of `check` and `diff` (`--junit F`), for CI systems that show test results.

This module owns the mapping of a verdict onto JUnit's vocabulary: one <testsuite> per route (in
ladder order), one <testcase> per route x session (classname "proxycheck.<route>", name the
session's label, s1, s2 ..., as `proxycheck sessions` shows it; the session id and key are the
testcase's properties `session` and `session.key`) covering every repetition and turn of that session on that route. A testcase fails
when any of its exchanges failed (`Judged.failed`, plus the degradations counted as failures with
`--fail-on`): <failure message="outcome: detail" type="outcome"> holds the failing turns and the
advice they fall under, each once ("advice (hop edge · reset · 4 exchange(s) on via:edge): ...").
Degradations not counted as failures (buffered, slow) are notes in <system-out>. The
routes an `incomplete` run lacks are errored testcases (classname "proxycheck.<route>", name
"(cut short)" or "(not replayed)", <error type="incomplete">): a route never replayed is no pass.

Properties sit on each <testsuite> (verdict, culprit, summary, statistics, the route's state):
the Ant/Jenkins schemas allow <properties> there and on testcases, not under <testsuites>.
Everything goes through xml.etree.ElementTree, so text is escaped; characters XML 1.0 cannot
carry at all (NUL and other control characters, from an error message say) are replaced.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Collection, Mapping, Sequence

from proxycheck.core.diagnose.advice import advise, kind_of
from proxycheck.core.diagnose.verdict import Advice, Judged, MissingRoute, RouteReport, Verdict
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import SessionName, attempt_text
from proxycheck.report.verdict_view import advice_heading, headline, missing_lines, statistics_line

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
    """The advice for a testcase's exchanges: the verdict's advice that covers each (once per
    hop and kind of finding), else its finding's words, else advice made here from the route's
    exchanges, about the hop a finding on that route is about (the culprit when the route passes
    it, else its entry hop; the engine for direct)."""

    def __init__(self, verdict: Verdict, judged: Mapping[str, Sequence[Judged]]) -> None:
        self.advice = verdict.advice
        self.findings = {(f.route, f.session, f.turn, f.outcome): f.advice for f in verdict.findings if f.advice}
        self.hops = {r.route: r.hops for r in verdict.routes}
        self.culprit = verdict.culprit
        self.judged = judged

    def covering(self, route: str, j: Judged) -> Advice | None:
        kind = kind_of(j.outcome, j.obs)
        return next((a for a in self.advice if a.covers(route, j.outcome.value, kind)), None)

    def hop(self, route: str) -> str | None:
        hops = self.hops.get(route) or ((route[4:],) if route.startswith("via:") else ())
        if not hops:
            return None
        return self.culprit if self.culprit in hops else hops[0]

    def lines(self, route: str, items: Sequence[Judged]) -> list[str]:
        """One "advice (...): ..." line per advice the items fall under, in order of first use."""
        said: list[str] = []
        made: dict[tuple[str, str], list[Judged]] = {}  # outcome, kind -> exchanges no advice covers
        for j in items:
            a = self.covering(route, j)
            given = self.findings.get((route, j.obs.session, j.obs.turn, j.outcome.value))
            if a is not None:
                line = f"advice ({advice_heading(a)}): {a.text}"
            elif given:
                line = f"advice: {given}"
            else:
                made.setdefault((j.outcome.value, kind_of(j.outcome, j.obs)), []).append(j)
                continue
            if line not in said:
                said.append(line)
        hop, hops = self.hop(route), self.hops.get(route, ())
        # As the localizer does: with no culprit among them, a route of several hops is named whole.
        whole = hop is not None and hop != self.culprit and len(hops) > 1
        name = f"{route} (its hops {' → '.join(hops)})" if whole else None
        for group in made.values():
            a = advise(hop, group, {route: self.judged.get(route, ())}, name)
            said.append(f"advice ({advice_heading(a)}): {a.text}")
        return said


def _turn_line(j: Judged, name: SessionName | None) -> str:
    detail = j.detail or j.obs.detail
    attempt = name.attempt_of(j.obs.xid) if name is not None else (1, 1)
    where = f"repetition {j.obs.repetition}, {attempt_text(j.obs.turn, *attempt)}"
    return f"{where}: {j.outcome.value}" + (f" — {detail}" if detail else "")


def _message(j: Judged) -> str:
    detail = j.detail or j.obs.detail
    return f"{j.outcome.value}: {detail}" if detail else j.outcome.value


def _testcase(route: str, session: str, items: Sequence[Judged], failing: Collection[Outcome],
              advisor: _Advisor, verdict: Verdict) -> tuple[ET.Element, bool]:  # fmt: skip
    case = ET.Element("testcase", classname=f"proxycheck.{route}", name=_clean(verdict.session_label(session)),
                      time=_seconds(sum(_duration(j) for j in items)))  # fmt: skip
    # The session as it was grouped (a key can be a 150-character JSON object): for scripts.
    name = next((n for n in verdict.sessions if n.id == session), None)
    props = ET.SubElement(case, "properties")
    ET.SubElement(props, "property", name="session", value=_clean(session))
    if name is not None and name.key is not None:
        ET.SubElement(props, "property", name="session.key", value=_clean(name.key))
    failed = [j for j in items if j.failed or j.outcome in failing]
    noted = [j for j in items if j.degraded and j not in failed]
    if failed:
        first = failed[0]
        body = [f"{len(failed)} of {len(items)} exchange(s) failed:"] + [_turn_line(j, name) for j in failed]
        body += [""] + advisor.lines(route, failed)
        el = ET.SubElement(case, "failure", message=_clean(_message(first)), type=first.outcome.value)
        el.text = _clean("\n".join(body))
    if noted:
        body = [f"{len(noted)} degraded exchange(s), not counted as failures:"] + [_turn_line(j, name) for j in noted]
        body += [""] + advisor.lines(route, noted)
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
        case, failed = _testcase(route, session, items, failing, advisor, verdict)
        suite.append(case)
        cases += 1
        failures += failed
    time = sum(_duration(j) for j in judged)
    suite.attrib.update(tests=str(cases), failures=str(failures), errors="0", skipped="0", time=_seconds(time))
    return suite, cases, failures, time


def _missing_cases(root: ET.Element, verdict: Verdict) -> int:
    """An incomplete run's missing routes, each an errored testcase in its route's suite (made
    when the run holds nothing whole of it): errored, not skipped, because a route that was to be
    replayed and was not is no pass, and CI dashboards read skipped as nothing to worry about."""
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    for m, line in zip(verdict.missing, missing_lines(verdict)):
        suite = suites.get(m.route)
        if suite is None:
            suite = ET.SubElement(root, "testsuite", name=m.route)
            _properties(suite, verdict, None)
            suite.attrib.update(tests="0", failures="0", errors="0", skipped="0", time=_seconds(0.0))
            suites[m.route] = suite
        suite.append(_missing_case(m, line, verdict))
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
        suite.set("errors", str(int(suite.get("errors", "0")) + 1))
    return len(verdict.missing)


def _missing_case(missing: MissingRoute, line: str, verdict: Verdict) -> ET.Element:
    case = ET.Element("testcase", classname=f"proxycheck.{missing.route}",
                      name=f"({missing.state.replace('_', ' ')})", time=_seconds(0.0))  # fmt: skip
    error = ET.SubElement(case, "error", message=_clean(line), type="incomplete")
    error.text = _clean(f"{line}\n\n{verdict.summary}")
    return case


def junit_xml(verdict: Verdict, judged: Mapping[str, Sequence[Judged]], fail_on: Collection[Outcome] = ()) -> str:
    """The JUnit XML document: a testsuite per route (the verdict's routes in ladder order, then
    any other route `judged` holds), a testcase per route and session. `fail_on` names the
    degradations to count as failures, as `--fail-on` does for the verdict."""
    root = ET.Element("testsuites", name=SUITES_NAME)
    advisor = _Advisor(verdict, judged)
    reports = {r.route: r for r in verdict.routes}
    order = list(reports) + [r for r in judged if r not in reports]
    tests = failures = 0
    total = 0.0
    for route in order:
        suite, n, failed, time = _suite(route, judged.get(route, ()), verdict, reports.get(route), fail_on, advisor)
        root.append(suite)
        tests, failures, total = tests + n, failures + failed, total + time
    errors = _missing_cases(root, verdict)
    root.attrib.update(tests=str(tests + errors), failures=str(failures), errors=str(errors), time=_seconds(total))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
