"""mitmproxy `.flow` dumps -> recordings (proxycheck.io.flowfile, `proxycheck import FILE.flow`).

The main fixture is real: `mitmdump -w FILE --set hardump=FILE.har` in reverse mode in front of
the reference engine, driven by httpx with streamed and non-streamed multi-turn sessions. The
import must give back the sessions, bodies and statuses that went through, and the HAR mitmproxy
wrote of the same traffic must import to the same exchanges. Edge cases (streamed bodies
mitmproxy did not keep, errors, non-HTTP flows, damaged files) use flows built with
`mitmproxy.test.tflow` and written with `FlowWriter`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from cli_runner import main_status as main
from mitmproxy import http
from mitmproxy.io import FlowWriter
from mitmproxy.test import tflow, tutils
from processes import EngineFactory, MitmdumpFactory

from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.flowfile import read_flows
from proxycheck.io.storage import Recording, load

pytestmark = pytest.mark.timeout(60)


@dataclass
class Sent:
    """What one session sent and got back, turn by turn."""

    requests: list[bytes] = field(default_factory=list)
    responses: list[bytes] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)


async def chat_session(base: str, turns: int, stream: bool, tag: str) -> Sent:
    sent = Sent()
    messages = [{"role": "system", "content": f"session {tag}"}, {"role": "user", "content": f"hello from {tag}"}]
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        for turn in range(turns):
            body = json.dumps({"model": "m", "messages": messages, "max_tokens": 12, "stream": stream}).encode()
            async with client.stream("POST", "/v1/chat/completions", content=body,
                                     headers={"content-type": "application/json", "authorization": "Bearer sk-test"}) as r:  # fmt: skip
                raw = b"".join([chunk async for chunk in r.aiter_raw()])
            sent.requests.append(body)
            sent.responses.append(raw)
            sent.statuses.append(r.status_code)
            messages = [*messages, {"role": "assistant", "content": f"answer {turn}"},
                        {"role": "user", "content": f"turn {turn + 2} of {tag}"}]  # fmt: skip
    return sent


async def completion_session(base: str, turns: int) -> Sent:
    sent = Sent()
    prompt = "Once upon a time"
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        for turn in range(turns):
            body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 8, "stream": True}).encode()
            async with client.stream("POST", "/v1/completions", content=body) as r:
                raw = b"".join([chunk async for chunk in r.aiter_raw()])
            sent.requests.append(body)
            sent.responses.append(raw)
            sent.statuses.append(r.status_code)
            prompt += f" and then part {turn + 2}"
        models = await client.get("/v1/models")  # not an LLM request: imported only with --all
        assert models.status_code == 200
    return sent


@dataclass
class Dumped:
    flow: Path
    har: Path
    sessions: list[Sent]


@pytest.fixture(scope="module")
def dumped(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
           module_mitmdumps: MitmdumpFactory) -> Dumped:  # fmt: skip
    root = tmp_path_factory.mktemp("flows")
    flow, har = root / "traffic.flow", root / "traffic.har"
    engine = module_engines("--token-interval", "0.005", "--tool-call-rate", "0")
    hop = module_mitmdumps("--mode", f"reverse:{engine.url}", "-w", str(flow), "--set", f"hardump={har}")
    sessions = asyncio.run(_drive(hop.url))
    hop.stop()  # SIGTERM: mitmdump shuts down cleanly and writes the HAR
    return Dumped(flow, har, sessions)


async def _drive(base: str) -> list[Sent]:
    return list(
        await asyncio.gather(
            chat_session(base, 3, True, "a"), chat_session(base, 2, False, "b"), completion_session(base, 2)
        )
    )


def by_request(rec: Recording) -> dict[bytes, tuple]:
    return {rec.request_body(x): (x.status, x.response_body, x.streamed) for x in rec.exchanges}


def session_bodies(rec: Recording) -> list[list[bytes]]:
    by_xid = {x.xid: x for x in rec.exchanges}
    sessions = summarize_sessions(rec.exchanges, rec.piece)
    return sorted([rec.request_body(by_xid[t.xid]) for t in s.turns] for s in sessions)


def test_a_real_dump_imports_the_sessions_that_went_through(dumped: Dumped, tmp_path: Path, capsys) -> None:
    assert main("import", str(dumped.flow), "--out", str(tmp_path / "rec")) == 0
    out = capsys.readouterr().out
    assert "7 exchange(s)" in out and "1 not LLM requests" in out
    rec = load(tmp_path / "rec")
    assert rec.warnings == []
    assert session_bodies(rec) == sorted(s.requests for s in dumped.sessions)
    got = by_request(rec)
    for sent in dumped.sessions:
        for body, response, status in zip(sent.requests, sent.responses, sent.statuses):
            assert got[body][:2] == (status, response)
    sessions = summarize_sessions(rec.exchanges, rec.piece)
    assert sorted(len(s.turns) for s in sessions) == [2, 2, 3]
    assert all(t.outcome.value == "ok" for s in sessions for t in s.turns)
    for x in rec.exchanges:
        # mitmproxy keeps no chunk arrival times: one chunk at the end, marked as such.
        assert x.chunk_timing is False and len(x.chunks) == 1
        assert x.t_request <= x.t_response <= x.chunks[0][0] == x.t_end
        assert x.conn.client_id and x.conn.server_id and x.conn.peer
    streamed = {rec.request_body(x): x.streamed for x in rec.exchanges}
    assert [streamed[b] for b in dumped.sessions[0].requests] == [True, True, True]
    assert [streamed[b] for b in dumped.sessions[1].requests] == [False, False]
    # The bearer token the chat sessions sent is redacted, as when recording.
    chats = [x for x in rec.exchanges if x.path == "/v1/chat/completions"]
    assert len(chats) == 5 and all(x.redacted == ("header:authorization",) for x in chats)
    # One httpx client per session, kept alive: its later turns reuse the upstream connection.
    first_session = [x for x in rec.exchanges if rec.request_body(x) in dumped.sessions[0].requests]
    assert len({x.conn.client_id for x in first_session}) == 1


def test_all_imports_the_other_requests_too(dumped: Dumped, tmp_path: Path) -> None:
    assert main("import", str(dumped.flow), "--out", str(tmp_path / "rec"), "--all") == 0
    paths = [x.path for x in load(tmp_path / "rec").exchanges]
    assert len(paths) == 8 and "/v1/models" in paths


def test_mitmproxys_har_of_the_same_traffic_imports_the_same(dumped: Dumped, tmp_path: Path) -> None:
    assert main("import", str(dumped.flow), "--out", str(tmp_path / "from-flow")) == 0
    assert main("import", str(dumped.har), "--out", str(tmp_path / "from-har")) == 0
    from_flow, from_har = load(tmp_path / "from-flow"), load(tmp_path / "from-har")
    assert from_har.warnings == []
    assert by_request(from_har) == by_request(from_flow)
    assert session_bodies(from_har) == session_bodies(from_flow)
    # Same clock: mitmproxy wrote both from the same timestamps (HAR keeps microseconds).
    for a, b in zip(from_flow.exchanges, from_har.exchanges):
        assert a.t_request == pytest.approx(b.t_request, abs=1e-5)


def test_read_flows_directly(dumped: Dumped) -> None:
    result = read_flows(dumped.flow)
    assert len(result.exchanges) == 8 and result.warnings == []
    assert result.source == {"imported_from": str(dumped.flow), "format": "mitmproxy-flow"}
    result.keep(all_requests=False)
    assert (len(result.exchanges), result.skipped_not_llm) == (7, 1)


# -- edge cases from built flows ---------------------------------------------------------------------


def chat_flow(t: float, *, body: bytes = b'{"messages":[{"role":"user","content":"x"}],"stream":true}',
              resp: http.Response | None = None, err: str | None = None) -> http.HTTPFlow:  # fmt: skip
    req = tutils.treq(method=b"POST", path=b"/v1/chat/completions", content=body,
                      timestamp_start=t, timestamp_end=t + 0.01)  # fmt: skip
    f = tflow.tflow(req=req, resp=resp or False, err=tflow.terr(err) if err else False)
    if err:
        f.error.timestamp = t + 2.0
    return f


def sse_response(t: float, content: bytes | None) -> http.Response:
    r = tutils.tresp(headers=http.Headers(content_type="text/event-stream"), content=b"",
                     timestamp_start=t, timestamp_end=t + 1.0)  # fmt: skip
    r.content = content  # None: streamed through, mitmproxy kept no body
    return r


def write_flows(path: Path, flows: list) -> None:
    with open(path, "wb") as f:
        writer = FlowWriter(f)
        for flow in flows:
            writer.add(flow)


def test_streamed_bodies_errors_and_other_flows(tmp_path: Path, capsys) -> None:
    sse = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    flows = [
        chat_flow(1000.0, resp=sse_response(1000.2, sse)),
        chat_flow(1003.0, resp=sse_response(1003.2, None)),  # the recorder streamed it: no body kept
        chat_flow(1006.0, err="Connection killed."),
        chat_flow(1009.0, resp=sse_response(1009.1, b"data: {}\n\n"), err="peer closed connection"),
        tflow.ttcpflow(),
    ]
    path = tmp_path / "edge.flow"
    write_flows(path, flows)
    assert main("import", str(path), "--out", str(tmp_path / "rec")) == 0
    err = capsys.readouterr().err
    assert f"{path}: 1 flow(s) that are not HTTP (TCP, UDP, DNS) left out" in err
    assert f"{path}: flow[1]: the response was streamed through and mitmproxy kept no body" in err
    ok, kept_no_body, killed, reset = load(tmp_path / "rec").exchanges
    assert ok.response_body == sse and ok.t_request == 0 and ok.t_response == pytest.approx(0.2)
    assert ok.t_end == pytest.approx(1.2) and ok.streamed and not ok.chunk_timing
    assert kept_no_body.status == 200 and kept_no_body.response_body == b"" and kept_no_body.streamed
    assert kept_no_body.t_end == pytest.approx(4.2)
    assert killed.status is None and killed.error == "Connection killed." and killed.t_error == pytest.approx(8.0)
    assert reset.status == 200 and reset.error == "peer closed connection" and reset.t_end is None
    assert reset.response_body == b"data: {}\n\n"


def test_a_truncated_dump_is_one_line_and_writes_nothing(dumped: Dumped, tmp_path: Path, capsys) -> None:
    data = dumped.flow.read_bytes()
    cut = tmp_path / "cut.flow"
    cut.write_bytes(data[: len(data) * 2 // 3])
    assert main("import", str(cut), "--out", str(tmp_path / "rec")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"proxycheck: {cut}: not a readable mitmproxy flow file")
    assert not (tmp_path / "rec").exists()


@pytest.mark.parametrize("content", [b"this is not a flow dump", b"\x00\x01\x02", b'{"log": 1}'])
def test_a_file_that_is_not_a_dump_is_one_line(tmp_path: Path, capsys, content: bytes) -> None:
    path = tmp_path / "junk.flow"
    path.write_bytes(content)
    assert main("import", str(path), "--out", str(tmp_path / "rec")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"proxycheck: {path}: not a readable mitmproxy flow file")


def test_an_empty_dump_is_an_empty_recording(tmp_path: Path, capsys) -> None:
    path = tmp_path / "empty.flow"
    path.write_bytes(b"")
    assert main("import", str(path), "--out", str(tmp_path / "rec")) == 0
    assert "0 exchange(s)" in capsys.readouterr().out
    assert load(tmp_path / "rec").exchanges == []
