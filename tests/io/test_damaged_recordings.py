"""Damaged recordings through the commands: damage loses only the exchanges it touches (those whose
request bodies cannot be rebuilt, and the turns built on them), each with a warning naming the
journal line or blobs file; the rest lists and replays. What cannot be read at all (recording.json
nested too deeply, holding NaN, a started_at that is no time) is one line naming the file, exit 2;
values JSON does not have never reach `sessions --json`."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from cli_runner import main_output

from proxycheck.core.errors import BadInput
from proxycheck.core.recording import journal as fmt
from proxycheck.io.jsonl import read_json_file
from proxycheck.io.storage import RecordingWriter, load

EXAMPLE = Path(__file__).resolve().parents[2] / "replays" / "example-agent"
NESTED = b"[" * 100_000 + b"]" * 100_000
META = b'{"format": 1, "kind": "proxycheck.recording", "started_at": %s}'

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def rec(tmp_path: Path) -> Path:
    """A copy of the example recording: session s1 is exchanges 1-4 (each turn's history builds on
    the one before), s2 is exchanges 5-6."""
    target = tmp_path / "rec"
    shutil.copytree(EXAMPLE, target)
    return target


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    path = tmp_path / "chain.toml"
    path.write_text('engine = "http://127.0.0.1:9"\n')
    return path


def journal_lines(rec: Path) -> list[bytes]:
    return (rec / fmt.JOURNAL_FILE).read_bytes().splitlines(keepends=True)


def set_line(rec: Path, number: int, line: bytes) -> None:
    lines = journal_lines(rec)
    lines[number - 1] = line
    (rec / fmt.JOURNAL_FILE).write_bytes(b"".join(lines))


def line_number(rec: Path, predicate) -> int:
    for i, line in enumerate(journal_lines(rec), 1):
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line a test damaged
        if predicate(record):
            return i
    raise AssertionError("no such line")


def req_line(rec: Path, xid: int) -> int:
    return line_number(rec, lambda r: r["k"] == "req" and r["x"] == xid)


def sessions_json(capsys: pytest.CaptureFixture[str], rec: Path) -> tuple[dict, str]:
    status, out, err = main_output(capsys, "sessions", "--json", str(rec))
    assert status == 0, err
    return json.loads(out, parse_constant=_refuse), err


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} in sessions --json")


def listed(doc: dict) -> dict[str, int]:
    return {s["label"]: s["turn_count"] for s in doc["sessions"]}


def dry_run(capsys: pytest.CaptureFixture[str], rec: Path, chain: Path) -> tuple[list[str], str]:
    status, out, err = main_output(capsys, "replay", "--dry-run", "--chain", str(chain), str(rec))
    assert status == 0, err
    return [line for line in out.splitlines() if " turn " in line], err


def test_the_example_loads_clean(rec: Path, chain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc, err = sessions_json(capsys, rec)
    assert listed(doc) == {"s1": 4, "s2": 2} and doc["warnings"] == [] and err == ""
    turns, _ = dry_run(capsys, rec, chain)
    assert len(turns) == 6


def test_a_damaged_piece_line_loses_only_the_turns_that_need_it(
    rec: Path, chain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first piece of turn 3 (a message every later turn of s1 re-sends).
    piece = line_number(rec, lambda r: r["k"] == "blob" and r["id"].startswith("b827f099"))
    set_line(rec, piece, journal_lines(rec)[piece - 1][:50] + b"\x00 cut by a crash\n")
    doc, err = sessions_json(capsys, rec)
    assert listed(doc) == {"s1": 2, "s2": 2}
    damaged = f"{rec / fmt.JOURNAL_FILE}:{piece}"
    for xid in (3, 4):
        warning = next(w for w in doc["warnings"] if f"exchange {xid} " in w)
        assert warning.startswith(f"{rec / fmt.JOURNAL_FILE}:{req_line(rec, xid)}: ")
        assert "request body cannot be rebuilt" in warning and "b827f099" in warning and damaged in warning
        assert "blobs/b827f099" not in warning  # no file that never existed is named as missing
    assert f"proxycheck: warning: {damaged}: invalid JSON; skipped" in err
    turns, _ = dry_run(capsys, rec, chain)
    assert [t.split(":")[0].strip() for t in turns] == ["s1 turn 1", "s1 turn 2", "s2 turn 1", "s2 turn 2"]


def test_a_damaged_request_line_loses_it_and_the_turns_built_on_it(
    rec: Path, chain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line, next_line = req_line(rec, 3), req_line(rec, 4)
    set_line(rec, line, journal_lines(rec)[line - 1][:-40] + b"\n")  # cut: no longer JSON
    doc, err = sessions_json(capsys, rec)
    assert listed(doc) == {"s1": 2, "s2": 2}
    journal = rec / fmt.JOURNAL_FILE
    assert f"{journal}:{line}: invalid JSON; skipped" in doc["warnings"]
    later = f"{journal}:{next_line}: bad 'req' record (its history builds on exchange 3, which is missing"
    assert any(w.startswith(later) and w.endswith("exchange 4 skipped") for w in doc["warnings"])
    # The records of exchange 3 after its lost request line are one loss, said once.
    assert sum("exchange 3 has no request record" in w for w in doc["warnings"]) == 1
    assert len(doc["warnings"]) == 3
    turns, _ = dry_run(capsys, rec, chain)
    assert len(turns) == 4


def test_a_recorded_url_that_does_not_parse_loses_only_its_exchange(
    rec: Path, chain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # urllib cannot take `http://[::1` apart: that exchange is skipped; its body is whole, so the
    # turns whose history builds on it are not.
    line = req_line(rec, 2)
    set_line(rec, line, journal_lines(rec)[line - 1].replace(b"http://127.0.0.1:4000/", b"http://[::1/"))
    doc, _ = sessions_json(capsys, rec)
    assert listed(doc) == {"s1": 3, "s2": 2}
    assert doc["warnings"] == [
        f"{rec / fmt.JOURNAL_FILE}:{line}: bad 'req' record (url 'http://[::1/v1/chat/completions' does not parse: "
        "Invalid IPv6 URL); exchange 2 skipped"
    ]  # and not one warning for each of its later records
    turns, _ = dry_run(capsys, rec, chain)
    assert len(turns) == 5
    status, out, err = main_output(capsys, "export", "--har", "-", str(rec))
    assert status == 0, err
    assert len(json.loads(out)["log"]["entries"]) == 5


def test_a_request_whose_body_cannot_be_read_takes_the_turns_built_on_it(
    rec: Path, chain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line, line3, line4 = req_line(rec, 2), req_line(rec, 3), req_line(rec, 4)
    record = json.loads(journal_lines(rec)[line - 1])
    record["body"]["size"] = "large"  # still JSON, of the wrong type
    set_line(rec, line, json.dumps(record).encode() + b"\n")
    doc, _ = sessions_json(capsys, rec)
    journal = rec / fmt.JOURNAL_FILE
    assert listed(doc) == {"s1": 1, "s2": 2}
    assert doc["warnings"] == [
        f"{journal}:{line}: bad 'req' record (size is not a byte count); exchange 2 skipped",
        f"{journal}:{line3}: bad 'req' record (its history builds on exchange 2, skipped at {journal}:{line}); "
        "exchange 3 skipped",
        f"{journal}:{line4}: bad 'req' record (its history builds on exchange 3, skipped at {journal}:{line3}); "
        "exchange 4 skipped",
    ]
    turns, _ = dry_run(capsys, rec, chain)
    assert len(turns) == 3


def test_a_request_line_whose_body_no_longer_hashes_is_skipped(
    rec: Path, chain: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Still JSON, the body's literal text changed: replaying it would send what the client never sent.
    line = req_line(rec, 6)
    record = json.loads(journal_lines(rec)[line - 1])
    record["body"]["parts"][0] = record["body"]["parts"][0].replace("model", "mödel")
    set_line(rec, line, json.dumps(record).encode() + b"\n")
    doc, _ = sessions_json(capsys, rec)
    assert listed(doc) == {"s1": 4, "s2": 1}
    assert doc["warnings"] == [
        f"{rec / fmt.JOURNAL_FILE}:{line}: exchange 6 (POST /v1/messages) skipped: its request body cannot be rebuilt, "
        "the joined body does not match its recorded SHA-256 (the request line or a piece is damaged)"
    ]
    turns, _ = dry_run(capsys, rec, chain)
    assert len(turns) == 5


def test_a_missing_blob_file_is_named(tmp_path: Path, chain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}).encode()
    small = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    w = RecordingWriter(tmp_path / "rec")
    for body in (big, small):
        x = w.request("POST", "http://e/v1/chat/completions", [("content-type", "application/json")], body)
        w.response(x, 200, "OK", [("content-type", "application/json")], streamed=False)
        w.data(x, b'{"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}')
        w.end(x)
    w.close()
    (blob,) = (tmp_path / "rec" / fmt.BLOB_DIR).iterdir()
    blob.unlink()
    rec = load(tmp_path / "rec")
    assert [x.xid for x in rec.exchanges] == [2]
    (warning,) = rec.warnings
    assert warning.where == f"{tmp_path / 'rec' / fmt.JOURNAL_FILE}:1"  # the request: its piece has no line
    assert f"piece {blob.name} is missing: not in the journal, and {blob}: No such file or directory" in warning.message
    turns, _ = dry_run(capsys, tmp_path / "rec", chain)
    assert len(turns) == 1


@pytest.mark.parametrize(
    "meta, problem",
    [
        (NESTED, "invalid JSON (nested too deeply)"),
        (META % b"NaN", "invalid JSON (NaN is not JSON)"),
        (META % b"1e309", "invalid JSON (number 1e309 is too large)"),
        (META % b"1e300", "started_at 1e+300 is not a wall-clock"),
        (META % b"-5", "started_at -5 is not a wall-clock"),
    ],
    ids=["nested", "nan", "inf", "huge", "negative"],
)
@pytest.mark.parametrize(
    "command", [("sessions", "--json"), ("replay", "--dry-run", "--chain", "CHAIN"), ("export", "--har", "-")]
)
def test_a_recording_json_that_cannot_be_read_is_one_line_and_exit_2(
    rec: Path, chain: Path, capsys: pytest.CaptureFixture[str], meta: bytes, problem: str, command: tuple[str, ...]
) -> None:
    (rec / fmt.META_FILE).write_bytes(meta)
    argv = [str(chain) if a == "CHAIN" else a for a in command]
    status, out, err = main_output(capsys, *argv, str(rec))
    assert status == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"proxycheck: {rec / fmt.META_FILE}: {problem}")


@pytest.mark.parametrize("started_at", [math.nan, math.inf, -math.inf])
def test_check_metadata_refuses_a_start_that_is_no_time(started_at: float) -> None:
    with pytest.raises(BadInput, match="started_at is missing or not a number"):
        fmt.check_metadata({"format": 1, "kind": fmt.KIND, "started_at": started_at}, "recording.json")


def test_metadata_is_read_strictly(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    for text in (b'{"a": Infinity}', b'{"a": -Infinity}', b'{"a": NaN}', b'{"a": 1e400}'):
        path.write_bytes(text)
        with pytest.raises(BadInput, match="invalid JSON"):
            read_json_file(path)


@pytest.mark.parametrize(
    "before, after, problem",
    [
        (b"[1.35,210]", b"[1.35,Infinity]", "invalid JSON (Infinity is not JSON); skipped"),
        (b"[1.35,210]", b"[1.35,1e999]", "invalid JSON (number 1e999 is too large); skipped"),
        (b"[1.35,210]", b"[1e300,210]", "bad 'data' record (a chunk time 1e+300 is out of range); skipped"),
        (b"[1.35,210]", b"[1.35,210.0]", "bad 'data' record (a chunk length is not a byte count); skipped"),
        (b"[1.35,210]", b"[1.35,-210]", "bad 'data' record (a chunk length is not a byte count); skipped"),
        (b"[1.35,210]", b'["soon",210]', "bad 'data' record (a chunk time is not a number); skipped"),
        (b"[1.35,210]", b"[1.35,210,7]", "bad 'data' record (a chunk is not [time, length]); skipped"),
        (b"[1.35,210]", b"[1.35," + b"9" * 5000 + b"]", "invalid JSON (Exceeds the limit"),
        (b'"c":[', b'"c":' + b"[" * 5000 + b"[" + b"]" * 5000, "JSON nested too deeply; skipped"),
    ],
    ids=["infinity", "huge", "far", "float-length", "negative", "text-time", "triple", "digits", "nested"],
)
def test_a_damaged_data_record_is_a_damaged_line(
    rec: Path, capsys: pytest.CaptureFixture[str], before: bytes, after: bytes, problem: str
) -> None:
    line = line_number(rec, lambda r: r["k"] == "data" and r["x"] == 1)
    set_line(rec, line, journal_lines(rec)[line - 1].replace(before, after, 1))
    doc, _ = sessions_json(capsys, rec)
    (warning,) = doc["warnings"]
    assert warning.startswith(f"{rec / fmt.JOURNAL_FILE}:{line}: {problem}")
    assert listed(doc) == {"s1": 4, "s2": 2}  # the turn is still there, without that data


@pytest.mark.parametrize(
    "kind, before, after",
    [
        ("resp", b'"t":1.02', b'"t":NaN'),
        ("end", b'"t":1.65', b'"t":-Infinity'),
        ("resp", b'"status":200', b'"status":1e999'),
        ("resp", b'"status":200', b'"status":20000'),
        ("end", b'"t":1.65', b'"t":' + b"1" * 400),
    ],
    ids=["nan-time", "minus-infinity", "huge-status", "no-http-status", "huge-int-time"],
)
def test_sessions_json_stays_json(
    rec: Path, capsys: pytest.CaptureFixture[str], kind: str, before: bytes, after: bytes
) -> None:
    line = line_number(rec, lambda r: r["k"] == kind and r["x"] == 1)
    set_line(rec, line, journal_lines(rec)[line - 1].replace(before, after, 1))
    doc, _ = sessions_json(capsys, rec)  # parsed strictly: no NaN, no Infinity
    (warning,) = doc["warnings"]
    assert warning.startswith(f"{rec / fmt.JOURNAL_FILE}:{line}: ")


def test_a_deeply_nested_journal_line_is_skipped(rec: Path, chain: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = journal_lines(rec)
    lines.insert(4, b'{"k":"blob","id":"x","v":' + NESTED + b"}\n")
    (rec / fmt.JOURNAL_FILE).write_bytes(b"".join(lines))
    doc, _ = sessions_json(capsys, rec)
    assert doc["warnings"] == [f"{rec / fmt.JOURNAL_FILE}:5: JSON nested too deeply; skipped"]
    assert listed(doc) == {"s1": 4, "s2": 2}
    turns, _ = dry_run(capsys, rec, chain)
    assert len(turns) == 6


def test_a_piece_reference_never_names_another_file(rec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = req_line(rec, 5)
    record = json.loads(journal_lines(rec)[line - 1])
    record["body"]["parts"].append({"p": "../../recording.json"})
    set_line(rec, line, json.dumps(record).encode() + b"\n")
    doc, _ = sessions_json(capsys, rec)
    assert listed(doc) == {"s1": 4}  # exchange 6 builds on exchange 5
    assert "a piece reference is not a piece id" in doc["warnings"][0]


@pytest.mark.parametrize("damage", ["flip", "truncate", "directory"])
def test_a_damaged_blob_file_is_named(tmp_path: Path, damage: str) -> None:
    w = RecordingWriter(tmp_path / "rec")
    w.end(w.request("POST", "http://e/v1/chat/completions", [], b"\x89PNG" + b"\x00" * (2 << 20)))
    w.end(w.request("POST", "http://e/v1/chat/completions", [], b'{"messages": []}'))
    w.close()
    (blob,) = (tmp_path / "rec" / fmt.BLOB_DIR).iterdir()
    if damage == "directory":
        blob.unlink()
        blob.mkdir()
    else:
        data = bytearray(blob.read_bytes())
        data[100] ^= 1
        blob.write_bytes(bytes(data if damage == "flip" else data[:1000]))
    rec = load(tmp_path / "rec")
    assert [x.xid for x in rec.exchanges] == [2]
    (warning,) = rec.warnings
    said = f"{blob} is not a file" if damage == "directory" else f"{blob} is damaged (its bytes are not the piece's)"
    assert warning.message.endswith(said)
