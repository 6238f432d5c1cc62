"""The reference engine told to refuse what vLLM refuses (`--served-model`, `--max-model-len`,
`--no-tool-parser`): vLLM's statuses and bodies on the wire, nothing refused by default, and what
`check` then reads of a conversation that outgrows the window (as of vLLM's own, in tests/vllm)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory, write_chain
from sdk import converse

from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(90)

MODEL = "smollm2-135m"
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def strict(module_engines: EngineFactory) -> Managed:
    return module_engines("--served-model", MODEL, "--max-model-len", "64", "--no-tool-parser",
                          "--token-interval", "0.001")  # fmt: skip


def post(engine: Managed, path: str, **doc: object) -> httpx.Response:
    return httpx.post(engine.url + path, json=doc, timeout=10)


def chat(engine: Managed, **extra: object) -> httpx.Response:
    doc = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    return post(engine, "/v1/chat/completions", **doc)


def test_another_model_name_is_a_404_in_vllms_words(strict: Managed) -> None:
    answer = chat(strict, model="test-model", stream=True)
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("application/json")
    assert answer.json()["error"]["message"] == "The model `test-model` does not exist. Valid aliases: smollm2-135m."
    assert "x-proxycheck-request-sha256" in answer.headers  # still says what it received
    assert chat(strict).status_code == 200
    listed = httpx.get(strict.url + "/v1/models", timeout=5).json()["data"]
    assert [(m["id"], m["max_model_len"]) for m in listed] == [(MODEL, 64)]
    messages = post(strict, "/v1/messages", model="claude-x", max_tokens=4,
                    messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    assert messages.status_code == 404 and messages.json()["type"] == "error"


def test_tools_are_refused_without_a_tool_parser_unless_the_choice_is_none(strict: Managed) -> None:
    refused = chat(strict, tools=TOOLS)
    assert refused.status_code == 400 and "--enable-auto-tool-choice" in refused.json()["error"]["message"]
    assert chat(strict, tools=TOOLS, tool_choice="none").status_code == 200


def test_a_prompt_past_the_window_is_a_400_and_a_long_answer_is_not(strict: Managed) -> None:
    long = post(strict, "/v1/chat/completions", model=MODEL, max_tokens=4,
                messages=[{"role": "user", "content": "word " * 200}])  # fmt: skip
    assert long.status_code == 400
    assert long.json()["error"]["message"].startswith("This model's maximum context length is 64 tokens")
    assert chat(strict, max_tokens=200).status_code == 200


def test_by_default_the_engine_refuses_none_of_it(engines: EngineFactory) -> None:
    engine = engines("--token-interval", "0.001")
    answer = post(engine, "/v1/chat/completions", model="test-model", tools=TOOLS, max_tokens=4,
                  messages=[{"role": "user", "content": "word " * 20000}])  # fmt: skip
    assert answer.status_code == 200


def test_the_refusals_do_not_apply_to_a_replay(tmp_path: Path) -> None:
    done = run_proxycheck("engine", "--listen", "127.0.0.1:0", "--replay", str(tmp_path), "--served-model", MODEL,
                          timeout=30)  # fmt: skip
    assert done.returncode == 2 and "do not apply with --replay" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_conversation_past_the_window_is_the_server_from_that_turn_as_against_vllm(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    # The same conversation as tests/vllm's: turn 2 pastes some 9k tokens into an 8,192-token window.
    engine = engines("--served-model", MODEL, "--max-model-len", "8192", "--token-interval", "0.001")
    recording = tmp_path / "recording"
    recorder = mitmdumps.recorder(engine, recording)
    client = converse("openai", recorder.url, model=MODEL, sessions=1, turns=3, max_tokens=8, paste="2:4000", within=60)
    time.sleep(1.2)  # the recorder flushes chunk times at least every second
    recorder.stop()
    assert [line["ok"] for line in client.lines] == [True, False], client.lines
    assert "400" in client.lines[1]["error"] and "maximum context length is 8192" in client.lines[1]["error"]
    hop = mitmdumps.faults(engine)
    verdict_path = tmp_path / "verdict.json"
    chain = write_chain(tmp_path / "chain.toml", engine.url, [("edge", hop.url)])
    done = run_proxycheck("check", str(recording), "--chain", str(chain), "--json", str(verdict_path),
                          "--out", str(tmp_path / "run"), "--pace", "fast", timeout=60)  # fmt: skip
    verdict = json.loads(verdict_path.read_text())
    assert done.returncode == 1 and (verdict["verdict"], verdict["first_turn"]) == ("server", 2), verdict["summary"]
    assert verdict["culprit"] != "edge"
    refused = [f for f in verdict["findings"] if f["turn"] == 2 and f["route"] == "direct"]
    assert refused and all("maximum context length" in f["detail"] for f in refused), refused
