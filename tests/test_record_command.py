"""`proxycheck record` as a real process: mitmdump with the recorder in reverse and forward mode in
front of the reference engine, httpx traffic through it, SIGINT, and a recording that holds what
went through (including the stream still running when it was stopped). Bad arguments and a
mitmdump that cannot start are one line and exit status 2."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from cli_runner import main_status as main
from processes import EngineFactory, MitmdumpFactory, RecordProcess
from recording_dirs import BAD_OUTS, named, snapshot

from proxycheck.commands import record
from proxycheck.core.recording.redact import REDACTED
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.io.procs import Managed
from proxycheck.io.recordings import JournalTail, SessionCount
from proxycheck.io.storage import load
from proxycheck.report.live_view import live_line

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.005", "--tool-call-rate", "0", "--max-answer-tokens", "0")


def chat(client: httpx.Client, messages: list[dict], *, trace: str, max_tokens: int = 8) -> tuple[bytes, bytes]:
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, "stream": True}).encode()
    headers = {"content-type": "application/json", "x-trace": trace, "x-team": "secret-team-token"}
    with client.stream("POST", "/v1/chat/completions", content=body, headers=headers) as r:
        assert r.status_code == 200
        return body, b"".join(r.iter_raw())


def conversation(base: str, trace: str, turns: int) -> list[tuple[bytes, bytes]]:
    out = []
    messages = [{"role": "user", "content": f"start {trace}"}]
    with httpx.Client(base_url=base, timeout=20) as client:
        for turn in range(turns):
            out.append(chat(client, messages, trace=trace))
            messages = [*messages, {"role": "assistant", "content": f"reply {turn}"}, {"role": "user", "content": "go on"}]
    return out


@pytest.mark.timeout(90)
def test_reverse_mode_records_sessions_and_the_stream_cut_by_ctrl_c(engine, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    rec = RecordProcess(tmp_path, "--listen", "127.0.0.1:0", "--upstream", engine.url, "--out", str(out),
                        "--session-header", "x-trace", "--redact-header", "x-team")  # fmt: skip
    try:
        assert not rec.address.endswith(":0")
        sent = conversation(rec.url, "alpha", 3) + conversation(rec.url, "beta", 2)
        # A long stream that is still running when the recorder is stopped.
        received = bytearray()
        started = threading.Event()

        def long_stream() -> None:
            body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "long"}],
                               "max_tokens": 4000, "stream": True})  # fmt: skip
            try:
                with httpx.stream("POST", f"{rec.url}/v1/chat/completions", content=body, timeout=30) as r:
                    for chunk in r.iter_raw():
                        received.extend(chunk)
                        started.set()
            except httpx.HTTPError:
                pass  # the proxy went away mid-stream, as expected

        reader = threading.Thread(target=long_stream, daemon=True)
        reader.start()
        assert started.wait(20)
        time.sleep(0.5)  # some chunks flushed to the journal
        assert rec.interrupt() == 0
        reader.join(timeout=20)
    finally:
        rec.close()
    recording = load(out)
    assert recording.warnings == []
    done = [x for x in recording.exchanges if not x.interrupted]
    assert [(recording.request_body(x), x.response_body) for x in done] == sent
    assert all(x.status == 200 and x.t_end is not None and x.streamed and x.chunk_timing for x in done)
    assert all(x.request_header("x-team") is REDACTED for x in done)
    (cut,) = [x for x in recording.exchanges if x.interrupted]
    assert cut.in_flight and cut.status == 200 and 0 < len(cut.response_body) <= len(received)
    assert bytes(received).startswith(cut.response_body)
    sessions = summarize_sessions(recording.exchanges, recording.piece, session_headers=["x-trace"])
    assert [(s.id, len(s.turns)) for s in sessions][:2] == [("alpha", 3), ("beta", 2)]
    assert recording.meta["source"]["session_headers"] == ["x-trace"]
    # The final report: a summary line and the sessions table, on stdout; no traceback anywhere.
    assert f"proxycheck record: {out}: 3 session(s), 6 exchange(s), 1 interrupted in flight" in rec.stdout
    assert "alpha" in rec.stdout and "in_flight" in rec.stdout
    assert "Traceback" not in rec.stderr + rec.stdout


def test_forward_mode(engine, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    rec = RecordProcess(tmp_path, "--mode", "forward", "--listen", "127.0.0.1:0", "--out", str(out))
    try:
        assert "(forward proxy)" in rec.stderr
        with httpx.Client(base_url=engine.url, proxy=rec.url, timeout=20) as client:
            body, response = chat(client, [{"role": "user", "content": "via a forward proxy"}], trace="f")
            assert client.get("/v1/models").status_code == 200  # not an LLM request: not recorded
        assert rec.interrupt() == 0
    finally:
        rec.close()
    (x,) = load(out).exchanges
    assert x.url == f"{engine.url}/v1/chat/completions"
    assert x.response_body == response and x.t_end is not None
    assert "1 session(s), 1 exchange(s)" in rec.stdout


def test_socks5_mode_records_a_client_whose_all_proxy_points_at_it(engine, tmp_path: Path) -> None:
    # A harness configured with ALL_PROXY=socks5://HOST:PORT: the recorder is its SOCKS5 proxy.
    out = tmp_path / "rec"
    rec = RecordProcess(tmp_path, "--mode", "socks5", "--listen", "127.0.0.1:0", "--out", str(out))
    try:
        assert "(SOCKS5 proxy)" in rec.stderr
        with httpx.Client(base_url=engine.url, proxy=f"socks5://{rec.address}", timeout=20, trust_env=False) as client:
            body, response = chat(client, [{"role": "user", "content": "via a SOCKS5 proxy"}], trace="s")
        assert rec.interrupt() == 0
    finally:
        rec.close()
    (x,) = load(out).exchanges
    assert x.url == f"{engine.url}/v1/chat/completions"
    assert x.response_body == response and x.t_end is not None
    assert "1 session(s), 1 exchange(s)" in rec.stdout


@pytest.fixture(scope="module")
def plain_forward_proxy(module_mitmdumps: MitmdumpFactory) -> Managed:
    return module_mitmdumps("--mode", "regular", "--set", "stream_large_bodies=1")


def test_forward_mode_chained_to_an_upstream_proxy(engine, plain_forward_proxy, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    rec = RecordProcess(tmp_path, "--mode", "forward", "--upstream", plain_forward_proxy.url,
                        "--listen", "127.0.0.1:0", "--out", str(out))  # fmt: skip
    try:
        assert f"(forward proxy via {plain_forward_proxy.url})" in rec.stderr
        with httpx.Client(base_url=engine.url, proxy=rec.url, timeout=20) as client:
            _, response = chat(client, [{"role": "user", "content": "two proxies"}], trace="u")
        assert rec.interrupt() == 0
    finally:
        rec.close()
    (x,) = load(out).exchanges
    assert x.response_body == response and x.status == 200


def test_sigterm_stops_it_like_ctrl_c(engine, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    rec = RecordProcess(tmp_path, "--listen", "127.0.0.1:0", "--upstream", engine.url, "--out", str(out))
    try:
        conversation(rec.url, "t", 1)
        rec.proc.terminate()
        assert rec.proc.wait(timeout=30) == 0
    finally:
        rec.close()
    assert len(load(out).exchanges) == 1 and load(out).closes
    assert "1 session(s), 1 exchange(s)" in rec.stdout


# -- bad arguments ------------------------------------------------------------------------------------


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "127.0.0.1:0", "--out", "{tmp}/r"], "proxycheck: --upstream: required in reverse mode"),
        (["--listen", "nowhere", "--upstream", "http://e:1", "--out", "{tmp}/r"], "proxycheck: --listen nowhere: expected HOST:PORT"),
        (["--listen", "127.0.0.1:0", "--upstream", "ftp://e", "--out", "{tmp}/r"], "is not an http:// or https:// URL"),
        (["--listen", "127.0.0.1:0", "--upstream", "http://e:1", "--out", "{tmp}/r", "--mode", "sideways"], "invalid choice"),
        (["--listen", "127.0.0.1:0", "--upstream", "http://e:1", "--out", "{tmp}/r", "--mode", "socks5"],
         "proxycheck: --upstream: not in socks5 mode"),
        (["--listen", "127.0.0.1:0", "--upstream", "http://e:1", "--out", "{tmp}/r", "--session-header", "a b"], "not a valid header name"),
        (["--listen", "127.0.0.1:0", "--upstream", "http://e:1", "--out", "{tmp}/file"], "exists and is not a directory"),
        (["--listen", "127.0.0.1:0", "--upstream", "http://e:1", "--out", "{tmp}/full"], "not a recording (choose a new directory)"),
    ],
)
def test_bad_arguments_are_one_line(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    assert main("record", *[a.format(tmp=tmp_path) for a in args]) == 2
    assert message in one_line(capsys)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("case", list(BAD_OUTS))
def test_an_output_directory_the_recorder_cannot_use_is_one_line_before_mitmdump_starts(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    bad = BAD_OUTS[case]
    out = bad.make(tmp_path)
    before = snapshot(tmp_path)
    started: list[list[str]] = []
    monkeypatch.setattr(record, "start_recorder", lambda argv, host: started.append(argv))
    status = main("record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--out", str(out))
    assert status == 2
    line = one_line(capsys)
    assert line.startswith(f"proxycheck: {named(out, bad)}: ") and bad.problem in line, line
    assert started == []  # no mitmdump
    assert snapshot(tmp_path) == before


def test_a_port_in_use_is_mitmdumps_error_in_one_line(tmp_path: Path, capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main("record", "--listen", f"127.0.0.1:{port}", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "r"))
    assert status == 2
    line = one_line(capsys)
    assert line.startswith("proxycheck: mitmdump: did not start: ") and "address already in use" in line
    assert "Try specifying" not in line


def test_a_filter_mitmproxy_refuses_is_one_line(tmp_path: Path, capsys) -> None:
    status = main("record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "r"),
                  "--filter", "~q ((")  # fmt: skip
    assert status == 2
    assert one_line(capsys) == "proxycheck: --filter: '~q ((' is not a mitmproxy filter expression"


def test_the_mitmdump_command_line() -> None:
    import argparse

    from proxycheck.hops import record as recorder

    ns = argparse.Namespace(mode="forward", upstream="http://corp:3128", out="d", redact_header=["x-a", "x-b"],
                            session_header=["x-s"], filter="~u chat")  # fmt: skip
    argv = record.mitmdump_args(ns, "0.0.0.0", 8080)
    assert argv[1:7] == ["--listen-host", "0.0.0.0", "--listen-port", "8080", "--mode", "upstream:http://corp:3128"]
    assert argv[7:9] == ["-s", recorder.__file__]
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert pairs == ["proxycheck_out=d", "flow_detail=0", "proxycheck_redact_headers=x-a", "proxycheck_redact_headers=x-b",
                     "proxycheck_session_header=x-s", "proxycheck_filter=~u chat"]  # fmt: skip
    ns.mode, ns.upstream = "forward", None
    assert "regular" in record.mitmdump_args(ns, "127.0.0.1", 0)
    ns.mode, ns.upstream = "reverse", "http://engine:30000"
    assert "reverse:http://engine:30000" in record.mitmdump_args(ns, "127.0.0.1", 0)


def test_the_journal_is_read_incrementally(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    tail = JournalTail(journal)
    tail.poll()  # not there yet
    with open(journal, "wb") as f:
        f.write(b'{"k":"req","x":1,"t":0}\n{"k":"req","x":2,"t":0}\n{"k":"data","x":1,"c":[[0.1,5],[0.2,7]],"v":"')
        f.flush()
        tail.poll()
        assert (tail.exchanges, tail.inflight, tail.response_bytes) == (2, {1, 2}, 0)
        read = tail.offset
        f.write(b'abcdefghijkl"}\n{"k":"end","x":1,"t":1}\n{"k":"error","x":2,"t":1,"msg":"reset"}\n')
        f.flush()
        tail.poll()
    assert tail.offset > read
    assert (tail.exchanges, tail.inflight, tail.failed, tail.response_bytes) == (2, set(), 1, 12)


def test_the_live_line(tmp_path: Path) -> None:
    from rich.console import Console

    tail = JournalTail(tmp_path / "journal.jsonl")
    tail.exchanges, tail.failed, tail.response_bytes, tail.inflight = 12, 1, 45_200, {12}
    counter = SessionCount(tmp_path)
    console = Console(width=200, record=True)
    console.print(live_line(tail, counter.sessions, "127.0.0.1:8080", 65.2))
    counter.sessions = 3
    console.print(live_line(tail, counter.sessions, "127.0.0.1:8080", 5))
    assert console.export_text().splitlines() == [
        "recording 127.0.0.1:8080  sessions ?  exchanges 12 (1 in flight, 1 failed)  45.2K  1m05s",
        "recording 127.0.0.1:8080  sessions 3  exchanges 12 (1 in flight, 1 failed)  45.2K  0m05s",
    ]


@pytest.mark.parametrize(
    ("log", "line"),
    [
        (
            "[16:41:42.505] Loading script /x/record.py\n"
            "[16:41:42.547] [Errno 98] reverse proxy to http://e:1 failed to listen on 127.0.0.1:5 with [Errno 98] "
            "error while attempting to bind on address ('127.0.0.1', 5): address already in use\n"
            "Try specifying a different port by using `--mode reverse:http://e:1@50887`.\n"
            "Error logged during startup, exiting...\n",
            "reverse proxy to http://e:1 failed to listen on 127.0.0.1:5 with [Errno 98] error while attempting to "
            "bind on address ('127.0.0.1', 5): address already in use",
        ),
        (
            "[16:41:43.185] error in script /x/record.py\nTraceback (most recent call last):\n  File \"x\", line 1\n"
            "mitmproxy.exceptions.OptionsError: proxycheck_out: /etc/passwd exists and is not a directory\n"
            "[16:41:43.186] reverse proxy to http://e:1 listening at 127.0.0.1:41953.\n"
            "Error logged during startup, exiting...\n",
            "proxycheck_out: /etc/passwd exists and is not a directory",
        ),
        ("/venv/bin/mitmdump: Invalid proxy mode specification: bogus:x (unknown mode)\n",
         "Invalid proxy mode specification: bogus:x (unknown mode)"),
        ("", "it exited without saying why"),
    ],
)
def test_mitmdumps_reason_for_not_starting(log: str, line: str) -> None:
    assert record.startup_error(log) == line
