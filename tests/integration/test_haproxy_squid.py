"""The HAProxy and Squid part of the proxy matrix, and a mixed nginx + HAProxy chain.

Each case starts the reference engine with the timing it needs, the proxy with a generated
config, records agent sessions through it (the recorder at the client side, where a harness's
local mitmproxy sits), runs `proxycheck check` over a chain file and asserts what a user sees: the
verdict, the culprit, the first failing turn, the outcome and the advice. Every process is stopped
in a `finally`, also on failure.

What the proxies really do (HAProxy 2.6, Squid 5.7, nginx 1.22, against the reference engine,
which sends its response headers at once and its first token after the prefill):

* HAProxy `timeout server 1s`, long prefill: HAProxy has forwarded the 200 headers, so it cannot
  answer 504 any more; after 1 s without a byte from the engine it closes the client connection
  (the chunked body never ends): `reset` with no event, from the first turn whose prefill is
  over 1 s. It answers 504 only when the engine holds its headers back until the prefill is done.
* HAProxy `timeout server 1s`, a token gap over 1 s: the stream is cut mid-way (`reset`).
* HAProxy without `option http-no-delay` (its default) sends with MSG_MORE and holds small writes
  back for up to 200 ms: tokens 50 ms apart arrive a few at a time (`buffered`, a degradation).
* HAProxy `http-reuse always` with a long `timeout http-keep-alive`, an engine closing idle
  connections after 1 s, think times over 1 s: no failure. HAProxy watches its idle server
  connections, drops the one the engine closed and opens a new one; no retry is needed (its
  log shows 0 retries and a new server-side port after every idle period).
* Squid `read_timeout 1 seconds`, a token gap over 2 s: the stream is cut (`reset`). Squid's
  timeouts run on a whole-second clock: with a 1.5 s gap the cut came at the first gap or only
  at the second, so the gap is 2.5 s to be cut every time. Squid streams SSE as it arrives.
* nginx (right) in front of HAProxy (timeout server 1s): nginx passes HAProxy's cut on ("upstream
  prematurely closed connection"), so via:nginx fails too; the culprit is HAProxy, the inner hop.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from common import chain_file, check, processes, record_through
from proxies import start_haproxy, start_nginx, start_squid

from proxycheck import cli
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.sessions import turn_number
from proxycheck.io.procs import start_engine
from proxycheck.io.runstore import load_run
from proxycheck.io.storage import load

TIMEOUT = 1.0  # the bad proxies' read timeout (HAProxy timeout server, Squid read_timeout), s
# A long prefill: TTFT = base + per_kb x request KiB. With 3000-byte tool results the agent's
# requests are about 1.5, 4.7 and 8.0 KiB: TTFT about 0.5, 1.5 and 2.5 s.
TTFT_BASE, TTFT_PER_KB = 0.05, 0.3
PREFILL = ("--ttft-base", f"{TTFT_BASE}", "--ttft-per-kb", f"{TTFT_PER_KB}", "--token-interval", "0.004",
           "--tool-call-rate", "1")  # fmt: skip
TOOL_RESULT_BYTES = 3000
FAST = ("--pace", "fast", "--stall-timeout", "4")  # the stall watchdog above every TTFT and token gap
# HAProxy's log on its stdout: client and server-side addresses, status, retries, termination state.
HAPROXY_LOG = '''log stdout format raw local0
    log-format "haproxy-log %ci:%cp %bi:%bp %ST rc=%rc ts=%tsc"'''
# Without it HAProxy merges small writes (it sends with MSG_MORE), holding SSE events back for up to
# 200 ms: a stream of fast tokens arrives in bursts (see the test of HAProxy's default below).
NO_DELAY = "option http-no-delay"
LOG_LINE = re.compile(r"haproxy-log (\S+) (\S+):(\d+) (-?\d+) rc=(-?\d+) ts=(\S+)")




def backend(engine: Any, *directives: str) -> str:
    """An HAProxy backend section's body: `directives`, then the engine as its one server."""
    return "\n    ".join((*directives, f"server engine {engine.host}:{engine.port}"))


def turn_sizes(recording: Path) -> list[tuple[int, int]]:
    """(turn, request body bytes) of every recorded exchange."""
    rec = load(recording)
    out = []
    for exchange in rec.exchanges:
        body = rec.request_body(exchange)
        out.append((turn_number(json.loads(body)), len(body)))
    return out


