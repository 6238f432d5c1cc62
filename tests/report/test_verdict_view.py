"""The terminal report of a verdict, as a user reads it on a console 100 characters wide."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console
from samples import STALL, STALL_ADVICE, STALL_DETAIL, SUMMARY, complete_stream, stalled_stream

from proxycheck.core.diagnose.verdict import ENGINE_ADVICE, Advice, Evidence, Finding, Verdict
from proxycheck.report.verdict_view import (
    CUT_MARK,
    render_verdict,
    repetitions_text,
    statistics_line,
    strip,
)


def rendered(verdict: Verdict, width: int = 100) -> str:
    # A file of its own keeps the test's output quiet; the record holds what a user would see.
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    render_verdict(verdict, console)
    return console.export_text()


def flat(text: str) -> str:
    """The text with line breaks and runs of spaces folded, so wrapped sentences compare whole."""
    return " ".join(text.split())


def row(out: str, route: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(f"│ {route} "))


def test_proxy_verdict_names_the_culprit_the_statistics_and_the_summary(proxy_verdict: Verdict) -> None:
    out = rendered(proxy_verdict)
    assert "proxy   culprit: hop edge   from turn 4" in out
    assert SUMMARY in flat(out)
    assert "Fisher's exact test decided: p=0.0003 < 0.01 (via:edge 10/40 failed, via:gateway 0/40)" in out
    assert "noise floor (direct, 20 pair(s))" in out
    assert all(len(line) <= 100 for line in out.splitlines())


def test_route_table_has_one_row_per_route_in_ladder_order_with_counts(proxy_verdict: Verdict) -> None:
    out = rendered(proxy_verdict)
    header = next(line for line in out.splitlines() if "route" in line and "state" in line)
    assert [h in header for h in ("hops", "reps", "exch", "ok", "stall_mid_stream", "TTFT p50", "added")]
    lines = out.splitlines()
    positions = [lines.index(row(out, r)) for r in ("direct", "via:gateway", "via:edge")]
    assert positions == sorted(positions)
    cells = [c.strip() for c in row(out, "via:edge").split("│")[1:-1]]
    assert cells[0] == "via:edge" and cells[2:6] == ["10", "40", "30", "10"]
    assert cells[6:] == ["failing", "0.068 s", "+0.004 s"]
    direct = [c.strip() for c in row(out, "direct").split("│")[1:-1]]
    assert direct[4:7] == ["40", "·", "clean"]  # no stall on direct: a dot, not a zero


def test_findings_of_one_exchange_fold_into_one_and_its_advice_is_given_once(proxy_verdict: Verdict) -> None:
    out = flat(rendered(proxy_verdict))
    assert "Findings (10 in 1 exchange(s))" in out
    assert f"via:edge session s1 turn 4 (repetitions 1-10): stall_mid_stream — {STALL_DETAIL}" in out
    assert "Advice (1, for 10 exchange(s)) hop edge · stall_mid_stream · 10 exchange(s) on via:edge" in out
    # What was seen, the likely causes and the fix, each on its own line, once.
    assert f"{STALL.seen} likely: {STALL.likely} fix: {STALL.fix}" in out
    assert out.count("likely: ") == 1 and out.count("fix: ") == 1
    assert "then none for 10.0 s (keep-alive comments still came)" in out and "proxy_buffering off" in out


def test_advice_covering_many_exchanges_is_given_once_with_their_count(proxy_verdict: Verdict) -> None:
    # Three sessions stalled in each of 10 repetitions: 30 findings, 3 exchanges, one advice.
    findings = tuple(Finding("via:edge", rep, s, 4, "stall_mid_stream", STALL_DETAIL, STALL_ADVICE)
                     for s in ("s1", "s2", "s3") for rep in range(1, 11))  # fmt: skip
    stalls = replace(STALL, exchanges=30)
    out = flat(rendered(replace(proxy_verdict, findings=findings, advice=(stalls,))))
    assert "Findings (30 in 3 exchange(s))" in out
    assert "Advice (1, for 30 exchange(s))" in out and "· 30 exchange(s) on via:edge" in out
    assert out.count(STALL.likely) == 1


def test_a_413_advice_reads_whole_at_100_columns(proxy_verdict: Verdict) -> None:
    refused = Advice("edge", "http_error", "body_limit",
                     seen="hop edge refused request bodies with HTTP 413: requests up to 60,112 B passed via:edge, "
                          "the smallest refused was 60,590 B: the limit lies between",
                     likely="its request body size limit (nginx client_max_body_size)",
                     fix="raise it above the largest request body the sessions send (67,078 B in this run)",
                     exchanges=4, routes=("via:edge",))  # fmt: skip
    findings = tuple(Finding("via:edge", 1, s, 3, "http_error", "HTTP 413", refused.text) for s in ("s1", "s2"))
    out = rendered(replace(proxy_verdict, findings=findings, advice=(refused,)), 100)
    assert all(len(line) <= 100 for line in out.splitlines())
    text = flat(out)
    assert "hop edge · http_error, body limit · 4 exchange(s) on via:edge" in text
    assert f"{refused.seen} likely: {refused.likely} fix: {refused.fix}" in text
    assert "67,078 B" in text and "60,590 B here" not in text


def test_only_the_first_findings_are_listed(proxy_verdict: Verdict) -> None:
    many = tuple(Finding("via:edge", 1, f"s{i}", 4, "reset", "closed", "raise the timeout") for i in range(8))
    out = flat(rendered(replace(proxy_verdict, findings=many)))
    assert "session s4 turn 4" in out and "session s5 turn 4" not in out
    assert "… and 3 more (all of them in the --json document)" in out


def test_timeline_shows_the_failing_stream_cut_beside_the_reference(proxy_verdict: Verdict) -> None:
    out = rendered(proxy_verdict)
    assert "First failing exchange: session s1 turn 4, repetition 1" in out
    lines = out.split("First failing exchange")[1].splitlines()
    direct = next(line for line in lines if line.startswith("direct "))
    edge = next(line for line in lines if line.startswith("via:edge "))
    assert lines.index(direct) < lines.index(edge)  # the reference on top, as in the route table
    # The reference ends with its terminal marker early; the failing stream goes on with
    # keep-alive comments only, and is cut at the right end of the shared axis.
    assert direct.rstrip().endswith("]") and "|" in direct
    strip_part = edge[len("via:edge") :].strip()
    # Five comments: the fifth shares the last slot with the cut, which wins it.
    assert strip_part.startswith("|") and strip_part.count(".") == 4 and strip_part.endswith(CUT_MARK)
    assert 90 <= len(edge) <= 100  # the strip takes the width the console has
    assert "reference: TTFT 0.060 s · E2E 1.260 s · 24 content, 0 comment(s)" in out
    assert "failing: TTFT 0.060 s · cut at 10.7 s (stall_mid_stream) · 12 content, 5 comment(s)" in out
    assert "0 s" in out and "10.7 s" in out and "X cut (no terminal)" in out


def test_timeline_without_a_reference_says_so(proxy_verdict: Verdict) -> None:
    out = rendered(replace(proxy_verdict, evidence=Evidence(stalled_stream(), None)))
    assert "no reference exchange to compare with" in out
    assert not any(line.startswith("direct ") and "]" in line for line in out.splitlines())


def test_healthy_verdict_has_clean_routes_and_no_findings(healthy_verdict: Verdict) -> None:
    out = rendered(healthy_verdict)
    assert "│ healthy" in out and "culprit" not in out
    assert "all 3 routes clean in 10/10 runs" in out
    for r in ("direct", "via:gateway", "via:edge"):
        assert "clean" in row(out, r) and " 40 " in row(out, r)
    assert "Findings" not in out and "First failing exchange" not in out


def test_server_verdict_blames_the_engine(server_verdict: Verdict) -> None:
    out = rendered(server_verdict)
    assert "server   culprit: the engine (the direct route fails)   from turn 2" in out
    assert "the direct route fails (direct 8/40 failed)" in out
    cells = [c.strip() for c in row(out, "direct").split("│")[1:-1]]
    assert cells[4:7] == ["32", "8", "failing"]
    assert "direct session s2 turn 2 (repetition 1): reset" in flat(out)
    assert "the engine · reset, mid stream · 1 exchange(s) on direct" in flat(out)
    assert f"{ENGINE_ADVICE}" in flat(out) and "hop" not in flat(out).split("Advice (1")[1]


def test_not_reproduced_lists_what_differed(not_reproduced_verdict: Verdict) -> None:
    out = rendered(not_reproduced_verdict)
    assert "│ not-reproduced" in out
    assert "What differed from the recording:" in out
    for d in not_reproduced_verdict.differences:
        assert f"- {d}" in flat(out)


def test_a_narrow_console_folds_the_outcomes_into_one_column(proxy_verdict: Verdict) -> None:
    out = rendered(proxy_verdict, width=80)
    edge = next(line for line in out.splitlines() if line.strip().startswith("via:edge ") and "failing" in line)
    assert "30 ok · 10" in edge and "+0.004 s" in edge
    assert "stall_mid_stream" in out and "…" not in out.split("Findings")[0]
    assert all(len(line) <= 80 for line in out.splitlines())


def test_statistics_line_reads_the_localizers_figures_or_the_routes(proxy_verdict: Verdict) -> None:
    # Without figures, the counts of the culprit's route and the next one inward.
    assert statistics_line(replace(proxy_verdict, statistics={})) == "via:edge 10/40 failed, via:gateway 0/40"
    # The localizer's words for the rule that decided come first.
    rule = ("the deterministic rule decided: the same 2 exchange(s) failed in each of the 2 repetitions of "
            "via:edge and none in the 2 of via:gateway")  # fmt: skip
    same = {"method": "deterministic", "decided_by": "deterministic", "rule": rule, "p_value": 0.093,
            "alpha": 0.01, "failing_route": "via:edge", "failing": [4, 12], "clean_route": "via:gateway",
            "clean": [0, 12]}  # fmt: skip
    line = statistics_line(replace(proxy_verdict, statistics=same))
    assert line == f"{rule} (via:edge 4/12 failed, via:gateway 0/12)"


def test_a_p_value_is_never_shown_as_deciding_when_it_did_not(proxy_verdict: Verdict) -> None:
    # Statistics without the localizer's words: the deterministic rule decided, Fisher's p=0.093
    # did not, and the line must not set it beside the rule.
    same = {"method": "deterministic", "p_value": 0.093, "alpha": 0.01, "failing_route": "via:edge",
            "failing": [4, 12], "clean_route": "via:gateway", "clean": [0, 12]}  # fmt: skip
    line = statistics_line(replace(proxy_verdict, statistics=same)) or ""
    assert line.startswith("the deterministic rule decided: the same exchanges failed in every repetition")
    assert "p=" not in line and "Fisher" not in line
    # An inconclusive verdict whose p-value is under alpha (the failing route fails no more often):
    # nothing said decided, and no "not under" that the figure belies.
    low = {"method": "fisher_exact", "p_value": 0.003, "alpha": 0.01, "failing_route": "via:edge",
           "failing": [2, 40], "clean_route": "via:gateway", "clean": [9, 40]}  # fmt: skip
    line = statistics_line(replace(proxy_verdict, verdict="inconclusive", culprit=None, statistics=low)) or ""
    assert line.startswith("neither rule decided: Fisher's exact test p=0.003 (") and "not under" not in line


def test_strip_puts_the_most_telling_mark_in_a_shared_slot() -> None:
    # Content and the terminal marker land in the last slot: the end marker wins.
    assert strip(complete_stream(), 1.26, 4) == "|||]"
    assert strip(stalled_stream(), 10.65, 10).endswith(CUT_MARK)


def test_repetitions_fold_into_runs() -> None:
    assert repetitions_text([3, 1, 2, 5]) == "repetitions 1-3, 5"
    assert repetitions_text([2]) == "repetition 2"


def test_inconclusive_shows_the_test_that_could_not_decide(proxy_verdict: Verdict) -> None:
    stats = {"method": "fisher_exact", "p_value": 0.12, "alpha": 0.01, "failing_route": "via:edge",
             "failing": [2, 40], "clean_route": "via:gateway", "clean": [0, 40]}  # fmt: skip
    verdict = replace(proxy_verdict, verdict="inconclusive", culprit=None, first_turn=None, statistics=stats,
                      summary="via:edge failed 2/40 and via:gateway 0/40: not a clear difference")  # fmt: skip
    out = rendered(verdict)
    assert "│ inconclusive" in out and "culprit" not in out
    panel = flat(out.replace("│", " "))  # the panel's sides out of the wrapped line
    assert "neither rule decided: Fisher's exact test p=0.12, not under 0.01 (via:edge 2/40 failed, via:gateway 0/40)" in panel
    assert "First failing exchange" in out


def test_names_are_shown_as_they_are_not_read_as_markup(healthy_verdict: Verdict) -> None:
    routes = tuple(replace(r, route=r.route.replace("edge", "[bold]edge"), hops=tuple(h.replace("edge", "[i]edge")
                   for h in r.hops)) for r in healthy_verdict.routes)  # fmt: skip
    out = rendered(replace(healthy_verdict, routes=routes, summary="[red]x[/red]"))
    assert "via:[bold]edge" in out and "[i]edge →" in out and "[red]x[/red]" in out


def test_incomplete_names_the_missing_routes_at_80_columns(incomplete_verdict: Verdict) -> None:
    out = rendered(incomplete_verdict, width=80)
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "│ incomplete   no verdict from part of the evidence" in out and "culprit" not in out
    text = flat(out.replace("│", " "))  # the panel's sides out of the wrapped summary
    assert incomplete_verdict.summary in text
    assert "Routes missing (no verdict without them):" in text
    assert "- via:edge: cut short in repetition 1 (2 of 40 exchanges observed, not judged)" in text
    assert "- via:corp: not replayed" in text
    # The table holds the finished routes only: nothing of the cut route is counted there.
    table = out.split("Routes (ladder order")[1].split("Routes missing")[0]
    routes = [line.split()[1] for line in table.splitlines() if line.startswith("│ ")]
    assert routes == ["direct", "via:gateway"]
    assert "First failing exchange" not in out
