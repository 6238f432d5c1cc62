"""The command line as a user meets it: output, exit codes, and one-line errors for bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import run_proxycheck as run

from proxycheck.cli import main
from proxycheck.core.recording import journal as fmt

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "replays" / "example-agent"


def test_sessions_table_shows_turns_sizes_think_times_and_the_wedge(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "150")
    assert main(["sessions", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "2 session(s), 6 exchange(s)" in out
    s1 = next(line for line in out.splitlines() if "│ s1 " in line)
    assert "openai_chat" in s1 and "│     4 │" in s1
    assert "675B 4.2K 6.1K 26.0K" in s1
    assert "1.4 2.1 6.0" in s1
    assert "1-3 ok · 4 in_flight" in s1
    assert "s1 turn 4: in_flight (26.0K request) — the recorder stopped while it was in flight; 12 event(s)" in out


def test_turns_table_shows_each_turn(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "150")
    assert main(["sessions", str(EXAMPLE), "--turns"]) == 0
    out = capsys.readouterr().out
    assert "session s1 (grouped by continuity)" in out
    rows = [line for line in out.splitlines() if line.startswith("│") and "read_file" in line]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("│").split("│")]
    assert cells[:3] == ["1", "1", "675B"] and cells[5] == "200"
    assert cells[9:] == ["tool_calls", "read_file", "ok"]
    wedge = next(line for line in out.splitlines() if line.startswith("│    4 │"))
    cells = [c.strip() for c in wedge.strip("│").split("│")]
    assert cells[3] == "8" and cells[7] == "-"  # 8 messages; never completed: no total time
    assert cells[11] == "in_flight"


def test_sessions_json_for_tools(capsys) -> None:
    assert main(["sessions", str(EXAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "proxycheck.sessions/1"
    s1, s2 = doc["sessions"]
    assert s1["grouped_by"] == s2["grouped_by"] == "continuity"
    assert [t["messages"] for t in s1["turns"]] == [2, 4, 6, 8]
    assert [t["outcome"] for t in s1["turns"]] == ["ok", "ok", "ok", "in_flight"]
    assert [t["tool_calls"] for t in s1["turns"][:3]] == [["read_file"], ["run_tests"], []]
    assert s1["turns"][1]["think_time"] == pytest.approx(1.4)
    assert s2["dialect"] == "anthropic_messages" and s2["outcomes"] == {"ok": 2}
    assert all(t["ttft"] > 0 for t in s2["turns"])


def test_the_shipped_example_loads_cleanly_and_holds_no_secret() -> None:
    from proxycheck.io.storage import load

    rec = load(EXAMPLE)
    assert rec.warnings == []
    assert b"sk-example-not-a-key" not in (EXAMPLE / fmt.JOURNAL_FILE).read_bytes()
    assert all("header:authorization" in x.redacted for x in rec.exchanges)


def copy_example(tmp_path: Path) -> Path:
    target = tmp_path / "rec"
    shutil.copytree(EXAMPLE, target)
    return target


def test_damaged_journal_lines_are_warnings_not_failures(tmp_path: Path) -> None:
    rec = copy_example(tmp_path)
    journal = rec / fmt.JOURNAL_FILE
    journal.write_bytes(journal.read_bytes() + b'{"k":"end","x":4,"t":3')  # a crash mid-line
    result = run("sessions", str(rec), "--json")
    assert result.returncode == 0
    assert f"proxycheck: warning: {journal}:" in result.stderr
    assert "last line is incomplete" in result.stderr
    assert json.loads(result.stdout)["warnings"]


@pytest.mark.parametrize(
    "make,expect",
    [
        (lambda p: p / "missing", "no such directory"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "not a proxycheck recording (no recording.json)"),
        (lambda p: p, "not a proxycheck recording"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, make, expect: str) -> None:
    result = run("sessions", str(make(tmp_path)))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("proxycheck: ") and expect in result.stderr
    assert "Traceback" not in result.stderr


def test_newer_format_is_refused_with_the_file_named(tmp_path: Path) -> None:
    rec = copy_example(tmp_path)
    meta = json.loads((rec / fmt.META_FILE).read_text())
    (rec / fmt.META_FILE).write_text(json.dumps({**meta, "format": 2}))
    result = run("sessions", str(rec))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"proxycheck: {rec / fmt.META_FILE}: recording format 2 is newer than this proxycheck reads (1); upgrade proxycheck"
    )


def test_bad_flags_exit_2_with_one_line() -> None:
    result = run("sessions", str(EXAMPLE), "--no-such-flag")
    assert result.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert run().returncode == 2


def test_module_and_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("proxycheck ")


def peak_rss_of_sessions(directory: Path) -> int:
    """Peak RSS (KiB) of a `proxycheck sessions --json` process over `directory`."""
    code = (
        "import contextlib, io, resource, sys\n"
        "from proxycheck.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['sessions', sys.argv[1], '--json'])\n"
        "print(rc, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True, text=True, timeout=120)
    rc, peak = result.stdout.split()
    assert rc == "0", result.stderr
    return int(peak)


def test_sessions_over_50_mb_bodies_stays_small(tmp_path: Path) -> None:
    from proxycheck.io.storage import RecordingWriter

    image = "A" * (55 * 1024 * 1024)  # a base64 image pasted into the conversation
    big = json.dumps({"model": "m", "stream": True, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + image}}]}]})
    w = RecordingWriter(tmp_path / "big")
    for raw in (big.encode(), b"\x00\x01 not json " * (6 * 1024 * 1024)):
        x = w.request("POST", "http://e/v1/chat/completions", [], raw)
        w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True)
        w.data(x, b'data: {"choices":[{"index":0,"delta":{"content":"a cat"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n')
        w.end(x)
    w.close()
    del image, big
    small = peak_rss_of_sessions(EXAMPLE)
    large = peak_rss_of_sessions(tmp_path / "big")
    # Listing sessions never reads the 55 MB and 60 MB pieces: the process is about as large as
    # for the small example (RSS is in KiB).
    assert large - small < 20 * 1024, (small, large)


def test_session_headers_named_at_record_time_are_used(tmp_path: Path, capsys) -> None:
    from proxycheck.io.storage import RecordingWriter

    w = RecordingWriter(tmp_path / "rec", source={"session_headers": ["x-trace"]})
    for trace in ("a", "b", "a"):
        x = w.request("POST", "http://e/v1/completions", [("x-trace", trace)], b'{"prompt": "p"}')
        w.end(x)
    w.close()
    assert main(["sessions", str(tmp_path / "rec"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [(s["id"], s["grouped_by"], len(s["turns"])) for s in doc["sessions"]] == [
        ("a", "header:x-trace", 2),
        ("b", "header:x-trace", 1),
    ]
