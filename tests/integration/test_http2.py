"""HTTP/2 as recorded: turns recorded over HTTP/2 are replayed over HTTP/2 where the route offers
it (real nginx with TLS and http2), with the recorded connection reuse; `--client aiohttp`
replays them over HTTP/1.1 and says so.

mitmproxy follows the client's ALPN order and httpx offers http/1.1 first, so no mitmproxy hop
negotiates HTTP/2 with the replayer; nginx prefers h2, as most servers do. The recording is made
through the recorder and then marked as HTTP/2 (an agent over HTTP/2 through a mitmproxy would
not have been), which is what a recording of an HTTP/2 harness holds.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from common import chain_file, record_through
from proxies import start_nginx

from proxycheck import cli
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.io.procs import start_engine
from proxycheck.io.runstore import load_run

pytestmark = pytest.mark.timeout(120)


def self_signed(home: Path) -> tuple[Path, Path]:
    cert, key = home / "cert.pem", home / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_http2_turns_go_over_http2_through_nginx(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert, key = self_signed(tmp_path)
    engine = start_engine("--token-interval", "0.005")
    nginx = None
    try:
        recording = tmp_path / "rec"
        assert record_through(engine.url, recording, sessions=2, turns=3, think=0.1).ok
        for journal in recording.glob("*.jsonl"):
            journal.write_text(journal.read_text().replace('"http":"HTTP/1.1"', '"http":"HTTP/2.0"'))
        nginx = start_nginx(
            f"ssl_certificate {cert}; ssl_certificate_key {key}; "
            f"location / {{ proxy_pass {engine.url}; proxy_buffering off; proxy_http_version 1.1; }}",
            listen="ssl http2",
        )  # fmt: skip
        chain = chain_file(tmp_path, engine.url, ("edge", f"url=https://127.0.0.1:{nginx.port}"),
                           extra=f'verify = "{cert}"\n')  # fmt: skip
        runs = {}
        for client in ("httpx", "aiohttp"):
            out = tmp_path / f"run-{client}"
            argv = ["replay", str(recording), "--chain", str(chain), "--route", "via:edge", "--pace", "fast",
                    "--client", client, "--out", str(out)]  # fmt: skip
            assert cli.main(argv) == 0
            runs[client] = load_run(out).observations
    finally:
        if nginx is not None:
            nginx.stop()
        engine.stop()
    h2 = runs["httpx"]
    assert len(h2) == 6 and all(o.outcome is Outcome.OK and o.http_version == "HTTP/2" for o in h2)
    # One HTTP/2 connection per session carried its turns, as the recording reused one.
    assert sorted((o.session, o.turn, o.reused) for o in h2) == sorted(
        (o.session, o.turn, o.turn > 1) for o in h2
    )  # fmt: skip
    assert all(o.outcome is Outcome.OK and o.http_version == "HTTP/1.1" for o in runs["aiohttp"])
    assert "aiohttp speaks HTTP/1.1 only: 6 turn(s) recorded over HTTP/2" in capsys.readouterr().err
