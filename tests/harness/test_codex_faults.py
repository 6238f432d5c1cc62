"""Codex CLI (the pinned @openai/codex in .harness/) through a faulty hop: the command line and
config of test_codex.py (its retries off: `request_max_retries = 0`, `stream_max_retries = 0`),
recorded through recorder -> hop `gateway` (mitmdump running the fault addon) -> the reference
engine. The hop cuts the answer of turn 2 (the request after the first function call's output)
mid-stream: 3 events, a second of silence, the connection dropped; Codex fails its turn. Then
`sessions`, `check` and the replay through the hop fixed tell the story
(harnesses.faulty_hop_story).

The hop counts a Responses request's turns in its `input` items (the model's runs of messages and
function calls), so its gate is the turn:

    mitmdump --mode reverse:ENGINE -s addons/faults.py --set proxycheck_fault_stall_after=3 \\
        --set proxycheck_fault_stall_seconds=1 --set proxycheck_fault_from_turn=2
"""

from __future__ import annotations

import pytest
from harnesses import FAULT_TURN, faulty_hop_story, run_through_faulty_hop
from test_codex import ENGINE_ARGS, codex_argv, codex_env, events


@pytest.mark.timeout(150)
def test_check_names_the_hop_that_cut_codexs_second_turn(codex, engines, mitmdumps, tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    (work / "README.md").write_text("# demo\n\nA small project the harness reads.\n")
    engine = engines(*ENGINE_ARGS)
    faulty = run_through_faulty_hop(mitmdumps, engine, tmp_path / "rec", codex_argv(codex, work),
                                    gate=f"from_turn={FAULT_TURN}", cwd=work,
                                    env_for=lambda url: codex_env(tmp_path / "home", url), timeout=60)  # fmt: skip
    # Codex noticed the cut at once and failed its turn.
    kinds = [event["type"] for event in events(faulty.run.done.stdout)]
    assert "turn.failed" in kinds and "turn.completed" not in kinds, faulty.run.failure()
    faulty_hop_story(faulty, mitmdumps, "/v1/responses", tmp_path)
