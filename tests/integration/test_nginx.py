"""nginx in the proxy matrix: the ways a real nginx 1.22 in front of an engine breaks (or does not
break) agent sessions, and what `proxycheck check` says about each.

Each test starts the reference engine with the timing its case needs and nginx in front of it
with a generated config, records agent sessions through nginx (the recorder at the client side,
where a harness's local mitmproxy sits), runs `check` on a chain that names the nginx hop, and
asserts what a user would see: the agent's turns, the verdict, the culprit, the first failing
turn, the outcome and the advice. Never absolute times. What nginx really does, found by running
it (and asserted here):

* `proxy_buffering on` (the default, upstream HTTP/1.0, `X-Accel-Buffering` ignored as real
  engines do not send it): the stream arrives in bursts of about one 4 KB buffer: `buffered`, a
  degradation (healthy; `--fail-on buffered` makes it the proxy verdict); a client stall timeout
  shorter than a burst's gap sees a stall.
* `proxy_read_timeout 1s`: the engine (like vLLM and SGLang behind uvicorn) sends its response
  headers at once and then prefills, so nginx has forwarded `200` before its read timeout fires:
  the client sees the stream cut before its first event (`reset`), not an HTTP 504. The same for a
  gap between tokens longer than the timeout, mid-stream.
* `client_max_body_size`: 413 from the first turn whose body is over the limit.
* `large_client_header_buffers 2 1k` and a 2 KB bearer token: 400 "Request Header Or Cookie Too
  Large" on every request of that route.
* `gzip` on `text/event-stream` with `proxy_buffering off`: nginx flushes the compressor on every
  read from the engine, so events arrive on time (compressed): no degradation. With buffering on
  as well, the stream is held back and the finding says it was compressed.
* upstream keep-alive kept longer than the engine's (60 s vs 1 s): nginx watches its idle pooled
  connections and drops the ones the engine closes, so the next turn gets a fresh connection:
  healthy (nginx is immune in this configuration; the stale-pool failure is a race it wins).
* the correct configuration: healthy, no findings.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from common import chain_file, check, record_through
from proxies import Proxy, start_nginx

from proxycheck import cli
from proxycheck.core.recording.sessions import turn_number
from proxycheck.core.testbed.synth import Timing
from proxycheck.io.procs import Managed, start_engine
from proxycheck.io.runstore import load_run
from proxycheck.io.storage import load

# Real engines (vLLM, SGLang) do not send `X-Accel-Buffering: no`; the reference engine does, and
# nginx would honour it (and not buffer). Ignoring it reproduces what users of real engines get.
LIKE_A_REAL_ENGINE = "proxy_ignore_headers X-Accel-Buffering;"
STREAMING = "proxy_http_version 1.1; proxy_buffering off;"  # the two settings SSE needs


def engine(stack: ExitStack, *args: str) -> Managed:
    proc = start_engine(*args)
    stack.callback(proc.stop)
    return proc


def nginx(stack: ExitStack, upstream: Managed | str, *directives: str, http: str = "", blocks: str = "") -> Proxy:
    """nginx with one `location /` passing to `upstream` (the engine, or an upstream block's name)."""
    target = upstream.url if isinstance(upstream, Managed) else f"http://{upstream}"
    proxy = start_nginx(f"location / {{ proxy_pass {target}; {' '.join(directives)} }}", http=http, upstream=blocks)
    stack.callback(proxy.stop)
    return proxy


def hop_chain(tmp: Path, eng: Managed, proxy: Proxy) -> Path:
    return chain_file(tmp, eng.url, ("nginx", f"url={proxy.url}"))


def turns_seen(run: Any) -> list[tuple[int, str, int | None]]:
    """(turn, outcome, status) of every turn the agent made, as its user saw them."""
    return sorted((t.turn, t.outcome.value, t.status) for s in run.sessions for t in s.turns)


def recorded_bodies(recording: Path) -> list[tuple[int, int]]:
    """(turn, request body bytes) of every recorded exchange."""
    rec = load(recording)
    return sorted((turn_number(json.loads(b)), len(b)) for b in map(rec.request_body, rec.exchanges))


def routes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["route"]: r for r in doc["routes"]}


def findings(doc: dict[str, Any], route: str = "via:nginx") -> list[dict[str, Any]]:
    found = [f for f in doc["findings"] if f["route"] == route]
    assert found, doc["findings"]
    return found


def diff(tmp: Path, run: str, *argv: str) -> tuple[int, dict[str, Any]]:
    """`proxycheck diff RUN` in-process: the verdict of an existing run, judged anew."""
    path = tmp / "diff.json"
    status = cli.main(["diff", run, "--json", str(path), *argv])
    return status, json.loads(path.read_text())


# --------------------------------------------------------------------------------------------


