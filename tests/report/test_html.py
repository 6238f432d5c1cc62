"""The HTML report: one offline page that parses, with the verdict, the routes and the timeline."""

from __future__ import annotations

import html
import re
from dataclasses import replace
from html.parser import HTMLParser

from samples import STALL, stalled_stream

from proxycheck.core.diagnose.verdict import Evidence, Verdict
from proxycheck.report.html import html_report, nice_step

VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
# SVG elements written self-closed (<line/>): the parser reports them with handle_startendtag.


class Page(HTMLParser):
    """Tags, attributes and the text under each id, with a check that elements nest properly."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[tuple[str, str | None]] = []
        self.text_by_id: dict[str, str] = {}
        self.errors: list[str] = []
        self.feed(text)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed: {self.stack}")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.stack.append((tag, dict(attrs).get("id")))
        if dict(attrs).get("id"):
            self.text_by_id.setdefault(str(dict(attrs)["id"]), "")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for _, ident in self.stack:
            if ident:
                self.text_by_id[ident] += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())]


def page(verdict: Verdict) -> tuple[str, Page]:
    text = html_report(verdict)
    parsed = Page(text)
    assert parsed.errors == []
    return text, parsed


def test_the_page_is_self_contained(proxy_verdict: Verdict) -> None:
    text, parsed = page(proxy_verdict)
    assert text.startswith("<!DOCTYPE html>")
    for _, attrs in parsed.tags:
        for name in ("src", "href", "xlink:href", "action", "poster", "data"):
            value = attrs.get(name) or ""
            assert not re.match(r"\s*(https?:)?//", value), (name, value)
    assert "http://" not in text and "https://" not in text
    assert not parsed.find("script") and not parsed.find("link") and not parsed.find("img")
    assert "url(" not in text and "@import" not in text
    assert len(parsed.find("style")) == 1


def test_the_verdict_summary_and_statistics(proxy_verdict: Verdict) -> None:
    _, parsed = page(proxy_verdict)
    assert parsed.find("h1", id="verdict")
    assert parsed.text_by_id["verdict"] == "proxy: hop edge"
    assert parsed.text_by_id["summary"] == proxy_verdict.summary
    assert parsed.text_by_id["statistics"] == (
        "Fisher's exact test decided: p=0.0003 < 0.01 (via:edge 10/40 failed, via:gateway 0/40)")


def test_routes_in_ladder_order_with_their_counts(proxy_verdict: Verdict) -> None:
    text, parsed = page(proxy_verdict)
    assert [a["data-route"] for a in parsed.find("tr") if a.get("data-route")] == ["direct", "via:gateway", "via:edge"]
    edge_row = text[text.index('<tr data-route="via:edge">') :].split("</tr>")[0]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", edge_row)
    assert cells[2:6] == ["10", "40", "30", "10"] and "failing" in edge_row
    assert '<th class="num">stall_mid_stream</th>' in text
    bars = [a for a in parsed.find("svg") if a.get("class") == "bar"]
    assert len(bars) == 3 and bars[2]["aria-label"] == "30 ok, 10 stall_mid_stream"


def test_findings_list_the_exchanges_and_the_advice_is_given_once(proxy_verdict: Verdict) -> None:
    text, parsed = page(proxy_verdict)
    findings = text[text.index('<section id="findings">') :].split("</section>")[0]
    assert "repetitions 1-10" in findings and "stall_mid_stream" in findings and "likely" not in findings
    (item,) = [a for t, a in parsed.tags if t == "li" and a.get("data-kind")]
    assert (item["data-hop"], item["data-outcome"], item["data-kind"]) == ("edge", "stall_mid_stream", "stall_mid_stream")
    advice = parsed.text_by_id["advice"]
    assert "Advice (1)" in advice and "hop edge · stall_mid_stream · 10 exchange(s) on via:edge" in advice
    assert f'<p class="seen">{html.escape(STALL.seen)}</p>' in text
    assert f'<p class="likely"><strong>likely:</strong> {html.escape(STALL.likely)}</p>' in text
    assert f'<p class="fix"><strong>fix:</strong> {html.escape(STALL.fix)}</p>' in text
    assert text.count(html.escape(STALL.likely)) == 1


def test_the_timeline_draws_both_exchanges_on_one_axis(proxy_verdict: Verdict) -> None:
    text, parsed = page(proxy_verdict)
    (svg,) = parsed.find("svg", id="timeline")
    # HTMLParser lower-cases attribute names: viewBox reads as viewbox.
    assert svg["role"] == "img" and svg["viewbox"] == f"0 0 {svg['width']} {svg['height']}"
    lanes = [a for a in parsed.find("g") if (a.get("class") or "").startswith("lane")]
    assert [(a["class"], a["data-route"]) for a in lanes] == [
        ("lane reference", "direct"),
        ("lane failing", "via:edge"),
    ]
    timeline = text[text.index('<svg id="timeline"') :].split("</svg>")[0]
    content_paths = re.findall(r'<path class="content" d="([^"]*)"', timeline)
    assert [p.count("M") for p in content_paths] == [24, 12]  # a tick per content event
    assert timeline.count('class="comment"') == 5 and timeline.count('class="terminal"') == 1
    assert timeline.count('class="cut"') == 1 and "cut at 10.7 s" in timeline
    assert "E2E 1.260 s" in timeline
    for label in ("0 s", "2 s", "10 s", "seconds since the request was sent"):
        assert f">{label}</text>" in timeline
    assert "First failing exchange: session s1 turn 4, repetition 1" in text


def test_a_timeline_without_reference_has_one_lane(proxy_verdict: Verdict) -> None:
    text, parsed = page(replace(proxy_verdict, evidence=Evidence(stalled_stream(), None)))
    assert len([a for a in parsed.find("g") if (a.get("class") or "").startswith("lane")]) == 1
    assert "no reference exchange to compare with" in text


def test_healthy_has_no_timeline(healthy_verdict: Verdict) -> None:
    _, parsed = page(healthy_verdict)
    assert parsed.text_by_id["verdict"] == "healthy"
    assert not parsed.find("svg", id="timeline") and not parsed.find("section", id="findings")


def test_server_and_not_reproduced(server_verdict: Verdict, not_reproduced_verdict: Verdict) -> None:
    _, parsed = page(server_verdict)
    assert parsed.text_by_id["verdict"] == "server: the engine"
    _, parsed = page(not_reproduced_verdict)
    assert parsed.text_by_id["verdict"] == "not-reproduced"
    differences = parsed.text_by_id["differences"]
    assert all(d in differences for d in not_reproduced_verdict.differences)


def test_all_text_is_escaped(proxy_verdict: Verdict) -> None:
    nasty = '<script>alert("x")</script> & <img src="https://evil.example/x.png">'
    verdict = replace(proxy_verdict, summary=nasty, culprit='<b onclick="x">edge</b>', differences=(nasty,))
    text, parsed = page(verdict)
    assert not parsed.find("script") and not parsed.find("img") and not parsed.find("b")
    assert parsed.text_by_id["summary"] == nasty
    assert parsed.text_by_id["verdict"] == 'proxy: hop <b onclick="x">edge</b>'
    assert "&lt;script&gt;" in text


def test_axis_steps_are_round_numbers() -> None:
    assert nice_step(10.65) == 2
    assert nice_step(1.26) == 0.2
    assert nice_step(600) == 100


def test_incomplete_lists_the_missing_routes(incomplete_verdict: Verdict) -> None:
    text, parsed = page(incomplete_verdict)
    assert parsed.text_by_id["verdict"] == "incomplete"
    assert parsed.text_by_id["summary"] == incomplete_verdict.summary
    assert 'class="card verdict-card incomplete"' in text
    missing = [a["data-route"] for a in parsed.find("li") if a.get("data-route")]
    assert missing == ["via:edge", "via:corp"]
    cut = "via:edge: cut short in repetition 1 (2 of 40 exchanges observed, not judged)"
    assert cut in parsed.text_by_id["missing"]
    assert [a["data-route"] for a in parsed.find("tr") if a.get("data-route")] == ["direct", "via:gateway"]
