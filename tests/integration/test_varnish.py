"""Varnish in the proxy matrix: a cap on a response's whole duration, and what `check` says of it.

Many hops cut a response at a fixed time from its start however much data still flows
(Cloudflare, GCP load balancers, Envoy's route timeout, Traffic Server's
transaction_active_timeout); Varnish's `send_timeout` is one (docs/troubleshooting.md). The test
starts the reference engine with a prefill that grows with the context and a steady stream
after it, Varnish in front of it, records agent sessions through Varnish (the recorder at the
client side, where a harness's local mitmproxy sits), runs `check` on a chain that names the
Varnish hop, and asserts what a user would see: the verdict, the culprit, the first failing turn,
the outcome and the advice. Never absolute times: the time the advice quotes is compared with
the configured cap. What Varnish 7.1 really does, found by running it (and asserted here):

* `send_timeout` is a total send time for an HTTP/1 response: a response still streaming when
  it runs out is cut (the chunked body never ends: `reset`), though a token came every 40 ms.
  Varnish checks it when it writes, so a response that is silent then (a long prefill) is cut
  at its next write instead; here every cut falls mid-stream.
* `do_stream` (its default) passes SSE on as it comes; every request is passed (not cached).
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from common import chain_file, check, record_through
from proxies import start_varnish

from proxycheck.io.procs import start_engine

CAP = 1.8  # Varnish's send_timeout, s
# TTFT = 0.05 s + 0.15 s per KiB of request; a token every 40 ms. With tool results of 3000 B the
# agent's three turns send about 1.5, 4.7 and 7.9 KiB: two short tool calls that end after about
# 0.4 and 0.9 s, then a text answer of 32 tokens whose first comes after about 1.2 s and whose last
# after about 2.5 s. Only the third outlasts the cap, and its first token comes before it.
ENGINE = ("--ttft-base", "0.05", "--ttft-per-kb", "0.15", "--token-interval", "0.04", "--tool-call-rate", "1")
FAST = ("--pace", "fast", "--stall-timeout", "4")  # the stall watchdog above every TTFT and token gap
CAPPED = re.compile(r"a cap on the response's duration of about ([\d.]+)(?:-([\d.]+))? s from the request")


def turns_seen(run: Any) -> list[tuple[int, str, int | None]]:
    return sorted((t.turn, t.outcome.value, t.status) for s in run.sessions for t in s.turns)


@pytest.mark.timeout(120)
def test_send_timeout_caps_a_streaming_response(tmp_path: Path) -> None:
    with ExitStack() as stack:
        eng = start_engine(*ENGINE)
        stack.callback(eng.stop)
        proxy = start_varnish(eng.url.removeprefix("http://"), params={"send_timeout": f"{CAP:g}"})
        stack.callback(proxy.stop)
        agent = record_through(proxy.url, tmp_path / "rec", turns=3, max_tokens=32, tool_result_bytes=3000)
        # The agent wedged at its third turn: Varnish forwarded the engine's 200 and cut the stream.
        assert turns_seen(agent) == [(1, "ok", 200)] * 2 + [(2, "ok", 200)] * 2 + [(3, "reset", 200)] * 2

        chain = chain_file(tmp_path, eng.url, ("varnish", f"url={proxy.url}"))
        status, doc = check(tmp_path, tmp_path / "rec", chain, *FAST)
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "varnish", doc["summary"]
        assert doc["first_turn"] == 3
        routes = {r["route"]: r for r in doc["routes"]}
        assert routes["direct"]["failures"] == 0
        findings = [f for f in doc["findings"] if f["route"] == "via:varnish"]
        assert findings and all(f["turn"] == 3 and f["outcome"] == "reset" for f in findings), findings
        (advice,) = [a for a in doc["advice"] if a["hop"] == "varnish"]
        assert advice["kind"] == "reset_mid_stream", advice
        # Named a cap on the duration, with the time it cut at: the configured cap, as the client
        # measured it (from sending its request: never sooner, later by what the path adds).
        m = CAPPED.search(advice["likely"])
        assert m, advice["likely"]
        lo, hi = float(m.group(1)), float(m.group(2) or m.group(1))
        assert CAP - 0.1 <= lo <= hi <= CAP * 1.5, advice["likely"]
        assert "not a read timeout" in advice["likely"] and "Varnish send_timeout" in advice["likely"]
        assert "connection limit" not in advice["text"]
        assert advice["fix"].startswith("raise the cap above the longest answer")
        assert "keep answers under" in advice["fix"]
        assert all(f["advice"] == advice["text"] for f in findings)
