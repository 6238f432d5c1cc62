"""Real nginx, HAProxy, Squid, Varnish, Dante and the LiteLLM proxy on loopback ports, with generated
configs, stopped by pid.

Each `start_*` writes a whole configuration (the caller gives the part under test), runs the
proxy in the foreground as a `Managed` process (stopped by its pid: SIGTERM, then SIGKILL), and
returns once its port accepts connections. Their files (config, logs, pid, temp) go to a
directory any user may write, since nginx's workers, Squid and Varnish's child drop root
privileges.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from common import REPO, binary, free_port, shared_dir

from proxycheck.io.procs import Managed


@dataclass
class Proxy:
    proc: Managed
    home: Path  # config, logs, pid, temp files

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def port(self) -> int:
        return self.proc.port

    def log(self, name: str) -> str:
        """One of its log files (error.log, access.log, cache.log ...), or the process output."""
        path = self.home / name
        return path.read_text(errors="replace") if path.exists() else self.proc.log_tail(100_000)

    def stop(self) -> None:
        self.proc.stop()
        shutil.rmtree(self.home, ignore_errors=True)


def _start(argv: list[str], port: int, home: Path, name: str, *, env: dict[str, str] | None = None,
           timeout: float = 30) -> Proxy:  # fmt: skip
    proc = Managed(argv, "127.0.0.1", port, name=name, log_dir=home, env=env)
    try:
        proc.wait_ready(timeout)
    except Exception:
        shutil.rmtree(home, ignore_errors=True)
        raise
    return Proxy(proc, home)


def start_nginx(server: str, *, http: str = "", upstream: str = "", listen: str = "") -> Proxy:
    """nginx with one `server` listening on a free loopback port: `server` is the body of the
    server block (locations, proxy_* directives), `http` more directives at the http level,
    `upstream` whole upstream blocks, `listen` parameters of the listen directive (`ssl http2`)."""
    nginx = binary("nginx")
    home = shared_dir("nginx-")
    port = free_port()
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (home / sub).mkdir(mode=0o777)
    user = "user root;" if os.geteuid() == 0 else ""  # workers as root can use the test's files
    conf = f"""
{user}
daemon off;
master_process on;
worker_processes 1;
pid {home}/nginx.pid;
error_log {home}/error.log info;
events {{ worker_connections 512; }}
http {{
    access_log {home}/access.log;
    client_body_temp_path {home}/body;
    proxy_temp_path {home}/proxy;
    fastcgi_temp_path {home}/fastcgi;
    uwsgi_temp_path {home}/uwsgi;
    scgi_temp_path {home}/scgi;
    {upstream}
    {http}
    server {{
        listen 127.0.0.1:{port} {listen};
        {server}
    }}
}}
"""
    (home / "nginx.conf").write_text(conf)
    return _start([nginx, "-p", str(home), "-c", str(home / "nginx.conf")], port, home, "nginx")


def start_haproxy(backend: str, *, defaults: str = "", frontend: str = "") -> Proxy:
    """HAProxy in HTTP mode on a free loopback port: `backend` is the body of the backend
    section (`server engine 127.0.0.1:PORT ...`), `defaults` and `frontend` more directives
    (timeouts: `timeout server 2s`)."""
    haproxy = binary("haproxy")
    home = shared_dir("haproxy-")
    port = free_port()
    conf = f"""
global
    maxconn 512
    # One thread: HAProxy writes a log line to a file descriptor (`log stdout`) only when it gets
    # the logger's lock at once, so two sessions ending together on two threads can lose a line
    # (haproxy/haproxy#1861, "works as designed"); the tests count those lines.
    nbthread 1
defaults
    mode http
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    {defaults}
frontend entry
    bind 127.0.0.1:{port}
    {frontend}
    default_backend upstream
backend upstream
    {backend}
"""
    (home / "haproxy.cfg").write_text(conf)
    return _start([haproxy, "-db", "-f", str(home / "haproxy.cfg")], port, home, "haproxy")


def start_squid(extra: str = "") -> Proxy:
    """Squid as a forward proxy on a free loopback port, caching nothing, allowing every
    request from loopback to any port; `extra` adds directives (`read_timeout 2 seconds`)."""
    squid = binary("squid")
    home = shared_dir("squid-")
    port = free_port()
    conf = f"""
http_port 127.0.0.1:{port}
acl local src 127.0.0.0/8
http_access allow local
http_access deny all
cache deny all
cache_mem 8 MB
pid_filename {home}/squid.pid
cache_log {home}/cache.log
access_log stdio:{home}/access.log
coredump_dir {home}
shutdown_lifetime 0 seconds
{extra}
"""
    (home / "squid.conf").write_text(conf)
    return _start([squid, "-N", "-d", "1", "-f", str(home / "squid.conf")], port, home, "squid")


def start_varnish(backend: str, *, params: dict[str, str] | None = None, vcl: str = "") -> Proxy:
    """Varnish on a free loopback port in front of `backend` (host:port), passing every request
    to it (nothing cached) and streaming responses as they come (`do_stream`, its default, said
    out loud); `params` are varnishd parameters (`send_timeout`), `vcl` more VCL. Its backend
    timeouts are long, so that only what the test sets cuts a response. Start-up compiles the
    VCL with the C compiler (a second or two)."""
    varnishd = binary("varnishd")
    home = shared_dir("varnish-")
    port = free_port()
    host, _, backend_port = backend.rpartition(":")
    (home / "default.vcl").write_text(f"""vcl 4.1;
