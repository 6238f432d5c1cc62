"""Sessions named the way a person reads them in every report of a verdict: by label (s1, s2 ...)
on an 80-column terminal, in the HTML headings and in the JUnit testcase names, with the long
harness key (Claude Code's `metadata.user_id`) said once, and kept whole in the JSON document."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from dataclasses import replace

from rich.console import Console
from samples import STALL_DETAIL, complete_stream, judged_for, stalled_stream

from proxycheck.core.diagnose.verdict import Evidence, Finding, Judged, Verdict
from proxycheck.core.recording.sessions import SessionName, label_of
from proxycheck.report.html import html_report
from proxycheck.report.junit import junit_xml
from proxycheck.report.verdict_view import render_verdict

SESSION_ID = "5c3e8a0f-2b1d-4c6e-9f7a-0d1e2f3a4b5c"
USER_ID = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": SESSION_ID}, separators=(",", ":"))
OTHER_ID = json.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": "0" * 36}, separators=(",", ":"))
NAMES = (
    SessionName(USER_ID, "s1", SESSION_ID, "field:metadata.user_id"),
    SessionName(OTHER_ID, "s2", "0" * 36, "field:metadata.user_id"),
)


def keyed(verdict: Verdict) -> Verdict:
    """The sample verdict with its sessions s1 and s2 grouped by Claude Code's user ids."""
    ids = {"s1": USER_ID, "s2": OTHER_ID}
    findings = tuple(replace(f, session=ids[f.session]) for f in verdict.findings)
    evidence = Evidence(stalled_stream(session=USER_ID), complete_stream(session=USER_ID))
    return replace(verdict, findings=findings, evidence=evidence, sessions=NAMES)


def judged_keyed(verdict: Verdict) -> dict[str, list[Judged]]:
    ids = {"s1": USER_ID, "s2": OTHER_ID}
    return {route: [replace(j, obs=replace(j.obs, session=ids[j.obs.session])) for j in items]
            for route, items in judged_for(verdict.routes).items()}  # fmt: skip


def rendered(verdict: Verdict, width: int) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    render_verdict(verdict, console)
    return console.export_text()


def test_an_80_column_report_names_sessions_by_label_and_says_the_key_once(proxy_verdict: Verdict) -> None:
    out = rendered(keyed(proxy_verdict), 80)
    assert all(len(line) <= 80 for line in out.splitlines())
    flat = " ".join(out.split())
    assert f"via:edge session s1 turn 4 (repetitions 1-10): stall_mid_stream — {STALL_DETAIL}" in flat
    assert f"s1 = session {SESSION_ID} (field:metadata.user_id)" in out
    assert "First failing exchange: session s1 turn 4, repetition 1" in out
    assert "device_id" not in out  # the 150-character key is never printed


def test_a_session_no_name_is_known_for_is_shown_by_its_key_never_a_label(proxy_verdict: Verdict) -> None:
    # A run written before runs kept names: no label is made up for it.
    two = (Finding("via:edge", 1, USER_ID, 2, "reset", "closed", "a"), Finding("via:edge", 1, OTHER_ID, 2, "reset", "closed", "a"))
    out = " ".join(rendered(replace(keyed(proxy_verdict), findings=two, sessions=()), 80).split())
    assert f"session {SESSION_ID} turn 2" in out and f"session {'0' * 36} turn 2" in out
    assert "session s1" not in out and " = session " not in out
    # Long keys that are no JSON object, alike at their heads, stay apart by their tails.
    a, b = "user-" + "x" * 60 + "-alpha", "user-" + "x" * 60 + "-bravo"
    assert label_of({}, a) != label_of({}, b) and len(label_of({}, a)) <= 40


def test_the_json_document_keeps_the_key_and_adds_the_label(proxy_verdict: Verdict) -> None:
    doc = json.loads(json.dumps(keyed(proxy_verdict).to_json()))
    assert {(f["session"], f["label"]) for f in doc["findings"]} == {(USER_ID, "s1")}
    assert doc["sessions"] == [n.to_json() for n in NAMES]


def test_html_headings_and_findings_use_labels(proxy_verdict: Verdict) -> None:
    text = html_report(keyed(proxy_verdict))
    assert "<h2>First failing exchange: session s1 turn 4, repetition 1</h2>" in text
    assert "session <code>s1</code> turn 4" in text
    assert f"<li>s1 = session {SESSION_ID} (field:metadata.user_id)</li>" in text
    assert "device_id" not in text and "&quot;device_id" not in text


def test_junit_testcases_are_named_by_label_with_the_session_as_a_property(proxy_verdict: Verdict) -> None:
    verdict = keyed(proxy_verdict)
    root = ET.fromstring(junit_xml(verdict, judged_keyed(verdict)))
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == ["s1", "s2"]
        props = {p.get("name"): p.get("value") for p in cases[0].findall("properties/property")}
        assert props == {"session": USER_ID, "session.key": SESSION_ID}
    failing = root.find("testsuite[@name='via:edge']/testcase[@name='s1']/failure")
    assert failing is not None and failing.get("type") == "stall_mid_stream"


def test_findings_of_two_keyed_sessions_stay_apart(proxy_verdict: Verdict) -> None:
    two = (Finding("via:edge", 1, USER_ID, 2, "reset", "closed", "a"), Finding("via:edge", 1, OTHER_ID, 2, "reset", "closed", "a"))
    out = " ".join(rendered(replace(keyed(proxy_verdict), findings=two), 80).split())
    assert "session s1 turn 2" in out and "session s2 turn 2" in out
    assert f"s2 = session {'0' * 36}" in out


def test_failed_attempts_of_one_turn_are_findings_of_their_own(proxy_verdict: Verdict) -> None:
    # Turn 2 of s1 took three attempts (exchanges 5, 6, 7); via:edge answered the first two 504.
    names = (replace(NAMES[0], attempts=((5, 1, 3), (6, 2, 3), (7, 3, 3))), NAMES[1])
    findings = tuple(Finding("via:edge", rep, USER_ID, 2, "http_error", "HTTP 504", "raise it", xid)
                     for rep in (1, 2) for xid in (5, 6))  # fmt: skip
    verdict = replace(keyed(proxy_verdict), findings=findings, sessions=names, evidence=None)
    out = " ".join(rendered(verdict, 80).split())
    assert "Findings (4 in 2 exchange(s))" in out
    assert "via:edge session s1 turn 2, attempt 1 of 3 (repetitions 1-2): http_error — HTTP 504" in out
    assert "via:edge session s1 turn 2, attempt 2 of 3 (repetitions 1-2): http_error — HTTP 504" in out
    doc = verdict.to_json()
    assert [(f["turn"], f["attempt"], f["attempts"], f["exchange"]) for f in doc["findings"][:2]] == [
        (2, 1, 3, 5), (2, 2, 3, 6)]
    assert doc["sessions"][0]["attempts"] == [[5, 1, 3], [6, 2, 3], [7, 3, 3]]
    assert "turn 2, attempt 2 of 3" in html_report(verdict)