# `alone`: it compares how bursty nginx's streams are with direct's, and a moment of starved CPU
# bunches direct's own streams too (seen beside vLLM's tests: the floor's burstiness x32, nothing
# judged buffered).
@pytest.mark.alone
@pytest.mark.timeout(90)
def test_buffering_holds_sse_back(tmp_path: Path) -> None:
    # Text answers only (no tool calls), 32 tokens 40 ms apart: nginx passes them on in bursts of
    # one 4 KB buffer (15-18 events), the first after about 0.6 s, the last at the end.
    with ExitStack() as stack:
        eng = engine(stack, "--token-interval", "0.04", "--ttft-per-kb", "0", "--tool-call-rate", "0")
        proxy = nginx(stack, eng, "proxy_http_version 1.0;", LIKE_A_REAL_ENGINE)  # proxy_buffering on: the default
        agent = record_through(proxy.url, tmp_path / "rec", turns=2, max_tokens=32)
        assert turns_seen(agent) == [(1, "ok", 200)] * 2 + [(2, "ok", 200)] * 2  # slow to start, but it works
        chain = hop_chain(tmp_path, eng, proxy)

        # A degradation: reported, not blamed.
        status, doc = check(tmp_path, tmp_path / "rec", chain, "--pace", "fast")
        assert status == 0 and doc["verdict"] == "healthy" and doc["culprit"] is None, doc["summary"]
        assert routes(doc)["direct"]["outcomes"] == {"ok": 8}
        assert routes(doc)["via:nginx"]["outcomes"] == {"buffered": 4}
        assert "degradations seen: buffered" in doc["summary"]
        for finding in findings(doc):
            assert finding["outcome"] == "buffered" and "burst" in finding["detail"]
            assert "Content-Encoding" not in finding["detail"]
            assert "proxy_buffering off" in finding["advice"] and "hop nginx" in finding["advice"]

        # --fail-on buffered: the same run, and the buffering hop is the culprit.
        status, doc = diff(tmp_path, doc["run"], "--fail-on", "buffered")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
        assert doc["first_turn"] == 1

        # A client whose stall watchdog is shorter than the wait for the first burst (but far
        # longer than the engine's 40 ms between tokens) gives up: a wedge, and nginx is the culprit.
        status, doc = check(tmp_path, tmp_path / "rec", chain, "--pace", "fast", "--stall-timeout", "0.3")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
        assert doc["first_turn"] == 1 and routes(doc)["direct"]["failures"] == 0
        stalls = {"stall_before_first_event", "stall_mid_stream"}
        assert set(routes(doc)["via:nginx"]["outcomes"]) <= stalls, routes(doc)["via:nginx"]
        for finding in findings(doc):
            assert finding["outcome"] in stalls
            assert "buffering" in finding["advice"] and "proxy_buffering off" in finding["advice"]


@pytest.mark.timeout(90)
def test_read_timeout_shorter_than_a_long_prefill(tmp_path: Path) -> None:
    # TTFT grows with the request body (0.1 s per KiB: a long prefill); every turn answers with
    # a tool call, so each turn's body carries a 16 KB tool result more than the one before.
    timing = Timing(ttft_base=0.05, ttft_per_kb=0.1)
    read_timeout = 1.0
    with ExitStack() as stack:
        eng = engine(stack, "--ttft-base", str(timing.ttft_base), "--ttft-per-kb", str(timing.ttft_per_kb),
                     "--token-interval", "0.005", "--tool-call-rate", "1")  # fmt: skip
        proxy = nginx(stack, eng, STREAMING, f"proxy_read_timeout {read_timeout:g}s;")
        agent = record_through(proxy.url, tmp_path / "rec", turns=3, max_tokens=16, tool_result_bytes=16000)

        # The first turn whose prefill outlasts nginx's read timeout, from what was recorded.
        bodies = recorded_bodies(tmp_path / "rec")
        ttft = {turn: timing.ttft(size) for turn, size in bodies}
        k = min(turn for turn, t in ttft.items() if t > read_timeout)
        assert k > 1 and ttft[1] < read_timeout / 2, ttft  # the case needs a clean first turn ...
        assert all(t < 0.7 * read_timeout or t > 1.3 * read_timeout for t in ttft.values()), ttft  # ... and margins
        # The agent wedged there: nginx forwarded the engine's 200 and then cut the stream.
        assert {(o, s) for turn, o, s in turns_seen(agent) if turn == k} == {("reset", 200)}
        assert all(o == "ok" for turn, o, _ in turns_seen(agent) if turn < k)

        status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, eng, proxy), "--pace", "fast")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
        assert doc["first_turn"] == k and f"from turn {k} on" in doc["summary"]
        assert routes(doc)["direct"]["failures"] == 0
        # Not an HTTP 504: the engine's headers came before the prefill ended (as vLLM's and
        # SGLang's do), so the client sees its stream cut before the first event.
        for finding in findings(doc):
            assert finding["turn"] >= k and finding["outcome"] == "reset", finding
            assert "0 with content" in finding["detail"]
            assert "proxy_read_timeout" in finding["advice"] and "prefill" in finding["advice"]
            assert "hop nginx" in finding["advice"]


