"""Forwarding headers a recorded hop added (X-Forwarded-For, Forwarded, Via, ...) are not replayed:
the plan leaves them out and says so, and a real hop in a replayed route never receives them."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory

from proxycheck.core.recording.redact import REDACTED
from proxycheck.core.replay.plan import FORWARDING, forwarding_left_out, replay_headers

pytestmark = pytest.mark.timeout(90)

RECORDED_FORWARDING = [
    ("X-Forwarded-For", "203.0.113.7, 10.0.0.2"),
    ("Forwarded", "for=203.0.113.7;proto=https;host=api.example"),
    ("X-Forwarded-Host", "api.example"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Port", "443"),
    ("X-Real-IP", "203.0.113.7"),
    ("Via", "1.1 squid-edge (squid/6.6)"),
]
KEPT = [("content-type", "application/json"), ("x-session-id", "sess-fwd"), ("anthropic-version", "2023-06-01")]


def test_the_plan_sends_none_of_the_recorded_forwarding_headers() -> None:
    recorded = tuple(RECORDED_FORWARDING + KEPT + [("Authorization", REDACTED)])
    assert replay_headers(recorded) == tuple(KEPT)
    assert forwarding_left_out(recorded) == ("x-forwarded-for", "forwarded", "x-forwarded-host", "x-forwarded-proto",
                                             "x-forwarded-port", "x-real-ip", "via")  # fmt: skip
    assert {name.lower() for name, _ in RECORDED_FORWARDING} <= FORWARDING


def _recording(directory: Path) -> Path:
    # io imports here: the module's first test is a pure one.
    from proxycheck.io.storage import RecordingWriter

    body = json.dumps({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}).encode()
    reply = json.dumps({"id": "c1", "object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()  # fmt: skip
    writer = RecordingWriter(directory)
    xid = writer.request("POST", "http://gw/v1/chat/completions", RECORDED_FORWARDING + KEPT, body)
    writer.response(xid, 200, "OK", [("content-type", "application/json")], streamed=False)
    writer.data(xid, reply)
    writer.end(xid)
    writer.close()
    return directory


def test_a_replay_through_a_real_hop_sends_no_recorded_forwarding_header(
    tmp_path: Path, engines: EngineFactory, mitmdumps: MitmdumpFactory
) -> None:
    recording = _recording(tmp_path / "rec")
    engine = engines("--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")
    # A reverse hop that writes every request's headers to its log, as it received them.
    printer = tmp_path / "print_headers.py"
    printer.write_text("import logging\n\ndef request(flow):\n"
                       "    logging.warning('received headers: %r', list(flow.request.headers.items(multi=True)))\n")
    hop = mitmdumps("--mode", f"reverse:{engine.url}", "-s", str(printer))
    chain = tmp_path / "chain.toml"
    chain.write_text(f'engine = "{engine.url}"\n[[hop]]\nname = "edge"\nurl = "{hop.url}"\n')

    dry = run_proxycheck("replay", str(recording), "--chain", str(chain), "--route", "via:edge", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert ("left out as recorded by a hop: x-forwarded-for, forwarded, x-forwarded-host, x-forwarded-proto, "
            "x-forwarded-port, x-real-ip, via") in dry.stdout  # fmt: skip

    result = run_proxycheck("replay", str(recording), "--chain", str(chain), "--route", "via:edge", "--pace", "fast",
                            "--out", str(tmp_path / "run"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 10
    while "sess-fwd" not in hop.log_path.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.05)
    # Only what the hop printed of the request's headers: the rest of its log holds client ports
    # and addresses, which may spell a recorded value ("127.0.0.1:44347" holds "443").
    seen = "\n".join(line for line in hop.log_path.read_text(errors="replace").lower().splitlines()
                     if "received headers:" in line)  # fmt: skip
    assert "sess-fwd" in seen  # the hop printed the request's headers
    for name, value in RECORDED_FORWARDING:
        assert name.lower() not in {k for k, _ in _pairs(seen)}, name


def _pairs(printed: str) -> set[tuple[str, str]]:
    """The (name, value) pairs of the hop's "received headers: [...]" lines, lowercased."""
    found: set[tuple[str, str]] = set()
    for line in printed.splitlines():
        listed = ast.literal_eval(line.split("received headers:", 1)[1].strip())
        found.update((str(k), str(v)) for k, v in listed)
    return found
