"""Real nginx, HAProxy and Squid on loopback ports, with generated configs, stopped by pid.

Each `start_*` writes a whole configuration (the caller gives the part under test), runs the
proxy in the foreground as a `Managed` process (stopped by its pid: SIGTERM, then SIGKILL), and
returns once its port accepts connections. Their files (config, logs, pid, temp) go to a
directory any user may write, since nginx's workers and Squid drop root privileges.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from common import binary, free_port, shared_dir

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


def _start(argv: list[str], port: int, home: Path, name: str) -> Proxy:
    proc = Managed(argv, "127.0.0.1", port, name=name, log_dir=home)
    try:
        proc.wait_ready(30)
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
