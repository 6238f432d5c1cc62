"""The recorder never takes traffic down, whatever its output directory holds and whatever its disk
does: a real mitmdump with addons/record.py in front of the reference engine, real httpx clients.

- An output directory a recording cannot be opened in (`recording_dirs.BAD_OUTS`), at start-up or
  set while mitmdump runs: one warning naming the path and the problem, traffic passes unrecorded,
  nothing there touched.
- A request piece over 1 MiB on a full disk: one warning, the requests go through, no `.tmp` left.
- A disk that fills mid-stream: the client gets every event and [DONE], byte for byte, and the
  recording says the exchange was not recorded to the end (never in flight: it was no wedge), so
  `check` counts no recorded failure from it.

A full disk is a file size limit on mitmdump (`MitmdumpFactory(file_limit=...)`, RLIMIT_FSIZE:
writes past it fail with EFBIG, as they would with ENOSPC)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from cli_runner import main_output
from processes import EngineFactory, MitmdumpFactory
from recording_dirs import BAD_OUTS, named, snapshot

from proxycheck.core.protocol.sse import SSEEvent, SSEParser
from proxycheck.io.procs import Managed
from proxycheck.io.storage import load

CHAT = "/v1/chat/completions"
SWITCH = "/proxycheck-test/out"  # the test addon below sets proxycheck_out to this request's body


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--token-interval", "0.0005", "--ttft-per-kb", "0", "--max-answer-tokens", "0")


def chat_body(*, max_tokens: int = 8, content: str = "hello") -> bytes:
    doc = {"model": "m", "max_tokens": max_tokens, "stream": True, "messages": [{"role": "user", "content": content}]}
    return json.dumps(doc).encode()


@dataclass
class Seen:
    status: int = 0
    raw: bytes = b""
    events: list[SSEEvent] = field(default_factory=list)
    headers: httpx.Headers = field(default_factory=httpx.Headers)


def stream(url: str, body: bytes) -> Seen:
    """POST `body` and read the streamed response to its end, as a client does."""
    seen, parser = Seen(), SSEParser()
    with httpx.Client(timeout=httpx.Timeout(30.0, connect=5.0), trust_env=False) as client:
        with client.stream("POST", url, content=body, headers={"content-type": "application/json"}) as response:
            seen.status, seen.headers = response.status_code, response.headers
            for chunk in response.iter_raw():
                seen.raw += chunk
                seen.events += [i for i in parser.feed(chunk, 0.0) if isinstance(i, SSEEvent)]
    seen.events += [i for i in parser.close(0.0) if isinstance(i, SSEEvent)]
    return seen


def normalized(raw: bytes) -> bytes:
    """Without the engine's `created` timestamp, the one thing two identical requests may differ in."""
    return re.sub(rb'"created": ?\d+', b'"created":0', raw)


def assert_passes(hop: Managed, engine: Managed, *, max_tokens: int = 8, content: str = "hello") -> Seen:
    """A streamed request through `hop` gets what the engine itself answers, to its [DONE]."""
    body = chat_body(max_tokens=max_tokens, content=content)
    via, direct = stream(hop.url + CHAT, body), stream(engine.url + CHAT, body)
    assert via.status == 200 and via.events and via.events[-1].data == "[DONE]"
    assert normalized(via.raw) == normalized(direct.raw)
    return via


def stopped_log(hop: Managed) -> str:
    hop.stop()
    return hop.log_path.read_text(errors="replace")


# --------------------------------------------------------------------------------------------
# What the output directory holds