def first_turn_over(recording: Path, timeout: float) -> int:
    """The first turn whose prefill, by the engine's formula on the recorded body sizes, outlasts
    `timeout`; the set-up must keep every TTFT well clear of it (0.3 s), or the case is flaky."""
    ttfts = [(turn, TTFT_BASE + TTFT_PER_KB * size / 1024) for turn, size in turn_sizes(recording)]
    k = min(turn for turn, ttft in ttfts if ttft > timeout)
    assert all(abs(ttft - timeout) > 0.3 for _, ttft in ttfts), ttfts
    assert all(ttft < timeout for turn, ttft in ttfts if turn < k), ttfts
    assert k > 1, ttfts  # turn 1 gets through: the wedge comes "after a few turns"
    return k


def routes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["route"]: r for r in doc["routes"]}


def findings(doc: dict[str, Any], route: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["route"] == route]


def haproxy_log(proxy: Any) -> list[tuple[str, int, int, int, str]]:
    """(client, server-side source port, status, retries, termination state) per request."""
    return [(m[1], int(m[3]), int(m[4]), int(m[5]), m[6]) for m in LOG_LINE.finditer(proxy.log("haproxy.log"))]


# 1. HAProxy `timeout server` ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_haproxy_timeout_server_cuts_a_long_prefill(tmp_path: Path) -> None:
    with processes() as started:
        engine = start_engine(*PREFILL)
        started.append(engine)
        haproxy = start_haproxy(backend(engine, f"timeout server {TIMEOUT:g}s", NO_DELAY), defaults=HAPROXY_LOG)
        started.append(haproxy)
        recording = tmp_path / "rec"
        agent = record_through(haproxy.url, recording, tool_result_bytes=TOOL_RESULT_BYTES, max_tokens=16, think=1.2)
        k = first_turn_over(recording, TIMEOUT)
        # The harness wedged at turn k: the stream was cut after the headers, before any token.
        assert [(s.turns[-1].turn, s.turns[-1].outcome) for s in agent.sessions] == [(k, Outcome.RESET)] * 2

        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={haproxy.url}"))
        # At the recorded pace: turn k goes on the client's connection to HAProxy after 1.2 s idle.
        status, doc = check(tmp_path, recording, chain, "--stall-timeout", "4")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "haproxy", doc["summary"]
        assert doc["first_turn"] == k, doc["summary"]
        by_route = routes(doc)
        assert by_route["direct"]["failures"] == 0
        reps = by_route["via:haproxy"]["repetitions"]  # 2: a failure in every repetition is deterministic
        assert by_route["via:haproxy"]["outcomes"] == {"ok": 2 * (k - 1) * reps, "reset": 2 * reps}, by_route
        found = findings(doc, "via:haproxy")
        assert {(f["turn"], f["outcome"]) for f in found} == {(k, "reset")}
        assert "0 with content" in found[0]["detail"]  # cut before the first token
        advice = found[0]["advice"]
        assert "hop haproxy" in advice and "HAProxy timeout server" in advice and "prefill" in advice, advice
        # The connection had been idle, but the response had begun on it: not a stale keep-alive.
        cut = [o for o in load_run(Path(doc["run"])).observations if o.route == "via:haproxy" and o.turn == k]
        assert all(o.reused and o.idle is not None and o.idle > 1.0 for o in cut), [(o.reused, o.idle) for o in cut]
        assert "idle" not in advice and "keep-alive" not in advice, advice
        # HAProxy's side of it: every turn k went out to the engine once (no retry), and ended on
        # a server-side timeout during the data phase ("sD": it had already sent the headers).
        # HAProxy logs a session once it has closed both sides, a moment after the client saw the cut.
        deadline = time.monotonic() + 5
        while (states := [ts for _, _, _, _, ts in haproxy_log(haproxy)]).count("sD--") < 2 + 2 * reps:
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert states.count("sD--") == 2 + 2 * reps, haproxy.log("haproxy.log")[-3000:]  # recorded + replayed