@pytest.mark.timeout(90)
def test_read_timeout_shorter_than_the_gap_between_tokens(tmp_path: Path) -> None:
    # A token every 1.5 s through a hop whose read timeout is 1 s: cut after the first token. The
    # client's side is chunked (HTTP/1.1), so the cut shows as a reset (the last chunk never came).
    with ExitStack() as stack:
        eng = engine(stack, "--token-interval", "1.5", "--ttft-per-kb", "0", "--tool-call-rate", "0")
        proxy = nginx(stack, eng, STREAMING, "proxy_read_timeout 1s;")
        agent = record_through(proxy.url, tmp_path / "rec", turns=1, max_tokens=2)
        assert set(turns_seen(agent)) == {(1, "reset", 200)}

        status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, eng, proxy), "--pace", "fast")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
        assert doc["first_turn"] == 1 and routes(doc)["direct"]["outcomes"] == {"ok": 4}
        for finding in findings(doc):
            assert finding["outcome"] == "reset" and "1 with content" in finding["detail"], finding
            assert "proxy_read_timeout" in finding["advice"] and "gaps between tokens" in finding["advice"]


@pytest.mark.timeout(90)
def test_body_size_limit(tmp_path: Path) -> None:
    limit = 6 * 1024  # between the first turn's body and the last one's
    with ExitStack() as stack:
        eng = engine(stack, "--token-interval", "0.002", "--ttft-per-kb", "0", "--tool-call-rate", "1")
        proxy = nginx(stack, eng, STREAMING, f"client_max_body_size {limit // 1024}k;")
        agent = record_through(proxy.url, tmp_path / "rec", turns=3, max_tokens=16, tool_result_bytes=3000)

        bodies = recorded_bodies(tmp_path / "rec")
        k = min(turn for turn, size in bodies if size > limit)
        assert k > 1 and all(size <= limit for turn, size in bodies if turn < k), bodies
        assert all(size > limit for turn, size in bodies if turn >= k), bodies
        assert {(o, s) for turn, o, s in turns_seen(agent) if turn == k} == {("http_error", 413)}

        status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, eng, proxy), "--pace", "fast")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
        assert doc["first_turn"] == k and f"answers HTTP 413 from turn {k} on" in doc["summary"]
        for finding in findings(doc):
            assert finding["turn"] >= k and finding["outcome"] == "http_error"
            assert finding["detail"].startswith("HTTP 413")
            assert "body size" in finding["advice"] and "client_max_body_size" in finding["advice"]


@pytest.mark.timeout(90)
def test_header_size_limit(tmp_path: Path) -> None:
    # The route to nginx carries a 2 KB bearer token (from the chain file, as a gateway's key would);
    # no single header line may exceed 1 KB there.
    token = "Bearer " + "0123456789abcdef" * 128
    with ExitStack() as stack:
        eng = engine(stack, "--token-interval", "0.002", "--ttft-per-kb", "0")
        proxy = nginx(stack, eng, STREAMING, http="large_client_header_buffers 2 1k;")
        agent = record_through(proxy.url, tmp_path / "rec", max_tokens=16)
        assert agent.ok  # the agent itself sends no such header
        chain = tmp_path / "chain.toml"
        chain.write_text(f'engine = "{eng.url}"\n[[hop]]\nname = "nginx"\nurl = "{proxy.url}"\n'
                         f'headers = {{ Authorization = "{token}" }}\n')  # fmt: skip

        status, doc = check(tmp_path, tmp_path / "rec", chain, "--pace", "fast")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
        assert doc["first_turn"] == 1 and "answers HTTP 400" in doc["summary"]
        assert routes(doc)["via:nginx"]["outcomes"] == {"http_error": 6}
        for finding in findings(doc):
            assert finding["detail"].startswith("HTTP 400") and "Header Or Cookie Too Large" in finding["detail"]
            assert "header size" in finding["advice"] and "large_client_header_buffers" in finding["advice"]
    assert token not in json.dumps(doc)  # the credential is not in the report


