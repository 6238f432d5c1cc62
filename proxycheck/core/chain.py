"""The chain file: the engine, the hops in front of it, and the routes a replay can take.

    engine = "http://127.0.0.1:30000"
    [engine_options]
    headers = { Authorization = "Bearer ${ENGINE_API_KEY}" }
    verify = true                     # true | false | "path/to/ca.pem"
    [[hop]]                           # listed from the client inward
    name = "corp"
    proxy = "http://127.0.0.1:3128"   # a forward hop
    [[hop]]
    name = "edge"
    url = "http://127.0.0.1:8080"     # a reverse hop
    headers = { "x-api-key" = "${EDGE_KEY}" }

Routes: `direct` (the engine URL) and `via:NAME` (enter the chain at hop NAME and pass every hop
from there inward). The *ladder* is `direct, via:hops[n-1], ..., via:hops[0]`.

How a route reaches the engine:
- through a reverse hop, the request goes to that hop's URL;
- through a forward hop, the request's target is the URL of the first reverse hop further
  inward, or the engine, and the forward hop is the client's proxy (CONNECT for https). Forward
  hops behind it are its own upstream configuration.
- Headers: the client of a chain sends what every hop from its entry inward needs, so a route's
  headers are the engine's, then each hop's from the innermost to the entry (outer ones win on the
  same name). `${VAR}` is expanded from the environment when the file is read; a missing variable
  is an error naming it. Headers never come from a recording.

Requests go only to the URLs of the chain file: `Route.url_for` keeps only the path and query of a
recorded URL. Pure: the file's text and the environment are passed in.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from proxycheck.core.errors import BadInput

DIRECT = "direct"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Verify = bool | str


@dataclass(frozen=True, slots=True)
class Hop:
    name: str
    url: str | None = None  # a reverse hop's entry point
    proxy: str | None = None  # a forward hop's proxy URL
    headers: tuple[tuple[str, str], ...] = ()
    verify: Verify = True

    @property
    def forward(self) -> bool:
        return self.proxy is not None


@dataclass(frozen=True, slots=True)
class Route:
    """One way to send a request: where to, through which proxy, with which headers."""

    name: str
    base_url: str  # scheme://host:port[/prefix] the requests go to
    proxy: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    verify: Verify = True
    hops: tuple[str, ...] = ()  # the hops this route passes, from its entry inward

    def url_for(self, recorded_url: str) -> str:
        """The URL to send a recorded request to: the route's scheme, host, port and path
        prefix, with the recorded path and query (the recorded host is never used)."""
        rec = urlsplit(recorded_url)
        base = urlsplit(self.base_url)
        path = base.path.rstrip("/") + (rec.path or "/")
        return urlunsplit((base.scheme, base.netloc, path, rec.query, ""))


@dataclass(frozen=True, slots=True)
class Chain:
    engine: str
    engine_headers: tuple[tuple[str, str], ...] = ()
    engine_verify: Verify = True
    hops: tuple[Hop, ...] = field(default=())
    source: str = ""

    def hop(self, name: str) -> Hop:
        for h in self.hops:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hops) or "none"
        raise BadInput(self.source, f"no hop named {name!r} (hops: {known})")

    def ladder(self) -> list[str]:
        """Route names from the engine outward: `direct, via:hops[n-1], ..., via:hops[0]`."""
        return [DIRECT] + [f"via:{h.name}" for h in reversed(self.hops)]

    def route(self, name: str) -> Route:
        if name == DIRECT:
            return Route(DIRECT, self.engine, None, self.engine_headers, self.engine_verify)
        if not name.startswith("via:"):
            raise BadInput(self.source, f"unknown route {name!r} (routes: {', '.join(self.ladder())})")
        entry = self.hop(name[4:])
        index = self.hops.index(entry)
        inner = self.hops[index:]
        headers = _merge(self.engine_headers, *(h.headers for h in reversed(inner)))
        names = tuple(h.name for h in inner)
        if not entry.forward:
            return Route(name, entry.url or "", None, headers, entry.verify, names)
        # A forward hop: the target is the first reverse hop further inward, else the engine.
        target = next((h for h in self.hops[index + 1 :] if not h.forward), None)
        base, verify = (target.url or "", target.verify) if target else (self.engine, self.engine_verify)
        return Route(name, base, entry.proxy, headers, verify, names)

    def routes(self, names: list[str] | None = None) -> list[Route]:
        return [self.route(n) for n in (names or self.ladder())]


def _merge(*groups: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """Headers of several groups, later groups replacing earlier ones of the same name."""
    merged: dict[str, tuple[str, str]] = {}
    for group in groups:
        for name, value in group:
            merged[name.lower()] = (name, value)
    return tuple(merged.values())


def parse_chain(text: str, env: Mapping[str, str], where: str) -> Chain:
    """A chain file's text; BadInput naming the file (and the problem) when it is wrong."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadInput(where, f"not valid TOML ({exc})") from None
    unknown = set(doc) - {"engine", "engine_options", "hop"}
    if unknown:
        raise BadInput(where, f"unknown key(s): {', '.join(sorted(unknown))}")
    engine = _url(doc.get("engine"), where, "engine")
    options = doc.get("engine_options", {})
    if not isinstance(options, dict):
        raise BadInput(where, "engine_options must be a table")
    headers = _headers(options.get("headers", {}), env, where, "engine_options.headers")
    verify = _verify(options.get("verify", True), where, "engine_options.verify")
    raw_hops = doc.get("hop", [])
    if not isinstance(raw_hops, list):
        raise BadInput(where, "hop must be an array of tables ([[hop]])")
    hops = tuple(_hop(h, i, env, where) for i, h in enumerate(raw_hops))
    names = [h.name for h in hops]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BadInput(where, f"hop names must be unique: {', '.join(dupes)}")
    return Chain(engine, headers, verify, hops, where)