@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", list(BAD_OUTS))
def test_a_directory_it_cannot_record_in_is_one_warning_and_traffic_passes(
    case: str, engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    bad = BAD_OUTS[case]
    base = tmp_path / "base"
    base.mkdir()
    out = bad.make(base)
    before = snapshot(base)
    hop = mitmdumps.recorder(engine, out)  # listening: mitmdump did not exit at start-up
    for _ in range(2):
        assert_passes(hop, engine)
    log = stopped_log(hop)
    (line,) = [line for line in log.splitlines() if "proxycheck recorder:" in line]
    assert f"proxycheck recorder: {named(out, bad)}: " in line and bad.problem in line, line
    assert line.endswith("; traffic passes unrecorded")
    assert "Traceback" not in log
    assert snapshot(base) == before


_SWITCH_ADDON = f'''
from mitmproxy import ctx, http


class SwitchOut:
    """Sets proxycheck_out while mitmdump runs, as a user changing the option would."""

    def request(self, flow):
        if flow.request.path == "{SWITCH}":
            ctx.options.update(proxycheck_out=flow.request.get_text())
            flow.response = http.Response.make(200, b"switched")


addons = [SwitchOut()]
'''


@pytest.mark.timeout(90)
@pytest.mark.parametrize("case", ["newer-format", "journal-is-a-directory", "out-is-a-file"])
def test_setting_such_a_directory_while_it_runs_is_one_warning_and_traffic_passes(
    case: str, engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    bad = BAD_OUTS[case]
    (tmp_path / "base").mkdir()
    out = bad.make(tmp_path / "base")
    before = snapshot(tmp_path / "base")
    addon = tmp_path / "switch_out.py"
    addon.write_text(_SWITCH_ADDON)
    good = tmp_path / "good"
    hop = mitmdumps.recorder(engine, good, "-s", str(addon))
    assert_passes(hop, engine)
    switched = httpx.post(hop.url + SWITCH, content=str(out), trust_env=False, timeout=30)
    assert (switched.status_code, switched.text) == (200, "switched")
    for _ in range(2):
        assert_passes(hop, engine)
    assert hop.alive()
    log = stopped_log(hop)
    warnings = [line for line in log.splitlines() if "traffic passes unrecorded" in line]
    (line,) = warnings
    assert f"proxycheck recorder: {named(out, bad)}: " in line and bad.problem in line, line
    assert "Traceback" not in log and "Addon error" not in log
    assert snapshot(tmp_path / "base") == before
    assert [x.finished for x in load(good).exchanges] == [True]  # recorded until the switch, then closed


# --------------------------------------------------------------------------------------------
# A disk that fills


@pytest.mark.timeout(90)
def test_a_large_piece_on_a_full_disk_warns_once_and_requests_go_through(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    out = tmp_path / "rec"
    hop = mitmdumps.recorder(engine, out, file_limit=1 << 20)
    for i in range(3):  # each holds one message over 1 MiB: a piece written to blobs/
        assert_passes(hop, engine, max_tokens=4, content=f"{i} " + "z" * 1_200_000)
    log = stopped_log(hop)
    assert "Traceback" not in log, log[-3000:]
    (line,) = [line for line in log.splitlines() if "proxycheck recorder:" in line and "write failed" in line]
    assert f"{out / 'blobs'}/" in line and "write failed: File too large" in line
    assert line.endswith("recording stopped, traffic goes on")
    assert not [p.name for p in (out / "blobs").iterdir() if p.name.endswith(".tmp")]
    assert json.loads((out / "recording.json").read_text())["write_failures"][0]["message"] == "File too large"


STREAM_LIMIT = 64 << 10  # the journal fills after a few hundred of the stream's events


@pytest.mark.timeout(150)
def test_a_disk_that_fills_mid_stream_is_not_recorded_to_the_end_not_a_wedge(
    engine: Managed, mitmdumps: MitmdumpFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rec"
    hop = mitmdumps.recorder(engine, out, file_limit=STREAM_LIMIT)
    assert_passes(hop, engine, max_tokens=8)  # recorded whole, before the disk fills
    via = assert_passes(hop, engine, max_tokens=3000, content="a long answer")
    assert len(via.events) > 2000 and len(via.raw) > 4 * STREAM_LIMIT  # far more than the disk could take
    time.sleep(1.0)  # the recorder's timer has run since
    log = stopped_log(hop)
    assert "Traceback" not in log, log[-3000:]
    (line,) = [line for line in log.splitlines() if "proxycheck recorder:" in line and "write failed" in line]
    assert "File too large" in line and line.endswith("recording stopped, traffic goes on")
    if (out / "blobs").exists():
        assert not [p.name for p in (out / "blobs").iterdir() if p.name.endswith(".tmp")]

    status, shown, err = main_output(capsys, "sessions", str(out), "--json")
    assert status == 0, err
    turns = [t for s in json.loads(shown)["sessions"] for t in s["turns"]]
    assert [t["outcome"] for t in sorted(turns, key=lambda t: t["exchange"])] == ["ok", "not_recorded"]
    cut = max(turns, key=lambda t: t["exchange"])
    assert cut["detail"].startswith("not recorded to the end: the recorder could not write from ")
    assert "(File too large)" in cut["detail"]
    status, shown, err = main_output(capsys, "sessions", str(out))
    assert status == 0 and "not_recorded" in shown and "in_flight" not in shown and "never completed" not in shown

    # check replays it: the cut exchange is no recorded failure, so nothing is "not reproduced".
    chain = tmp_path / "chain.toml"
    chain.write_text(f'engine = "{engine.url}"\n')
    status, _, err = main_output(capsys, "check", str(out), "--chain", str(chain), "--pace", "fast",
                                 "--json", str(tmp_path / "verdict.json"), "--out", str(tmp_path / "run"))  # fmt: skip
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert (status, verdict["verdict"]) == (0, "healthy"), verdict["summary"]
    assert "not recorded to the end" in err
