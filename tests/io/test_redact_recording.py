"""What a recording on disk holds of a request full of credentials: none of them, the list of
what was redacted, and every other byte of the URL and the body."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxycheck.core.recording.redact import REDACTED
from proxycheck.io.storage import RecordingWriter, load

pytestmark = pytest.mark.timeout(30)

SECRETS = ["tok-1", "tok-2", "ak-3", "ak-4", "at-5", "cs-6", "pw-7", "AIza-8"]


def test_a_recording_holds_no_credential_and_the_rest_unchanged(tmp_path: Path) -> None:
    body = ('{"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}],\n'
            ' "metadata": {"api_key": "ak-3", "apiKey": "ak-4"}, "access_token": "at-5",\n'
            ' "client_secret": "cs-6", "password": "pw-7", "temperature": 1e0}').encode()  # fmt: skip
    url = "http://h/v1/chat/completions?q=a%20b&s=1;2&key=AIza-8"
    headers = [("X-Auth-Token", "tok-1"), ("x-amz-security-token", "tok-2"), ("anthropic-version", "2023-06-01")]
    writer = RecordingWriter(tmp_path / "rec")
    xid = writer.request("POST", url, headers, body)
    writer.response(xid, 200, "OK", [("x-ratelimit-remaining-tokens", "9000")], streamed=False)
    writer.end(xid)
    writer.close()
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "rec").rglob("*") if p.is_file())
    for secret in SECRETS:
        assert secret.encode() not in on_disk
    recording = load(tmp_path / "rec")
    (ex,) = recording.exchanges
    assert ex.url == "http://h/v1/chat/completions?q=a%20b&s=1;2&key=[redacted]"
    assert dict(ex.request_headers) == {"X-Auth-Token": REDACTED, "x-amz-security-token": REDACTED,
                                        "anthropic-version": "2023-06-01"}  # fmt: skip
    assert set(ex.redacted) == {"query:key", "header:x-auth-token", "header:x-amz-security-token",
                                "body:metadata.api_key", "body:metadata.apiKey", "body:access_token",
                                "body:client_secret", "body:password"}  # fmt: skip
    stored = recording.request_body(ex)
    assert stored.replace(b'"[redacted]"', b"") == body.replace(b'"ak-3"', b"").replace(b'"ak-4"', b"").replace(
        b'"at-5"', b"").replace(b'"cs-6"', b"").replace(b'"pw-7"', b"")  # fmt: skip
    assert json.loads(stored)["temperature"] == 1.0 and b"1e0" in stored
