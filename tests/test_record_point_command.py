"""`proxycheck record --point NAME`: the recorder's point of observation from the command line.

A real `proxycheck record` in front of the reference engine keeps `--point` in the recording, or,
without it, the address it listens at (the real port with --listen 127.0.0.1:0). Before mitmdump
starts, one line and exit 2 for a name outside the rule and for a recording made at another
point (named with --point, or known from --listen); `--point` becomes `--set proxycheck_point`,
and nothing is passed without it."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cli_runner import main_status, proxycheck_argv
from ctrl_c import as_at_a_terminal
from processes import EngineFactory
from recording_dirs import snapshot

from proxycheck.commands import record
from proxycheck.core.errors import BadInput
from proxycheck.io.procs import Managed
from proxycheck.io.storage import RecordingWriter, load

REPO = Path(__file__).resolve().parents[1]
CHAT = "/v1/chat/completions"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.0005", "--max-answer-tokens", "0")


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def recorded_at(out: Path, point: str | None) -> Path:
    RecordingWriter(out, point=point).close()
    return out


@pytest.fixture
def no_mitmdump(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The mitmdump command lines `record` would start; none is started (it stops there, exit 2)."""
    started: list[list[str]] = []

    def start(argv: list[str], host: str) -> None:
        started.append(argv)
        raise BadInput("mitmdump", "not started by this test")

    monkeypatch.setattr(record, "start_recorder", start)
    return started


def recording(engine: Managed, tmp_path: Path, *args: str) -> tuple[str, Path]:
    """`proxycheck record --listen 127.0.0.1:0 ARGS` as a real process, one request through it,
    Ctrl-C; the address it listened at and its recording."""
    out = tmp_path / "rec"
    err_path = tmp_path / "record.err"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(proxycheck_argv("record", "--listen", "127.0.0.1:0", "--upstream", engine.url, "--out", str(out), *args),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO,
                                env={**os.environ, "COLUMNS": "200"}, preexec_fn=as_at_a_terminal)  # fmt: skip
    try:
        deadline, address = time.monotonic() + 50, None
        while address is None and time.monotonic() < deadline and proc.poll() is None:
            found = re.search(r"listening at (\S+:\d+)", err_path.read_text())
            address = found.group(1) if found else None
            time.sleep(0.05)
        assert address is not None, err_path.read_text()
        body = {"model": "m", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(timeout=httpx.Timeout(20.0, connect=5.0), trust_env=False) as client:
            response = client.post(f"http://{address}{CHAT}", json=body)
        assert response.status_code == 200 and b"data: [DONE]" in response.content
        time.sleep(1.0)  # the recorder's timer flushes within a second
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0, err_path.read_text()
    finally:
        if proc.poll() is None:  # always stopped: SIGTERM (it stops its mitmdump), then SIGKILL
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    return address, out


@pytest.mark.timeout(120)
def test_the_point_given_is_kept(engine: Managed, tmp_path: Path) -> None:
    _, out = recording(engine, tmp_path, "--point", "client-side")
    assert json.loads((out / "recording.json").read_text())["point"] == {"name": "client-side", "host": socket.gethostname()}
    assert len(load(out).exchanges) == 1


@pytest.mark.timeout(120)
def test_without_point_it_is_the_address_listened_at(engine: Managed, tmp_path: Path) -> None:
    address, out = recording(engine, tmp_path)
    assert not address.endswith(":0")
    assert json.loads((out / "recording.json").read_text())["point"] == {"name": address, "host": socket.gethostname()}


@pytest.mark.parametrize("name", ["a b", "x" * 65, "a/b", ""])
def test_a_name_outside_the_rule_is_one_line(name: str, tmp_path: Path, capsys, no_mitmdump: list) -> None:
    status = main_status("record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--out", str(tmp_path / "r"),
                         "--point", name)  # fmt: skip
    assert status == 2
    line = one_line(capsys)
    assert line.startswith("proxycheck: argument --point: ") and f"{name!r} is not a point name" in line, line
    assert no_mitmdump == [] and not (tmp_path / "r").exists()


def test_another_point_is_one_line_before_mitmdump_starts(tmp_path: Path, capsys, no_mitmdump: list) -> None:
    out = recorded_at(tmp_path / "A", "A")
    before = snapshot(tmp_path)
    status = main_status("record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--out", str(out), "--point", "B")
    assert status == 2
    assert one_line(capsys) == f"proxycheck: {out}: recorded at point A; a recording holds one point (give another --out)"
    assert no_mitmdump == []
    assert snapshot(tmp_path) == before


def test_a_listen_address_that_is_another_point_is_one_line_before_mitmdump_starts(
    tmp_path: Path, capsys, no_mitmdump: list
) -> None:
    out = recorded_at(tmp_path / "A", "127.0.0.1:8080")
    status = main_status("record", "--listen", "127.0.0.1:8081", "--upstream", "http://127.0.0.1:9", "--out", str(out))
    assert status == 2
    assert one_line(capsys) == f"proxycheck: {out}: recorded at point 127.0.0.1:8080; a recording holds one point (give another --out)"
    assert no_mitmdump == []
    # port 0 without --point: named after a port chosen at start, never the recording's point
    status = main_status("record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--out", str(out))
    assert status == 2
    line = one_line(capsys)
    assert line.startswith(f"proxycheck: {out}: recorded at point 127.0.0.1:8080; a recording holds one point") and \
        "give --point 127.0.0.1:8080 to append" in line, line  # fmt: skip
    assert no_mitmdump == []


def test_the_same_point_and_a_recording_without_one_start_mitmdump(tmp_path: Path, capsys, no_mitmdump: list) -> None:
    same = recorded_at(tmp_path / "same", "127.0.0.1:8080")
    older = recorded_at(tmp_path / "older", None)
    for out, args in [(same, ["--listen", "127.0.0.1:8080"]), (same, ["--listen", "127.0.0.1:0", "--point", "127.0.0.1:8080"]),
                      (older, ["--listen", "127.0.0.1:0"]), (older, ["--listen", "127.0.0.1:0", "--point", "B"]),
                      (same, ["--listen", "localhost:8080"])]:  # fmt: skip
        assert main_status("record", *args, "--upstream", "http://127.0.0.1:9", "--out", str(out)) == 2
        assert one_line(capsys) == "proxycheck: mitmdump: not started by this test"
    assert len(no_mitmdump) == 5


def test_point_is_passed_as_the_option_and_not_passed_without_it() -> None:
    ns = argparse.Namespace(mode="reverse", upstream="http://engine:1", out="d", redact_header=[], session_header=[],
                            filter=None, point="engine-side")  # fmt: skip
    argv = record.mitmdump_args(ns, "127.0.0.1", 0)
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--set"][-1] == "proxycheck_point=engine-side"
    ns.point = None
    assert not any(a.startswith("proxycheck_point") for a in record.mitmdump_args(ns, "127.0.0.1", 0))
