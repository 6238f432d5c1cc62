"""The HTML report renders in headless Chromium with the verdict visible.

Driven over the W3C WebDriver protocol by a client of a few lines on httpx (no selenium): start
`chromedriver --port=0`, read the port it chose from its output, open a headless session, load
the report from a file:// URL, and ask the browser what a user would see: is `#verdict` displayed,
what does it say, does the timeline SVG take room on the page.

chromium and chromium-driver are Debian packages `make test` installs when it runs as root (as
CI does). The test skips when they are missing and we are not root; as root it fails instead,
since the Makefile must have installed them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from proxycheck.core.diagnose.verdict import Verdict
from proxycheck.report.html import html_report

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference
START_TIMEOUT = 30.0  # chromedriver's start, and a browser session's (a cold Chromium can be slow)
REQUEST_TIMEOUT = 30.0
HEADLESS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def find_binaries() -> tuple[str | None, str | None]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or next(
        (p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if os.access(p, os.X_OK)), None
    )
    return browser, driver


class WebDriverError(AssertionError):
    pass


class WebDriver:
    """Just enough of the W3C WebDriver protocol: a session, navigation, elements."""

    def __init__(self, base: str) -> None:
        self.http = httpx.Client(base_url=base, timeout=REQUEST_TIMEOUT)
        self.session: str | None = None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.http.request(method, path, json=body)
        value = response.json().get("value")
        if response.status_code >= 400 or (isinstance(value, dict) and "error" in value):
            raise WebDriverError(f"{method} {path}: HTTP {response.status_code}: {value}")
        return value

    def start(self, browser: str) -> None:
        options = {"args": HEADLESS, "binary": browser}
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def go(self, url: str) -> None:
        self.call("POST", f"/session/{self.session}/url", {"url": url})

    def element(self, css: str) -> str:
        found = self.call("POST", f"/session/{self.session}/element", {"using": "css selector", "value": css})
        return found[ELEMENT]

    def get(self, element: str, what: str) -> Any:
        return self.call("GET", f"/session/{self.session}/element/{element}/{what}")

    def close(self) -> None:
        try:
            if self.session:
                self.call("DELETE", f"/session/{self.session}")
        finally:
            self.session = None
            self.http.close()


def start_chromedriver(driver: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """chromedriver on a port it picks itself (no race for a free port), read from its output."""
    with log.open("wb") as out:
        # Its own process group, so whatever it started can be stopped with it.
        proc = subprocess.Popen([driver, "--port=0"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        found = re.search(rb"started successfully on port (\d+)", log.read_bytes())
        if found:
            return proc, int(found.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop(proc)
    raise AssertionError(f"chromedriver did not start: {log.read_text(errors='replace')[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """chromedriver, then anything left in its process group (a browser a failed test left)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@pytest.fixture
def browser_session(tmp_path: Path) -> Iterator[WebDriver]:
    browser, driver = find_binaries()
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None)
        if os.geteuid() == 0:
            pytest.fail(f"{missing} not installed: `make test` installs the Debian packages chromium and "
                        "chromium-driver when run as root")  # fmt: skip
        pytest.skip(f"{missing} not installed (Debian: apt-get install chromium chromium-driver, as root)")
    proc, port = start_chromedriver(driver, tmp_path / "chromedriver.log")
    client = WebDriver(f"http://127.0.0.1:{port}")
    try:
        client.start(browser)
        yield client
    finally:
        try:
            client.close()
        finally:
            stop(proc)


@pytest.mark.timeout(120)
def test_the_report_renders_with_the_verdict_visible(
    tmp_path: Path, proxy_verdict: Verdict, browser_session: WebDriver
) -> None:
    report = tmp_path / "report.html"
    report.write_text(html_report(proxy_verdict), encoding="utf-8")
    browser_session.go(report.as_uri())

    verdict = browser_session.element("#verdict")
    assert browser_session.get(verdict, "displayed") is True
    text = browser_session.get(verdict, "text")
    assert "proxy" in text and "edge" in text
    assert text == "proxy: hop edge"

    timeline = browser_session.element("svg#timeline")
    assert browser_session.get(timeline, "displayed") is True
    rect = browser_session.get(timeline, "rect")
    assert rect["width"] > 100 and rect["height"] > 50

    row = browser_session.element('tr[data-route="via:edge"]')
    assert "failing" in browser_session.get(row, "text")
