"""The verdict's waits in the terminal (at 100 columns), in HTML and in JSON."""

from __future__ import annotations

import io
from dataclasses import replace

from rich.console import Console

from proxycheck.core.diagnose.verdict import HEALTHY, Verdict
from proxycheck.core.diagnose.waits import waits_of
from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.report.html import html_report
from proxycheck.report.verdict_view import verdict_view

PATIENT = Watchdogs(headers=30.0, stall=10.0).with_patience(600.0, 600.0, "the client's own read timeout (600 s)")
SLOW = Observation(route="direct", repetition=1, session="abc", turn=2, t_start=0.0, end=20.0, outcome=Outcome.SLOW,
                   waited=12.5)  # fmt: skip


def text_of(verdict: Verdict) -> str:
    console = Console(width=100, record=True, color_system=None, file=io.StringIO())
    console.print(verdict_view(verdict, 100))
    return console.export_text()


def test_the_reports_show_the_waits() -> None:
    verdict = Verdict(HEALTHY, None, "no route fails", ())
    w = waits_of(PATIENT, [SLOW])
    text = text_of(replace(verdict, waits=w))
    assert "Waits:\n  - a silence fails at the client's patience, 600 s" in text
    assert "direct abc turn 2 (12.5 s)" in " ".join(text.split())
    assert "Waits" not in text_of(verdict)
    html = html_report(replace(verdict, waits=w))
    assert '<section id="waits"><h2>Waits</h2>' in html and "12.5 s" in html
    assert replace(verdict, waits=w).to_json()["waits"]["stall_limit"] == 600.0
    assert verdict.to_json()["waits"] is None
