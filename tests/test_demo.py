"""`make demo` (`proxycheck demo`), the README's first command, run as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from demo_story import assert_story_told

from proxycheck.io.harness import HARNESSES, find_harness
from proxycheck.io.storage import load

REPO = Path(__file__).resolve().parents[1]
# What the demo with a real harness says when the harness is missing: the one line, exit 2.
NOT_INSTALLED = {
    "claude-code": "proxycheck: demo --harness claude-code: Claude Code is not installed (make test installs it "
                   "into .harness/, or npm install -g @anthropic-ai/claude-code)\n",
    "codex": "proxycheck: demo --harness codex: Codex CLI is not installed (make test installs it into .harness/, "
             "or npm install -g @openai/codex)\n",
}
# The turn the demo's gateway stalls from (the harness's first tool call has been run by then).
FIRST_FAILING_TURN = 2


@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_finds_the_faulty_hop_then_replays_clean(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "demo", f"OUT={out}"],
                          capture_output=True, text=True, timeout=200)  # fmt: skip
    shown = proc.stdout + proc.stderr
    assert proc.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown
    assert_story_told(out, shown)
    assert 'id="verdict"' in (out / "report.html").read_text()  # the HTML report is written


@pytest.mark.timeout(60)
@pytest.mark.parametrize("harness", sorted(NOT_INSTALLED))
def test_demo_with_a_harness_that_is_not_installed_says_how_to_install_it(harness: str, tmp_path: Path) -> None:
    empty = tmp_path / "nothing"
    empty.mkdir()
    out = tmp_path / "demo"
    done = run_proxycheck("demo", "--harness", harness, "--out", str(out), timeout=50,
                          env={"PATH": str(empty), "PROXYCHECK_HARNESS_DIR": str(empty)})  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == NOT_INSTALLED[harness]
    assert done.stdout == "" and not out.exists()  # nothing started, nothing written


def _needs(harness: str) -> None:
    """Skip, saying why, where the real harness is not installed."""
    if find_harness(HARNESSES[harness]) is None:
        pytest.skip(f"{HARNESSES[harness].package} is not installed (`make test` installs it into .harness/ with npm)")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("harness", sorted(NOT_INSTALLED))
def test_demo_with_a_real_harness_finds_the_faulty_hop_then_replays_clean(harness: str, tmp_path: Path) -> None:
    _needs(harness)
    out = tmp_path / "demo"
    done = run_proxycheck("demo", "--harness", harness, "--out", str(out), timeout=150)
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown
    # The harness ran the demo's project through the chain and wedged...
    assert f"{HARNESSES[harness].title} runs" in shown and (out / "project" / "README.md").exists()
    # ...the verdict names the faulty hop and the turn where the wedge starts, the fixed replay is clean
    assert_story_told(out, shown, FIRST_FAILING_TURN, f"culprit: hop gateway   from turn {FIRST_FAILING_TURN}")


@pytest.mark.timeout(180)
def test_demo_with_codex_over_a_websocket_finds_the_hop_that_cuts_its_socket(tmp_path: Path) -> None:
    _needs("codex")
    out = tmp_path / "demo"
    done = run_proxycheck("demo", "--harness", "codex", "--websocket", "--out", str(out), timeout=150)
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown[-4000:]
    assert "Traceback" not in shown and "over a WebSocket" in shown and "cuts WebSockets mid-answer" in shown
    # Codex talked over a socket (the recording's first exchange is one), and the socket's turn 2 was cut...
    exchanges = load(out / "recording").exchanges
    assert exchanges and exchanges[0].websocket and exchanges[0].status == 101, exchanges[:1]
    found = json.loads((out / "check-run" / "verdict.json").read_text())
    assert found["verdict"] == "proxy" and found["culprit"] == "gateway", found["summary"]
    assert found["first_turn"] == FIRST_FAILING_TURN
    # ...and with the gateway fixed the regression replay is clean.
    fixed = json.loads((out / "fixed-run" / "verdict.json").read_text())
    assert fixed["verdict"] == "not-reproduced"
    assert all(r["failures"] == 0 and r["state"] == "clean" for r in fixed["routes"]), fixed["routes"]


def test_demo_websocket_needs_codex(tmp_path: Path) -> None:
    done = run_proxycheck("demo", "--websocket", "--out", str(tmp_path / "demo"), timeout=50)
    assert done.returncode == 2 and done.stderr == (
        "proxycheck: demo --websocket: needs --harness codex (the harness that speaks the WebSocket mode)\n")


# -- the demo on vLLM (--engine vllm): its bad input, before anything starts (the real run is in tests/vllm/)

ELSEWHERE = "(or --vllm-python and --vllm-model name one built elsewhere)"


def _refused(tmp_path: Path, *args: str) -> str:
    """The demo's one-line refusal of `args` (exit 2, nothing started or written), run in `tmp_path`."""
    out = tmp_path / "demo"
    done = run_proxycheck("demo", *args, "--out", str(out), timeout=50, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == "" and not out.exists()
    return done.stderr


def test_demo_on_vllm_where_it_is_not_built_names_make_vllm_and_the_flags(tmp_path: Path) -> None:
    # The default vLLM is the project's: .venv-vllm and .models under the current directory.
    assert _refused(tmp_path, "--engine", "vllm") == (
        f"proxycheck: demo --engine vllm: vLLM is not installed ({tmp_path}/.venv-vllm/bin/python missing): "
        f"`make vllm` builds it {ELSEWHERE}\n")  # fmt: skip


def test_demo_on_vllm_installed_elsewhere_without_its_model_says_the_model_is_missing(tmp_path: Path) -> None:
    python, model = tmp_path / "bin" / "python", tmp_path / "model"
    python.parent.mkdir()
    python.write_text("")
    model.mkdir()
    assert _refused(tmp_path, "--engine", "vllm", "--vllm-python", str(python), "--vllm-model", str(model)) == (
        f"proxycheck: demo --engine vllm: the model is not built ({model}/config.json missing): "
        f"`make vllm` builds it {ELSEWHERE}\n")  # fmt: skip


CLIENTS = [["--harness", "claude-code"], ["--harness", "codex", "--websocket"], ["--websocket"]]


@pytest.mark.parametrize("client", CLIENTS)
def test_demo_on_vllm_refuses_the_harnesses_which_need_tool_calls_the_model_does_not_make(
    client: list[str], tmp_path: Path
) -> None:
    said = _refused(tmp_path, "--engine", "vllm", *client)
    given = " ".join(client[:2]) if client[0] == "--harness" else "--websocket"
    assert said == (f"proxycheck: demo --engine vllm: {given} cannot run on it: the harnesses need tool calls, and "
                    "the small model it serves makes none (its chat template has no tools)\n")  # fmt: skip


@pytest.mark.parametrize("flag", ["--vllm-python", "--vllm-model"])
def test_demo_vllm_flags_need_engine_vllm(flag: str, tmp_path: Path) -> None:
    assert _refused(tmp_path, flag, str(tmp_path)) == (
        "proxycheck: demo --vllm-python/--vllm-model: need --engine vllm\n")
