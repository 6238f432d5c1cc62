"""A Responses API agent loop through a hop that cuts its turn 2, end to end: recorded through the
recorder in front of the hop, `check` names the hop and the turn (the hop counts a Responses
request's turns in its `input` items), and `minimize` shrinks the recording to the failing turn,
which still fails through the hop."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory

TOOLS = [{"type": "function", "name": "read_file",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}]  # fmt: skip


def agent_loop(base: str, sessions: int = 2, turns: int = 3) -> list[int]:
    """Each session sends the answer's items and the tools' outputs back, as Codex does; the turn
    at which each session's loop broke (0: it did not)."""
    broke: list[int] = []
    with httpx.Client(timeout=15) as client:
        for s in range(sessions):
            items: list[dict] = [{"role": "user", "content": f"session {s}: read the file"}]
            broke.append(0)
            for turn in range(1, turns + 1):
                body = {"model": "m", "input": items, "tools": TOOLS, "stream": True, "max_output_tokens": 16}
                try:
                    text = client.post(f"{base}/v1/responses", json=body).text
                except httpx.HTTPError:
                    broke[-1] = turn
                    break
                events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
                output = next(e["response"]["output"] for e in events if e.get("type") == "response.completed")
                items += output
                items += [{"type": "function_call_output", "call_id": o["call_id"], "output": "contents"}
                          for o in output if o["type"] == "function_call"]  # fmt: skip
    return broke


@pytest.mark.timeout(180)
def test_check_and_minimize_find_the_hop_that_cuts_a_responses_loop(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    engine = engines("--token-interval", "0.005", "--tool-call-rate", "1")
    faults = ("stall_after=3", "stall_seconds=1", "from_turn=2")
    gateway = mitmdumps.faults(engine, *faults)
    recording = tmp_path / "rec"
    recorder = mitmdumps.recorder(gateway, recording)
    assert agent_loop(recorder.url) == [2, 2]  # each loop broke at its turn 2
    time.sleep(1.5)  # the recorder flushes its last chunks within a second
    recorder.stop()

    chain = tmp_path / "chain.toml"
    chain.write_text(f'engine = "{engine.url}"\n[[hop]]\nname = "gateway"\nurl = "{gateway.url}"\n')
    checked = run_proxycheck("check", str(recording), "--chain", str(chain), "--pace", "fast",
                             "--json", str(tmp_path / "verdict.json"))  # fmt: skip
    assert checked.returncode == 1, checked.stderr
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert (verdict["verdict"], verdict["culprit"], verdict["first_turn"]) == ("proxy", "gateway", 2)

    minimized = tmp_path / "min"
    shrunk = run_proxycheck("minimize", str(recording), "--chain", str(chain), "--out", str(minimized),
                            "--time", "120")  # fmt: skip
    assert shrunk.returncode == 0, shrunk.stdout + shrunk.stderr
    assert "sessions 2 -> 1" in shrunk.stdout, shrunk.stdout
    listed = json.loads(run_proxycheck("sessions", "--json", str(minimized)).stdout)
    (session,) = listed["sessions"]
    assert session["dialect"] == "openai_responses"
    assert len(session["turns"]) < 4  # of the 4 recorded turns, fewer remain
