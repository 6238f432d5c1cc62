"""Session labels end to end: a recording made through the real recorder (mitmdump with
addons/record.py in front of the reference engine) of two Claude-Code-shaped sessions, keyed by
the ~150-character JSON `metadata.user_id`, and one session grouped by continuity; then
`sessions`, `check` (through a fault hop that stalls from turn 2 on), `diff RUN` and `minimize`
on an 80-column terminal. Each names the sessions s1, s2, s3 the same way, says which key is
which once, and keeps the keys whole in its JSON. Every process is stopped by the fixture."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cli_runner import main_output
from processes import EngineFactory, MitmdumpFactory

from proxycheck.io.procs import Managed

FAST = ["--pace", "fast", "--stall-timeout", "1"]
WIDTH = 80

pytestmark = pytest.mark.timeout(240)


def claude_user_id(session_id: str) -> str:
    """Claude Code's `metadata.user_id`: a JSON object in a string."""
    return json.dumps({"device_id": "7f" * 32, "account_uuid": "", "session_id": session_id}, separators=(",", ":"))


SESSION_A = "5c3e8a0f-2b1d-4c6e-9f7a-0d1e2f3a4b5c"
SESSION_C = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
KEYS = {SESSION_A: claude_user_id(SESSION_A), SESSION_C: claude_user_id(SESSION_C)}


@dataclass
class Setup:
    recording: Path
    engine: Managed
    faulty: Managed

    def chain(self, tmp: Path) -> Path:
        path = tmp / "chain.toml"
        path.write_text(f'engine = "{self.engine.url}"\n[[hop]]\nname = "edge"\nurl = "{self.faulty.url}"\n')
        return path


def anthropic(client: httpx.Client, session: str, messages: list[dict]) -> str:
    body = {"model": "claude-test", "max_tokens": 6, "stream": True, "metadata": {"user_id": KEYS[session]},
            "messages": messages}  # fmt: skip
    with client.stream("POST", "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}) as r:
        assert r.status_code == 200
        text = r.read().decode()
    return "".join(json.loads(m)["delta"].get("text", "") for m in re.findall(r"^data: (.*)$", text, re.M)
                   if '"text_delta"' in m)  # fmt: skip


def openai(client: httpx.Client, messages: list[dict]) -> str:
    body = {"model": "m", "max_tokens": 6, "stream": True, "messages": messages}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        r.read()
    return "reply"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, module_engines: EngineFactory,
          module_mitmdumps: MitmdumpFactory) -> Setup:  # fmt: skip
    engine = module_engines("--token-interval", "0.004", "--ttft-per-kb", "0", "--tool-call-rate", "0")
    out = tmp_path_factory.mktemp("rec") / "recording"
    recorder = module_mitmdumps.recorder(engine, out)
    faulty = module_mitmdumps.faults(engine, "stall_after=3", "from_turn=2")
    a = [{"role": "user", "content": "refactor the parser"}]
    b = [{"role": "user", "content": "write the changelog"}]
    c = [{"role": "user", "content": "explain the failing test"}]
    with httpx.Client(base_url=recorder.url, timeout=20) as client:
        # First turns in the order A (keyed), B (continuity), C (keyed): labels s1, s2, s3.
        replies = [anthropic(client, SESSION_A, a), openai(client, b), anthropic(client, SESSION_C, c)]
        time.sleep(0.05)
        for history, reply in zip((a, b, c), replies):
            history += [{"role": "assistant", "content": reply or "ok"}, {"role": "user", "content": "go on"}]
        anthropic(client, SESSION_A, a)
        openai(client, b)
        anthropic(client, SESSION_C, c)
    time.sleep(1.5)  # the recorder flushes its last chunks within a second
    recorder.stop()
    return Setup(out, engine, faulty)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status, out, _ = main_output(capsys, *argv)
    return status, out


def assert_fits(out: str) -> None:
    too_long = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not too_long, too_long


@pytest.fixture(autouse=True)
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))


def test_the_sessions_table_is_readable_at_80_columns(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "sessions", str(setup.recording))
    assert status == 0
    assert_fits(out)
    # Every column keeps its header (the one rich squeezes to nothing when a cell is too wide).
    header = [[cell.strip() for cell in line.split("┃")[1:-1]] for line in out.splitlines() if line.startswith("┃")]
    columns = [" ".join(word for word in words if word) for words in zip(*header)]
    assert columns == ["session", "dialect", "turns", "request bytes per turn", "think s", "outcome per turn"]
    rows = [line for line in out.splitlines() if line.startswith("│ s")]
    assert [r.split("│")[1].strip() for r in rows] == ["s1", "s2", "s3"]
    assert "anthropic_messages" in rows[0] and "openai_chat" in rows[1] and "2" in rows[2].split("│")[3]
    assert f"s1 = session {SESSION_A} (field:metadata.user_id)" in out
    assert f"s3 = session {SESSION_C} (field:metadata.user_id)" in out
    assert "s2 = session" not in out  # grouped by continuity: its label is its id
    assert "device_id" not in out


