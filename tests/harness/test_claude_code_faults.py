"""Claude Code (the pinned @anthropic-ai/claude-code in .harness/) through a faulty hop: the command
line of test_claude_code.py, its retries off, recorded through recorder -> hop `gateway` (mitmdump
running the fault addon) -> the reference engine. The hop cuts the answer of turn 2 (the request
after the first tool result) mid-stream: 3 events, a second of silence, the connection dropped;
Claude Code ends its prompt with an API error. Then `sessions`, `check` and the replay through the
hop fixed tell the story (harnesses.faulty_hop_story).

The environment adds to test_claude_code.py's CLAUDE_CODE_MAX_RETRIES=0 (its own retries: 10 by
default, with backoff) and CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK=1 (else a cut stream may be
asked again without streaming, which the hop lets through); the hop is

    mitmdump --mode reverse:ENGINE -s addons/faults.py --set proxycheck_fault_stall_after=3 \\
        --set proxycheck_fault_stall_seconds=1 --set proxycheck_fault_from_turn=2
"""

from __future__ import annotations

import json

import pytest
from harnesses import FAULT_TURN, faulty_hop_story, run_through_faulty_hop
from test_claude_code import ENGINE_ARGS, claude_argv, claude_env


@pytest.mark.timeout(150)
def test_check_names_the_hop_that_cut_claude_codes_second_turn(claude_code, engines, mitmdumps, tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    (work / "README.md").write_text("# demo\n\nA small project the harness reads.\n")

    def env_for(base_url: str) -> dict[str, str]:
        return {**claude_env(tmp_path / "home", base_url), "CLAUDE_CODE_MAX_RETRIES": "0",
                "CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK": "1"}  # fmt: skip

    faulty = run_through_faulty_hop(mitmdumps, engines(*ENGINE_ARGS), tmp_path / "rec", claude_argv(claude_code),
                                    gate=f"from_turn={FAULT_TURN}", cwd=work, env_for=env_for, timeout=60)  # fmt: skip
    # Claude Code noticed the cut at once and ended its prompt with an error.
    assert faulty.run.done.returncode == 1 and faulty.run.done.stdout.startswith("{"), faulty.run.failure()
    result = json.loads(faulty.run.done.stdout)
    assert result["is_error"] is True and result["num_turns"] == FAULT_TURN, result
    faulty_hop_story(faulty, mitmdumps, "/v1/messages", tmp_path)
