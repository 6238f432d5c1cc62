"""The clients of a route: how each stack reaches the route's proxy, HTTP or SOCKS5.

A forward hop is an HTTP proxy (the stacks' own `proxy=`: CONNECT for https) or a SOCKS5 proxy
(`socks5://`, `socks5h://`), which neither stack reaches through `proxy=` alike: httpx does
with `socksio` (its `socks` extra), aiohttp not at all (its `proxy=` is HTTP only), so aiohttp
gets `aiohttp-socks`' connector instead of its TCP connector. This module is the one place that
chooses: `httpx_client` and `aiohttp_session` build a client for a route, whichever its proxy.

The two SOCKS connectors are made to behave alike:

- Name resolution: `socks5://` resolves the target's name on this machine and hands the proxy
  an address (as curl does); `socks5h://` hands the proxy the name. httpx always hands it the
  name, so for `socks5://` the name is resolved here and the TLS server name kept.
- Failures of the proxy are connect errors in one sentence (`core/exchange/socks`): its reply
  code when it would not connect to the target, its refusal of the authentication; a proxy that
  cannot be reached, or a name that does not resolve here, is a connect error too. aiohttp-socks
  raises exceptions of its own, which would otherwise escape the stack's errors.
- The connection facts: both report the connection made once the proxy has connected to the
  target (httpx's `setup_socks5_connection` trace step, aiohttp's connection-created trace), so
  an observation's connect time is the time through the proxy, as for other hops.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import ssl
from typing import Any
from urllib.parse import unquote, urlsplit

import aiohttp
import aiohttp_socks
import httpx
import python_socks

from proxycheck.core.exchange.socks import auth_refused, code_of, refused, unresolved_here
from proxycheck.core.replay.chain import Route, is_socks

__all__ = ["aiohttp_session", "httpx_client"]


def httpx_client(route: Route, *, verify: ssl.SSLContext | bool, limits: httpx.Limits,
                 http2: bool = False) -> httpx.AsyncClient:  # fmt: skip
    """An httpx client for `route`: through its proxy, if any. Never `trust_env`: only the chain
    file's proxy, never a stray HTTP_PROXY or ALL_PROXY, may add a hop. No redirects followed."""
    if not is_socks(route.proxy):
        return httpx.AsyncClient(proxy=route.proxy, verify=verify, http2=http2, limits=limits, trust_env=False,
                                 follow_redirects=False)  # fmt: skip
    assert route.proxy is not None
    # The transport holds what the client would give its own: TLS, HTTP/2, the pool's limits.
    transport = _HttpxSocks(route.proxy, verify=verify, http2=http2, limits=limits)
    return httpx.AsyncClient(transport=transport, trust_env=False, follow_redirects=False)


def aiohttp_session(route: Route, *, tls: ssl.SSLContext | bool, limit: int, keepalive: float | None = None,
                    **options: Any) -> aiohttp.ClientSession:  # fmt: skip
    """An aiohttp session for `route`, on a connector of its own (`limit` connections at most, 0
    for no limit; idle ones kept `keepalive` seconds, aiohttp's default for None); `options` go
    to the session (trace configs, decompression). Never `trust_env`."""
    kept = {} if keepalive is None else {"keepalive_timeout": keepalive}
    if not is_socks(route.proxy):
        connector = aiohttp.TCPConnector(ssl=tls, limit=limit, **kept)
        return aiohttp.ClientSession(connector=connector, proxy=route.proxy, trust_env=False, **options)
    assert route.proxy is not None
    address, user, password, remote_dns = _socks_parts(route.proxy)
    host, _, port = address.rpartition(":")
    socks = _AiohttpSocks(address, host=host.strip("[]"), port=int(port), username=user, password=password,
                          rdns=remote_dns, ssl=tls, limit=limit, **kept)  # fmt: skip
    return aiohttp.ClientSession(connector=socks, trust_env=False, **options)


