"""`proxycheck addon-path record|faults`: a path `mitmdump -s` loads, from the installed package."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from cli_runner import run_proxycheck
from processes import EngineFactory, MitmdumpFactory

import proxycheck
from proxycheck.io.storage import load

pytestmark = pytest.mark.timeout(90)
PACKAGE = Path(proxycheck.__file__).resolve().parent


def _post(url: str) -> httpx.Response:
    body = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{url}/v1/chat/completions", content=json.dumps(body), timeout=20,
                      headers={"content-type": "application/json"})  # fmt: skip


@pytest.mark.parametrize("addon", ["record", "faults"])
def test_the_printed_script_loads_in_mitmdump(addon: str, tmp_path: Path, engines: EngineFactory,
                                              mitmdumps: MitmdumpFactory) -> None:  # fmt: skip
    printed = run_proxycheck("addon-path", addon, cwd=tmp_path)
    assert printed.returncode == 0 and printed.stderr == ""
    script = Path(printed.stdout.strip())
    assert script == PACKAGE / "hops" / "scripts" / f"{addon}.py"
    engine = engines("--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")
    options = (["--set", f"proxycheck_out={tmp_path / 'rec'}"] if addon == "record"
               else ["--set", "proxycheck_fault_status_first=1", "--set", "proxycheck_fault_status_code=502"])
    hop = mitmdumps("--mode", f"reverse:{engine.url}", "-s", str(script), *options)
    reply = _post(hop.url)
    if addon == "record":
        assert reply.status_code == 200
        hop.stop()
        assert len(load(tmp_path / "rec").exchanges) == 1
    else:
        assert reply.status_code == 502  # the fault hop is loaded and acts


def test_an_unknown_addon_is_one_line_and_exit_2() -> None:
    result = run_proxycheck("addon-path", "recorder")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("proxycheck: argument addon: invalid choice: 'recorder'")
    assert len(result.stderr.splitlines()) == 1
