"""The recorder names its point of observation and the recording keeps it: real mitmdump processes
running addons/record.py in front of the reference engine, httpx clients; and the writer's and
`check_appendable`'s part on temporary directories.

- `--set proxycheck_point=NAME`: recording.json says `"point": {"name": NAME, "host": HOSTNAME}`.
- Without it: the point is named after the address the client connected to, `127.0.0.1:PORT` with
  the port the system picked (the recorders here listen on port 0).
- A name outside the rule stops mitmdump with OptionsError naming the option.
- One recording, one point: appending at another point (named, or derived from the listen
  address) is one warning, the client still gets its answer, and nothing in the recording changes;
  the same point appends; an older recording without a point takes the point of its first append.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from processes import RECORD, EngineFactory, MitmdumpFactory
from recording_dirs import snapshot

from proxycheck.core.errors import BadInput
from proxycheck.core.recording.journal import point_name_problem
from proxycheck.hops.record import listen_point
from proxycheck.io.procs import Managed, mitmdump_path
from proxycheck.io.storage import RESERVE_FILE, RecordingWriter, check_appendable, load

pytestmark = pytest.mark.timeout(90)

CHAT = "/v1/chat/completions"
HOST = socket.gethostname()


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.0005", "--ttft-per-kb", "0", "--max-answer-tokens", "0")


def meta_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "recording.json").read_text())


def ask(hop: Managed, content: str = "hello") -> None:
    """A streamed chat request through `hop`, answered to its [DONE]."""
    body = {"model": "m", "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": content}]}
    with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0), trust_env=False) as client:
        response = client.post(hop.url + CHAT, json=body)
    assert response.status_code == 200 and b"data: [DONE]" in response.content


def stopped_log(hop: Managed) -> str:
    hop.stop()
    return hop.log_path.read_text(errors="replace")


def recorded_at(out: Path, point: str) -> Path:
    """A recording of one exchange made at `point` (the writer alone: no traffic needed)."""
    w = RecordingWriter(out, point=point)
    xid = w.request("POST", "http://engine" + CHAT, [("content-type", "application/json")], b'{"model":"m"}')
    w.response(xid, 200, "OK", [("content-type", "application/json")], streamed=False)
    w.data(xid, b'{"choices":[]}')
    w.end(xid)
    w.close()
    return out


def old_recording(out: Path) -> Path:
    """A recording as an older proxycheck wrote it: no point."""
    w = RecordingWriter(out)
    xid = w.request("POST", "http://engine" + CHAT, [("content-type", "application/json")], b'{"model":"old"}')
    w.error(xid, "reset")
    w.close()
    assert "point" not in meta_of(out)
    return out


def assert_private(out: Path) -> None:
    for path in [out, *out.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


# --------------------------------------------------------------------------------------------
# The addon


def test_a_named_point_is_kept_with_the_host(engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    hop = mitmdumps.recorder(engine, out, "--set", "proxycheck_point=engine-side")
    assert meta_of(out)["point"] == {"name": "engine-side", "host": HOST}  # written when the recording is created
    ask(hop)
    log = stopped_log(hop)
    assert meta_of(out)["point"] == {"name": "engine-side", "host": HOST}
    assert len(load(out).exchanges) == 1
    assert_private(out)
    assert "Traceback" not in log


def test_without_a_name_the_point_is_the_address_the_client_connected_to(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    out = tmp_path / "rec"
    hop = mitmdumps.recorder(engine, out)  # --listen-port 0: the system picked hop.port
    assert hop.port != 0
    assert "point" not in meta_of(out)  # known only once a client connects
    ask(hop, "one")
    ask(hop, "two")
    stopped_log(hop)
    assert meta_of(out)["point"] == {"name": f"127.0.0.1:{hop.port}", "host": HOST}
    assert len(load(out).exchanges) == 2
    assert_private(out)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["a b", "x" * 65, "caf\u00e9", "a/b"])
def test_a_name_outside_the_rule_stops_mitmdump_naming_the_option(name: str, engine: Managed, tmp_path: Path) -> None:
    argv = [mitmdump_path(), "-q", "--listen-host", "127.0.0.1", "--listen-port", "0", "--mode", f"reverse:{engine.url}",
            "-s", str(RECORD), "--set", f"proxycheck_out={tmp_path / 'rec'}", "--set", f"proxycheck_point={name}"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=50)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "OptionsError" in output and f"proxycheck_point: {name!r} is not a point name" in output, output
    assert not (tmp_path / "rec").exists()


def test_appending_at_another_named_point_is_one_warning_and_traffic_passes(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    out = recorded_at(tmp_path / "rec", "A")
    before = snapshot(tmp_path)
    hop = mitmdumps.recorder(engine, out, "--set", "proxycheck_point=B")
    ask(hop, "one")
    ask(hop, "two")
    log = stopped_log(hop)
    lines = [line for line in log.splitlines() if "proxycheck recorder:" in line]
    assert lines == [line for line in lines if "recorded at point" in line] and len(lines) == 1, lines
    assert lines[0].endswith(f"proxycheck recorder: {out}: recorded at point A; a recording holds one point "
                             "(give another --out); traffic passes unrecorded")  # fmt: skip
    assert snapshot(tmp_path) == before
    assert "Traceback" not in log


def test_appending_at_another_derived_point_is_refused_at_the_first_request_and_writes_nothing(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    out = recorded_at(tmp_path / "rec", "A")
    before = snapshot(tmp_path)
    hop = mitmdumps.recorder(engine, out)  # its point would be 127.0.0.1:PORT
    for n in range(3):
        ask(hop, f"turn {n}")
    log = stopped_log(hop)
    refusals = [line for line in log.splitlines() if "recorded at point" in line]
    assert len(refusals) == 1, refusals
    assert refusals[0].endswith(f"{out}: recorded at point A; a recording holds one point (give another --out); "
                                "traffic passes unrecorded")  # fmt: skip
    assert snapshot(tmp_path) == before  # no close record, no reserve left behind
    assert "Traceback" not in log


def test_the_same_point_appends(engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    for n in range(2):
        hop = mitmdumps.recorder(engine, out, "--set", "proxycheck_point=edge")
        ask(hop, f"run {n}")
        assert "recorded at point" not in stopped_log(hop)
    assert meta_of(out)["point"] == {"name": "edge", "host": HOST}
    assert len(load(out).exchanges) == 2
    assert_private(out)


@pytest.mark.parametrize("named", [True, False])
def test_an_older_recording_without_a_point_takes_it_on_append(
    named: bool, engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    out = old_recording(tmp_path / "rec")
    earlier = meta_of(out)
    hop = mitmdumps.recorder(engine, out, *(["--set", "proxycheck_point=late"] if named else []))
    ask(hop)
    stopped_log(hop)
    meta = meta_of(out)
    assert meta.pop("point") == {"name": "late" if named else f"127.0.0.1:{hop.port}", "host": HOST}
    assert meta == earlier  # the rest as it was
    assert len(load(out).exchanges) == 2
    assert_private(out)
    assert not list(out.glob(".*.tmp"))


# --------------------------------------------------------------------------------------------
# The writer and check_appendable (no traffic)


def test_the_name_rule() -> None:
    for good in ("engine-side", "127.0.0.1:8080", "[::1]:8080", "a", "x" * 64, "me@host_1.b"):
        assert point_name_problem(good) is None, good
    for bad in ("", "x" * 65, "a b", "a/b", "caf\u00e9", "a\n", None, 3):
        assert point_name_problem(bad) is not None, bad


def test_listen_addresses_name_points() -> None:
    assert listen_point(("127.0.0.1", 8080)) == "127.0.0.1:8080"
    assert listen_point(("::1", 8080, 0, 0)) == "[::1]:8080"
    assert listen_point(("::ffff:127.0.0.1", 81, 0, 0)) == "127.0.0.1:81"  # a dual-stack socket's IPv4 client
    assert listen_point(("fe80::1%eth0", 82, 0, 2)) == "[fe80::1]:82"  # the scope is no part of a name
    assert listen_point(None) is None and listen_point("/run/proxy.sock") is None and listen_point(("host", 1)) is None


def test_check_appendable_asks_the_point(tmp_path: Path) -> None:
    out = recorded_at(tmp_path / "rec", "A")
    before = snapshot(out)
    check_appendable(out, point="A")
    check_appendable(out)  # no point to compare: the recorder names it later
    with pytest.raises(BadInput) as refused:
        check_appendable(out, point="B")
    assert str(refused.value) == f"{out}: recorded at point A; a recording holds one point (give another --out)"
    check_appendable(old_recording(tmp_path / "old"), point="B")  # no point yet: it takes this one
    check_appendable(tmp_path / "new", point="B")
    assert snapshot(out) == before and not (tmp_path / "new").exists()


def test_a_point_that_cannot_be_read_is_refused(tmp_path: Path) -> None:
    out = recorded_at(tmp_path / "rec", "A")
    for point in ("A", {"name": "a b", "host": "h"}, {"name": "A"}, None):
        meta = {**meta_of(out), "point": point}
        (out / "recording.json").write_text(json.dumps(meta))
        with pytest.raises(BadInput) as refused:
            check_appendable(out, point="A")
        assert str(refused.value).startswith(f"{out / 'recording.json'}: point is not ")
        with pytest.raises(BadInput):
            RecordingWriter(out)


def test_a_new_recording_says_its_point(tmp_path: Path) -> None:
    w = RecordingWriter(tmp_path / "rec", point="[::1]:8080", host="box")
    assert w.point == {"name": "[::1]:8080", "host": "box"}
    w.close()
    assert meta_of(tmp_path / "rec")["point"] == {"name": "[::1]:8080", "host": "box"}
    RecordingWriter(tmp_path / "default", point="p").close()
    assert meta_of(tmp_path / "default")["point"] == {"name": "p", "host": HOST}
    assert_private(tmp_path / "rec")


def test_an_older_recording_takes_the_point_at_open(tmp_path: Path) -> None:
    out = old_recording(tmp_path / "rec")
    earlier = meta_of(out)
    w = RecordingWriter(out, point="late", host="box")
    assert meta_of(out) == {**earlier, "point": {"name": "late", "host": "box"}}  # at open, before any exchange
    w.close()
    assert_private(out)
    assert not list(out.glob(".*.tmp"))


def test_another_point_is_refused_before_anything_changes(tmp_path: Path) -> None:
    out = recorded_at(tmp_path / "rec", "A")
    before = snapshot(tmp_path)
    with pytest.raises(BadInput, match="recorded at point A; a recording holds one point"):
        RecordingWriter(out, point="B")
    assert snapshot(tmp_path) == before


def test_name_point_names_once_and_refuses_another(tmp_path: Path) -> None:
    out = old_recording(tmp_path / "rec")
    w = RecordingWriter(out)
    assert w.point is None
    w.name_point("127.0.0.1:9", host="box")
    assert meta_of(out)["point"] == w.point == {"name": "127.0.0.1:9", "host": "box"}
    named = (out / "recording.json").read_bytes()
    w.name_point("127.0.0.1:9", host="other")  # the same point: nothing written
    with pytest.raises(BadInput) as refused:
        w.name_point("127.0.0.1:10")
    assert str(refused.value) == f"{out}: recorded at point 127.0.0.1:9; a recording holds one point (give another --out)"
    assert (out / "recording.json").read_bytes() == named
    w.close()
    RecordingWriter(out, point="127.0.0.1:9").close()  # appends as that point
    assert_private(out)


def test_discard_leaves_the_recording_as_it_was(tmp_path: Path) -> None:
    out = recorded_at(tmp_path / "rec", "A")
    before = snapshot(tmp_path)
    w = RecordingWriter(out)
    assert (out / RESERVE_FILE).exists()
    with pytest.raises(BadInput):
        w.name_point("B")
    w.discard()
    w.discard()
    assert snapshot(tmp_path) == before
