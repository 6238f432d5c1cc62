"""A bad chain file stops every command that loads one before any traffic: exit 2, one line
naming the file and line, and the engine (a real reference engine, logging each request it gets)
receives nothing.

Once per module: the reference engine with its access log on. Each case runs the command in its
own process, as a user would; a good chain first shows that a request does reach the log.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from cli_runner import run_proxycheck as run
from processes import EngineFactory

from proxycheck.io.procs import Managed

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "replays" / "example-agent"
REQUEST_LINE = re.compile(r'"[A-Z]+ /\S* HTTP/[\d.]+" \d{3} ')  # `"POST /v1/chat/completions HTTP/1.1" 200 `

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def engine(module_engines: EngineFactory) -> Managed:
    return module_engines("--access-log", "--token-interval", "0", "--ttft-base", "0", "--ttft-per-kb", "0")


def requests_seen(engine: Managed) -> int:
    return len(REQUEST_LINE.findall(engine.log_path.read_text(errors="replace")))


def chain_file(tmp: Path, engine: Managed, hop_extra: str) -> Path:
    """The engine, and one reverse hop `edge` (the engine's URL too: whichever route a command took
    first, the engine would see it) with `hop_extra` from line 5 on."""
    path = tmp / "chain.toml"
    path.write_text(f'engine = "{engine.url}"\n[[hop]]\nname = "edge"\nurl = "{engine.url}"\n{hop_extra}')
    return path


def commands(chain: Path, tmp: Path) -> dict[str, list[str]]:
    """Every command that loads a chain, with what it needs to send traffic at once."""
    return {
        "check": ["check", str(EXAMPLE), "--chain", str(chain), "--pace", "fast"],
        "replay": ["replay", str(EXAMPLE), "--chain", str(chain), "--pace", "fast", "--out", str(tmp / "run")],
        "probe": ["probe", "--chain", str(chain), "--probe", "sse", "--timeout", "2"],
        "minimize": ["minimize", str(EXAMPLE), "--chain", str(chain), "--out", str(tmp / "small")],
        "bench": ["bench", str(EXAMPLE), "--chain", str(chain), "--route", "via:edge", "--concurrency", "1",
                  "--requests", "2", "--out", str(tmp / "bench")],
    }  # fmt: skip


def assert_refused_before_traffic(result: subprocess.CompletedProcess[str], engine: Managed, before: int,
                                  expected: str, tmp: Path) -> None:  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr == f"proxycheck: {expected}\n"
    assert result.stdout == ""
    time.sleep(0.2)  # a request sent at the last moment would be logged by now
    assert requests_seen(engine) == before
    assert not any((tmp / name).exists() for name in ("run", "small", "bench"))


def test_a_good_chain_does_reach_the_engine(engine: Managed, tmp_path: Path) -> None:
    """The observation the other tests rely on: a request sent is a request in the log."""
    chain = chain_file(tmp_path, engine, 'headers = { "x-api-key" = "${EDGE_KEY}" }\n')
    before = requests_seen(engine)
    result = run("replay", str(EXAMPLE), "--chain", str(chain), "--route", "via:edge", "--pace", "fast",
                 "--max-requests", "1", "--out", str(tmp_path / "run"), env={"EDGE_KEY": "k"})  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    deadline = time.monotonic() + 5
    while requests_seen(engine) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert requests_seen(engine) == before + 1


@pytest.mark.parametrize("command", ["check", "replay", "probe", "minimize", "bench"])
def test_every_command_refuses_a_header_name_with_a_space(engine: Managed, tmp_path: Path, command: str) -> None:
    chain = chain_file(tmp_path, engine, 'headers = { "x api key" = "k" }\n')
    before = requests_seen(engine)
    result = run(*commands(chain, tmp_path)[command])
    expected = f'{chain}:5: hop "edge": header name "x api key" is not a valid HTTP token (no spaces)'
    assert_refused_before_traffic(result, engine, before, expected, tmp_path)


@pytest.mark.parametrize(
    "hop_extra,env,expected",
    [
        # a key read from a file with its newline: the variable is named, its value never shown
        ('headers = { Authorization = "Bearer ${EDGE_KEY}" }\n', {"EDGE_KEY": "sk-from-a-file\n"},
         'hop "edge": header "Authorization": ${EDGE_KEY} holds a line break (CR or LF), which would end the header'),
        ('headers = { "x-api-key" = "clé" }\n', {},
         'hop "edge": header "x-api-key": the value holds U+00E9, not ASCII (HTTP clients send header values as ASCII)'),
        ('header = { "x-api-key" = "k" }\n', {}, 'hop "edge": unknown key "header" (did you mean "headers"?)'),
        ('[[hop]]\nname = "corp"\nproxy = "http://[::1:3128"\n', {},
         'hop "corp": proxy is not a valid URL: "http://[::1:3128" (invalid IPv6 URL)'),
    ],
)
def test_check_refuses_each_kind_of_mistake_with_its_line(engine: Managed, tmp_path: Path, hop_extra: str,
                                                          env: dict[str, str], expected: str) -> None:  # fmt: skip
    chain = chain_file(tmp_path, engine, hop_extra)
    before = requests_seen(engine)
    result = run(*commands(chain, tmp_path)["check"], env=env)
    line = 7 if hop_extra.startswith("[[hop]]") else 5
    assert_refused_before_traffic(result, engine, before, f"{chain}:{line}: {expected}", tmp_path)
    assert "sk-from-a-file" not in result.stderr


def test_the_file_is_read_as_utf_8_with_or_without_a_byte_order_mark(engine: Managed, tmp_path: Path) -> None:
    chain = chain_file(tmp_path, engine, "")
    chain.write_bytes(b"\xef\xbb\xbf" + chain.read_bytes())  # as some editors save it
    dry = run("replay", str(EXAMPLE), "--chain", str(chain), "--route", "via:edge", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"POST {engine.url}/v1/chat/completions" in dry.stdout
    chain.write_bytes(chain.read_bytes().replace(b'"edge"', b'"\xe9dge"'))  # Latin-1, not UTF-8, on line 3
    before = requests_seen(engine)
    result = run(*commands(chain, tmp_path)["check"])
    assert_refused_before_traffic(result, engine, before, f"{chain}:3: the chain file is not UTF-8 text", tmp_path)
