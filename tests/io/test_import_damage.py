"""Damaged and hostile files through `proxycheck import` and `export` (proxycheck.io.flowfile,
proxycheck.io.har): one line naming the file, exit 2, nothing written; a damaged HAR entry is
skipped with a warning and the journal never holds what JSON cannot (NaN, Infinity)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from cli_runner import main_output
from mitmproxy.io import FlowWriter, tnetstring
from mitmproxy.test import tflow, tutils

pytestmark = pytest.mark.timeout(30)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "replays" / "example-agent"


def good_flow_bytes() -> bytes:
    req = tutils.treq(method=b"POST", path=b"/v1/chat/completions", content=b'{"messages":[]}',
                      timestamp_start=1000.0, timestamp_end=1000.01)  # fmt: skip
    flow = tflow.tflow(req=req, resp=tutils.tresp(timestamp_start=1000.2, timestamp_end=1000.3))
    buffer = io.BytesIO()
    FlowWriter(buffer).add(flow)
    return buffer.getvalue()


def refused(capsys, tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    status, out, err = main_output(capsys, "import", str(path), "--out", str(tmp_path / "rec"))
    assert status == 2, err
    assert err.count("\n") == 1 and err.startswith(f"proxycheck: {path}: "), err
    assert not (tmp_path / "rec").exists()
    return err


@pytest.mark.parametrize(
    "tail, says",
    [
        (b"5:hello,", "flow[1] at byte {at} is a byte string, not a dictionary"),
        (b"3:abc]", "flow[1] at byte {at} is a list, not a dictionary"),
        (b"1:5#", "flow[1] at byte {at} is an integer, not a dictionary"),
        (b"999999999999:abc", "truncated: flow[1] at byte {at} announces 999999999999 bytes"),  # would be a MemoryError
        (b"9999999999999:abc", "flow[1] at byte {at} announces a length of more than 12 digits"),
        (b"garbage", "flow[1] at byte {at} has no length prefix"),
    ],
)
def test_a_dump_that_holds_something_other_than_flows_is_one_line(capsys, tmp_path: Path, tail: bytes, says: str) -> None:
    good = good_flow_bytes()
    err = refused(capsys, tmp_path, "d.flow", good + tail)
    assert f"not a readable mitmproxy flow file ({says.format(at=len(good))}" in err


def test_a_dump_cut_short_names_the_flow_and_where_it_ends(capsys, tmp_path: Path) -> None:
    good = good_flow_bytes()
    err = refused(capsys, tmp_path, "cut.flow", good + good[: len(good) // 2])
    assert f"(truncated: flow[1] at byte {len(good)} announces" in err


def test_a_dictionary_that_is_no_flow_is_one_line(capsys, tmp_path: Path) -> None:
    err = refused(capsys, tmp_path, "state.flow", tnetstring.dumps({b"type": b"http", b"version": 19, b"request": 5}))
    assert "not a readable mitmproxy flow file (flow[0]" in err


# --------------------------------------------------------------------------------------------
# HAR


def entry(**over) -> dict:
    base = {
        "startedDateTime": "2024-01-01T00:00:00Z",
        "time": 10,
        "request": {"method": "POST", "url": "http://a/v1/chat/completions", "headers": [],
                    "postData": {"mimeType": "application/json", "text": '{"messages":[]}'}},
        "response": {"status": 200, "headers": [], "content": {"text": "{}"}},
        "timings": {"wait": 5},
    }  # fmt: skip
    for key, value in over.items():
        base[key] = value
    return base


def import_har(capsys, tmp_path: Path, entries: list, log_extra: dict | None = None) -> tuple[int, str, Path]:
    path = tmp_path / "x.har"
    text = json.dumps({"log": {"entries": entries, **(log_extra or {})}})
    path.write_text(text.replace('"__NAN__"', "NaN").replace('"__INF__"', "1e999"))
    status, _, err = main_output(capsys, "import", str(path), "--out", str(tmp_path / "rec"), "--all")
    return status, err, path


def test_a_har_entry_with_an_unparseable_url_or_an_impossible_time_is_skipped_with_a_warning(capsys, tmp_path: Path) -> None:
    entries = [
        entry(),
        entry(request={"method": "GET", "url": "http://[::1/v1/x"}),
        entry(startedDateTime="9999-12-31T23:59:59-23:59"),
        entry(response={"status": 10**30, "headers": []}),
        entry(time="__INF__", timings={"wait": "__NAN__", "receive": "__INF__"}),
    ]
    status, err, path = import_har(capsys, tmp_path, entries)
    assert status == 0, err
    assert "Traceback" not in err
    assert f"{path}: log.entries[1]: request url 'http://[::1/v1/x' is not a valid URL" in err
    assert f"{path}: log.entries[2]: startedDateTime '9999-12-31T23:59:59-23:59' is not a time" in err
    assert f"{path}: log.entries[3]: response status {10**30} is not an HTTP status" in err
    journal = (tmp_path / "rec" / "journal.jsonl").read_text()
    assert "NaN" not in journal and "Infinity" not in journal
    assert journal.count('"k":"req"') == 2  # entries 0 and 4 (its junk timings count as none)


def test_an_exported_har_whose_start_is_no_time_is_read_as_a_foreign_one(capsys, tmp_path: Path) -> None:
    exact = entry(_proxycheck_times={"request": "__INF__", "response": 1, "end": 2})
    status, err, path = import_har(capsys, tmp_path, [exact], {"_proxycheck_recording": {"started_at": 1e308}})
    assert status == 0, err
    assert f"{path}: log._proxycheck_recording.started_at 1e+308 is not a time" in err
    assert '"started_at": 1704067200.0' in (tmp_path / "rec" / "recording.json").read_text()


@pytest.mark.parametrize(
    "text, says",
    [
        ("not json", "not a HAR file (invalid JSON"),
        ("[" * 100000 + "]" * 100000, "not a HAR file (invalid JSON"),
        ('{"log": ' + "[" * 50000 + "]" * 50000 + "}", "not a HAR file (invalid JSON"),
        ('{"log": {"entries": 5}}', "not a HAR file (no log.entries list)"),
        ('{"log": {"entries": NaN}}', "not a HAR file (no log.entries list)"),
    ],
)
def test_a_file_that_is_no_har_is_one_line(capsys, tmp_path: Path, text: str, says: str) -> None:
    err = refused(capsys, tmp_path, "bad.har", text.encode())
    assert says in err


# --------------------------------------------------------------------------------------------
# export


@pytest.mark.parametrize("target", ["FILE/x.har", "FILE/deeper/x.har", "DIR"])
def test_export_to_a_path_it_cannot_write_is_one_line_and_writes_nothing(capsys, tmp_path: Path, target: str) -> None:
    (tmp_path / "FILE").write_text("keep")
    (tmp_path / "DIR").mkdir()
    status, out, err = main_output(capsys, "export", str(EXAMPLE), "--har", str(tmp_path / target))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"proxycheck: {tmp_path / target}: "), err
    assert (tmp_path / "FILE").read_text() == "keep" and list((tmp_path / "DIR").iterdir()) == []