@pytest.mark.timeout(60)
def test_haproxy_answers_504_when_the_engine_holds_its_headers_through_the_prefill(tmp_path: Path) -> None:
    # An engine (or a gateway in front of it) that sends its headers only once the first token is
    # ready: HAProxy's timeout server then fires before the headers, and it answers 504 itself.
    with processes() as started:
        engine = start_engine("--ttft-per-kb", "0", "--token-interval", "0.004", "--tool-call-rate", "1",
                              "--fault", "delay_headers:seconds=1.5,from_turn=2")  # fmt: skip
        started.append(engine)
        haproxy = start_haproxy(backend(engine, f"timeout server {TIMEOUT:g}s", NO_DELAY), defaults=HAPROXY_LOG)
        started.append(haproxy)
        recording = tmp_path / "rec"
        agent = record_through(haproxy.url, recording, max_tokens=16)
        assert [(s.turns[-1].turn, s.turns[-1].status) for s in agent.sessions] == [(2, 504)] * 2

        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={haproxy.url}"))
        status, doc = check(tmp_path, recording, chain, *FAST)
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "haproxy", doc["summary"]
        assert doc["first_turn"] == 2
        reps = routes(doc)["via:haproxy"]["repetitions"]
        assert routes(doc)["via:haproxy"]["outcomes"] == {"ok": 2 * reps, "http_error": 2 * reps}
        found = findings(doc, "via:haproxy")
        assert {(f["turn"], f["outcome"]) for f in found} == {(2, "http_error")}
        assert "504" in found[0]["detail"]
        advice = found[0]["advice"]
        assert "HTTP 504" in advice and "HAProxy timeout server" in advice and "prefill" in advice, advice
        # HAProxy's log: a server-side timeout while waiting for the headers (sH), 2 recorded + replayed
        assert [ts for _, _, st, _, ts in haproxy_log(haproxy) if st == 504] == ["sH--"] * (2 + 2 * reps)


@pytest.mark.timeout(60)
def test_haproxy_timeout_server_cuts_a_stream_at_a_long_token_gap(tmp_path: Path) -> None:
    # Two tokens 1.5 s apart: one gap over the 1 s timeout. No tool calls (their arguments stream
    # in many small tokens, each 1.5 s apart).
    with processes() as started:
        engine = start_engine("--ttft-per-kb", "0", "--token-interval", "1.5", "--tool-call-rate", "0")
        started.append(engine)
        haproxy = start_haproxy(backend(engine, f"timeout server {TIMEOUT:g}s", NO_DELAY))
        started.append(haproxy)
        recording = tmp_path / "rec"
        agent = record_through(haproxy.url, recording, max_tokens=2)
        assert [(len(s.turns), s.turns[0].outcome) for s in agent.sessions] == [(1, Outcome.RESET)] * 2

        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={haproxy.url}"))
        status, doc = check(tmp_path, recording, chain, *FAST)
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "haproxy", doc["summary"]
        assert doc["first_turn"] == 1
        assert routes(doc)["direct"]["outcomes"] == {"ok": 4}  # two repetitions: the noise floor
        assert set(routes(doc)["via:haproxy"]["outcomes"]) <= {"reset", "truncated"}
        found = findings(doc, "via:haproxy")
        assert len(found) == 2 * routes(doc)["via:haproxy"]["repetitions"], found
        # Under load Squid may cut before it relayed the first token; between tokens in at least one.
        assert any("1 with content" in f["detail"] for f in found), found  # cut after the first token
        advice = found[0]["advice"]
        assert "HAProxy timeout server" in advice and "between tokens" in advice, advice


# 2. HAProxy pooled keep-alive connections -----------------------------------------------------


