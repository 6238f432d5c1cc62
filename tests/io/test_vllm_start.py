"""Readiness of vLLM as `proxycheck.io.vllm` waits for it, against stand-in processes that behave
as vLLM does at its start (its port bound before the model is loaded, GET /health answering 200
only once it is), and the bounded paths: a process that exits while starting, and one never ready,
are errors quoting them, and are stopped by their pid."""

from __future__ import annotations

import sys
import urllib.request
from pathlib import Path

import pytest

from proxycheck.core.errors import ProcessError
from proxycheck.io.procs import Managed, free_port
from proxycheck.io.vllm import VllmSetup, measure_speed, wait_ready

pytestmark = pytest.mark.timeout(60)

# Binds at once; GET /health is 503 for `LOADING` seconds (the model loading), then 200.
HEALTH_LATER = """
import http.server, sys, time
start, loading = time.monotonic(), float(sys.argv[2])
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ready = self.path == "/health" and time.monotonic() - start >= loading
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def stand_in(script: str, *args: str) -> Managed:
    port = free_port()
    return Managed([sys.executable, "-c", script, str(port), *args], "127.0.0.1", port, name="vllm")


def test_an_engine_whose_port_accepts_before_it_is_ready_is_waited_for_until_health_says_so() -> None:
    proc = stand_in(HEALTH_LATER, "1.5")
    try:
        assert wait_ready(proc, timeout=30) is proc and proc.alive()
        # Ready means ready, not a bound port: /health answers 200 the moment the wait returns.
        with urllib.request.urlopen(proc.url + "/health", timeout=5) as answer:
            assert answer.status == 200
    finally:
        proc.stop()


def test_an_engine_never_ready_is_an_error_within_the_bound_and_is_stopped() -> None:
    proc = stand_in(HEALTH_LATER, "3600")
    with pytest.raises(ProcessError, match="vllm was not ready within 2 s"):
        wait_ready(proc, timeout=2)
    assert not proc.alive()


def test_an_engine_that_exits_while_starting_is_an_error_quoting_its_output() -> None:
    proc = stand_in("import sys; print('no model here'); sys.exit(3)")
    with pytest.raises(ProcessError, match=r"(?s)vllm exited with status 3 before it was ready:.*no model here"):
        wait_ready(proc, timeout=30)
    assert not proc.alive()


def test_a_setup_missing_its_python_or_its_model_says_which_and_how_to_build_it(tmp_path: Path) -> None:
    setup = VllmSetup.of_project(tmp_path)
    assert setup.missing() == f"vLLM is not installed ({setup.python} missing): `make vllm` builds it"
    setup.python.parent.mkdir(parents=True)
    setup.python.write_text("")
    assert setup.missing() == f"the model is not built ({setup.model}/config.json missing): `make vllm` builds it"
    setup.model.mkdir(parents=True)
    (setup.model / "config.json").write_text("{}")
    assert setup.missing() is None


# Streams /v1/completions as vLLM does: a chunk per token `gap` seconds apart after a first token
# that takes `per_word` seconds a pasted word, then the usage chunk (prompt tokens: 3 per word and
# 10 more) and [DONE]. With "broken" as its last argument, it answers without usage.
COMPLETIONS = """
import http.server, json, sys, time
port, gap, per_word = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
broken = sys.argv[4:] == ["broken"]
class Completions(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        words = len(req["prompt"].split()) - 5  # the nonce and "Here is the file:"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        time.sleep(per_word * words)
        for i in range(req["max_tokens"]):
            if i:
                time.sleep(gap)
            chunk = {"choices": [{"index": 0, "text": f" t{i}"}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\\n\\n".encode()); self.wfile.flush()
        if not broken:
            usage = {"choices": [], "usage": {"prompt_tokens": 3 * words + 10}}
            self.wfile.write(f"data: {json.dumps(usage)}\\n\\n".encode())
        self.wfile.write(b"data: [DONE]\\n\\n")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Completions).serve_forever()
"""


def test_the_speed_measured_is_the_engines_first_tokens_and_decode_pace() -> None:
    # 2 ms a pasted word (0.5 s for the 250-word prompt), tokens 50 ms apart
    proc = stand_in(COMPLETIONS, "0.05", "0.002").wait_ready()
    try:
        speed = measure_speed(proc.url, timeout=30)
    finally:
        proc.stop()
    assert (speed.short_tokens, speed.long_tokens, speed.long_words) == (3 * 4 + 10, 3 * 250 + 10, 250)
    assert 0.05 <= speed.per_token < 0.5  # a sleep is never shorter; a loaded machine may stretch it
    assert speed.first_token < speed.long_first_token and speed.long_first_token >= 0.5
    assert speed.tokens_per_word == pytest.approx(3.0)
    # 2 ms of prefill a word at 3 tokens a word: 0.67 s per 1k tokens, or more on a busy machine
    assert speed.prefill_per_token * 1000 >= 0.6


def test_an_engine_whose_stream_lacks_its_usage_or_that_is_gone_is_an_error_saying_so() -> None:
    proc = stand_in(COMPLETIONS, "0", "0", "broken").wait_ready()
    try:
        with pytest.raises(ProcessError, match="its stream had no text or no usage"):
            measure_speed(proc.url, timeout=30)
    finally:
        proc.stop()
    with pytest.raises(ProcessError, match=f"measuring the engine at {proc.url}: "):
        measure_speed(proc.url, timeout=5)  # stopped: nothing listens there
