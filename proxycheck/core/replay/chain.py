"""The chain file: the engine, the hops in front of it, the routes a replay can take, and where recorders stand.

    engine = "http://127.0.0.1:30000"
    [engine_options]
    headers = { Authorization = "Bearer ${ENGINE_API_KEY}" }
    verify = true                     # true | false | "path/to/ca.pem"
    point = "inner"                   # a recorder just in front of the engine
    [[hop]]                           # listed from the client inward
    name = "corp"
    proxy = "http://127.0.0.1:3128"   # a forward hop
    point = ["client", "client-2"]    # recorders just in front of (client side of) this hop
    [[hop]]
    name = "edge"
    url = "http://127.0.0.1:8080"     # a reverse hop
    headers = { "x-api-key" = "${EDGE_KEY}" }
    query = { key = "${EDGE_KEY}" }   # a query parameter the recording holds redacted

Points: `point` names the recorders (proxycheck's addon) standing at a place of the chain, for
`proxycheck trace`. Position i is in front of hops[i], position len(hops) in front of the engine;
the hops between an outer point at i and an inner one at j are hops[i:j] (`Chain.hops_between`).
Point names are unique in the file.

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
- Query parameters: `query` supplies the value of a parameter the recorded query carries (a key
  the recorder redacted, say), merged as headers are; the rest of the recorded query is sent byte
  for byte (`Route.url_for`).
- Userinfo (`http://user:pw@host`) becomes Basic authorization on the routes whose requests go to
  that URL (Proxy-Authorization for a forward hop's proxy, as the clients do), and is never shown:
  not in messages, not in a run's `chain` (`Chain.to_doc`). A route that would also send an
  Authorization (Proxy-Authorization) header from the file is refused: one would silently
  replace the other.

The file is validated whole when it is read, before anything is sent (`parse_chain`): a mistake
in it would otherwise fail every exchange at the client, and those failures would read as the
engine's. Each error names the file and the line of the offending key (tomllib keeps no lines, so
`_KeyLines` finds them in the text).

Requests go only to the URLs of the chain file: `Route.url_for` keeps only the path and query of a
recorded URL. Pure: the file's text and the environment are passed in.
"""

from __future__ import annotations

import base64
import difflib
import json
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any, Mapping, NoReturn, Sequence
from urllib.parse import quote, unquote, unquote_plus, urlsplit, urlunsplit

from proxycheck.core.errors import BadInput
from proxycheck.core.protocol.httpsyntax import HEADER_NAME, value_problem_at
from proxycheck.core.recording.journal import POINT_NAME

DIRECT = "direct"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# A point's name as the recorder takes it (an address such as "127.0.0.1:8080" or "[::1]:8080" passes).
POINT_NAME_MAX = 64  # the rule is the recordings' (`journal.POINT_NAME`): a chain file names the same points

Verify = bool | str
Pairs = tuple[tuple[str, str], ...]
#: How a value the chain file supplies is shown (a dry run's URLs): never the value itself.
SUPPLIED_SHOWN = "[from chain file]"


@dataclass(frozen=True, slots=True)
class Hop:
    name: str
    url: str | None = None  # a reverse hop's entry point, without userinfo
    proxy: str | None = None  # a forward hop's proxy URL (userinfo kept: the client sends it to the proxy)
    headers: Pairs = ()
    verify: Verify = True
    line: int | None = field(default=None, compare=False)  # where the file names it, for messages
    query: Pairs = ()  # query parameters supplied to the routes entering at or outside this hop
    url_auth: str | None = field(default=None, repr=False)  # Basic authorization from `url`'s userinfo

    @property
    def forward(self) -> bool:
        return self.proxy is not None

    @property
    def socks(self) -> bool:
        """A forward hop that is a SOCKS5 proxy (`socks5://`, `socks5h://`), not an HTTP one."""
        return is_socks(self.proxy)


@dataclass(frozen=True, slots=True)
class Route:
    """One way to send a request: where to, through which proxy, with which headers."""

    name: str
    base_url: str  # scheme://host:port[/prefix] the requests go to (never userinfo)
    proxy: str | None = None  # may hold userinfo: show `shown_proxy`
    headers: Pairs = ()
    verify: Verify = True
    hops: tuple[str, ...] = ()  # the hops this route passes, from its entry inward
    query: Pairs = ()  # parameters whose recorded values the route replaces

    def url_for(self, recorded_url: str, *, shown: bool = False) -> str:
        """The URL to send a recorded request to: the route's scheme, host, port and path
        prefix, with the recorded path and query (the recorded host is never used), the values
        of the route's `query` parameters put in. `shown`: as a listing may print it, the
        supplied values as SUPPLIED_SHOWN."""
        rec = urlsplit(recorded_url)
        base = urlsplit(self.base_url)
        path = base.path.rstrip("/") + (rec.path or "/")
        query = supply_query(rec.query, self.query, shown=shown)
        return urlunsplit((base.scheme, base.netloc, path, query, ""))

    @property
    def shown_proxy(self) -> str | None:
        """The proxy URL as it may be shown: userinfo hidden."""
        return hide_userinfo(self.proxy) if self.proxy else None

    @property
    def socks(self) -> bool:
        """The route's proxy is a SOCKS5 proxy: the client's connector, not its HTTP proxy support."""
        return is_socks(self.proxy)