def _socks_parts(proxy: str) -> tuple[str, str | None, str | None, bool]:
    """host:port of a SOCKS5 proxy URL, its user and password (decoded), and whether the proxy
    resolves the target's name (`socks5h`)."""
    parts = urlsplit(proxy)
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
    user = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return f"{host}:{parts.port}", user, password, parts.scheme.lower() == "socks5h"


# ------------------------------------------------------------------------------------------------
# httpx: socksio through httpx's own transport


class _HttpxSocks(httpx.AsyncHTTPTransport):
    def __init__(self, proxy: str, **options: Any) -> None:
        self.address, _, _, self.remote_dns = _socks_parts(proxy)
        # httpx knows the schemes in lower case only; it hands the proxy the name either way.
        scheme, _, rest = proxy.partition("://")
        super().__init__(proxy=f"{scheme.lower()}://{rest}", **options)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        target = _with_port(request.url)
        if not self.remote_dns:
            await _resolve_here(request)
        try:
            return await super().handle_async_request(request)
        except httpx.ProxyError as exc:
            words = str(exc)
            if "username/password" in words or "Requested" in words:
                raise httpx.ProxyError(auth_refused(self.address, words), request=request) from None
            raise httpx.ProxyError(refused(self.address, target, code_of(words), words), request=request) from None


def _with_port(url: httpx.URL) -> str:
    """host:port the proxy is asked to connect to (the scheme's port when the URL gives none)."""
    return _target(url.raw_host.decode("ascii"), url.port or (443 if url.scheme == "https" else 80))


def _target(host: str, port: int | None) -> str:
    return f"{f'[{host}]' if ':' in host else host}:{port}"


async def _resolve_here(request: httpx.Request) -> None:
    """`socks5://`: the target's name resolved on this machine, the proxy given the address; the
    TLS server name (and the Host header, already set) stay the name."""
    host = request.url.host
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return  # an address already
    except OSError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, request.url.port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise httpx.ConnectError(unresolved_here(host, exc), request=request) from None
    request.extensions = {**request.extensions, "sni_hostname": host}
    request.url = request.url.copy_with(host=str(infos[0][4][0]))


# ------------------------------------------------------------------------------------------------
# aiohttp: aiohttp-socks' connector, its exceptions made aiohttp's


class _AiohttpSocks(aiohttp_socks.ProxyConnector):
    def __init__(self, address: str, **options: Any) -> None:
        super().__init__(**options)
        self.address = address  # host:port of the proxy, for the messages

    async def _wrap_create_connection(self, *args: Any, req: Any, timeout: Any, **kwargs: Any) -> Any:
        target = _target(req.url.raw_host or "", req.url.port)
        key = req.connection_key
        try:
            return await super()._wrap_create_connection(*args, req=req, timeout=timeout, **kwargs)
        except aiohttp_socks.ProxyTimeoutError as exc:
            raise aiohttp.ConnectionTimeoutError(f"SOCKS5 proxy {self.address}: {exc}") from None
        except aiohttp_socks.ProxyError as exc:
            words = str(exc)
            if exc.error_code is None and "auth" in words.lower():
                text = auth_refused(self.address, words)
            else:
                text = refused(self.address, target, exc.error_code if exc.error_code else code_of(words), words)
            raise aiohttp.ClientProxyConnectionError(key, OSError(errno.ECONNREFUSED, text)) from None
        except aiohttp.ClientError:
            raise
        except (aiohttp_socks.ProxyConnectionError, python_socks.ProxyConnectionError, OSError) as exc:
            # The proxy not reached, or (socks5://) the target's name not resolved here.
            if isinstance(exc, socket.gaierror):
                text = unresolved_here(str(req.url.raw_host), exc)
            else:
                text = f"cannot connect through SOCKS5 proxy {self.address}: {exc}"
            raise aiohttp.ClientProxyConnectionError(key, OSError(errno.ECONNREFUSED, text)) from None