def _hop(raw: Any, index: int, env: Mapping[str, str], where: str) -> Hop:
    what = f"hop[{index}]"
    if not isinstance(raw, dict):
        raise BadInput(where, f"{what} must be a table")
    unknown = set(raw) - {"name", "url", "proxy", "headers", "verify"}
    if unknown:
        raise BadInput(where, f"{what}: unknown key(s): {', '.join(sorted(unknown))}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadInput(where, f"{what}: name must be letters, digits, '.', '_' or '-' (got {name!r})")
    what = f"hop {name!r}"
    if ("url" in raw) == ("proxy" in raw):
        raise BadInput(where, f"{what}: give exactly one of url (a reverse hop) or proxy (a forward hop)")
    url = _url(raw["url"], where, f"{what}: url") if "url" in raw else None
    proxy = _url(raw["proxy"], where, f"{what}: proxy") if "proxy" in raw else None
    headers = _headers(raw.get("headers", {}), env, where, f"{what}: headers")
    return Hop(name, url, proxy, headers, _verify(raw.get("verify", True), where, f"{what}: verify"))


def _url(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise BadInput(where, f"{what} must be a URL string")
    parts = urlsplit(value)
    try:
        _ = parts.port  # raises for a port out of range
    except ValueError:
        raise BadInput(where, f"{what}: bad port in {value!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(where, f"{what} must be an http:// or https:// URL with a host (got {value!r})")
    return value


def _headers(value: Any, env: Mapping[str, str], where: str, what: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, dict):
        raise BadInput(where, f"{what} must be a table of name = value")
    out = []
    for name, raw in value.items():
        if not isinstance(raw, str):
            raise BadInput(where, f"{what}.{name} must be a string")
        out.append((name, _expand(raw, env, where, f"{what}.{name}")))
    return tuple(out)


def _expand(text: str, env: Mapping[str, str], where: str, what: str) -> str:
    def value(match: re.Match[str]) -> str:
        var = match.group(1)
        if var not in env:
            raise BadInput(where, f"{what} uses ${{{var}}}, which is not set in the environment")
        return env[var]

    return _VAR.sub(value, text)


def _verify(value: Any, where: str, what: str) -> Verify:
    if isinstance(value, bool) or (isinstance(value, str) and value):
        return value
    raise BadInput(where, f"{what} must be true, false or the path of a CA file")
