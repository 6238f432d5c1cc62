"""The journal's record encoders (proxycheck.core.recording.journal) against its decoder: every
record a writer journals, through one JSON line, comes back as the exchange it describes; and a
builder that follows a growing journal rebuilds only what the new records changed."""

from __future__ import annotations

import json

from proxycheck.core.recording import bodies
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording.journal import Connection, RecordedExchange, RecordingBuilder
from proxycheck.core.recording.redact import REDACTED

BODY = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}'


def through_lines(records: list[dict]) -> RecordingBuilder:
    """The records as the writer puts them on disk (one `dumps` line each), read back."""
    builder = RecordingBuilder()
    for i, rec in enumerate(records, 1):
        builder.add(json.loads(fmt.dumps(rec)), f"journal.jsonl:{i}")
    assert builder.warnings == []
    return builder


def request_records(xid: int, t: float, body: bytes = BODY) -> list[dict]:
    split = bodies.split_body(body)
    pieces = [fmt.blob_record(pid, data) for pid, data in split.pieces.items()]
    headers = [("content-type", "application/json"), ("authorization", REDACTED)]
    req = fmt.request_record(xid, t, "POST", "http://gw/v1/chat/completions", "HTTP/1.1", headers,
                             bodies.encode_body(split.body), redacted=["header:authorization"],
                             conn={"client_id": "c1", "tls": False})  # fmt: skip
    return [*pieces, req]


def test_a_finished_exchange_round_trips() -> None:
    chunks = [(0.3000004, b"data: a\n\n"), (0.35, b"data: [DONE]\n\n")]
    records = [
        *request_records(1, 0.1234567),
        fmt.response_record(1, 0.25, 200, "OK", [("content-type", "text/event-stream")], streamed=True,
                            http_version="HTTP/1.1", conn={"server_id": "s1", "server_reused": True}),  # fmt: skip
        fmt.data_record(1, chunks),
        fmt.end_record(1, 0.4),
    ]
    builder = through_lines(records)
    (x,) = builder.finish()
    assert (x.xid, x.t_request, x.method, x.url, x.http_version) == (1, 0.123457, "POST", "http://gw/v1/chat/completions",
                                                                    "HTTP/1.1")  # fmt: skip
    assert x.request_headers == (("content-type", "application/json"), ("authorization", REDACTED))
    assert x.redacted == ("header:authorization",)
    assert bodies.join_body(x.body, builder.pieces.__getitem__) == BODY
    assert x.conn == Connection(client_id="c1", server_id="s1", server_reused=True, tls=False)
    assert (x.t_response, x.status, x.reason, x.streamed, x.chunk_timing) == (0.25, 200, "OK", True, True)
    assert x.response_headers == (("content-type", "text/event-stream"),)
    assert x.timed_chunks() == [(0.3, b"data: a\n\n"), (0.35, b"data: [DONE]\n\n")]
    assert (x.t_end, x.error, x.interrupted) == (0.4, None, False)


def test_an_error_a_close_and_bytes_that_are_not_utf8_round_trip() -> None:
    odd = b"\xff\xfe not utf-8"
    records = [
        *request_records(1, 0.0, odd),
        fmt.response_record(1, 0.1, 502, None, [], streamed=False, chunk_timing=False),
        fmt.data_record(1, [(0.2, b"\xc3")]),  # a chunk cut inside a UTF-8 sequence
        fmt.error_record(1, 0.3, "peer closed connection", {"peer": "10.0.0.1:443"}),
        *request_records(2, 1.0),
        fmt.close_record(2.0, "stopped", {2}),
    ]
    assert "b64" in records[0] and "b64" in records[3]
    builder = through_lines(records)
    one, two = builder.finish()
    assert bodies.join_body(one.body, builder.pieces.__getitem__) == odd
    assert (one.status, one.reason, one.streamed, one.chunk_timing, one.response_body) == (502, None, False, False, b"\xc3")
    assert (one.error, one.t_error, one.t_end, one.conn and one.conn.peer) == ("peer closed connection", 0.3, None,
                                                                              "10.0.0.1:443")  # fmt: skip
    assert (two.in_flight, two.interrupted) == (True, True)
    assert builder.closed == [{"k": "close", "t": 2.0, "reason": "stopped", "inflight": [2]}]


def test_records_are_the_lines_the_format_documents() -> None:
    assert fmt.end_record(3, 1.0000004) == {"k": "end", "x": 3, "t": 1.0}
    assert list(fmt.error_record(3, 1.0, "reset")) == ["k", "x", "msg", "t"]
    bare = fmt.request_record(1, 0.0, "GET", "http://gw/v1/models", None, [], {"kind": "empty", "size": 0})
    assert set(bare) == {"k", "x", "t", "method", "url", "http", "headers", "body"}


def test_a_follower_rebuilds_only_what_changed() -> None:
    builder = RecordingBuilder()
    for rec in [*request_records(1, 0.0), *request_records(2, 0.5)]:
        builder.add(rec, "j")
    assert [x.xid for x in builder.take_changed()] == [1, 2]
    builder.add(fmt.data_record(2, [(0.6, b"data: a\n\n")]), "j")
    builder.add(fmt.blob_record("unused", b"x"), "j")
    (changed,) = builder.take_changed()
    assert isinstance(changed, RecordedExchange) and changed.xid == 2 and changed.response_body == b"data: a\n\n"
    assert builder.take_changed() == []
    builder.add(fmt.close_record(1.0, "stopped", [1, 2]), "j")
    assert [(x.xid, x.interrupted) for x in builder.take_changed()] == [(1, True), (2, True)]