def test_the_sessions_json_keeps_the_keys(setup: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "sessions", str(setup.recording), "--json")
    assert status == 0
    doc = json.loads(out)
    assert [(s["label"], s["id"], s["key"], s["grouped_by"]) for s in doc["sessions"]] == [
        ("s1", KEYS[SESSION_A], SESSION_A, "field:metadata.user_id"),
        ("s2", "s2", None, "continuity"),
        ("s3", KEYS[SESSION_C], SESSION_C, "field:metadata.user_id"),
    ]


def test_check_diff_and_their_reports_name_the_sessions_as_sessions_does(
    setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chain = setup.chain(tmp_path)
    files = {name: tmp_path / name for name in ("v.json", "j.xml", "h.html")}
    status, out = run(capsys, "check", str(setup.recording), "--chain", str(chain), *FAST, "--out", str(tmp_path / "run"),
                      "--json", str(files["v.json"]), "--junit", str(files["j.xml"]), "--html", str(files["h.html"]))  # fmt: skip
    doc = json.loads(files["v.json"].read_text())
    assert status == 1 and doc["verdict"] == "proxy" and doc["culprit"] == "edge", doc["summary"]
    assert_fits(out)
    flat = " ".join(out.split())
    for label in ("s1", "s2", "s3"):
        assert f"via:edge session {label} turn 2 " in flat
    assert f"s1 = session {SESSION_A} (field:metadata.user_id)" in out
    assert "First failing exchange: session s" in out
    assert "device_id" not in out

    # JSON: `session` holds the key the exchanges were grouped by, `label` what was shown.
    assert {(f["session"], f["label"]) for f in doc["findings"]} == {(KEYS[SESSION_A], "s1"), ("s2", "s2"),
                                                                     (KEYS[SESSION_C], "s3")}  # fmt: skip
    assert {n["label"]: n["key"] for n in doc["sessions"]} == {"s1": SESSION_A, "s2": None, "s3": SESSION_C}

    root = ET.fromstring(files["j.xml"].read_text())
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        assert sorted(c.get("name") or "" for c in cases) == ["s1", "s2", "s3"]
        sessions = {c.get("name"): {p.get("name"): p.get("value") for p in c.findall("properties/property")} for c in cases}
        assert sessions["s1"] == {"session": KEYS[SESSION_A], "session.key": SESSION_A}
    page = files["h.html"].read_text()
    heading = re.search(r'<section id="evidence"><h2>(.*?)</h2>', page)
    assert heading is not None and re.fullmatch(r"First failing exchange: session s[123] turn 2, repetition \d+",
                                                heading.group(1)), heading.group(1)  # fmt: skip
    assert "device_id" not in page

    # diff RUN has no recording at hand: the run keeps the names.
    status, again = run(capsys, "diff", str(tmp_path / "run"), "--json", str(tmp_path / "d.json"))
    diffed = json.loads((tmp_path / "d.json").read_text())
    assert status == 1 and diffed["verdict"] == "proxy"
    assert {(f["session"], f["label"]) for f in diffed["findings"]} == {(f["session"], f["label"]) for f in doc["findings"]}
    assert_fits(again)
    assert f"s1 = session {SESSION_A} (field:metadata.user_id)" in again
    assert all(f"via:edge session {label} turn 2 " in " ".join(again.split()) for label in ("s1", "s2", "s3"))


def test_minimize_names_the_trigger_by_its_label(setup: Setup, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chain = setup.chain(tmp_path)
    status, out = run(capsys, "minimize", str(setup.recording), "--chain", str(chain), "--route", "via:edge",
                      "--stall-timeout", "1", "--budget", "6", "--out", str(tmp_path / "small"))  # fmt: skip
    assert status == 0, out
    summary = json.loads((tmp_path / "small" / "minimized.json").read_text())
    trigger = summary["trigger"]
    labels = {KEYS[SESSION_A]: "s1", "s2": "s2", KEYS[SESSION_C]: "s3"}
    assert trigger["label"] == labels[trigger["session"]]
    assert all(k["label"] == labels[k["session"]] for k in summary["kept"])
    assert f"trigger: {trigger['label']} turn 2:" in out
    assert "device_id" not in out
