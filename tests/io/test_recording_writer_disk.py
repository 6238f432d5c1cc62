"""The journal writer against what disks do: directories it must not open (`check_appendable`, read
only), a request piece over 1 MiB that cannot be written, and a disk that fills while exchanges are
in flight. A full disk is a real one for the writer: a child process whose files may not grow past a
limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails with EFBIG as it would with ENOSPC)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import main_output
from recording_dirs import BAD_OUTS, named, snapshot

from proxycheck.core.errors import BadInput, StorageError
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.storage import RESERVE_FILE, RecordingWriter, check_appendable, load

pytestmark = pytest.mark.timeout(60)

CHAT = "http://engine/v1/chat/completions"
SSE = [("content-type", "text/event-stream")]


@pytest.mark.parametrize("case", list(BAD_OUTS))
def test_a_directory_that_cannot_take_a_recording_is_named_and_left_untouched(tmp_path: Path, case: str) -> None:
    bad = BAD_OUTS[case]
    out = bad.make(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises((BadInput, StorageError)) as raised:  # what is there; what cannot be written
        check_appendable(out)
    message = str(raised.value)
    assert message.startswith(f"{named(out, bad)}: ") and bad.problem in message, message
    assert "\n" not in message
    assert snapshot(tmp_path) == before


def test_a_new_directory_an_empty_one_and_a_recording_can_be_appended_to(tmp_path: Path) -> None:
    check_appendable(tmp_path / "new" / "rec")
    (tmp_path / "empty").mkdir()
    check_appendable(tmp_path / "empty")
    w = RecordingWriter(tmp_path / "rec")
    w.close()
    check_appendable(tmp_path / "rec")
    assert not (tmp_path / "new").exists()


def test_the_reserve_is_kept_while_open_and_removed_on_close(tmp_path: Path) -> None:
    w = RecordingWriter(tmp_path / "rec")
    reserve = tmp_path / "rec" / RESERVE_FILE
    assert reserve.stat().st_size > 0 and reserve.stat().st_mode & 0o777 == 0o600
    w.close()
    assert not reserve.exists()
    assert load(tmp_path / "rec").warnings == []


# --------------------------------------------------------------------------------------------
# A disk that fills, in a child process with a file size limit


_LIMITED = """
import json, sys, resource
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
from pathlib import Path
from proxycheck.core.errors import StorageError
from proxycheck.io.storage import RESERVE_FILE, RecordingWriter
out = Path(sys.argv[1])
report = {"errors": []}
def attempt(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except StorageError as exc:
        report["errors"].append(str(exc))
"""


def run_limited(script: str, out: Path, limit: int) -> dict:
    """`script` (after _LIMITED's set-up) in a child whose files may not grow past `limit` bytes;
    the JSON it prints as its last line. An exception it did not expect fails the test."""
    done = subprocess.run([sys.executable, "-c", _LIMITED + script, str(out), str(limit)],
                          capture_output=True, text=True, timeout=50)  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def chat(content: str) -> bytes:
    return json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": content}]}).encode()


def test_a_large_piece_on_a_full_disk_is_a_storage_error_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    report = run_limited(
        """
big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (3 << 20)}]}).encode()
w = RecordingWriter(out)
for _ in range(2):
    attempt(w.request, "POST", "http://engine/v1/chat/completions", [], big)
w.close()
print(json.dumps(report))
""",
        out,
        2 << 20,
    )
    assert len(report["errors"]) == 2
    assert all(e.startswith(f"{out / 'blobs'}/") and "write failed: File too large" in e for e in report["errors"])
    assert [p.name for p in (out / "blobs").iterdir()] == []  # no .tmp left to fill the disk further
    meta = json.loads((out / "recording.json").read_text())
    assert [f["message"] for f in meta["write_failures"]] == ["File too large"]
    assert not (out / RESERVE_FILE).exists()


def test_a_disk_that_fills_mid_stream_says_which_exchanges_it_did_not_record_to_the_end(tmp_path: Path, capsys) -> None:
    out = tmp_path / "rec"
    report = run_limited(
        f"""
w = RecordingWriter(out)
done = w.request("POST", {CHAT!r}, [], {chat("first")!r})
w.response(done, 200, "OK", {SSE!r}, streamed=True)
w.data(done, b'data: {{"choices": []}}\\n\\ndata: [DONE]\\n\\n')
w.end(done)
streaming = w.request("POST", {CHAT!r}, [], {chat("second")!r})
w.response(streaming, 200, "OK", {SSE!r}, streamed=True)
waiting = w.request("POST", {CHAT!r}, [], {chat("third")!r})
report["reserve_while_open"] = (out / RESERVE_FILE).exists()
for i in range(5000):
    attempt(w.data, streaming, b'data: {{"choices": [{{"delta": {{"content": "word"}}}}]}}\\n\\n')
    attempt(w.flush)
    if report["errors"]:
        break
attempt(w.end, streaming)  # refused at once: nothing is written after the failure
report["inflight"] = sorted(w.inflight)
w.close()
report["reserve_after_close"] = (out / RESERVE_FILE).exists()
print(json.dumps(report))
""",
        out,
        64 << 10,
    )
    assert report["reserve_while_open"] and not report["reserve_after_close"]
    assert len(report["errors"]) == 2 and all("File too large" in e for e in report["errors"])
    assert report["inflight"] == [2, 3]

    rec = load(out)
    by_xid = {x.xid: x for x in rec.exchanges}
    assert by_xid[1].finished and by_xid[1].not_recorded is None
    assert by_xid[2].not_recorded and by_xid[3].not_recorded and not by_xid[2].interrupted
    turns = {t.xid: t for s in summarize_sessions(rec.exchanges, rec.piece) for t in s.turns}
    assert turns[1].outcome is Outcome.OK
    assert turns[2].outcome is Outcome.NOT_RECORDED and turns[3].outcome is Outcome.NOT_RECORDED
    assert not Outcome.NOT_RECORDED.is_failure
    assert turns[2].detail.startswith("not recorded to the end: the recorder could not write from ")
    assert "(File too large)" in turns[2].detail and "event(s) recorded" in turns[2].detail
    assert "no response headers recorded" in turns[3].detail

    status, shown, err = main_output(capsys, "sessions", str(out), "--json")
    assert status == 0
    doc = json.loads(shown)
    outcomes = {t["exchange"]: t["outcome"] for s in doc["sessions"] for t in s["turns"]}
    assert outcomes == {1: "ok", 2: "not_recorded", 3: "not_recorded"}
    assert any("could not write from" in w and "2 exchange(s) not recorded to the end" in w for w in doc["warnings"])

    status, shown, err = main_output(capsys, "sessions", str(out))
    assert status == 0 and "not_recorded" in shown and "in_flight" not in shown
    assert "not recorded to the end" in shown
    assert "2 exchange(s) not recorded to the end" in err


def test_without_a_failure_nothing_changes_in_flight_stays_in_flight(tmp_path: Path) -> None:
    w = RecordingWriter(tmp_path / "rec")
    xid = w.request("POST", CHAT, [], chat("hi"))
    w.response(xid, 200, "OK", SSE, streamed=True)
    w.data(xid, b'data: {"choices": []}\n\n')
    w.flush()  # never ends: the evidence of a wedge, as before
    rec = load(tmp_path / "rec")
    (turn,) = [t for s in summarize_sessions(rec.exchanges, rec.piece) for t in s.turns]
    assert turn.outcome is Outcome.IN_FLIGHT and rec.exchanges[0].not_recorded is None
    assert "write_failures" not in json.loads((tmp_path / "rec" / "recording.json").read_text())
    w.close()