@pytest.mark.timeout(60)
def test_haproxy_does_not_reuse_a_pooled_connection_the_engine_closed(tmp_path: Path) -> None:
    # HAProxy keeps idle server connections for any request (http-reuse always); the engine closes
    # them after 1 s idle; the agent thinks 1.5 s between turns. HAProxy sees the engine's FIN on
    # its idle connection and drops it from the pool: the next turn goes on a new connection, with
    # no retry, and nothing fails. So the verdict is healthy; what proxycheck replayed shows that
    # the situation was really there (turns on a client connection idle for over 1 s).
    with processes() as started:
        engine = start_engine("--keepalive-timeout", "1", "--token-interval", "0.004", "--tool-call-rate", "0")
        started.append(engine)
        haproxy = start_haproxy(backend(engine, "http-reuse always", NO_DELAY),
                                defaults=f"timeout http-keep-alive 60s\n    {HAPROXY_LOG}")  # fmt: skip
        started.append(haproxy)
        recording = tmp_path / "rec"
        agent = record_through(haproxy.url, recording, think=1.5, max_tokens=8, turns=2)
        assert agent.ok, [t.detail for s in agent.sessions for t in s.turns]

        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={haproxy.url}"))
        status, doc = check(tmp_path, recording, chain, "--full")  # recorded think times: they matter here
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert routes(doc)["via:haproxy"]["outcomes"] == {"ok": 4}
        replayed = [o for o in load_run(Path(doc["run"])).observations if o.route == "via:haproxy" and o.turn > 1]
        assert len(replayed) == 2 and all(o.reused and o.idle is not None and o.idle > 1.2 for o in replayed), [
            (o.turn, o.reused, o.idle) for o in replayed
        ]
        # HAProxy's log: 8 requests (4 recorded, 4 replayed), all 200, none retried; on each client
        # connection, the turn after the think time went on a new server connection (another
        # source port): the pooled one had been dropped when the engine closed it.
        log = haproxy_log(haproxy)
        assert len(log) == 8, haproxy.log("haproxy.log")[-3000:]
        assert all(status == 200 and retries == 0 for _, _, status, retries, _ in log), log
        ports: dict[str, list[int]] = {}
        for client, port, _, _, _ in log:
            ports.setdefault(client, []).append(port)
        assert any(len(p) > 1 for p in ports.values()), log  # the client side did reuse its connections
        assert all(a != b for p in ports.values() for a, b in zip(p, p[1:])), log


# 3. HAProxy set up right ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_haproxy_with_timeouts_above_the_prefill_is_healthy(tmp_path: Path) -> None:
    with processes() as started:
        engine = start_engine(*PREFILL)
        started.append(engine)
        haproxy = start_haproxy(backend(engine, "timeout server 60s", NO_DELAY), defaults="timeout http-keep-alive 60s")
        started.append(haproxy)
        recording = tmp_path / "rec"
        agent = record_through(haproxy.url, recording, tool_result_bytes=TOOL_RESULT_BYTES, max_tokens=16, turns=2)
        assert agent.ok
        assert first_turn_over(recording, TIMEOUT) == 2  # the same long prefill as the failing case

        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={haproxy.url}"))
        status, doc = check(tmp_path, recording, chain, *FAST)
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert {r["route"]: r["outcomes"] for r in doc["routes"]} == {"direct": {"ok": 8}, "via:haproxy": {"ok": 4}}
        assert doc["findings"] == []


@pytest.mark.timeout(60)
def test_haproxy_default_merges_sse_events_into_bursts(tmp_path: Path) -> None:
    # The same right timeouts, without `option http-no-delay`: 16 tokens 50 ms apart come out of
    # HAProxy a few at a time. Nothing fails (healthy), the bursts are reported as `buffered`,
    # and with `--fail-on buffered` HAProxy is blamed for them.
    with processes() as started:
        engine = start_engine("--ttft-per-kb", "0", "--token-interval", "0.05", "--tool-call-rate", "0")
        started.append(engine)
        haproxy = start_haproxy(backend(engine, "timeout server 60s"))
        started.append(haproxy)
        recording = tmp_path / "rec"
        assert record_through(haproxy.url, recording, max_tokens=16, turns=2).ok

        chain = chain_file(tmp_path, engine.url, ("haproxy", f"url={haproxy.url}"))
        status, doc = check(tmp_path, recording, chain, *FAST)
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert routes(doc)["via:haproxy"]["state"] == "degraded", routes(doc)
        found = findings(doc, "via:haproxy")
        assert found and {f["outcome"] for f in found} == {"buffered"}, found
        assert "option http-no-delay" in found[0]["advice"], found[0]["advice"]

        # The same run judged again, the bursts counted as failures (no replay needed).
        assert cli.main(["diff", doc["run"], "--fail-on", "buffered", "--json", str(tmp_path / "d.json")]) == 1
        doc = json.loads((tmp_path / "d.json").read_text())
        assert doc["verdict"] == "proxy" and doc["culprit"] == "haproxy", doc["summary"]


