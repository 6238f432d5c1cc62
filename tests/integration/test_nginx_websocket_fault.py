"""nginx on the Responses API's WebSocket mode: what a real nginx 1.22 does to a socket it proxies,
found by running it, next to the fault hop's fault that stands for it.

* `proxy_read_timeout`: nginx tunnels an upgraded connection without reading its frames, so when
  no data has passed for the timeout it closes the TCP connections: the client sees the socket
  end without a close frame (a cut, 1006), never a close code. Traffic keeps the socket open.
  The fault hop's `ws_idle_close` does the same by default (`ws_idle_close_code=0`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from processes import EngineFactory, MitmdumpFactory
from proxies import Proxy, start_nginx
from wsclient import socket

from proxycheck.io.procs import Managed

pytestmark = pytest.mark.timeout(90)

FAST = ("--token-interval", "0.005", "--ttft-base", "0.02")
UPGRADING = 'proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection "upgrade";'
TIMEOUT = 1.5  # nginx's proxy_read_timeout and the fault hop's ws_idle_close
SLACK = 10.0


@pytest.fixture
def nginx(engines: EngineFactory) -> Iterator[Proxy]:
    engine = engines(*FAST)
    timeout = f"proxy_read_timeout {int(TIMEOUT * 1000)}ms;"
    proxy = start_nginx(f"location / {{ proxy_pass {engine.url}; {UPGRADING} {timeout} }}")
    try:
        yield proxy
    finally:
        proxy.stop()


async def idle_end(proc: Managed | Proxy) -> tuple[str, int | None, float, float]:
    """One socket through `proc`: turns for twice the timeout (traffic), then idle; how it ended,
    how long it had lived, and how long after its last message."""
    loop = asyncio.get_running_loop()
    async with socket(proc) as ws:  # type: ignore[arg-type]
        opened = loop.time()
        while loop.time() - opened < 2 * TIMEOUT:
            assert (await ws.turn())[-1]["type"] == "response.completed"
            last = loop.time()
            await asyncio.sleep(TIMEOUT / 3)
        how, code, at = await ws.end(within=TIMEOUT + SLACK)
    return how, code, at - opened, at - last


async def test_nginx_cuts_an_idle_socket_without_a_close_frame_as_the_fault_hop_does(
    nginx: Proxy, engines: EngineFactory, mitmdumps: MitmdumpFactory
) -> None:
    how, code, lived, idle = await idle_end(nginx)
    assert (how, code) == ("cut", None)
    assert lived >= 2 * TIMEOUT and idle >= TIMEOUT - 0.1  # traffic kept it open; idle, it went
    hop = mitmdumps.faults(engines(*FAST), f"ws_idle_close={TIMEOUT}")
    assert (await idle_end(hop))[:2] == (how, code)
