"""A reverse proxy's read timeout shorter than a long prefill that grows with the context: the hop
is named at the first turn whose prefill outlasts it, never the engine.

Real engines (vLLM, SGLang) send their 200 headers at once and the first byte after the prefill,
which grows with the context. The reference engine does the same (`--ttft-per-kb`); nginx in front
of it with `proxy_read_timeout 10s` cuts turn 2, whose prefill is about 13.5 s, while the client
still waits (it was recorded so). On the direct route that prefill outlasts the replay's 10 s
stall watchdog too: it is waited out to the client's patience, a slow answer, and the verdict is
the hop at turn 2 (proxycheck used to cut it at 10 s and say `server` from turn 1).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import pytest
from common import chain_file, check, record_through
from proxies import start_nginx
from test_haproxy_squid import turn_sizes

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.io.procs import start_engine

READ_TIMEOUT = 10.0  # nginx proxy_read_timeout, s: the derived stall watchdog's floor too
TTFT_PER_KB = 1.27  # turn 1 (1.5 KiB) about 1.9 s, turn 2 (10.6 KiB, a 9000-byte tool result) about 13.5 s
TOOL_RESULT_BYTES = 9000


@pytest.mark.timeout(240)
def test_a_reverse_proxys_read_timeout_shorter_than_a_growing_prefill_is_the_hop_at_its_first_turn(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        eng = start_engine("--ttft-base", "0", "--ttft-per-kb", f"{TTFT_PER_KB}", "--token-interval", "0.004",
                           "--tool-call-rate", "1")  # fmt: skip
        stack.callback(eng.stop)
        nginx = start_nginx(f"location / {{ proxy_pass {eng.url}; proxy_http_version 1.1; proxy_buffering off; "
                            f"proxy_read_timeout {READ_TIMEOUT:g}s; }}")  # fmt: skip
        stack.callback(nginx.stop)
        rec = tmp_path / "rec"
        agent = record_through(nginx.url, rec, sessions=2, turns=2, tool_result_bytes=TOOL_RESULT_BYTES,
                               read_timeout=60.0, max_tokens=16)  # fmt: skip
        ttfts = {turn: TTFT_PER_KB * size / 1024 for turn, size in turn_sizes(rec)}
        # The set-up: turn 1's prefill well inside every limit (and under a third of the 10 s
        # watchdog, so the recording does not widen it), turn 2's well past nginx's timeout.
        assert ttfts[1] < READ_TIMEOUT / 3 - 0.5 and ttfts[2] > READ_TIMEOUT + 2.0, ttfts
        assert [(s.turns[-1].turn, s.turns[-1].outcome) for s in agent.sessions] == [(2, Outcome.RESET)] * 2
        chain = chain_file(tmp_path, eng.url, ("nginx", f"url={nginx.url}"))
        status, doc = check(tmp_path, rec, chain)
    assert status == 1 and (doc["verdict"], doc["culprit"], doc["first_turn"]) == ("proxy", "nginx", 2), doc["summary"]
    direct = next(r for r in doc["routes"] if r["route"] == "direct")
    assert direct["failures"] == 0 and direct["outcomes"].get("slow", 0) >= 2, direct
    nginx_findings = [f for f in doc["findings"] if f["route"] == "via:nginx"]
    assert nginx_findings and {(f["turn"], f["outcome"]) for f in nginx_findings} == {(2, "reset")}
    waited = doc["waits"]["waited_out"]
    assert waited and all(w["route"] == "direct" and w["turn"] == 2 and w["seconds"] > READ_TIMEOUT for w in waited)