# 4. Squid as a forward hop --------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_squid_read_timeout_cuts_a_stream_at_a_long_token_gap(tmp_path: Path) -> None:
    # Squid's timeouts tick in whole seconds: with a 1.5 s gap `read_timeout 1 seconds` cut some
    # streams at their first gap and others only at their second; a 2.5 s gap is cut every time.
    with processes() as started:
        engine = start_engine("--ttft-per-kb", "0", "--token-interval", "2.5", "--tool-call-rate", "0")
        started.append(engine)
        squid = start_squid(f"read_timeout {TIMEOUT:g} seconds")
        started.append(squid)
        recording = tmp_path / "rec"
        agent = record_through(engine.url, recording, upstream_proxy=squid.url, max_tokens=2)
        assert [(len(s.turns), s.turns[0].outcome) for s in agent.sessions] == [(1, Outcome.RESET)] * 2

        chain = chain_file(tmp_path, engine.url, ("corp", f"proxy={squid.url}"))
        status, doc = check(tmp_path, recording, chain, *FAST)
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "corp", doc["summary"]
        assert doc["first_turn"] == 1
        by_route = routes(doc)
        assert by_route["direct"]["outcomes"] == {"ok": 4}
        assert set(by_route["via:corp"]["outcomes"]) <= {"reset", "truncated"}, by_route
        found = findings(doc, "via:corp")
        assert len(found) == 2 * by_route["via:corp"]["repetitions"], found
        # Under load Squid may cut before it relayed the first token; between tokens in at least one.
        assert any("1 with content" in f["detail"] for f in found), found
        advice = found[0]["advice"]
        assert "hop corp" in advice and "Squid read_timeout" in advice and "between tokens" in advice, advice
        assert "TCP_MISS/200" in squid.log("access.log")  # Squid did forward the requests


@pytest.mark.timeout(60)
def test_squid_streams_sse_and_is_healthy(tmp_path: Path) -> None:
    # 12 tokens 50 ms apart: a Squid that buffered SSE would be `buffered` (every event at once).
    with processes() as started:
        engine = start_engine("--ttft-per-kb", "0", "--token-interval", "0.05", "--tool-call-rate", "0")
        started.append(engine)
        squid = start_squid()
        started.append(squid)
        recording = tmp_path / "rec"
        agent = record_through(engine.url, recording, upstream_proxy=squid.url, max_tokens=12, turns=2)
        assert agent.ok

        chain = chain_file(tmp_path, engine.url, ("corp", f"proxy={squid.url}"))
        status, doc = check(tmp_path, recording, chain, *FAST)
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert {r["route"]: r["outcomes"] for r in doc["routes"]} == {"direct": {"ok": 8}, "via:corp": {"ok": 4}}
        assert doc["findings"] == []
        assert squid.log("access.log").count("TCP_MISS/200") == 8  # 4 recorded + 4 replayed, through Squid


# 5. nginx (right) in front of HAProxy (wrong) -------------------------------------------------


@pytest.mark.timeout(60)
def test_the_inner_haproxy_is_blamed_not_the_nginx_in_front_of_it(tmp_path: Path) -> None:
    with processes() as started:
        engine = start_engine(*PREFILL)
        started.append(engine)
        haproxy = start_haproxy(backend(engine, f"timeout server {TIMEOUT:g}s", NO_DELAY))
        started.append(haproxy)
        nginx = start_nginx(f"""
        location / {{
            proxy_pass http://127.0.0.1:{haproxy.port};
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}""")
        started.append(nginx)
        recording = tmp_path / "rec"
        agent = record_through(nginx.url, recording, tool_result_bytes=TOOL_RESULT_BYTES, max_tokens=16)
        k = first_turn_over(recording, TIMEOUT)
        assert [(s.turns[-1].turn, s.turns[-1].outcome) for s in agent.sessions] == [(k, Outcome.RESET)] * 2

        chain = chain_file(tmp_path, engine.url, ("nginx", f"url={nginx.url}"), ("haproxy", f"url={haproxy.url}"))
        # bisect replays the outermost route too: via:nginx fails (it passes HAProxy) and is not blamed.
        status, doc = check(tmp_path, recording, chain, *FAST, "--strategy", "bisect")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "haproxy", doc["summary"]
        assert doc["first_turn"] == k
        by_route = routes(doc)
        assert set(by_route) == {"direct", "via:haproxy", "via:nginx"}
        assert by_route["direct"]["failures"] == 0
        assert by_route["via:haproxy"]["failures"] == 2 * by_route["via:haproxy"]["repetitions"], by_route
        assert by_route["via:nginx"]["failures"] == 2 * by_route["via:nginx"]["repetitions"], by_route
        assert doc["summary"].startswith("hop haproxy"), doc["summary"]
        advice = findings(doc, "via:haproxy")[0]["advice"]
        assert "hop haproxy" in advice and "HAProxy timeout server" in advice, advice
        assert "upstream prematurely closed" in nginx.log("error.log")  # nginx saw HAProxy cut it
