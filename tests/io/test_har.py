"""HAR <-> recordings (proxycheck.io.har, `proxycheck export` and `proxycheck import`): exact round
trips of our own exports, browsers' and mitmproxy's HAR files (tests/fixtures/har/, shaped like
Chrome's DevTools export and mitmproxy's `hardump`), and bad input as one line with exit 2."""

from __future__ import annotations

import argparse
import base64
import json
import stat
from pathlib import Path

import pytest
from cli_runner import main_status as main
from cli_runner import run_proxycheck
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxycheck.commands import export, importer
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.redact import REDACTED, RedactionPolicy
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.har import har_document, read_har, write_recording
from proxycheck.io.storage import Recording, RecordingWriter, load

HAR_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "har"
START = 1_714_637_000.125

pytestmark = pytest.mark.timeout(60)


def chat_body(messages: list[dict], **extra) -> bytes:
    return json.dumps({"model": "m", "messages": messages, "stream": True, **extra}).encode()


def sse(*texts: str) -> list[bytes]:
    events = [
        f'data: {{"choices":[{{"index":0,"delta":{{"content":{json.dumps(t)}}},"finish_reason":null}}]}}\n\n'.encode()
        for t in texts
    ]
    return [*events, b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n']


def write_sample(directory: Path) -> None:
    """Two chat sessions (one named by a header, one by continuity), a binary answer, a reset
    mid-stream, a request still in flight, and secrets in a header, the query and the body."""
    policy = RedactionPolicy.default().extended(headers=["x-team-token"], body_paths=["metadata.api_key"])
    w = RecordingWriter(directory, policy, source={"mode": "reverse", "session_headers": ["x-trace"]}, wall=lambda: START)
    history = [{"role": "user", "content": "hello"}]
    t = 1.0
    for turn in range(3):
        x = w.request(
            "POST", "http://engine:30000/v1/chat/completions?key=s3cret&v=1",
            [("content-type", "application/json"), ("authorization", "Bearer sk-1"), ("x-team-token", "tt"),
             ("x-trace", "alpha")],
            chat_body(history, metadata={"api_key": "k", "user_id": "u"}),
            http_version="HTTP/1.1", conn={"client_id": "c1", "server_id": "s1", "server_reused": turn > 0}, t=t,
        )  # fmt: skip
        w.response(x, 200, "OK", [("content-type", "text/event-stream"), ("set-cookie", "a=b")], streamed=True, t=t + 0.2)
        for i, chunk in enumerate(sse("Hi", " there", f" {turn}")):
            w.data(x, chunk, t=t + 0.3 + 0.05 * i)
        w.end(x, t=t + 0.5)
        history += [{"role": "assistant", "content": f"Hi there {turn}"}, {"role": "user", "content": f"more {turn}"}]
        t += 2.0
    other = [{"role": "user", "content": "another conversation"}]
    x = w.request("POST", "http://engine:30000/v1/chat/completions", [("content-type", "application/json")],
                  chat_body(other), conn={"client_id": "c2"}, t=1.5)
    w.response(x, 200, "OK", [("content-type", "application/octet-stream")], streamed=False, t=1.6)
    w.data(x, b"\x00\xff\xfe binary \xc3", t=1.7)
    w.end(x, t=1.71)
    x = w.request("POST", "http://engine:30000/v1/chat/completions", [], chat_body(other + [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]),
                  conn={"client_id": "c2"}, t=3.0)  # fmt: skip
    w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=3.1)
    w.data(x, sse("partial")[0], t=3.2)
    w.error(x, "connection reset by peer", t=3.4)
    x = w.request("POST", "http://engine:30000/v1/chat/completions", [], chat_body(history), conn={"client_id": "c1"}, t=8.0)
    w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=8.2)
    w.data(x, sse("wedged")[0], t=8.3)
    w.request("POST", "http://engine:30000/generate", [], b'{"text": "no answer yet"}', t=9.0)
    w.close("stopped")


def recorded_fields(x: RecordedExchange) -> dict:
    return {name: getattr(x, name) for name in RecordedExchange.__slots__}