@pytest.mark.timeout(90)
def test_gzip_on_event_streams(tmp_path: Path) -> None:
    gzip = "gzip on; gzip_types text/event-stream; gzip_min_length 0;"
    with ExitStack() as stack:
        eng = engine(stack, "--token-interval", "0.01", "--ttft-per-kb", "0", "--tool-call-rate", "0")
        unbuffered = nginx(stack, eng, STREAMING, gzip)
        agent = record_through(unbuffered.url, tmp_path / "rec", turns=2, max_tokens=40)
        assert agent.ok and all(t.content_events == 40 for s in agent.sessions for t in s.turns)

        # With proxy_buffering off, nginx flushes the compressor on every read from the engine:
        # each event arrives compressed but on time. No degradation.
        status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, eng, unbuffered), "--pace", "fast")
        via = [o for o in load_run(doc["run"]).observations if o.route == "via:nginx"]
        assert via and all(o.response_header("content-encoding") == "gzip" for o in via)
        assert all(r["outcomes"] == {"ok": r["exchanges"]} for r in doc["routes"]), doc["routes"]
        assert not doc["findings"]
        gzip_verdict = doc

        # With buffering on as well (nginx's default), the compressed stream is held back, and
        # the finding says it was compressed.
        buffered = nginx(stack, eng, "proxy_http_version 1.1;", LIKE_A_REAL_ENGINE, gzip)
        chain = chain_file(tmp_path, eng.url, ("nginx", f"url={buffered.url}"), name="buffered.toml")
        status, doc = check(tmp_path, tmp_path / "rec", chain, "--pace", "fast", "--fail-on", "buffered")
        assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "nginx", doc["summary"]
        assert routes(doc)["via:nginx"]["outcomes"] == {"buffered": 4}
        for finding in findings(doc):
            assert "Content-Encoding: gzip" in finding["detail"]
            assert "compresses text/event-stream" in finding["advice"] and "gzip_types" in finding["advice"]

    # The recorder keeps the gzip bytes as they came; the recording's analysis reads them decoded
    # (each event at the time its compressed chunk came), so the recorded turns are ok too.
    assert gzip_verdict["verdict"] == "healthy", gzip_verdict["summary"]


@pytest.mark.timeout(90)
def test_stale_pooled_keepalive_connections(tmp_path: Path) -> None:
    # nginx keeps idle upstream connections for 60 s, the engine closes them after 1 s, and the
    # agent thinks 2 s between turns: each next turn comes after the engine closed what nginx
    # pooled. nginx watches its pooled connections and drops those the engine closes, so it opens a
    # fresh one instead of failing the turn: nginx is immune in this configuration (the failure
    # would need the engine's close and nginx's reuse to cross in flight, far from 1 s vs 2 s).
    with ExitStack() as stack:
        eng = engine(stack, "--token-interval", "0.005", "--ttft-per-kb", "0", "--keepalive-timeout", "1")
        blocks = f"upstream engine {{ server {eng.url.removeprefix('http://')}; keepalive 8; keepalive_timeout 60s; }}"
        proxy = nginx(stack, "engine", STREAMING, 'proxy_set_header Connection "";', blocks=blocks,
                      http="error_log debug.log debug;")  # fmt: skip
        agent = record_through(proxy.url, tmp_path / "rec", turns=3, think=2, max_tokens=16)
        assert agent.ok

        # --full: the recorded think times (2 s idle); check would shorten them, the recording showing no failure.
        status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, eng, proxy), "--full")
        assert status == 0 and doc["verdict"] == "healthy", doc["summary"]
        assert all(r["outcomes"] == {"ok": r["exchanges"]} for r in doc["routes"]), doc["routes"]
        assert not doc["findings"]
        # The case really happened: nginx pooled its upstream connections, and turns came after
        # longer idle times than the engine keeps connections open.
        assert "free keepalive peer: saving connection" in proxy.log("debug.log")
        idle = [o.idle for o in load_run(doc["run"]).observations if o.route == "via:nginx" and o.turn > 1]
        assert idle and all(i is not None and i > 1.5 for i in idle), idle


@pytest.mark.timeout(90)
def test_correct_configuration_is_healthy(tmp_path: Path) -> None:
    correct = (STREAMING, "proxy_read_timeout 300s;", "client_max_body_size 0;", 'proxy_set_header Connection "";',
               LIKE_A_REAL_ENGINE)  # fmt: skip
    with ExitStack() as stack:
        eng = engine(stack, "--token-interval", "0.01")
        # gzip on, for HTML only (its default gzip_types): not for the event stream.
        proxy = nginx(stack, eng, *correct, http="gzip on;")
        agent = record_through(proxy.url, tmp_path / "rec", max_tokens=32, tool_result_bytes=4000)
        assert agent.ok

        status, doc = check(tmp_path, tmp_path / "rec", hop_chain(tmp_path, eng, proxy), "--pace", "fast",
                            "--fail-on", "buffered,slow")  # fmt: skip
        assert status == 0 and doc["verdict"] == "healthy" and doc["culprit"] is None, doc["summary"]
        assert [r["route"] for r in doc["routes"]] == ["direct", "via:nginx"]
        assert all(r["outcomes"] == {"ok": r["exchanges"]} for r in doc["routes"]), doc["routes"]
        assert doc["findings"] == []
