"""Recordings on disk: the writer's files and permissions, and a loader that survives damage."""

from __future__ import annotations

import json
import os
import stat
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxycheck.core.errors import BadInput, StorageError
from proxycheck.core.recording import journal as fmt
from proxycheck.core.recording.redact import REDACTED, RedactionPolicy
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.storage import RecordingWriter, load

SSE = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


class FakeClock:
    """A clock the test moves by hand, so offsets are exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def body(n_messages: int, size: int = 100) -> bytes:
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} " + "x" * size} for i in range(n_messages)]
    return json.dumps({"model": "m", "messages": msgs, "stream": True}).encode()


def write_session(directory: Path, turns: int = 3, **kw) -> RecordingWriter:
    clock = FakeClock()
    w = RecordingWriter(directory, clock=clock, wall=lambda: 1_700_000_000.0, **kw)
    for turn in range(turns):
        clock.now += 2.0
        x = w.request("POST", "http://engine/v1/chat/completions", [("content-type", "application/json")], body(2 * turn + 1))
        clock.now += 0.1
        w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True)
        clock.now += 0.1
        w.data(x, SSE[:30])
        clock.now += 0.1
        w.data(x, SSE[30:])
        w.end(x)
    return w


def test_round_trip_with_exact_times_and_bodies(tmp_path: Path) -> None:
    w = write_session(tmp_path / "rec")
    w.close()
    rec = load(tmp_path / "rec")
    assert rec.warnings == []
    assert [x.xid for x in rec.exchanges] == [1, 2, 3]
    third = rec.exchanges[2]
    assert rec.request_body(third) == body(5)
    assert third.t_request == pytest.approx(6.6)  # 2.3 s per turn, first request at 2.0
    assert third.chunks == ((pytest.approx(6.8), 30), (pytest.approx(6.9), len(SSE) - 30))
    assert third.response_body == SSE
    assert third.t_end == pytest.approx(6.9)
    assert rec.meta["started_at"] == 1_700_000_000.0


def test_files_are_private(tmp_path: Path) -> None:
    w = write_session(tmp_path / "rec", turns=1)
    x = w.request("POST", "http://e/generate", [], b"\x00" * (fmt.INLINE_PIECE_MAX + 10))
    w.close()
    root = tmp_path / "rec"
    for path in [root, root / fmt.BLOB_DIR]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    for path in [root / fmt.META_FILE, root / fmt.JOURNAL_FILE, *(root / fmt.BLOB_DIR).iterdir()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert x == 2


def test_secrets_never_reach_the_disk(tmp_path: Path) -> None:
    policy = RedactionPolicy.default().extended(headers=["x-team-token"], body_paths=["metadata.secret"])
    w = RecordingWriter(tmp_path / "rec", policy)
    raw = json.dumps({"messages": [{"role": "user", "content": "hi"}], "metadata": {"secret": "s3cr3t-body"}}).encode()
    headers = [("Authorization", "Bearer sk-live-123"), ("X-Team-Token", "tt-456"), ("Cookie", "c=789"), ("Accept", "*/*")]
    x = w.request("POST", "http://u:pw@e/v1/chat/completions?key=k-000&x=1", headers, raw)
    w.response(x, 200, "OK", [("Set-Cookie", "session=abc999")], streamed=False)
    w.data(x, b"{}")
    w.end(x)
    w.close()
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "rec").rglob("*") if p.is_file())
    for secret in [b"sk-live-123", b"tt-456", b"c=789", b"k-000", b"s3cr3t-body", b"abc999", b"pw@"]:
        assert secret not in on_disk
    ex = load(tmp_path / "rec").exchanges[0]
    assert ex.request_header("authorization") is REDACTED
    assert ex.request_header("accept") == "*/*"
    assert ex.response_header("set-cookie") is REDACTED
    assert set(ex.redacted) >= {"header:authorization", "header:x-team-token", "query:key", "url:userinfo", "body:metadata.secret"}
    assert "x=1" in ex.url


def test_a_crash_mid_line_loses_only_that_line(tmp_path: Path) -> None:
    w = write_session(tmp_path / "rec")
    w.close()
    journal = tmp_path / "rec" / fmt.JOURNAL_FILE
    data = journal.read_bytes()
    lines = data.splitlines(keepends=True)
    journal.write_bytes(data[: len(data) - len(lines[-1]) - 7])  # cut inside the last 'end' record
    rec = load(tmp_path / "rec")
    (warning,) = rec.warnings
    assert warning.where == f"{journal}:{len(lines) - 1}"
    assert "incomplete" in warning.message
    last = rec.exchanges[-1]
    assert last.in_flight and last.response_body == SSE  # the data record before the cut is kept
    assert all(x.finished for x in rec.exchanges[:-1])


def test_in_flight_exchanges_survive_close_and_are_marked(tmp_path: Path) -> None:
    w = write_session(tmp_path / "rec", turns=1)
    x = w.request("POST", "http://e/v1/chat/completions", [], body(3))
    w.response(x, 200, "OK", [], streamed=True)
    w.data(x, SSE[:20])
    w.close("SIGTERM")
    rec = load(tmp_path / "rec")
    wedged = rec.exchanges[-1]
    assert wedged.in_flight and wedged.interrupted
    assert wedged.response_body == SSE[:20]  # buffered chunks are flushed on close
    assert rec.closes[0]["reason"] == "SIGTERM"


def test_chunks_are_flushed_once_a_second_without_close(tmp_path: Path) -> None:
    clock = FakeClock()
    w = RecordingWriter(tmp_path / "rec", clock=clock)
    x = w.request("POST", "http://e/v1/chat/completions", [], body(1))
    w.data(x, b"data: 1\n\n")
    assert load(tmp_path / "rec").exchanges[0].response_body == b""  # still buffered
    clock.now += 1.01
    w.data(x, b"data: 2\n\n")
    assert load(tmp_path / "rec").exchanges[0].response_body == b"data: 1\n\ndata: 2\n\n"
    w.close()


def test_reopening_appends_with_new_numbers_and_shared_pieces(tmp_path: Path) -> None:
    write_session(tmp_path / "rec", turns=2).close()
    size_before = (tmp_path / "rec" / fmt.JOURNAL_FILE).stat().st_size
    w = RecordingWriter(tmp_path / "rec")
    x = w.request("POST", "http://engine/v1/chat/completions", [], body(3))  # messages 0-2 known
    w.close()
    assert x == 3
    rec = load(tmp_path / "rec")
    assert rec.warnings == [] and len(rec.exchanges) == 3
    assert rec.request_body(rec.exchanges[-1]) == body(3)
    added = (tmp_path / "rec" / fmt.JOURNAL_FILE).stat().st_size - size_before
    assert added < 1200  # no message was stored twice


def test_a_growing_session_costs_what_it_adds(tmp_path: Path) -> None:
    # 60 turns whose history grows by two messages a turn: each turn's journal lines must not
    # grow with the history (no id lists re-written), or a long session costs O(turns^2).
    w = RecordingWriter(tmp_path / "rec")
    journal = tmp_path / "rec" / fmt.JOURNAL_FILE
    added = []
    for turn in range(60):
        before = journal.stat().st_size
        w.request("POST", "http://e/v1/chat/completions", [], body(2 * turn + 1))
        added.append(journal.stat().st_size - before)
    w.close()
    assert max(added[2:]) - min(added[2:]) < 50
    rec = load(tmp_path / "rec")
    assert rec.warnings == []
    assert [rec.request_body(x) for x in rec.exchanges] == [body(2 * t + 1) for t in range(60)]


def test_unwritable_directory_is_a_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StorageError, match="cannot write a recording here"):
        RecordingWriter(blocker / "rec")


@pytest.mark.parametrize(
    "setup,match",
    [
        (lambda d: None, "no such directory"),
        (lambda d: d.write_text("x"), "not a directory"),
        (lambda d: d.mkdir(), "not a proxycheck recording"),
        (lambda d: (d.mkdir(), (d / "recording.json").write_text("{oops")), "invalid JSON"),
        (lambda d: (d.mkdir(), (d / "recording.json").write_bytes(b"\xff\xfe")), "not UTF-8"),
        (
            lambda d: (d.mkdir(), (d / "recording.json").write_text(json.dumps(fmt.new_metadata(0.0, "", "9") | {"format": 7}))),
            "format 7 is newer",
        ),
    ],
)
def test_what_cannot_be_loaded_is_bad_input_naming_the_path(tmp_path: Path, setup, match: str) -> None:
    target = tmp_path / "rec"
    setup(target)
    with pytest.raises(BadInput, match=match) as info:
        load(target)
    assert str(tmp_path) in str(info.value)


def test_bad_lines_are_skipped_with_warnings(tmp_path: Path) -> None:
    write_session(tmp_path / "rec", turns=2).close()
    journal = tmp_path / "rec" / fmt.JOURNAL_FILE
    lines = journal.read_bytes().splitlines(keepends=True)
    lines.insert(2, b"\xff\xfe not utf-8\n")
    lines.insert(4, b"{not json}\n")
    lines.insert(5, b"\n")
    journal.write_bytes(b"".join(lines))
    rec = load(tmp_path / "rec")
    assert [(w.where.rsplit(":", 1)[1], w.message) for w in rec.warnings] == [
        ("3", "line is not UTF-8; skipped"),
        ("5", "invalid JSON; skipped"),
    ]
    assert len(rec.exchanges) == 2


def test_huge_bodies_are_stored_aside_and_loading_stays_small(tmp_path: Path) -> None:
    big = b"\x89PNG" + os.urandom(1024) * (55 * 1024)  # 55 MB, not JSON, not UTF-8
    w = RecordingWriter(tmp_path / "rec")
    x = w.request("POST", "http://e/v1/chat/completions", [], big)
    w.end(x)
    w.close()
    assert (tmp_path / "rec" / fmt.JOURNAL_FILE).stat().st_size < 4096
    del big
    tracemalloc.start()
    try:
        rec = load(tmp_path / "rec")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000  # the body is not read to list the recording
    assert rec.exchanges[0].body.size == 4 + 55 * 1024 * 1024
    assert len(rec.request_body(rec.exchanges[0])) == rec.exchanges[0].body.size


def test_an_overlong_line_is_skipped_without_reading_it_whole(tmp_path: Path) -> None:
    write_session(tmp_path / "rec", turns=1).close()
    journal = tmp_path / "rec" / fmt.JOURNAL_FILE
    with open(journal, "ab") as f:
        f.write(b'{"k":"blob","id":"x","v":"' + b"a" * (fmt.MAX_LINE + 10) + b'"}\n')
        f.write(b'{"k":"end","x":1,"t":99.0}\n')
    tracemalloc.start()
    try:
        rec = load(tmp_path / "rec")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * fmt.MAX_LINE
    assert [w.message for w in rec.warnings] == ["line longer than 16 MiB; skipped"]
    assert rec.exchanges[0].t_end == 99.0  # the line after it was read


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_journals_load_or_fail_cleanly(tmp_path_factory, data) -> None:
    root = tmp_path_factory.mktemp("fuzz") / "rec"
    write_session(root, turns=2).close()
    journal = root / fmt.JOURNAL_FILE
    raw = bytearray(journal.read_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(0, len(raw) - 1)))
        if op == "flip" and raw:
            raw[pos] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del raw[pos : pos + data.draw(st.integers(1, 40))]
        else:
            raw[pos:pos] = data.draw(st.binary(max_size=30) | st.sampled_from([b"\n", b'{"k":"req"}\n', b'{"k":"data","x":1}\n']))
    journal.write_bytes(bytes(raw))
    rec = load(root)  # never raises for a damaged journal
    for ex in rec.exchanges:
        try:
            rec.request_body(ex)
        except BadInput:
            pass  # a piece lost to the damage is named, not a crash
    sessions = summarize_sessions(rec.exchanges, rec.piece)  # and what loaded can be listed
    assert sum(len(s.turns) for s in sessions) == len(rec.exchanges)


def test_imported_streams_are_marked_as_having_no_chunk_timing(tmp_path: Path) -> None:
    w = RecordingWriter(tmp_path / "rec")
    x = w.request("POST", "http://e/v1/chat/completions", [], body(1))
    w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, chunk_timing=False, t=1.0)
    w.data(x, SSE, t=1.0)
    w.end(x, t=1.0)
    y = w.request("POST", "http://e/v1/chat/completions", [], body(1))
    w.response(y, 200, "OK", [], streamed=True)
    w.close()
    imported, recorded = load(tmp_path / "rec").exchanges
    assert not imported.chunk_timing and recorded.chunk_timing


def test_an_error_can_bring_the_server_connection_facts(tmp_path: Path) -> None:
    w = RecordingWriter(tmp_path / "rec")
    x = w.request("POST", "http://e/v1/chat/completions", [], body(1), conn={"client_id": "c1"})
    w.error(x, "timed out", conn={"server_id": "s9", "server_reused": True, "server_idle": 7.5})
    w.close()
    (ex,) = load(tmp_path / "rec").exchanges
    assert (ex.conn.client_id, ex.conn.server_id, ex.conn.server_reused, ex.conn.server_idle) == ("c1", "s9", True, 7.5)
