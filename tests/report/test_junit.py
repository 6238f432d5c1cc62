"""The JUnit XML report, read back with ElementTree as a CI system would."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

from samples import STALL_ADVICE, STALL_DETAIL, complete_stream, judged_for

from proxycheck.core.diagnose.verdict import ENGINE_ADVICE, Judged, Verdict
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.report.junit import junit_xml


def parse(verdict: Verdict, judged: dict[str, list[Judged]], **kw: object) -> ET.Element:
    text = junit_xml(verdict, judged, **kw)  # type: ignore[arg-type]
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    return ET.fromstring(text)


def case(root: ET.Element, route: str, session: str) -> ET.Element:
    found = root.find(f"testsuite[@name='{route}']/testcase[@name='{session}']")
    assert found is not None, (route, session)
    return found


def test_a_suite_per_route_in_ladder_order_and_a_case_per_session(proxy_verdict: Verdict) -> None:
    root = parse(proxy_verdict, judged_for(proxy_verdict.routes))
    assert root.tag == "testsuites" and root.get("name") == "proxycheck check"
    assert root.get("tests") == "6" and root.get("failures") == "1" and root.get("errors") == "0"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["direct", "via:gateway", "via:edge"]
    for s in suites:
        assert [c.get("name") for c in s.findall("testcase")] == ["s1", "s2"]
        assert {c.get("classname") for c in s.findall("testcase")} == {f"proxycheck.{s.get('name')}"}
        assert s.get("tests") == "2"
    assert [s.get("failures") for s in suites] == ["0", "0", "1"]
    # Time: the exchanges' durations (1.26 s clean, 10.65 s stalled), all repetitions.
    assert float(case(root, "direct", "s1").get("time") or 0) == 8 * 1.26


def test_a_failing_case_names_the_outcome_the_turns_and_the_advice(proxy_verdict: Verdict) -> None:
    root = parse(proxy_verdict, judged_for(proxy_verdict.routes))
    failure = case(root, "via:edge", "s1").find("failure")
    assert failure is not None
    assert failure.get("type") == "stall_mid_stream"
    assert failure.get("message") == f"stall_mid_stream: {STALL_DETAIL}"
    text = failure.text or ""
    assert "2 of 8 exchange(s) failed:" in text
    assert f"repetition 1, turn 4: stall_mid_stream — {STALL_DETAIL}" in text
    assert "repetition 2, turn 4: stall_mid_stream" in text
    # The advice once, with what it covers: not once per failing exchange.
    assert text.count("advice (") == 1
    assert f"advice (hop edge · stall_mid_stream · 10 exchange(s) on via:edge): {STALL_ADVICE}" in text
    assert case(root, "via:gateway", "s1").find("failure") is None


def test_degradations_are_notes_unless_counted_as_failures(proxy_verdict: Verdict) -> None:
    judged = judged_for(proxy_verdict.routes)
    root = parse(proxy_verdict, judged)
    buffered = case(root, "via:edge", "s2")
    assert buffered.find("failure") is None
    out = buffered.findtext("system-out") or ""
    assert "2 degraded exchange(s), not counted as failures:" in out
    assert "repetition 1, turn 1: buffered — TTFT 1.20 s vs 0.06 s" in out
    # No advice of the verdict covers them: made from the route's exchanges, about hop edge.
    assert "advice (hop edge · buffered · 2 exchange(s) on via:edge): hop edge delivers streams in bursts" in out

    strict = parse(proxy_verdict, judged, fail_on={Outcome.BUFFERED})
    failure = case(strict, "via:edge", "s2").find("failure")
    assert failure is not None and failure.get("type") == "buffered"
    assert case(strict, "via:edge", "s2").find("system-out") is None
    assert strict.get("failures") == "2"


def test_the_verdict_is_in_each_suites_properties(proxy_verdict: Verdict) -> None:
    root = parse(proxy_verdict, judged_for(proxy_verdict.routes))
    edge = root.find("testsuite[@name='via:edge']")
    assert edge is not None
    props = {p.get("name"): p.get("value") for p in edge.iter("property")}
    assert props["verdict"] == "proxy" and props["culprit"] == "edge" and props["headline"] == "proxy: hop edge"
    assert props["summary"] == proxy_verdict.summary
    assert props["statistics"] == "Fisher's exact test decided: p=0.0003 < 0.01 (via:edge 10/40 failed, via:gateway 0/40)"
    assert props["route.state"] == "failing" and props["route.hops"] == "edge gateway"


def test_healthy_has_no_failures(healthy_verdict: Verdict) -> None:
    judged = {r: [replace(j, outcome=Outcome.OK) for j in js] for r, js in judged_for(healthy_verdict.routes).items()}
    root = parse(healthy_verdict, judged)
    assert root.get("tests") == "6" and root.get("failures") == "0"
    assert root.find(".//failure") is None and root.find(".//system-out") is None


def test_direct_failures_get_the_engine_advice(server_verdict: Verdict) -> None:
    reset = Judged(replace(complete_stream("direct", 3, 1, "s9"), outcome=Outcome.RESET), Outcome.RESET, "closed")
    root = parse(replace(server_verdict, findings=()), {"direct": [reset]})
    failure = case(root, "direct", "s9").find("failure")
    assert failure is not None and failure.get("message") == "reset: closed"
    assert f"advice (the engine · reset, mid stream · 1 exchange(s) on direct): {ENGINE_ADVICE}" in (failure.text or "")
    # Routes of the verdict without judged exchanges are still there, empty.
    assert [s.get("tests") for s in root.findall("testsuite")] == ["1", "0", "0"]


def test_text_is_escaped_and_control_characters_replaced(not_reproduced_verdict: Verdict) -> None:
    nasty = 'a <b> & "c" \x00\x1b]8;; end'
    obs = replace(complete_stream("via:edge", 1, 1, 's<1>&"'), outcome=Outcome.RESET)
    verdict = replace(not_reproduced_verdict, summary=nasty)
    text = junit_xml(verdict, {"via:edge": [Judged(obs, Outcome.RESET, nasty)]})
    root = ET.fromstring(text)  # it parses: nothing XML cannot carry got through
    failure = case(root, "via:edge", 's<1>&"').find("failure")
    assert failure is not None
    assert failure.get("message") == 'reset: a <b> & "c" \ufffd\ufffd]8;; end'
    summary = root.find("testsuite[@name='direct']/properties/property[@name='summary']")
    assert summary is not None and summary.get("value", "").startswith('a <b> & "c"')


def test_missing_routes_are_errored_testcases(incomplete_verdict: Verdict) -> None:
    judged = {r: js for r, js in judged_for(incomplete_verdict.routes).items()}
    root = parse(incomplete_verdict, {r: [replace(j, outcome=Outcome.OK) for j in js] for r, js in judged.items()})
    assert [s.get("name") for s in root.findall("testsuite")] == ["direct", "via:gateway", "via:edge", "via:corp"]
    assert root.get("errors") == "2" and root.get("failures") == "0" and root.get("tests") == "6"
    cut = case(root, "via:edge", "(cut short)")
    error = cut.find("error")
    assert error is not None and error.get("type") == "incomplete"
    assert error.get("message") == "via:edge: cut short in repetition 1 (2 of 40 exchanges observed, not judged)"
    assert incomplete_verdict.summary in (error.text or "")
    assert cut.find("skipped") is None and cut.find("failure") is None
    never = case(root, "via:corp", "(not replayed)")
    assert never.find("error") is not None
    suite = root.find("testsuite[@name='via:corp']")
    assert suite is not None and suite.get("tests") == "1" and suite.get("errors") == "1"
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "incomplete" and props["culprit"] == ""