SOCKS_SCHEMES = ("socks5", "socks5h")  # socks5h: the proxy resolves the target's name


def is_socks(proxy: str | None) -> bool:
    """`proxy` (a chain file's proxy URL) is a SOCKS5 proxy's."""
    return proxy is not None and re.match(r"(?i)socks5h?://", proxy) is not None


def supply_query(raw: str, supplied: Pairs, *, shown: bool = False) -> str:
    """`raw` (a recorded query) with the values of the `supplied` parameters (names matched as
    the recorder redacts them: decoded, case-insensitive) replaced; every other byte as it was.
    A parameter the recorded query does not carry is not added: the client never sent it."""
    if not supplied or not raw:
        return raw
    values = {name.lower(): value for name, value in supplied}
    pieces = raw.split("&")
    for index, piece in enumerate(pieces):
        name, sep, _ = piece.partition("=")
        value = values.get(unquote_plus(name).lower())
        if value is not None:
            pieces[index] = f"{name}={SUPPLIED_SHOWN if shown else quote(value, safe='')}"
    return "&".join(pieces)


@dataclass(frozen=True, slots=True)
class Chain:
    engine: str  # without userinfo
    engine_headers: Pairs = ()
    engine_verify: Verify = True
    hops: tuple[Hop, ...] = field(default=())
    source: str = ""
    engine_query: Pairs = ()
    engine_auth: str | None = field(default=None, repr=False)  # Basic authorization from `engine`'s userinfo
    # Where the file places recorders: (name, position), in the order the file gives them. Position
    # i is in front of (client side of) hops[i]; len(hops) is in front of the engine.
    points: tuple[tuple[str, int], ...] = ()

    def point_position(self, name: str) -> int | None:
        """Where point `name` stands (see `points`); None for a point the file does not place."""
        return next((position for point, position in self.points if point == name), None)

    def hops_between(self, outer: int, inner: int) -> tuple[str, ...]:
        """The names of the hops between two positions: hops[outer:inner] (none when they are the
        same place). Given the other way round, the same hops: a segment spans them either way."""
        for position in (outer, inner):
            if not 0 <= position <= len(self.hops):
                raise ValueError(f"position {position} is not in the chain (0..{len(self.hops)})")
        low, high = sorted((outer, inner))
        return tuple(h.name for h in self.hops[low:high])

    def socks_hops(self) -> frozenset[str]:
        """The names of the hops that are SOCKS5 proxies (their failures get advice of their own)."""
        return frozenset(h.name for h in self.hops if h.socks)

    def hop(self, name: str) -> Hop:
        for h in self.hops:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in self.hops) or "none"
        raise BadInput(self.source, f"no hop named {name!r} (hops: {known})")

    def ladder(self) -> list[str]:
        """Route names from the engine outward: `direct, via:hops[n-1], ..., via:hops[0]`."""
        return ladder_of_hops([h.name for h in self.hops])

    def to_doc(self) -> dict[str, Any]:
        """The chain as a run's run.json keeps it: URLs without userinfo, header and query NAMES
        only (values may be credentials). `doc_ladder` and `doc_hops_by_route` read it back."""
        doc: dict[str, Any] = {
            "source": self.source,
            "engine": self.engine,
            "engine_headers": [n for n, _ in self.engine_headers],
            "hops": [
                {"name": h.name, "url": h.url, "proxy": hide_userinfo(h.proxy) if h.proxy else None,
                 "headers": [n for n, _ in h.headers], **({"query": [n for n, _ in h.query]} if h.query else {})}
                for h in self.hops
            ],  # fmt: skip
        }
        if self.engine_query:
            doc["engine_query"] = [n for n, _ in self.engine_query]
        if self.points:
            doc["points"] = dict(self.points)
        return doc

    def route(self, name: str) -> Route:
        if name == DIRECT:
            return Route(DIRECT, self.engine, None, _with_auth(self.engine_headers, self.engine_auth),
                         self.engine_verify, query=self.engine_query)  # fmt: skip
        if not name.startswith("via:"):
            raise BadInput(self.source, f"unknown route {name!r} (routes: {', '.join(self.ladder())})")
        entry = self.hop(name[4:])
        index = self.hops.index(entry)
        inner = self.hops[index:]
        headers = _merge(self.engine_headers, *(h.headers for h in reversed(inner)))
        query = _merge(self.engine_query, *(h.query for h in reversed(inner)))
        names = hops_of_route([h.name for h in self.hops], name)
        if not entry.forward:
            return Route(name, entry.url or "", None, _with_auth(headers, entry.url_auth), entry.verify, names, query)
        # A forward hop: the target is the first reverse hop further inward, else the engine.
        target = next((h for h in self.hops[index + 1 :] if not h.forward), None)
        if target is not None:
            base, verify, auth = target.url or "", target.verify, target.url_auth
        else:
            base, verify, auth = self.engine, self.engine_verify, self.engine_auth
        return Route(name, base, entry.proxy, _with_auth(headers, auth), verify, names, query)

    def routes(self, names: list[str] | None = None) -> list[Route]:
        return [self.route(n) for n in (names or self.ladder())]


