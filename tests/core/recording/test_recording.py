"""The recording format, pure parts: records, rebuilding exchanges from them, versions."""

from __future__ import annotations

import json

import pytest

from proxycheck.core.errors import BadInput
from proxycheck.core.recording import bodies
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording.journal import RecordingBuilder
from proxycheck.core.recording.redact import REDACTED

# ---------------------------------------------------------------------------- records


def test_headers_keep_order_duplicates_and_the_redaction_marker() -> None:
    headers = (("A", "1"), ("Authorization", REDACTED), ("a", "2"))
    assert fmt.decode_headers(json.loads(json.dumps(fmt.encode_headers(headers)))) == headers
    assert fmt.encode_headers(headers)[1] == ["Authorization", {"redacted": True}]


def test_data_record_keeps_bytes_split_inside_utf8_sequences() -> None:
    smile = "\U0001f600".encode()
    chunks = [(0.5, b"data: " + smile[:2]), (0.75, smile[2:] + b"\n\n")]
    text_rec = fmt.encode_data(chunks)
    assert "v" in text_rec  # joined, the bytes are valid UTF-8
    assert fmt.decode_payload(text_rec) == b"data: " + smile + b"\n\n"
    cut = fmt.encode_data(chunks[:1])
    assert "b64" in cut and fmt.decode_payload(cut) == chunks[0][1]
    assert cut["c"] == [[0.5, 8]]


def build(records: list[dict]) -> RecordingBuilder:
    b = RecordingBuilder()
    for i, rec in enumerate(records, 1):
        b.add(rec, f"journal.jsonl:{i}")
    return b


def req(x: int, t: float = 0.0) -> dict:
    raw = json.dumps({"messages": [{"role": "user", "content": f"q{x}"}]}).encode()
    return {"k": "req", "x": x, "t": t, "method": "POST", "url": "http://e/v1/chat/completions",
            "headers": [], "body": bodies.encode_body(bodies.split_body(raw).body)}


def test_builder_rebuilds_an_exchange_and_keeps_in_flight_ones() -> None:
    b = build(
        [
            req(1, 0.0),
            req(2, 1.0),
            {"k": "resp", "x": 1, "t": 0.1, "status": 200, "headers": [["content-type", "text/event-stream"]], "stream": True},
            {"k": "data", "x": 1, **fmt.encode_data([(0.2, b"data: a\n\n"), (0.3, b"data: b\n\n")])},
            {"k": "end", "x": 1, "t": 0.4},
            {"k": "resp", "x": 2, "t": 1.1, "status": 200, "headers": [], "stream": True},
            {"k": "close", "t": 9.0, "reason": "SIGTERM", "inflight": [2]},
        ]
    )
    first, second = b.finish()
    assert first.finished and first.status == 200 and first.streamed
    assert first.response_body == b"data: a\n\ndata: b\n\n"
    assert first.chunks == ((0.2, 9), (0.3, 9))
    assert second.in_flight and second.interrupted and second.status == 200
    assert b.warnings == []


def test_builder_skips_damaged_records_with_a_warning_naming_the_line() -> None:
    b = build(
        [
            req(1),
            {"k": "data", "x": 7, "c": [[0, 1]], "v": "x"},  # unknown exchange
            {"k": "resp", "x": 1, "t": "soon", "status": 200},  # bad time
            {"k": "data", "x": 1, "c": [[0, 5]], "v": "abc"},  # sizes do not add up
            {"k": "teleport"},
            ["not", "an", "object"],
            req(1),  # started twice
        ]
    )
    assert [w.where for w in b.warnings] == [f"journal.jsonl:{i}" for i in (2, 3, 4, 5, 6, 7)]
    assert "no request record" in b.warnings[0].message
    assert "unknown record kind 'teleport'" in b.warnings[3].message
    (only,) = b.finish()
    assert only.status is None and only.in_flight


# ---------------------------------------------------------------------------- versions


def meta(**over) -> dict:
    return {**fmt.new_metadata(1000.0, "2026-01-01T00:00:00+00:00", "0"), **over}


def test_metadata_checks() -> None:
    assert fmt.check_metadata(meta(), "r/recording.json") == 1
    with pytest.raises(BadInput, match="newer than this proxycheck reads"):
        fmt.check_metadata(meta(format=2), "r/recording.json")
    with pytest.raises(BadInput, match="unknown recording format"):
        fmt.check_metadata(meta(format="1"), "r/recording.json")
    with pytest.raises(BadInput, match="not a proxycheck recording"):
        fmt.check_metadata({"format": 1}, "r/recording.json")
    with pytest.raises(BadInput, match="started_at"):
        fmt.check_metadata(meta(started_at=None), "r/recording.json")


def test_upgrade_applies_migrations_in_order() -> None:
    # A future format 2 renames "msg" to "message" in error records; format 3 drops "close".
    def rename(rec):
        if rec.get("k") != "error":
            return rec
        return {**{k: v for k, v in rec.items() if k != "msg"}, "message": rec["msg"]}

    steps = {
        1: fmt.Migration(meta=lambda m: m, record=rename),
        2: fmt.Migration(meta=lambda m: {**m, "note": "v3"}, record=lambda r: None if r.get("k") == "close" else r),
    }
    m, upgrade_record = fmt.upgrade(meta(format=1), steps, current=3)
    assert m["format"] == 3 and m["note"] == "v3"
    assert upgrade_record({"k": "error", "msg": "boom"}) == {"k": "error", "message": "boom"}
    assert upgrade_record({"k": "close"}) is None
    assert upgrade_record({"k": "end", "x": 1}) == {"k": "end", "x": 1}
    with pytest.raises(BadInput, match="no migration from recording format 1"):
        fmt.upgrade(meta(format=1), {}, current=2)


def test_current_format_needs_no_migration() -> None:
    m, upgrade_record = fmt.upgrade(meta())
    assert m["format"] == fmt.FORMAT
    assert upgrade_record({"k": "end"}) == {"k": "end"}
