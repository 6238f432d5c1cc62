"""What the proxy matrix's tests share: finding the proxies' binaries, free loopback ports,
recording agent sessions through a chain with the recorder, and running `check` on them.

The proxies are Debian packages (`make test` installs them as root). A test that needs one that
is missing skips, saying why, when it could not have been installed (not root), and fails when
it should have been (root: `make test` installs it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import pytest

from proxycheck import cli
from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed, start_mitmdump

REPO = Path(__file__).resolve().parents[2]
RECORD = str(REPO / "addons" / "record.py")
FAULTS = str(REPO / "addons" / "faults.py")


def binary(name: str) -> str:
    """The path of a proxy's binary, or skip (not root) / fail (root) when it is missing."""
    candidates = (f"/usr/sbin/{name}", f"/sbin/{name}")
    found = shutil.which(name) or next((p for p in candidates if os.access(p, os.X_OK)), None)
    if found:
        return found
    if os.geteuid() == 0:
        pytest.fail(f"{name} is missing: `make test` installs it (apt-get install {name})")
    pytest.skip(f"{name} is not installed (`make test` as root installs it)")


def free_port() -> int:
    """A loopback port free now (for proxies that cannot be told to pick one themselves)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shared_dir(prefix: str) -> Path:
    """A temp dir any user can use: proxies that drop root privileges (Squid, nginx workers)
    write their logs and pid files there. The caller removes it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o777)
    return path


def record_through(
    url: str,
    out: Path,
    *,
    upstream_proxy: str | None = None,
    socks: bool = False,
    sessions: int = 2,
    turns: int = 3,
    think: float = 0.2,
    max_tokens: int = 32,
    read_timeout: float = 5.0,
    tool_result_bytes: int = 2000,
) -> Any:
    """Agent sessions through the recorder placed at the client side (where a harness's local
    mitmproxy sits): reverse mode in front of `url`, or, with `upstream_proxy`, a forward proxy
    chained to that one (the agent then sends absolute URLs to `url` through the recorder), or,
    with `socks`, a SOCKS5 proxy (the agent's proxy is socks5://, as a harness's ALL_PROXY).
    Returns the agent's run (its sessions and outcomes); the recording is in `out`."""
    agent = dict(sessions=sessions, turns=turns, think=think, max_tokens=max_tokens, read_timeout=read_timeout,
                 tool_result_bytes=tool_result_bytes)  # fmt: skip
    mode = f"reverse:{url}" if upstream_proxy is None else f"upstream:{upstream_proxy}"
    recorder = start_mitmdump("--mode", "socks5" if socks else mode, "-s", RECORD, "--set", f"proxycheck_out={out}")
    if socks:
        options = AgentOptions(base_url=url, proxy=f"socks5://{recorder.host}:{recorder.port}", **agent)  # type: ignore[arg-type]
    elif upstream_proxy is None:
        options = AgentOptions(base_url=recorder.url, **agent)  # type: ignore[arg-type]
    else:
        options = AgentOptions(base_url=url, proxy=recorder.url, **agent)  # type: ignore[arg-type]
    try:
        result = asyncio.run(run_agent(options))
        # Stopping the recorder writes everything it holds; the pause lets the last flow's
        # `response` hook run (it may follow the last bytes the agent read by a moment).
        time.sleep(0.3)
    finally:
        recorder.stop()
    return result


def chain_file(tmp: Path, engine: str, *hops: tuple[str, str], name: str = "chain.toml", extra: str = "") -> Path:
    """A chain file: `hops` are (name, "url=..." or "proxy=...") from the client inward."""
    lines = [f'engine = "{engine}"']
    for hop, where in hops:
        key, _, value = where.partition("=")
        lines += ["[[hop]]", f'name = "{hop}"', f'{key} = "{value}"']
    path = tmp / name
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def check(tmp: Path, recording: Path, chain: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    """`proxycheck check` in-process: its exit status and its verdict document."""
    out = tmp / f"run-{time.monotonic_ns()}"
    verdict = out.with_suffix(".json")
    argv = ("--chain", str(chain), "--out", str(out), "--json", str(verdict), *argv)
    status = cli.main(["check", str(recording), *argv])
    return status, json.loads(verdict.read_text())


class Stoppable(Protocol):
    def stop(self) -> Any: ...


@contextmanager
def processes() -> Iterator[list[Stoppable]]:
    """What the test starts goes in the list; all of it is stopped at the end, also on failure."""
    started: list[Stoppable] = []
    try:
        yield started
    finally:
        for proc in reversed(started):
            proc.stop()


def stop_all(procs: list[Managed]) -> None:
    for proc in reversed(procs):
        proc.stop()