def ladder_of_hops(hop_names: Sequence[str]) -> list[str]:
    """The ladder of a chain whose hops, client inward, are `hop_names`."""
    return [DIRECT] + [f"via:{n}" for n in reversed(hop_names)]


def hops_of_route(hop_names: Sequence[str], route: str) -> tuple[str, ...]:
    """The hops `route` passes, from its entry inward (none for direct or an unknown hop)."""
    if route.startswith("via:") and route[4:] in hop_names:
        return tuple(hop_names[list(hop_names).index(route[4:]) :])
    return ()


def _doc_hop_names(chain_doc: Mapping[str, Any]) -> list[str]:
    return [str(h.get("name")) for h in chain_doc.get("hops", []) if isinstance(h, Mapping)]


def doc_hops_by_route(chain_doc: Mapping[str, Any], routes: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The hops each route passes, from a run's chain document (`Chain.to_doc`)."""
    names = _doc_hop_names(chain_doc)
    return {route: hops_of_route(names, route) for route in routes}


def doc_socks_hops(chain_doc: Mapping[str, Any]) -> frozenset[str]:
    """The hops that are SOCKS5 proxies, from a run's chain document (`Chain.to_doc`)."""
    return frozenset(str(h.get("name")) for h in chain_doc.get("hops", [])
                     if isinstance(h, Mapping) and isinstance(h.get("proxy"), str) and is_socks(h["proxy"]))  # fmt: skip


def doc_ladder(chain_doc: Mapping[str, Any], routes: Sequence[str], where: str) -> list[str]:
    """`direct` first, then the routes of a run from the engine outward, from its chain document;
    BadInput naming `where` for a route the chain does not have."""
    order = ladder_of_hops(_doc_hop_names(chain_doc))
    unknown = [r for r in routes if r not in order]
    if unknown:
        raise BadInput(where, f"routes {', '.join(unknown)} are not in the run's chain")
    return [DIRECT] + [r for r in order[1:] if r in routes]


def _merge(*groups: Pairs) -> Pairs:
    """Headers (or query parameters) of several groups, later groups replacing earlier ones of
    the same name."""
    merged: dict[str, tuple[str, str]] = {}
    for group in groups:
        for name, value in group:
            merged[name.lower()] = (name, value)
    return tuple(merged.values())


def _with_auth(headers: Pairs, auth: str | None) -> Pairs:
    """`headers` and the Authorization a base URL's userinfo gives (parse_chain refused a route
    with both, so neither replaces the other)."""
    return headers + (("Authorization", auth),) if auth else headers


def hide_userinfo(url: str) -> str:
    """A URL as it may be shown: its userinfo, if any, becomes ***."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", r"\1***@", url)


def _split_userinfo(url: str) -> tuple[str, str | None]:
    """The URL without its userinfo, and the Basic authorization value that userinfo gives (as
    httpx and aiohttp would send it: user and password percent-decoded)."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return url, None
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode("utf-8")).decode("ascii")
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), f"Basic {token}"


