"""`proxycheck probe` against real nginx and HAProxy: the limits mitmproxy cannot have.

    nginx   -> engine   proxy_read_timeout 2.7 s (and buffering off): the read-timeout probe
                        must find it within a second
    haproxy -> engine   `maxconn 5` on its server: the 6th concurrent stream waits in HAProxy's
                        queue; the concurrency probe must find 5

Every process is stopped by the test that started it, also when it fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from common import chain_file
from proxies import start_haproxy, start_nginx

from proxycheck import cli
from proxycheck.io.procs import start_engine

READ_TIMEOUT, QUEUE_SLOTS = 2.7, 5

pytestmark = pytest.mark.timeout(90)


def probe(tmp: Path, chain: Path, *argv: str) -> tuple[int, dict]:
    out = tmp / "probe.json"
    status = cli.main(["probe", "--chain", str(chain), "--json", str(out), "--timeout", "2", *argv])
    return status, json.loads(out.read_text())


def result(doc: dict, route: str, probe_name: str) -> dict:
    return next(r for r in doc["results"] if r["route"] == route and r["probe"] == probe_name)


def test_nginx_read_timeout_is_found_within_a_second(tmp_path: Path) -> None:
    engine = start_engine("--token-interval", "0.01", "--keepalive-timeout", "60")
    nginx = None
    try:
        nginx = start_nginx(f"location / {{ proxy_pass {engine.url}; proxy_buffering off; "
                            f"proxy_http_version 1.1; proxy_read_timeout {int(READ_TIMEOUT * 1000)}ms; }}")  # fmt: skip
        chain = chain_file(tmp_path, engine.url, ("nginx", f"url={nginx.url}"))
        status, doc = probe(tmp_path, chain, "--probe", "gap", "--max-gap", "6")
    finally:
        if nginx is not None:
            nginx.stop()
        engine.stop()
    assert status == 1
    gap = result(doc, "via:nginx", "gap")
    assert gap["state"] == "limit" and gap["belongs_to"] == "nginx", gap
    assert abs(gap["value"] - READ_TIMEOUT) <= 1.0 and gap["value"] <= READ_TIMEOUT <= gap["failed_at"], gap
    assert result(doc, "direct", "gap")["state"] == "none"


def test_haproxy_connection_cap_that_queues_is_found(tmp_path: Path) -> None:
    engine = start_engine("--token-interval", "0.01", "--keepalive-timeout", "60")
    haproxy = None
    try:
        haproxy = start_haproxy(f"server engine 127.0.0.1:{engine.port} maxconn {QUEUE_SLOTS}",
                                defaults="timeout queue 30s")  # fmt: skip
        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={haproxy.url}"))
        status, doc = probe(tmp_path, chain, "--probe", "concurrency", "--max-concurrency", "16")
    finally:
        if haproxy is not None:
            haproxy.stop()
        engine.stop()
    assert status == 1
    conc = result(doc, "via:haproxy", "concurrency")
    assert conc["state"] == "limit" and conc["belongs_to"] == "haproxy", conc
    assert conc["value"] == QUEUE_SLOTS and conc["failed_at"] == QUEUE_SLOTS + 1, conc
    assert result(doc, "direct", "concurrency")["state"] == "none"
