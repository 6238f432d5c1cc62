"""`proxycheck watch`: recordings followed while they are written. Real processes: the reference
engine behind a recorder (engine-side), a fault hop that stalls mid-stream, a recorder in front of
it (client-side) and the synthetic agent, with the watch running as its own process: the finding
names the exchange, engine-side ahead and client-side behind, the moment it has lasted --stall
seconds; a healthy run (the watch started before its recorders) finds nothing and stops on Ctrl-C
with exit 0. In this process: what can never be a recording is one line and exit 2, a directory
not there yet is waited for (and the view says so), the journal is read incrementally, a point
named later is renamed, and one point's exchange without progress is stalled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_runner import main_output, proxycheck_argv
from ctrl_c import as_at_a_terminal
from processes import EngineFactory, MitmdumpFactory
from recording_dirs import BAD_OUTS, named
from rich.console import Console

from proxycheck.core.points.watching import snapshot
from proxycheck.io.procs import Managed
from proxycheck.io.storage import RecordingWriter
from proxycheck.io.watching import FOLLOWING, NO_DIRECTORY, WatchedRecordings
from proxycheck.report.watch_view import watch_view

REPO = Path(__file__).resolve().parents[1]
CHAT = "http://engine/v1/chat/completions"

pytestmark = pytest.mark.timeout(60)


class WatchProcess:
    """`proxycheck watch ...` in the background, its output in files; `close()` always stops it."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.out_path, self.err_path = tmp / "watch.out", tmp / "watch.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(proxycheck_argv("watch", *args), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                         cwd=REPO, env={**os.environ, "COLUMNS": "200"},
                                         preexec_fn=as_at_a_terminal)  # fmt: skip

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def interrupt(self, timeout: float = 20) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(timeout=timeout)

    @property
    def findings(self) -> list[dict]:
        return [json.loads(line) for line in self.out_path.read_text().splitlines()]

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def run_agent(base_url: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    argv = proxycheck_argv("agent", "--base-url", base_url, "--sessions", "1", "--turns", "2", "--read-timeout", "20",
                           "--think", "0.2", "--max-tokens", "64")  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.02", "--tool-call-rate", "0")


def chain(mitmdumps: MitmdumpFactory, engine: Managed, tmp: Path, *faults: str) -> Managed:
    """engine <- recorder (engine-side) <- fault hop <- recorder (client-side): the client's entry."""
    inner = mitmdumps.recorder(engine, tmp / "engine", "--set", "proxycheck_point=engine-side")
    hop = mitmdumps.faults(inner, *faults)
    return mitmdumps.recorder(hop, tmp / "client", "--set", "proxycheck_point=client-side")


# --------------------------------------------------------------------------------------------
# Real processes


@pytest.mark.timeout(120)
def test_a_hop_stalling_mid_stream_is_found_engine_side_ahead_client_side_behind(engine, mitmdumps, tmp_path: Path) -> None:
    # From turn 2 the hop forwards 5 events, then nothing; it drops the connection 6 s later.
    entry = chain(mitmdumps, engine, tmp_path, "stall_after=5", "stall_seconds=6", "from_turn=2")
    watch = WatchProcess(tmp_path, str(tmp_path / "client"), str(tmp_path / "engine"), "--stall", "2", "--json-lines", "--for", "15")
    try:
        started = time.monotonic()
        agent = run_agent(entry.url)
        assert agent.returncode == 1, agent.stdout  # turn 2 failed: the hop cut it
        assert watch.wait(timeout=40) == 0, watch.stderr
        took = time.monotonic() - started
    finally:
        watch.close()
    docs = watch.findings
    stuck = [d for d in docs if d["event"] == "stuck"]
    assert len(stuck) == 1, docs
    d = stuck[0]
    assert (d["session"], d["turn"], d["ahead"], d["behind"]) == ("s1", 2, "engine-side", "client-side")
    assert d["behind_progress"]["events"] == 5 and d["behind_progress"]["ended"] is False
    assert d["ahead_progress"]["complete"] is True and d["age"] >= 2
    assert "client-side stuck at event 5" in d["line"], d["line"]
    assert {"wall", "ahead_progress", "behind_progress", "age", "line"} <= set(d)
    # When the hop dropped the client side's stream, the exchange ended there: recovered, once.
    recovered = [d for d in docs if d["event"] == "recovered"]
    assert [(r["finding"], r["how"], r["behind"]) for r in recovered] == [("stuck", "ended", "client-side")]
    assert {d["event"] for d in docs} == {"stuck", "recovered"}
    # The finding is a line that stays on stderr too, and the summary counts it.
    assert d["line"] in watch.stderr
    assert "1 finding(s), 1 recovered" in watch.stderr
    print(f"stuck finding raised at age {d['age']:.2f} s (--stall 2); run took {took:.1f} s")


@pytest.mark.timeout(120)
def test_a_healthy_run_is_no_finding_and_ctrl_c_ends_the_watch_with_0(engine, mitmdumps, tmp_path: Path) -> None:
    # The watch starts first: its recordings are not there yet, and are waited for.
    # Given inward-first: the timing of the exchanges orders them.
    watch = WatchProcess(tmp_path, str(tmp_path / "engine"), str(tmp_path / "client"), "--stall", "2", "--json-lines", "--for", "90")
    try:
        entry = chain(mitmdumps, engine, tmp_path)
        agent = run_agent(entry.url)
        assert agent.returncode == 0, agent.stdout
        time.sleep(3)  # longer than --stall: a finding would have been raised by now
        assert watch.proc.poll() is None, watch.stderr
        assert watch.interrupt() == 0, watch.stderr
    finally:
        watch.close()
    assert watch.findings == []
    assert "proxycheck watch: 0 finding(s)" in watch.stderr and "Traceback" not in watch.stderr


# --------------------------------------------------------------------------------------------
# Bad input


@pytest.mark.parametrize("case", sorted(BAD_OUTS))
def test_what_can_never_be_a_recording_is_one_line_and_exit_2(case: str, tmp_path: Path, capsys) -> None:
    bad = BAD_OUTS[case]
    out = bad.make(tmp_path)
    status, stdout, err = main_output(capsys, "watch", str(out), "--for", "5")
    lines = err.strip().splitlines()
    assert status == 2 and stdout == "" and len(lines) == 1, err
    assert named(out, bad) in lines[0] and bad.problem in lines[0], lines[0]


def recording(directory: Path, point: str | None = None) -> RecordingWriter:
    return RecordingWriter(directory, point=point)


def test_a_directory_given_twice_and_two_recordings_of_one_point_are_exit_2(tmp_path: Path, capsys) -> None:
    a = tmp_path / "a"
    status, _, err = main_output(capsys, "watch", str(a), str(tmp_path / "." / "a"), "--for", "5")
    assert status == 2 and "given twice" in err and len(err.strip().splitlines()) == 1
    recording(a, "edge").close()
    recording(tmp_path / "b", "edge").close()
    status, _, err = main_output(capsys, "watch", str(a), str(tmp_path / "b"), "--for", "5")
    assert status == 2 and "is point 'edge' too" in err and len(err.strip().splitlines()) == 1, err
    for flags in (("--stall", "0"), ("--for", "-1"), ("--stall", "nan")):
        status, _, err = main_output(capsys, "watch", str(a), *flags)
        assert status == 2 and len(err.strip().splitlines()) == 1, err


def test_a_second_recording_of_one_point_appearing_later_is_exit_2(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    recording(a, "edge").close()

    def later() -> None:
        time.sleep(1.0)
        recording(b, "edge").close()

    writer = threading.Thread(target=later)
    writer.start()
    started = time.monotonic()
    try:
        status, _, err = main_output(capsys, "watch", str(a), str(b), "--for", "20")
    finally:
        writer.join(timeout=10)
    assert status == 2 and "is point 'edge' too" in err, err
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------------------------
# Following a recording


def test_a_directory_not_there_yet_is_waited_for_and_said_so(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "later"
    status, stdout, err = main_output(capsys, "watch", str(missing), "--for", "0.5")
    assert status == 0 and stdout == ""
    assert f"still waiting for {missing}" in err
    watched = WatchedRecordings([str(missing)])
    watched.poll()
    assert watched.recordings[0].state == NO_DIRECTORY and watched.points() == ([], [])
    console = Console(record=True, width=160, color_system=None)
    console.print(watch_view(None, watched.recordings, [], 0, 0, 1.0, 10))
    assert "waiting: no directory yet" in console.export_text()
    recording(missing, "edge").close()
    watched.poll()
    assert watched.recordings[0].state == FOLLOWING and [p.name for p in watched.points()[0]] == ["edge"]


def test_the_journal_is_read_incrementally_and_a_point_named_later_is_renamed(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    w = recording(out)  # no point yet: named after its directory until the recorder names it
    watched = WatchedRecordings([str(out)])
    followed = watched.recordings[0]
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    x = w.request("POST", CHAT, [("content-type", "application/json")], body)
    w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True)
    w.data(x, b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n')
    w.flush()
    assert watched.poll()
    (point,), _ = watched.points()
    assert point.name == "rec" and point.seen[0].content_events == 1 and point.seen[0].t_ended is None
    size = (out / "journal.jsonl").stat().st_size
    assert followed._tail.offset == size
    assert not watched.poll()  # nothing new: nothing read, nothing changed
    w.name_point("edge")
    w.data(x, b'data: {"choices":[{"index":0,"delta":{"content":"b"}}]}\n\n')
    w.flush()
    added = (out / "journal.jsonl").stat().st_size - size
    assert watched.poll()
    assert followed._tail.offset == size + added  # only the new bytes
    (point,), _ = watched.points()
    assert point.name == "edge" and point.seen[0].content_events == 2 and point.recorded_until is None
    w.close()
    watched.poll()
    (point,), _ = watched.points()
    assert point.seen[0].interrupted and point.recorded_until is not None
    assert snapshot([point], time.time(), 0.1).lags == ()  # stopped recording: nothing is stuck there


def test_one_point_an_exchange_without_progress_is_stalled(tmp_path: Path, capsys) -> None:
    out = tmp_path / "rec"
    w = recording(out)
    body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    x = w.request("POST", CHAT, [("content-type", "application/json")], body)
    w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True)
    w.data(x, b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n')
    w.flush()
    try:
        status, stdout, err = main_output(capsys, "watch", str(out), "--stall", "0.5", "--json-lines", "--for", "2")
    finally:
        w.close()
    assert status == 0, err
    docs = [json.loads(line) for line in stdout.splitlines()]
    assert [(d["event"], d["ahead"], d["behind"], d["session"], d["turn"]) for d in docs] == [("stalled", None, "rec", "s1", 1)]
    assert docs[0]["line"].startswith("s1 turn 1: rec: no progress for ") and docs[0]["line"].endswith(", at event 1")
    assert "stalled" in err and "1 finding(s), 0 recovered, 1 still open" in err