def parse_chain(text: str, env: Mapping[str, str], where: str) -> Chain:
    """A chain file's text, validated whole before anything is sent.

    BadInput names the file and, where the mistake is in the text, its line (`chain.toml:7: ...`):
    a key no table knows, a header a client cannot send (name not an HTTP token, given twice, or
    one the client sets itself; value with a line break, a control character, a non-ASCII
    character or surrounding whitespace, also once `${VAR}` is expanded, naming the variable; a
    variable unset or empty), a bad `query` table, a URL without an http(s) scheme, a host or a
    valid port, a bad `verify`, a bad or repeated hop name, userinfo in a URL whose route also
    sends an Authorization header, a bad `point` or a point name given twice. Such a chain would
    otherwise fail every exchange at the client, and the failures would read as the engine's."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(exc, text, where) from None
    check = _Checker(text, env, where)
    check.keys(doc, (), _TOP_KEYS, "")
    if "engine" not in doc:
        raise BadInput(where, 'no engine: give engine = "http://HOST:PORT", the inference engine\'s URL')
    engine, engine_auth = _split_userinfo(check.url(doc["engine"], (), "engine", "engine", reverse=True))
    options = doc.get("engine_options", {})
    if not isinstance(options, dict):
        check.fail((), ("engine_options",), "engine_options must be a table ([engine_options])")
    check.keys(options, ("engine_options",), _OPTION_KEYS, "engine_options")
    headers = check.headers(options.get("headers", {}), ("engine_options",), "engine_options")
    query = check.query(options.get("query", {}), ("engine_options",), "engine_options")
    verify = check.verify(options.get("verify", True), ("engine_options",), "engine_options")
    engine_points = check.points(options, ("engine_options",), "engine_options")
    placed: list[tuple[str, int, tuple[str | int, ...]]] = []  # (name, position, its table) of every point
    raw_hops = doc.get("hop", [])
    if not isinstance(raw_hops, list):
        check.fail((), ("hop",), "hop must be an array of tables ([[hop]], one per hop)")
    hops: list[Hop] = []
    for index, raw in enumerate(raw_hops):
        hop = check.hop(raw, index)
        if any(h.name == hop.name for h in hops):
            check.fail(("hop", index), ("name",), f"hop names must be unique: {hop.name} is given twice")
        hops.append(hop)
        placed += [(name, index, ("hop", index)) for name in check.points(raw, ("hop", index), f"hop {_quote(hop.name)}")]
    placed += [(name, len(hops), ("engine_options",)) for name in engine_points]
    points = check.unique_points(placed)
    chain = Chain(engine, headers, verify, tuple(hops), where, query, engine_auth, points)
    check.credentials_once(chain)
    return chain


# --------------------------------------------------------------------------------------------
# Validation

_TOP_KEYS = ("engine", "engine_options", "hop")
_OPTION_KEYS = ("headers", "query", "verify", "point")
_HOP_KEYS = ("name", "url", "proxy", "headers", "query", "verify", "point")
_TOKEN = HEADER_NAME  # RFC 9110 5.6.2: a field name is a token
# Headers the client sets for each connection and body (RFC 9110 7.6.1, and the framing of the
# body): one given in the chain file would contradict the client's own and break every request
# on the route, or be refused outright by HTTP/2.
_CLIENT_OWNED = frozenset(
    {"connection", "content-length", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)
# A host as RFC 3986 allows it outside brackets (registered name or IPv4); non-ASCII letters pass
# for internationalized names, which the clients encode.
_HOST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=%")


class _Checker:
    """The checks of one chain file, each error located in its text."""

    def __init__(self, text: str, env: Mapping[str, str], where: str) -> None:
        self.lines = _KeyLines(text)
        self.env = env
        self.where = where

    def fail(self, table: tuple[str | int, ...], keys: tuple[str, ...], message: str) -> NoReturn:
        line = self.line(table, keys)
        raise BadInput(f"{self.where}:{line}" if line else self.where, message)

    def line(self, table: tuple[str | int, ...], keys: tuple[str, ...]) -> int | None:
        line = self.lines.line_of(table, keys)
        if line is None and table:
            # A table written inline (`engine_options = { ... }`, `hop = [{ ... }]`): its keys are
            # searched from the line that starts it; an inline array's items are not told apart.
            inline = (table[0],) + keys if len(table) == 1 else (table[0],)
            line = self.lines.line_of((), inline)
        return line

    def keys(self, value: dict[str, Any], table: tuple[str | int, ...], known: tuple[str, ...], what: str) -> None:
        """Every key of a table is one it knows: a misspelt key would otherwise be ignored."""
        for key in value:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                hint = f'did you mean "{close[0]}"?' if close else f"known: {', '.join(known)}"
                self.fail(table, (key,), f"{_prefix(what)}unknown key {_quote(key)} ({hint})")

    def hop(self, raw: Any, index: int) -> Hop:
        table = ("hop", index)
        if not isinstance(raw, dict):
            self.fail((), ("hop",), f"hop[{index}] must be a table ([[hop]])")
        name = raw.get("name")
        named = isinstance(name, str) and _NAME.match(name) is not None
        what = f"hop {_quote(name)}" if named else f"hop[{index}]"
        self.keys(raw, table, _HOP_KEYS, what)
        if not named:
            got = "no name" if name is None else "got " + (_quote(name) if isinstance(name, str) else repr(name))
            self.fail(table, ("name",), f"{what}: name must be letters, digits, '.', '_' or '-', starting with a "
                                        f"letter or digit ({got})")  # fmt: skip
        if ("url" in raw) == ("proxy" in raw):
            self.fail(table, (), f"{what}: give exactly one of url (a reverse hop) or proxy (a forward hop)")
        url = self.url(raw["url"], table, "url", f"{what}: url", reverse=True) if "url" in raw else None
        url, url_auth = _split_userinfo(url) if url is not None else (None, None)
        proxy = self.proxy(raw["proxy"], table, f"{what}: proxy") if "proxy" in raw else None
        headers = self.headers(raw.get("headers", {}), table, what)
        query = self.query(raw.get("query", {}), table, what)
        verify = self.verify(raw.get("verify", True), table, what)
        return Hop(name, url, proxy, headers, verify, line=self.lines.line_of(table, ("name",)), query=query,
                   url_auth=url_auth)  # fmt: skip

    def query(self, value: Any, table: tuple[str | int, ...], what: str) -> Pairs:
        """`query = { name = "value" }`: parameters whose recorded values a route replaces
        (percent-encoded when sent, so any text goes; `${VAR}` expanded as in headers)."""
        if not isinstance(value, dict):
            self.fail(table, ("query",), f"{what}: query must be a table of name = value")
        seen: set[str] = set()
        out = []
        for name, raw in value.items():

            def bad(problem: str) -> NoReturn:
                self.fail(table, ("query", name), f"{what}: {problem}")

            if not name or any(not c.isprintable() for c in name):
                bad(f"query parameter name {_quote(name)} is empty or has a control character in it")
            if name.lower() in seen:
                bad(f"query parameter {_quote(name)} is given twice (names are matched case-insensitively)")
            if not isinstance(raw, str):
                bad(f"query parameter {_quote(name)}: the value must be a string (in quotes)")
            expanded, problem = self.expand(raw, header=False)
            if problem:
                bad(f"query parameter {_quote(name)}: {problem}")
            seen.add(name.lower())
            out.append((name, expanded))
        return tuple(out)

    def points(self, raw: dict[str, Any], table: tuple[str | int, ...], what: str) -> tuple[str, ...]:
        """The names of `point = "NAME"` (or a list of names): the recorders standing at this place."""
        if "point" not in raw:
            return ()
        value = raw["point"]

        def bad(problem: str) -> NoReturn:
            self.fail(table, ("point",), f"{what}: {problem}")

        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list):
            bad(f"point must be a name or a list of names, in quotes (got {_shown_value(value)})")
        odd = next((n for n in names if not isinstance(n, str)), None)
        if odd is not None:
            bad(f"point must be a name or a list of names, in quotes (got a list holding {_shown_value(odd)})")
        if not names:
            bad('point = [] names no point: give a name, a list of names (point = ["a", "b"]), or no point key')
        for name in names:
            if len(name) > POINT_NAME_MAX:
                bad(f"point name {_quote(name[:20])}... is {len(name)} characters long (at most {POINT_NAME_MAX})")
            if not POINT_NAME.fullmatch(name):
                odd_char = next((c for c in name if not POINT_NAME.fullmatch(c)), "")
                problem = f"has {_quote(odd_char)} in it" if name else "is empty"
                bad(f"point name {_quote(name)} {problem} (a point name is 1-{POINT_NAME_MAX} characters: letters, digits and "
                    ". _ : @ [ ] -)")  # fmt: skip
        return tuple(names)

    def unique_points(self, placed: list[tuple[str, int, tuple[str | int, ...]]]) -> tuple[tuple[str, int], ...]:
        """The points (name, position) in the order the file gives them; a name given twice, in one
        place or two, is refused at its second line (a recording is one point: it has one place)."""
        # The engine's options may come before the hops in the text: order by the line of each `point`.
        ordered = sorted(enumerate(placed), key=lambda item: (self.line(item[1][2], ("point",)) or 0, item[0]))
        seen: dict[str, tuple[int, int | None]] = {}  # name: (position, line)
        for _, (name, position, table) in ordered:
            line = self.line(table, ("point",))
            if name in seen:
                first = seen[name][1]
                self.fail(table, ("point",), f"point names must be unique: {name} is given twice"
                                             + (f" (first at line {first})" if first and first != line else ""))  # fmt: skip
            seen[name] = (position, line)
        return tuple((name, position) for name, (position, _) in seen.items())

    def credentials_once(self, chain: Chain) -> None:
        """Userinfo in a URL becomes that route's Authorization (Proxy-Authorization for a
        proxy): refused where the route also sends that header from the file, since the clients
        would silently let one replace the other."""
        for name in chain.ladder():
            route = chain.route(name)
            sent = [n.lower() for n, _ in route.headers]
            if sent.count("authorization") > 1:
                self._refuse_userinfo(chain, route, "authorization")
            # A SOCKS proxy gets its user and password in its own handshake, never as a header.
            if route.proxy and not route.socks and "@" in urlsplit(route.proxy).netloc and "proxy-authorization" in sent:
                self._refuse_userinfo(chain, route, "proxy-authorization")

    def _refuse_userinfo(self, chain: Chain, route: Route, header: str) -> NoReturn:
        entry = chain.hop(route.name[4:]) if route.name != DIRECT else None
        if header == "proxy-authorization":
            assert entry is not None
            table: tuple[str | int, ...] = ("hop", chain.hops.index(entry))
            key, what = "proxy", f"hop {_quote(entry.name)}: proxy"
        else:
            owner = entry
            if entry is not None and entry.forward:
                index = chain.hops.index(entry)
                owner = next((h for h in chain.hops[index + 1 :] if not h.forward), None)
            if owner is None:
                table, key, what = (), "engine", "engine"
            else:
                table, key, what = ("hop", chain.hops.index(owner)), "url", f"hop {_quote(owner.name)}: url"
        givers = [("engine_options", chain.engine_headers)] + [
            (f"hop {_quote(h.name)}", h.headers) for h in chain.hops if h.name in route.hops
        ]
        given = [who for who, headers in givers if any(n.lower() == header for n, _ in headers)]
        shown = header.title() if header == "authorization" else "Proxy-Authorization"
        self.fail(table, (key,), f"{what} has userinfo (user:password@) in it, and route {route.name} also sends the "
                                 f"{shown} header from {', '.join(given)}: give one or the other (userinfo is "
                                 f"sent as Basic {shown.lower()}, which would replace the header)")  # fmt: skip

    def proxy(self, value: Any, table: tuple[str | int, ...], what: str) -> str:
        """A forward hop's proxy: an HTTP proxy's URL, or a SOCKS5 proxy's (`socks5://` or
        `socks5h://`, with its port, nothing after it, and its user and password, if any, from
        `${VAR}` as header values are: percent-encoded here, since the clients decode them)."""
        schemes = ("http", "https") + SOCKS_SCHEMES
        if not (isinstance(value, str) and is_socks(value) and "@" in value):
            value = self.url(value, table, "proxy", what, reverse=False, schemes=schemes)
            return value if not is_socks(value) else self._socks_parts(value, table, what)
        scheme, _, rest = value.partition("://")
        userinfo, _, address = rest.rpartition("@")
        _, problem = self.expand(userinfo, header=False)
        if problem:
            self.fail(table, ("proxy",), f"{what}: {problem}")
        # A variable's value may hold any character: encoded, so that it stays user or password.
        userinfo = _VAR.sub(lambda m: quote(self.env[m.group(1)], safe=""), userinfo)
        if any(len(unquote(part).encode()) > 255 for part in userinfo.split(":", 1)):  # RFC 1929: a byte of length
            self.fail(table, ("proxy",), f"{what}: a SOCKS5 user or password is at most 255 bytes")
        shown = f"{scheme}://***@{address}"
        self.url(f"{scheme}://{address}", table, "proxy", what, reverse=False, schemes=schemes, shown=shown)
        return self._socks_parts(f"{scheme}://{userinfo}@{address}", table, what)

    def _socks_parts(self, value: str, table: tuple[str | int, ...], what: str) -> str:
        """A SOCKS5 proxy URL names a proxy and nothing more: its port (there is no default the
        clients agree on), no path, query or fragment."""
        parts = urlsplit(value)
        if parts.port is None:
            self.fail(table, ("proxy",), f"{what} must give the SOCKS proxy's port ({parts.scheme}://HOST:PORT; "
                                         f"got {_quote(hide_userinfo(value))})")  # fmt: skip
        if parts.path not in ("", "/") or parts.query or parts.fragment or value.endswith(("?", "#")):
            self.fail(table, ("proxy",), f"{what} must be {parts.scheme}://HOST:PORT with nothing after it "
                                         f"(got {_quote(hide_userinfo(value))})")  # fmt: skip
        return value

    def url(self, value: Any, table: tuple[str | int, ...], key: str, what: str, *, reverse: bool,
            schemes: tuple[str, ...] = ("http", "https"), shown: str | None = None) -> str:  # fmt: skip
        """A URL of one of `schemes` with a host and a valid port. `reverse`: requests go to it,
        with the recorded path and query appended, so a query or fragment of its own would be
        lost. `shown`: how to show it (default: userinfo hidden)."""

        def bad(problem: str) -> NoReturn:
            self.fail(table, (key,), f"{what} {problem}")

        if not isinstance(value, str):
            bad("must be a URL string")
        shown = _quote(shown or hide_userinfo(value))
        if any(c.isspace() or not c.isprintable() for c in value):
            bad(f"has whitespace or a control character in it ({shown})")
        try:
            parts = urlsplit(value)
            port, host = parts.port, parts.hostname  # .port raises for a port out of range
        except ValueError as exc:
            unparsed = str(exc)
        else:
            unparsed = ""
        if unparsed:
            bad(f"is not a valid URL: {shown} ({unparsed[:1].lower()}{unparsed[1:]})")
        if parts.scheme not in schemes or not host:
            names = [f"{scheme}://" for scheme in schemes]
            bad(f"must be an {', '.join(names[:-1])} or {names[-1]} URL with a host (got {shown})")
        if port == 0:
            bad(f"has a bad port in {shown} (give one from 1 to 65535, or none)")
        if not parts.netloc.rpartition("@")[2].startswith("[") and not all(c in _HOST_CHARS or c.isalnum() for c in host):
            bad(f"has a host that is not a host name or address ({shown})")
        if reverse and (parts.query or parts.fragment or value.endswith(("?", "#"))):
            bad(f"must not have a query or fragment: requests go to it with the recorded path and query ({shown})")
        return value

    def headers(self, value: Any, table: tuple[str | int, ...], what: str) -> tuple[tuple[str, str], ...]:
        if not isinstance(value, dict):
            self.fail(table, ("headers",), f"{what}: headers must be a table of name = value")
        seen: set[str] = set()
        out = []
        for name, raw in value.items():
            out.append(self.header(name, raw, seen, table, what))
            seen.add(name.lower())
        return tuple(out)

    def header(self, name: str, raw: Any, seen: set[str], table: tuple[str | int, ...], what: str) -> tuple[str, str]:
        """One header as the client will send it; `seen`: the lower-cased names before it."""

        def bad(problem: str) -> NoReturn:
            self.fail(table, ("headers", name), f"{what}: {problem}")

        if not name:
            bad("a header name is empty")
        if not _TOKEN.fullmatch(name):
            bad(f"header name {_quote(name)} is not a valid HTTP token ({_token_problem(name)})")
        if name.lower() in _CLIENT_OWNED:
            bad(f"header {_quote(name)} is the client's to set (it describes the connection or frames the body); "
                "remove it")  # fmt: skip
        if name.lower() in seen:
            bad(f"header {_quote(name)} is given twice (header names are case-insensitive)")
        if not isinstance(raw, str):
            bad(f"header {_quote(name)}: the value must be a string (in quotes)")
        value, problem = self.expand(raw)
        if problem:
            bad(f"header {_quote(name)}: {problem}")
        return name, value

    def expand(self, text: str, *, header: bool = True) -> tuple[str, str | None]:
        """`text` with `${VAR}` expanded, and what makes it an invalid header value (`header`;
        else only an unset or empty variable is a problem), if anything.

        The value itself is never shown (it is usually a credential): the problem names the
        variable the offending character came from, else "the value" (as the file writes it)."""
        pieces: list[str] = []
        spans: list[tuple[int, int, str]] = []  # where each variable's value landed
        at = 0
        length = 0
        for match in _VAR.finditer(text):
            var = match.group(1)
            if var not in self.env:
                return "", f"${{{var}}} is not set in the environment"
            if not self.env[var]:
                return "", f"${{{var}}} is empty in the environment"
            literal = text[at : match.start()]
            pieces += [literal, self.env[var]]
            spans.append((length + len(literal), length + len(literal) + len(self.env[var]), var))
            length += len(literal) + len(self.env[var])
            at = match.end()
        pieces.append(text[at:])
        value = "".join(pieces)
        if not header:
            return value, None

        def source(position: int) -> str:
            for start, end, var in spans:
                if start <= position < end:
                    return f"${{{var}}}"
            return "the value"

        found = value_problem_at(value)
        if found is not None:
            position, problem = found
            return value, f"{source(position)} {problem}"
        return value, None

    def verify(self, value: Any, table: tuple[str | int, ...], what: str) -> Verify:
        if isinstance(value, bool) or (isinstance(value, str) and value and value.isprintable()):
            return value
        self.fail(table, ("verify",), f"{_prefix(what)}verify must be true, false or the path of a CA file")


def _shown_value(value: Any) -> str:
    """A TOML value of the wrong type, as a message may show it (one line, short)."""
    kind = {bool: "a boolean", int: "a number", float: "a number", dict: "a table", list: "a list"}.get(type(value))
    return kind or f"a {type(value).__name__}"


def _prefix(what: str) -> str:
    return f"{what}: " if what else ""


def _quote(text: str) -> str:
    """`text` in double quotes, on one line: what cannot be printed is escaped."""
    inner = "".join(
        c if c.isprintable() and c not in '"\\' else ("\\" + c if c in '"\\' else json.dumps(c)[1:-1])
        for c in text
    )
    return f'"{inner}"'


def _token_problem(name: str) -> str:
    if " " in name:
        return "no spaces"
    bad = next(c for c in name if not _TOKEN.fullmatch(c))
    return f"{_quote(bad)} is not allowed; letters, digits and !#$%&'*+-.^_`|~ are"


def _toml_error(exc: tomllib.TOMLDecodeError, text: str, where: str) -> BadInput:
    """tomllib's message as one line, its line number moved next to the file's name."""
    message = str(exc)
    found = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", message, re.DOTALL)
    if found:
        return BadInput(f"{where}:{found.group(2)}", f"not valid TOML: {found.group(1)} (column {found.group(3)})")
    if message.endswith("(at end of document)"):
        last = text.rstrip().count("\n") + 1
        return BadInput(f"{where}:{last}", f"not valid TOML: {message[: -len('(at end of document)')].strip()} "
                                           "(at the end of the file)")  # fmt: skip
    return BadInput(where, f"not valid TOML: {message}")


# --------------------------------------------------------------------------------------------
# Lines of keys (tomllib keeps none)


@dataclass(frozen=True, slots=True)
class _Line:
    number: int
    table: tuple[str | int, ...]  # the table the line belongs to: () top level, ("hop", 1) ...
    header: bool  # a [table] or [[array]] header: `table` is the one it opens
    alone: dict[str, Any] | None  # what the line defines, read on its own; None: not TOML on its own
    text: str  # the line with its string values blanked, for lines that are not TOML on their own


class _KeyLines:
    """Where a table or key of a TOML document is defined: good enough for error messages.

    Tables are named as their values are reached: `()` is the top level, `("engine_options",)`,
    `("hop", 1)` the second `[[hop]]`, `("hop", 1, "headers")` a `[hop.headers]` under it. A key is
    found at the first line, at or after its table's header, that defines it (`key =`, a dotted
    `key.sub =`, inside an inline table, or a sub-table header); each further key is searched
    from the line of the one before. Each line is read by tomllib on its own, so keys match as
    TOML spells them (quotes, escapes); lines that are not TOML alone (inside a multi-line
    array) are matched by their text. An error then names the nearest line found, or none."""

    _VALUE = re.compile(r"=\s*(\"(?:[^\"\\]|\\.)*\"|'[^']*')")

    def __init__(self, text: str) -> None:
        self.lines: list[_Line] = []
        arrays: dict[tuple[str, ...], int] = {}  # how many [[path]] so far
        table: tuple[str | int, ...] = ()
        # Lines end at LF only, as TOML's do (str.splitlines would also split at U+0085, U+2028 ...).
        for number, raw in enumerate(text.split("\n"), start=1):
            raw = raw.removesuffix("\r")
            try:
                alone: dict[str, Any] | None = tomllib.loads(raw)
            except tomllib.TOMLDecodeError:
                alone = None
            header = self._header(alone) if alone is not None and raw.lstrip().startswith("[") else None
            if header is not None:
                path, is_array = header
                table = self._table(path[:-1], arrays) + (path[-1],)
                if is_array:
                    arrays[path] = arrays.get(path, 0) + 1
                    table += (arrays[path] - 1,)
                self.lines.append(_Line(number, table, True, {}, ""))
            else:
                self.lines.append(_Line(number, table, False, alone, self._VALUE.sub('= ""', raw)))

    @staticmethod
    def _header(alone: dict[str, Any]) -> tuple[tuple[str, ...], bool] | None:
        """The path of the header a line holds on its own (`[a.b]`: {"a": {"b": {}}}), and
        whether it is an array's (`[[a]]`: {"a": [{}]})."""
        path: list[str] = []
        node: Any = alone
        while isinstance(node, dict) and len(node) == 1:
            key, node = next(iter(node.items()))
            path.append(key)
        if not path or not (node == {} or node == [{}]):
            return None
        return tuple(path), node == [{}]

    @staticmethod
    def _table(path: tuple[str, ...], arrays: dict[tuple[str, ...], int]) -> tuple[str | int, ...]:
        """A header's dotted path as a table name: an array's segment is followed by its last index."""
        table: tuple[str | int, ...] = ()
        for end in range(1, len(path) + 1):
            table += (path[end - 1],)
            if path[:end] in arrays:
                table += (arrays[path[:end]] - 1,)
        return table

    def line_of(self, table: tuple[str | int, ...], keys: tuple[str, ...]) -> int | None:
        """The line of `keys` (successive keys, e.g. ("headers", "x-api-key")) in `table`; the
        line of the last one found (or of the table's header) when one is not; None for none."""
        # The top level owns its lines before the first header, and every header names one of its keys.
        owned = [
            line for line in self.lines
            if line.table[: len(table)] == table and (table or line.table == () or line.header)
        ]  # fmt: skip
        found = next((line.number for line in owned if line.header and line.table == table), None)
        current = table
        for key in keys:
            hit = next((i for i, line in enumerate(owned) if self._defines(line, current, key)), None)
            if hit is None:
                break
            found = owned[hit].number
            owned = owned[hit:]
            current += (key,)
        return found

    @staticmethod
    def _defines(line: _Line, table: tuple[str | int, ...], key: str) -> bool:
        if line.header:
            # A header of a sub-table of `table` named `key`: [hop.headers] defines the hop's headers.
            return len(line.table) > len(table) and line.table[: len(table)] == table and line.table[len(table)] == key
        if line.alone is not None:
            # The line's keys belong to its own table; `table` may be a table within it (inline).
            if line.table != table[: len(line.table)]:
                return False
            node: Any = line.alone
            for part in table[len(line.table) :]:
                if not isinstance(node, dict) or part not in node:
                    return False
                node = node[part]
            return isinstance(node, dict) and key in node
        forms = [re.escape(json.dumps(key, ensure_ascii=False)), re.escape(f"'{key}'")]
        if re.fullmatch(r"[A-Za-z0-9_-]+", key):
            forms.append(re.escape(key) + r"(?![A-Za-z0-9_-])")
        return re.search(rf"(?:^|[{{,.])\s*(?:{'|'.join(forms)})\s*[=.]", line.text) is not None

