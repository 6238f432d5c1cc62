"""A Responses API conversation continued through `previous_response_id`, end to end: recorded
through the recorder in front of the reference engine, listed by `sessions` as one session,
replayed chained against a fresh engine (which never gave the recorded ids) cleanly, and an
exact replay warned about in one line."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory

WARNING = "previous_response_id, which an exact replay sends as recorded"


def converse(base: str) -> list[str]:
    """Three turns, each naming the response before it; the ids the engine gave."""
    ids: list[str] = []
    with httpx.Client(timeout=30) as client:
        for n, text in enumerate(("hello", "and then?", "thanks")):
            body = {"model": "m", "input": [{"role": "user", "content": text}], "max_output_tokens": 8,
                    "stream": n != 1}  # fmt: skip
            if ids:
                body["previous_response_id"] = ids[-1]
            r = client.post(f"{base}/v1/responses", json=body)
            assert r.status_code == 200, r.text
            if body["stream"]:
                done = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
                ids.append(next(e["response"]["id"] for e in done if e.get("type") == "response.completed"))
            else:
                ids.append(r.json()["id"])
    return ids


@pytest.mark.timeout(120)
def test_a_conversation_chained_by_response_ids_is_one_session_and_replays_chained(
    engines: EngineFactory, mitmdumps: MitmdumpFactory, tmp_path: Path
) -> None:
    recording = tmp_path / "rec"
    recorder = mitmdumps.recorder(engines("--token-interval", "0"), recording)
    ids = converse(recorder.url)
    assert len(set(ids)) == 3
    time.sleep(1.5)  # the recorder flushes its last chunks within a second
    recorder.stop()

    listed = run_proxycheck("sessions", str(recording), "--json")
    assert listed.returncode == 0, listed.stderr
    (session,) = json.loads(listed.stdout)["sessions"]
    assert [t["turn"] for t in session["turns"]] == [1, 2, 3]

    chain = tmp_path / "chain.toml"
    # Another seed: other answers, other ids; the engine knows none of the recorded ones.
    engine = engines("--token-interval", "0", "--seed", "1")
    chain.write_text(f'engine = "{engine.url}"\n')
    exact = run_proxycheck("replay", str(recording), "--chain", str(chain), "--dry-run")
    assert exact.returncode == 0, exact.stderr
    (line,) = [ln for ln in exact.stderr.splitlines() if WARNING in ln]
    assert line.startswith("proxycheck: warning: 2 turn(s) ") and "--mode chained" in line

    chained = run_proxycheck("replay", str(recording), "--chain", str(chain), "--mode", "chained",
                             "--pace", "fast", "--out", str(tmp_path / "run"))  # fmt: skip
    assert chained.returncode == 0, chained.stderr
    assert WARNING not in chained.stderr
    assert ", 0 not ok" in chained.stderr

    # Exact: the recorded ids reach an engine that never gave them; the replay says why first.
    plain = run_proxycheck("replay", str(recording), "--chain", str(chain), "--pace", "fast",
                           "--out", str(tmp_path / "run-exact"))  # fmt: skip
    assert WARNING in plain.stderr
    assert ", 2 not ok" in plain.stderr

    # check makes no verdict of those 400s: exact, it stops before any traffic, saying why; chained,
    # the engine alone is healthy.
    refused = run_proxycheck("check", str(recording), "--chain", str(chain), "--pace", "fast")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip() == (f"proxycheck: {recording}: 2 turn(s) continue a recorded response by "
                                      "previous_response_id, which an exact replay sends to a server that never gave "
                                      "it: check with --mode chained")  # fmt: skip
    checked = run_proxycheck("check", str(recording), "--chain", str(chain), "--pace", "fast", "--mode", "chained",
                             "--json", str(tmp_path / "verdict.json"))  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert json.loads((tmp_path / "verdict.json").read_text())["verdict"] == "healthy"