def comparable(rec: Recording) -> list[dict]:
    return [{**recorded_fields(x), "request_bytes": rec.request_body(x)} for x in rec.exchanges]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("har") / "rec"
    write_sample(directory)
    return directory


def test_export_then_import_gives_back_the_same_recording(sample: Path, tmp_path: Path, capsys) -> None:
    har = tmp_path / "out.har"
    assert main("export", str(sample), "--har", str(har)) == 0
    assert f"{har}: 7 entries (2 in flight)" in capsys.readouterr().out
    assert stat.S_IMODE(har.stat().st_mode) == 0o600  # it holds the prompts
    assert main("import", str(har), "--out", str(tmp_path / "back"), "--all") == 0
    original, back = load(sample), load(tmp_path / "back")
    assert back.warnings == []
    # Everything: times (exact, chunk by chunk), bodies, statuses, errors, in-flight and
    # interrupted exchanges, connections and redactions.
    assert comparable(back) == comparable(original)
    assert all(x.chunk_timing for x in back.exchanges)
    assert back.meta["started_at"] == START
    assert back.meta["source"]["session_headers"] == ["x-trace"]
    assert back.meta["source"]["imported_from"] == str(har)
    headers = ["x-trace"]
    assert summarize_sessions(back.exchanges, back.piece, session_headers=headers) == summarize_sessions(
        original.exchanges, original.piece, session_headers=headers
    )


def test_default_import_keeps_only_llm_requests_and_they_round_trip(sample: Path, tmp_path: Path, capsys) -> None:
    har = tmp_path / "out.har"
    main("export", str(sample), "--har", str(har))
    assert main("import", str(har), "--out", str(tmp_path / "back")) == 0
    # All seven are LLM requests (chat and SGLang /generate).
    assert "7 exchange(s)" in capsys.readouterr().out
    assert len(load(tmp_path / "back").exchanges) == 7


def test_the_exported_har_is_what_har_readers_expect(sample: Path) -> None:
    doc = har_document(load(sample))
    log = doc["log"]
    assert log["version"] == "1.2" and log["creator"]["name"] == "proxycheck"
    entries = log["entries"]
    assert [e["startedDateTime"] for e in entries] == sorted(e["startedDateTime"] for e in entries)
    first = entries[0]
    for key in ("startedDateTime", "time", "request", "response", "cache", "timings"):
        assert key in first
    req, resp = first["request"], first["response"]
    assert {"name": "authorization", "value": "[redacted]"} in req["headers"]
    assert {"name": "x-team-token", "value": "[redacted]"} in req["headers"]
    assert "key=%5Bredacted%5D" in req["url"] or "key=[redacted]" in req["url"]
    assert json.loads(req["postData"]["text"])["metadata"]["api_key"] == "[redacted]"
    assert resp["status"] == 200 and resp["content"]["mimeType"] == "text/event-stream"
    assert resp["content"]["text"].endswith("data: [DONE]\n\n")
    assert first["timings"]["send"] == 0 and first["timings"]["wait"] == pytest.approx(200.0)
    assert first["timings"]["receive"] == pytest.approx(300.0)
    assert first["time"] == pytest.approx(500.0)
    assert [t for t, _ in first["_proxycheck_chunks"]] == pytest.approx([1.3, 1.35, 1.4, 1.45])
    binary = entries[1]
    assert binary["response"]["content"]["encoding"] == "base64"
    assert base64.b64decode(binary["response"]["content"]["text"]) == b"\x00\xff\xfe binary \xc3"
    reset = next(e for e in entries if e["response"].get("_error"))
    assert reset["response"]["_error"] == "connection reset by peer" and reset["response"]["status"] == 200
    inflight = [e for e in entries if e.get("_proxycheck_inflight")]
    assert [e["response"]["status"] for e in inflight] == [0, 0]
    assert inflight[0]["response"]["_proxycheck_status"] == 200
    assert "_proxycheck_status" not in inflight[1]["response"]


def test_export_to_stdout(sample: Path, capsys) -> None:
    assert main("export", str(sample), "--har", "-") == 0
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["log"]["entries"]) == 7
    assert "7 entries" in captured.err