backend engine {{
    .host = "{host}"; .port = "{backend_port}";
    .first_byte_timeout = 300s; .between_bytes_timeout = 300s;
}}
sub vcl_recv {{ return (pass); }}
sub vcl_backend_response {{ set beresp.do_stream = true; }}
{vcl}
""")
    argv = [varnishd, "-F", "-a", f"127.0.0.1:{port}", "-f", str(home / "default.vcl"), "-n", str(home / "work"),
            "-s", "malloc,16m", "-p", "vsl_space=1M"]  # fmt: skip
    for name, value in (params or {}).items():
        argv += ["-p", f"{name}={value}"]
    return _start(argv, port, home, "varnish")


def start_dante(*, timeout_io: float = 0, rules: str = "") -> Proxy:
    """Dante (`danted`) as a SOCKS5 proxy on a free loopback port, no authentication, relaying
    from loopback to loopback; `timeout_io` is its idle timeout on a relayed connection (whole
    seconds; 0: none), `rules` more `socks block { ... }` rules, read before the one that
    passes everything."""
    danted = binary("danted")
    home = shared_dir("dante-")
    port = free_port()
    user = "user.unprivileged: nobody" if os.geteuid() == 0 else ""
    conf = f"""
logoutput: {home}/danted.log
internal: 127.0.0.1 port = {port}
external: 127.0.0.1
clientmethod: none
socksmethod: none
{user}
timeout.negotiate: 10
timeout.io: {timeout_io:g}
client pass {{ from: 127.0.0.0/8 to: 0.0.0.0/0 }}
{rules}
socks pass {{ from: 127.0.0.0/8 to: 0.0.0.0/0 log: connect disconnect error }}
"""
    (home / "danted.conf").write_text(conf)
    return _start([danted, "-f", str(home / "danted.conf"), "-p", str(home / "danted.pid")], port, home, "danted")


# LiteLLM needs h11 >= 0.16, which mitmproxy 11 refuses: it has a venv of its own, built by
# `make test` from tests/tools/litellm.txt.
LITELLM = REPO / ".venv-litellm" / "bin" / "litellm"
# What the LiteLLM proxy would fetch from the internet at start-up (the model cost map, Anthropic
# beta headers, blog posts, policy templates, autorouter presets): the bundled copies instead.
# Telemetry is off as well; there is no database (no DATABASE_URL) and no callback.
LITELLM_OFFLINE = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_TELEMETRY_DISABLED": "true",
    "NO_DOCS": "True",
}


def start_litellm(engine: str, *, model: str = "proxycheck-agent", params: dict[str, Any] | None = None,
                  master_key: str | None = None, settings: dict[str, Any] | None = None) -> Proxy:  # fmt: skip
    """The LiteLLM proxy on a free loopback port with one model, `model`, that forwards to the
    engine at `engine` as an OpenAI-compatible backend (`openai/...`, a dummy API key);
    `params` adds litellm_params (`timeout`, `stream_timeout`), `settings` litellm_settings,
    `master_key` makes every request need `Authorization: Bearer KEY`. Without a master key it is
    told to start anyway (it refuses to, unless in local development). Start-up takes seconds."""
    if not LITELLM.exists():
        # `make test` always builds it (PyPI only, no root): a missing venv is a broken set-up.
        pytest.fail(f"{LITELLM} is missing: `make test` builds it (make .venv-litellm/.installed)")
    home = shared_dir("litellm-")
    port = free_port()
    general: dict[str, Any] = (
        {"master_key": master_key} if master_key else {"dangerously_permit_weak_or_unset_master_key": True}
    )
    config = {
        "model_list": [{"model_name": model, "litellm_params": {
            "model": f"openai/{model}", "api_base": f"{engine}/v1", "api_key": "dummy", **(params or {})}}],
        "litellm_settings": {"telemetry": False, **(settings or {})},
        "general_settings": general,
    }  # fmt: skip
    (home / "config.yaml").write_text(json.dumps(config, indent=2))  # JSON is YAML
    argv = [str(LITELLM), "--config", str(home / "config.yaml"), "--host", "127.0.0.1", "--port", str(port)]
    # Uvicorn listens only once LiteLLM's start-up is complete: a port that accepts means ready.
    return _start(argv, port, home, "litellm", env=LITELLM_OFFLINE, timeout=120)
