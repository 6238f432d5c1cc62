"""A hop that checks a key, and a recording that had to drop it.

nginx in front of the engine answers 401 unless `Authorization: Bearer <key>` comes (as gateways
check a master key). The OpenAI SDK talks through the recorder at the client side with the key;
the recording redacts it. Replayed without the key, the hop refuses: that is a missing
credential (exit 2, one line naming the hop, the redacted header and the chain-file line that
supplies it, found on the route's first exchange), never `proxy` with the hop as the culprit.
With the key in the chain file, the same check is healthy.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import ExitStack
from pathlib import Path

import pytest
from cli_runner import run_proxycheck
from proxies import start_nginx
from sdk import converse

from proxycheck.io.procs import start_engine, start_mitmdump

REPO = Path(__file__).resolve().parents[2]
RECORD = str(REPO / "addons" / "record.py")
KEY = "sk-test-0000"  # what tests/clients/conversation.py sends as the OpenAI SDK's api_key

pytestmark = pytest.mark.timeout(180)


def check(recording: Path, chain: Path, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return run_proxycheck("check", str(recording), "--chain", str(chain), "--pace", "fast", "--out", str(out),
                          "--json", str(out) + ".json", timeout=150, env=env)  # fmt: skip


def test_a_hop_refusing_the_redacted_key_is_a_missing_credential_not_a_culprit(tmp_path: Path) -> None:
    with ExitStack() as stack:
        engine = start_engine("--token-interval", "0.002")
        stack.callback(engine.stop)
        gate = f'if ($http_authorization != "Bearer {KEY}") {{ return 401 "no key"; }}'
        nginx = start_nginx(f"location / {{ {gate} proxy_pass {engine.url}; proxy_http_version 1.1; proxy_buffering off; }}")
        stack.callback(nginx.stop)
        recording = tmp_path / "rec"
        recorder = start_mitmdump("--mode", f"reverse:{nginx.url}", "-s", RECORD, "--set", f"proxycheck_out={recording}")
        stack.callback(recorder.stop)
        client = converse("openai", recorder.url, sessions=2, turns=3)
        assert client.ok, client.errors
        recorder.stop()
        assert KEY not in (recording / "journal.jsonl").read_text()  # redacted at record time

        lines = [f'engine = "{engine.url}"', "", "[[hop]]", 'name = "authgw"', f'url = "{nginx.url}"']
        chain = tmp_path / "chain.toml"
        chain.write_text("\n".join(lines) + "\n")
        done = check(recording, chain, tmp_path / "run-without")
        assert done.returncode == 2, done.stdout + done.stderr
        errors = [x for x in done.stderr.splitlines() if not x.startswith("proxycheck: direct #")]  # progress
        assert len(errors) == 1, done.stderr
        (line,) = errors
        assert line.startswith(f"proxycheck: {chain}: route via:authgw answered HTTP 401")
        assert "hop authgw wants a credential" in line and "not a fault of the hop" in line
        assert "redacted the header authorization" in line
        assert 'on [[hop]] name = "authgw" (line 4): headers = { "authorization" = "Bearer ${AUTHGW_KEY}" }' in line
        assert not (tmp_path / "run-without.json").exists()  # no verdict from it
        observed = [json.loads(x) for x in (tmp_path / "run-without" / "observations.jsonl").read_text().splitlines()]
        refused = [o for o in observed if o["route"] == "via:authgw"]
        # Stopped at the first refusal: only the sessions' first turns, which were in flight at once.
        assert 1 <= len(refused) <= 2 and {(o["turn"], o["status"]) for o in refused} == {(1, 401)}
        assert all(o["outcome"] == "ok" for o in observed if o["route"] == "direct")

        # The fix the message names: the key from the environment, on the hop.
        chain.write_text("\n".join(lines) + '\nheaders = { "authorization" = "Bearer ${AUTHGW_KEY}" }\n')
        done = check(recording, chain, tmp_path / "run-with", AUTHGW_KEY=KEY)
        verdict = json.loads((tmp_path / "run-with.json").read_text())
        assert (done.returncode, verdict["verdict"]) == (0, "healthy"), done.stdout + done.stderr

        # A wrong key in the chain file is named as such.
        done = check(recording, chain, tmp_path / "run-wrong", AUTHGW_KEY="sk-wrong")
        assert done.returncode == 2 and "the chain file supplies authorization for it: check the value" in done.stderr