# -- HAR files from elsewhere -------------------------------------------------------------------------


def test_chrome_export(tmp_path: Path, capsys) -> None:
    har = HAR_FIXTURES / "chrome-chat.har"
    assert main("import", str(har), "--out", str(tmp_path / "rec")) == 0
    captured = capsys.readouterr()
    # The event stream Chrome kept no body of is named by its index (log.entries[2]).
    assert f"{har}: log.entries[2]: the HAR holds no response body (text/event-stream)" in captured.err
    assert "left out: 1 not LLM requests" in captured.out
    rec = load(tmp_path / "rec")
    ex = rec.exchanges
    assert [(x.path, x.status, x.error) for x in ex] == [
        ("/v1/chat/completions", 200, None),
        ("/v1/chat/completions", 200, None),
        ("/v1/chat/completions", None, "net::ERR_CONNECTION_RESET"),
        ("/v1/completions", 200, None),
    ]
    turn1, turn2, turn3, completion = ex
    # Offsets from the first entry (the skipped /v1/models at 08:15:29.500).
    assert rec.meta["started_at"] == pytest.approx(1714637729.5)
    assert turn1.t_request == pytest.approx(0.5)
    # Headers at blocked + dns + connect + send + wait (-1 ignored; ssl is part of connect).
    assert turn1.t_response - turn1.t_request == pytest.approx((1.2 + 4.0 + 30.0 + 0.1 + 350.5) / 1000)
    assert turn1.t_end - turn1.t_request == pytest.approx(1.5861)
    assert turn1.response_body == b"" and turn1.chunks == ()
    assert turn2.t_request == pytest.approx(4.75)
    assert turn2.chunk_timing is False and turn2.streamed is True
    assert len(turn2.chunks) == 1 and turn2.chunks[0][0] == pytest.approx(turn2.t_end)
    assert turn2.response_body.endswith(b"data: [DONE]\n\n")
    assert turn3.t_error - turn3.t_request == pytest.approx(15.0009)
    # HTTP/2 pseudo-headers are not headers; the decoded body makes Content-Encoding a lie;
    # the bearer token is redacted as when recording.
    names = [n for n, _ in turn2.request_headers]
    assert not any(n.startswith(":") for n in names) and "content-length" not in names
    assert turn2.request_header("authorization") is REDACTED and "header:authorization" in turn2.redacted
    assert turn2.response_header("content-encoding") is None
    assert turn2.conn.client_id == "412345" and turn2.conn.peer == "203.0.113.7"
    assert json.loads(rec.request_body(turn2))["messages"][-1] == {"role": "user", "content": "what is 2+2?"}
    # base64 content is decoded.
    assert json.loads(completion.response_body)["choices"][0]["text"] == " hi"
    sessions = summarize_sessions(rec.exchanges, rec.piece)
    by_id = {s.id: [t.outcome.value for t in s.turns] for s in sessions}
    assert by_id["chat-7"] == ["truncated", "ok", "connect_error"]
    assert [len(s.turns) for s in sessions] == [3, 1]


def test_chrome_export_with_all_requests(tmp_path: Path) -> None:
    assert main("import", str(HAR_FIXTURES / "chrome-chat.har"), "--out", str(tmp_path / "rec"), "--all") == 0
    ex = load(tmp_path / "rec").exchanges
    assert [x.path for x in ex][0] == "/v1/models"
    assert ex[0].t_request == 0 and ex[0].method == "GET" and b"qwen3" in ex[0].response_body


def test_mitmproxy_hardump(tmp_path: Path, capsys) -> None:
    har = HAR_FIXTURES / "mitmproxy-anthropic.har"
    assert main("import", str(har), "--out", str(tmp_path / "rec")) == 0
    capsys.readouterr()
    rec = load(tmp_path / "rec")
    assert rec.warnings == []
    assert rec.meta["source"]["creator"] == "mitmproxy 11.0.2"
    turn1, turn2, killed = rec.exchanges
    assert turn1.t_response == pytest.approx((0.8 + 0.2 + 120) / 1000)
    assert turn1.t_end == pytest.approx(1.021)
    assert turn2.t_request == pytest.approx(4.0)
    assert turn1.request_header("x-api-key") is REDACTED
    assert turn1.response_body.startswith(b"event: message_start")
    assert killed.error == "Connection killed." and killed.status is None
    sessions = summarize_sessions(rec.exchanges, rec.piece)
    assert [[t.outcome.value for t in s.turns] for s in sessions] == [["ok", "ok", "connect_error"]]
    assert sessions[0].dialect == "anthropic_messages"
    assert all(t.turn == i for i, t in enumerate(sessions[0].turns, start=1))


def test_mitmproxy_hardump_binary_body_with_all(tmp_path: Path) -> None:
    assert main("import", str(HAR_FIXTURES / "mitmproxy-anthropic.har"), "--out", str(tmp_path / "rec"), "--all") == 0
    favicon = next(x for x in load(tmp_path / "rec").exchanges if x.path == "/favicon.ico")
    assert favicon.response_body == bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0xFF, 0xFE])


def test_compressed_har(tmp_path: Path) -> None:
    import zlib

    zhar = tmp_path / "flows.zhar"
    zhar.write_bytes(zlib.compress((HAR_FIXTURES / "mitmproxy-anthropic.har").read_bytes()))
    assert main("import", str(zhar), "--out", str(tmp_path / "rec")) == 0
    assert len(load(tmp_path / "rec").exchanges) == 3


# -- bad input ----------------------------------------------------------------------------------------


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("notjson.har", b"{not json", "not a HAR file (invalid JSON"),
        ("other.har", b'{"hello": "world"}', "not a HAR file (no log.entries list)"),
        ("binary.har", b"\xff\xfe\x00garbage", "not a HAR file (not UTF-8 text)"),
        ("notes.txt", b"{}", "unknown file type"),
        ("broken.zhar", b"not zlib", "not a zlib-compressed HAR file"),
    ],
)
def test_a_file_that_is_not_har_is_one_line(tmp_path: Path, capsys, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    assert main("import", str(path), "--out", str(tmp_path / "rec")) == 2
    line = error_line(capsys)
    assert line.startswith(f"proxycheck: {path}: ") and message in line
    assert not (tmp_path / "rec").exists()


def test_a_missing_file_is_one_line(tmp_path: Path, capsys) -> None:
    assert main("import", str(tmp_path / "nope.har"), "--out", str(tmp_path / "rec")) == 2
    assert "nope.har: no such file" in error_line(capsys)


def test_out_must_be_new_or_empty(sample: Path, tmp_path: Path, capsys) -> None:
    har = tmp_path / "x.har"
    main("export", str(sample), "--har", str(har))
    capsys.readouterr()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    assert main("import", str(har), "--out", str(tmp_path / "full")) == 2
    assert error_line(capsys) == f"proxycheck: {tmp_path / 'full'}: exists and is not an empty directory (choose a new --out)"
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert main("import", str(har), "--out", str(har)) == 2
    assert "exists and is not an empty directory" in error_line(capsys)
    (tmp_path / "empty").mkdir()
    assert main("import", str(har), "--out", str(tmp_path / "empty")) == 0


def test_broken_entries_are_skipped_with_their_index(tmp_path: Path, capsys) -> None:
    good = json.loads((HAR_FIXTURES / "mitmproxy-anthropic.har").read_text())["log"]["entries"][0]
    no_url = json.loads(json.dumps(good))
    del no_url["request"]["url"]
    bad_time = {**good, "startedDateTime": "yesterday"}
    bad_b64 = json.loads(json.dumps(good))
    bad_b64["response"]["content"].update(text="!!!", encoding="base64")
    bad_headers = json.loads(json.dumps(good))
    bad_headers["request"]["headers"] = "host: x"
    har = tmp_path / "mixed.har"
    har.write_text(json.dumps({"log": {"entries": [good, no_url, "junk", bad_time, bad_b64, bad_headers]}}))
    assert main("import", str(har), "--out", str(tmp_path / "rec")) == 0
    err = capsys.readouterr().err
    assert f"{har}: log.entries[1]: request has no method or url; skipped" in err
    assert f"{har}: log.entries[2]: not a JSON object; skipped" in err
    assert f"{har}: log.entries[3]: startedDateTime 'yesterday' is not an ISO 8601 time; skipped" in err
    assert f"{har}: log.entries[4]: response.content.text is not valid base64; skipped" in err
    assert f"{har}: log.entries[5]: headers is not a list; skipped" in err
    assert len(load(tmp_path / "rec").exchanges) == 1


def test_export_of_something_that_is_not_a_recording(tmp_path: Path, capsys) -> None:
    assert main("export", str(tmp_path), "--har", str(tmp_path / "x.har")) == 2
    assert "not a proxycheck recording" in error_line(capsys)
    assert not (tmp_path / "x.har").exists()


def test_bad_input_through_the_real_command_line(tmp_path: Path) -> None:
    """No traceback from `python -m proxycheck` either."""
    path = tmp_path / "x.har"
    path.write_text("[1, 2")
    done = run_proxycheck("import", str(path), "--out", str(tmp_path / "r"), timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"proxycheck: {path}: not a HAR file (invalid JSON") and done.stderr.count("\n") == 1


# -- properties ---------------------------------------------------------------------------------------


@st.composite
def exchanges(draw: st.DrawFn) -> list[tuple]:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        chunks = draw(st.lists(st.binary(min_size=1, max_size=40) | st.text(min_size=1, max_size=20).map(str.encode),
                               max_size=5))  # fmt: skip
        gaps = draw(st.lists(st.floats(0, 5, allow_nan=False), min_size=len(chunks) + 3, max_size=len(chunks) + 3))
        ending = draw(st.sampled_from(["end", "error", "inflight"]))
        request = draw(st.binary(max_size=60) | st.just(b'{"messages":[{"role":"user","content":"x"}]}'))
        out.append((request, chunks, gaps, ending))
    return out


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(exchanges())
def test_any_recording_survives_export_and_import(tmp_path_factory: pytest.TempPathFactory, spec: list[tuple]) -> None:
    root = tmp_path_factory.mktemp("prop")
    w = RecordingWriter(root / "rec", wall=lambda: START)
    t = 0.0
    for request, chunks, gaps, ending in spec:
        t += gaps[0]
        x = w.request("POST", "http://e/v1/chat/completions", [("content-type", "application/json")], request, t=t)
        t += gaps[1]
        w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=t)
        for gap, chunk in zip(gaps[2:], chunks):
            t += gap
            w.data(x, chunk, t=t)
        t += gaps[-1]
        if ending == "end":
            w.end(x, t=t)
        elif ending == "error":
            w.error(x, "reset", t=t)
    w.close()
    original = load(root / "rec")
    (root / "x.har").write_text(json.dumps(har_document(original)))
    result = read_har(root / "x.har")
    write_recording(root / "back", result)
    assert comparable(load(root / "back")) == comparable(original)


def test_run_functions_can_be_called_directly(sample: Path, tmp_path: Path, capsys) -> None:
    """The command modules work without the CLI (as the lead's tests may call them)."""
    har = tmp_path / "d.har"
    assert export.run(argparse.Namespace(directory=str(sample), har=str(har))) == 0
    assert importer.run(argparse.Namespace(file=str(har), out=str(tmp_path / "r"), all=True)) == 0
    assert len(load(tmp_path / "r").exchanges) == 7


def test_proxycheck_replays_are_never_imported(tmp_path: Path, capsys) -> None:
    doc = json.loads((HAR_FIXTURES / "mitmproxy-anthropic.har").read_text())
    doc["log"]["entries"][2]["request"]["headers"].append({"name": "X-Proxycheck-Replay", "value": "run-1"})
    har = tmp_path / "with-replay.har"
    har.write_text(json.dumps(doc))
    assert main("import", str(har), "--out", str(tmp_path / "rec"), "--all") == 0
    assert "left out: 1 proxycheck replays" in capsys.readouterr().out
    assert [x.t_request for x in load(tmp_path / "rec").exchanges] == [0.0, 3.5, 9.0]
