"""The recording format, version 1: what the recorder journals and the loader rebuilds.

A recording is a directory:

    recording.json   metadata, written once: {"format": 1, "kind": "proxycheck.recording",
                     "started_at": <epoch seconds>, "created": <ISO time>, "proxycheck": <version>,
                     "point": {"name": NAME, "host": HOSTNAME}}  (`point`: the recorder that made it)
    journal.jsonl    append-only, one JSON record a line, in the order things happened
    blobs/<id>       pieces too large for a journal line (raw bytes, written before they are used)

Journal records (`k` is the kind; `x` the exchange number; `t` seconds since `started_at`):

    {"k":"blob","id":ID,"v":TEXT}                a piece of request content (or "b64" for bytes)
    {"k":"req","x":N,"t":T,"method":..,"url":..,"http":..,"headers":[[name,value],..],
     "body":BODY,"redacted":[..],"conn":{..}}    the request, journaled when it arrives
    {"k":"resp","x":N,"t":T,"status":200,"reason":"OK","http":..,"headers":[..],"stream":true,
     "conn":{..}}                                 response headers ("timing":false when imported
                                                  from a format without chunk arrival times)
    {"k":"data","x":N,"c":[[T,LEN],..],"v":TEXT} response bytes as they arrived: chunk arrival
                                                  times and sizes, their bytes joined ("b64" when
                                                  not UTF-8)
    {"k":"end","x":N,"t":T}                      the response completed
    {"k":"error","x":N,"t":T,"msg":..}           the exchange failed (reset, timeout ...)
    {"k":"close","t":T,"reason":..,"inflight":[N,..]}  the recorder stopped
    {"k":"ws","x":N,"t":T,"c":true,"v":TEXT}     a WebSocket message of exchange N (its upgrade),
                                                  `c` true from the client ("b64" for binary)
    {"k":"wsclose","x":N,"t":T,"by":..,"code":..,"reason":..}  how its socket ended
                                                  (`proxycheck.core.recording.websocket`)

An exchange with a `req` and neither `end` nor `error` is *in flight*: the evidence of a wedge,
unless the writer could no longer write while it ran: then recording.json lists it under
`write_failures` (`[{"t": T, "message": "No space left on device", "incomplete": [N, ..]}]`,
added atomically by the writer on its first failed write) and it was *not recorded to the end*
(`RecordedExchange.not_recorded`), which says nothing about the traffic. A damaged line that
may have held one of an exchange's records (`RecordedExchange.lost_line`) makes a failure the
loaded exchange shows (in flight, cut short) not recorded to the end as well: a wedge is never
made of a line that cannot be read.
A header value that carried a secret is stored as `{"redacted":true}`.

`point` names the point of observation the recording was made at (the recorder's
`proxycheck_point`, or its listen address `HOST:PORT`; the machine's host name): written with the
metadata, or atomically when a recording without one (an older one) is first appended to. One
recording holds one point; one without `point` is the point named after its directory.

BODY is a request body cut into content-addressed pieces (message-level deduplication, byte-exact
when joined): see `proxycheck.core.recording.bodies`. Its history may build on an earlier exchange's
(`"history": {"base": X, "keep": N, "add": [ids]}`), so a growing session costs O(new messages).

Everything here is pure: records in, records out. File handling is in `proxycheck.io.storage`.
"""

from __future__ import annotations

import base64
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from proxycheck.core.errors import BadInput
from proxycheck.core.recording.bodies import Body, decode_body, is_text, piece_id
from proxycheck.core.recording.redact import REDACTED, Headers, HeaderValue
from proxycheck.core.recording.websocket import WsClose, WsMessage, decode_close, decode_message, is_upgrade

FORMAT = 1
KIND = "proxycheck.recording"
META_FILE = "recording.json"
JOURNAL_FILE = "journal.jsonl"
BLOB_DIR = "blobs"

# Pieces larger than this go to blobs/ so that journal lines stay small and the loader can bound
# the memory one line may take.
INLINE_PIECE_MAX = 1 << 20
# The loader refuses longer journal lines (a writer never produces them).
MAX_LINE = 16 << 20
# Response data records hold at most this many bytes.
DATA_RECORD_MAX = 1 << 20
# Journal times are offsets from `started_at`; one further away than this (about 300 years) is
# damage, not a time (and would overflow the arithmetic and clocks built on it).
MAX_OFFSET = 1e10
# `started_at` is a wall-clock time in epoch seconds, between 1970 and this (the year 5138).
MAX_WALL = 1e11

# --------------------------------------------------------------------------------------------
# Records


def encode_headers(headers: Iterable[tuple[str, HeaderValue]]) -> list[list[Any]]:
    return [[n, {"redacted": True} if v is REDACTED else v] for n, v in headers]


def decode_headers(rec: Any) -> Headers:
    if not isinstance(rec, list):
        raise ValueError("headers is not a list")
    out: list[tuple[str, HeaderValue]] = []
    for item in rec:
        if not (isinstance(item, list) and len(item) == 2 and is_text(item[0])):
            raise ValueError("bad header entry")
        value = item[1]
        if isinstance(value, dict) and value.get("redacted"):
            out.append((item[0], REDACTED))
        elif is_text(value):
            out.append((item[0], value))
        else:
            raise ValueError("bad header value")
    return tuple(out)


def encode_data(chunks: list[tuple[float, bytes]]) -> dict[str, Any]:
    """The fields of a `data` record for these (arrival time, bytes) chunks."""
    joined = b"".join(c for _, c in chunks)
    rec: dict[str, Any] = {"c": [[round(t, 6), len(c)] for t, c in chunks]}
    try:
        rec["v"] = joined.decode("utf-8")
    except UnicodeDecodeError:
        # A chunk may end inside a UTF-8 sequence; the raw bytes are kept exactly.
        rec["b64"] = base64.b64encode(joined).decode("ascii")
    return rec


def decode_payload(rec: Mapping[str, Any]) -> bytes:
    """The bytes of a record that carries `v` (text) or `b64`."""
    if "v" in rec:
        if not isinstance(rec["v"], str):
            raise ValueError("v is not text")
        return rec["v"].encode("utf-8", "surrogateescape")
    if "b64" in rec:
        if not isinstance(rec["b64"], str):
            raise ValueError("b64 is not text")
        return base64.b64decode(rec["b64"], validate=True)  # binascii.Error is a ValueError
    raise ValueError("no v or b64")


def dumps(record: Mapping[str, Any]) -> bytes:
    """One journal line."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


# Encoders: one record of each kind, as the module docstring lists them. The writer
# (`proxycheck.io.storage.RecordingWriter`) decides what to journal and when; what the lines say
# is decided here, beside the `RecordingBuilder` that reads them back. Times are rounded to the
# microsecond, as every journaled time is.


def blob_record(pid: str, data: bytes) -> dict[str, Any]:
    """A piece of request content: its text as `v`, or `b64` when it is not UTF-8."""
    try:
        return {"k": "blob", "id": pid, "v": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"k": "blob", "id": pid, "b64": base64.b64encode(data).decode("ascii")}


def request_record(
    xid: int,
    t: float,
    method: str,
    url: str,
    http_version: str | None,
    headers: Iterable[tuple[str, HeaderValue]],
    body: Mapping[str, Any],
    *,
    redacted: Iterable[str] = (),
    conn: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A request; `body` is its encoded body (`proxycheck.core.recording.bodies.encode_body`)."""
    rec: dict[str, Any] = {"k": "req", "x": xid, "t": round(t, 6), "method": method, "url": url,
                           "http": http_version, "headers": encode_headers(headers), "body": dict(body)}  # fmt: skip
    removed = list(redacted)
    if removed:
        rec["redacted"] = removed
    if conn:
        rec["conn"] = dict(conn)
    return rec


def response_record(
    xid: int,
    t: float,
    status: int,
    reason: str | None,
    headers: Iterable[tuple[str, HeaderValue]],
    *,
    streamed: bool,
    http_version: str | None = None,
    conn: Mapping[str, Any] | None = None,
    chunk_timing: bool = True,
) -> dict[str, Any]:
    """Response headers (`"timing": false` when the chunks that follow carry no arrival times)."""
    rec: dict[str, Any] = {"k": "resp", "x": xid, "t": round(t, 6), "status": status, "reason": reason,
                           "http": http_version, "headers": encode_headers(headers), "stream": streamed}  # fmt: skip
    if conn:
        rec["conn"] = dict(conn)
    if not chunk_timing:
        rec["timing"] = False
    return rec


def data_record(xid: int, chunks: list[tuple[float, bytes]]) -> dict[str, Any]:
    """Response bytes as they arrived (at most DATA_RECORD_MAX of them: the writer splits)."""
    return {"k": "data", "x": xid, **encode_data(chunks)}


def end_record(xid: int, t: float) -> dict[str, Any]:
    return {"k": "end", "x": xid, "t": round(t, 6)}


def error_record(xid: int, t: float, message: str, conn: Mapping[str, Any] | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {"k": "error", "x": xid, "msg": message}
    if conn:
        rec["conn"] = dict(conn)
    rec["t"] = round(t, 6)
    return rec


def close_record(t: float, reason: str, inflight: Iterable[int]) -> dict[str, Any]:
    return {"k": "close", "t": round(t, 6), "reason": reason, "inflight": sorted(inflight)}


# recording.json's list of the times the writer could no longer write (see the module docstring).
WRITE_FAILURES = "write_failures"
# What a damaged line's first bytes still tell: the kind and exchange number its record began with.
_LOST_KIND = re.compile(rb'^\s*\{\s*"k"\s*:\s*"(\w+)"')
_LOST_XID = re.compile(rb'^\s*\{\s*"k"\s*:\s*"\w+"\s*,\s*"x"\s*:\s*(\d{1,12})\b')
NOT_RECORDED_PREFIX = "not recorded to the end: "  # how RecordedExchange.not_recorded begins


def write_failure_entry(t: float, message: str, incomplete: Iterable[int], detail: str | None = None) -> dict[str, Any]:
    """One entry of `write_failures`: from when, why (the system's words), and the exchanges
    that were in flight then, whose records from then on are missing. `detail`, when given, is
    said instead (an exchange copied from a recording that had not recorded it to the end says
    why there)."""
    entry: dict[str, Any] = {"t": round(t, 6), "message": message, "incomplete": sorted(incomplete)}
    if detail is not None:
        entry["detail"] = detail
    return entry


# recording.json's point of observation: {"name": NAME, "host": HOSTNAME}, the recorder that made it
# (see the module docstring). One recording holds one point.
POINT = "point"
POINT_NAME = re.compile(r"[A-Za-z0-9._:@\[\]-]{1,64}")  # "engine-side", "127.0.0.1:8080", "[::1]:8080"


def point_name_problem(name: Any) -> str | None:
    """What is wrong with a point's name (None: nothing), in words that follow the name's place."""
    if isinstance(name, str) and POINT_NAME.fullmatch(name):
        return None
    return f"{name!r} is not a point name (1-64 characters of letters, digits and . _ : @ [ ] -)"


def point_entry(name: str, host: str) -> dict[str, str]:
    """recording.json's `point` member; ValueError for a name the rule refuses (callers check names
    where they are given, so this is a bug, not bad input)."""
    problem = point_name_problem(name)
    if problem is not None or not isinstance(host, str):
        raise ValueError(problem or f"point host {host!r} is not a string")
    return {"name": name, "host": host}


def point_of(meta: Mapping[str, Any], where: str = META_FILE) -> dict[str, str] | None:
    """The point a recording's metadata names (`{"name", "host"}`), None when it names none (an
    older recording, an import: it is the point named after its directory). BadInput at `where`
    when `point` is there but not of that shape: a recording whose point cannot be told is not one
    to append to, nor to match against others."""
    if POINT not in meta:
        return None
    point = meta[POINT]
    if not isinstance(point, dict) or not isinstance(point.get("host"), str) or point_name_problem(point.get("name")):
        raise BadInput(where, f"{POINT} is not {{\"name\": NAME, \"host\": HOST}} with a point name "
                              "(1-64 characters of letters, digits and . _ : @ [ ] -)")  # fmt: skip
    return {"name": point["name"], "host": point["host"]}


# --------------------------------------------------------------------------------------------
# Loaded exchanges


@dataclass(frozen=True, slots=True)
class Connection:
    """Connection facts the recorder saw for one exchange (None where unknown)."""

    client_id: str | None = None
    server_id: str | None = None
    server_reused: bool | None = None
    server_idle: float | None = None
    http_version: str | None = None
    tls: bool | None = None
    peer: str | None = None

    @staticmethod
    def from_record(rec: Any) -> "Connection | None":
        """The facts of a `conn` object; a fact of the wrong type (a damaged line) is unknown."""
        if not isinstance(rec, dict):
            return None
        idle = rec.get("server_idle")
        return Connection(
            client_id=_opt_str(rec.get("client_id")),
            server_id=_opt_str(rec.get("server_id")),
            server_reused=_opt_bool(rec.get("server_reused")),
            server_idle=float(idle) if _is_number(idle) and 0 <= idle <= MAX_OFFSET else None,
            http_version=_opt_str(rec.get("http_version")),
            tls=_opt_bool(rec.get("tls")),
            peer=_opt_str(rec.get("peer")),
        )

    def merged(self, other: "Connection | None") -> "Connection":
        if other is None:
            return self
        names = Connection.__slots__  # type: ignore[attr-defined]
        return Connection(
            **{k: getattr(other, k) if getattr(other, k) is not None else getattr(self, k) for k in names}
        )


@dataclass(frozen=True, slots=True)
class RecordedExchange:
    """One recorded request and what came back (times are offsets from the recording start)."""

    xid: int
    t_request: float
    method: str
    url: str
    http_version: str | None
    request_headers: Headers
    body: Body
    redacted: tuple[str, ...] = ()
    conn: Connection | None = None
    t_response: float | None = None
    status: int | None = None
    reason: str | None = None
    response_headers: Headers = ()
    streamed: bool | None = None
    chunk_timing: bool = True  # False when imported from a format that kept no arrival times
    chunks: tuple[tuple[float, int], ...] = ()
    response_body: bytes = b""
    t_end: float | None = None
    error: str | None = None
    t_error: float | None = None
    interrupted: bool = False
    # Why the recording of this exchange stops short (the writer could no longer write while it
    # was in flight: recording.json's `write_failures`); None when it was recorded as it went.
    not_recorded: str | None = None
    # A damaged journal line that may have held one of its records (its data, its end): what the
    # loaded exchange lacks may be that line, not the traffic. None when no such line.
    lost_line: str | None = None
    # A WebSocket upgrade that was agreed to: the socket's messages both ways, in order, and how
    # it ended (None while it had not: in flight, or the recorder stopped first).
    ws: tuple[WsMessage, ...] = ()
    ws_close: WsClose | None = None

    @property
    def websocket(self) -> bool:
        """A WebSocket session: its upgrade was agreed to (101), or it has messages."""
        return bool(self.ws) or self.ws_close is not None or (self.status == 101 and is_upgrade(self.response_headers))

    @property
    def finished(self) -> bool:
        return self.t_end is not None or self.error is not None

    @property
    def in_flight(self) -> bool:
        return not self.finished

    @property
    def path(self) -> str:
        rest = self.url.split("://", 1)[-1]
        slash = rest.find("/")
        return rest[slash:] if slash >= 0 else "/"

    def timed_chunks(self) -> list[tuple[float, bytes]]:
        """The response as (arrival offset, bytes) chunks, every byte included."""
        out: list[tuple[float, bytes]] = []
        data, pos = self.response_body, 0
        for t, n in self.chunks:
            out.append((t, data[pos : pos + n]))
            pos += n
        if pos < len(data):  # sizes that fall short (a damaged record) lose no bytes
            end = self.chunks[-1][0] if self.chunks else (self.t_response or self.t_request)
            out.append((end, data[pos:]))
        return [(t, c) for t, c in out if c]

    def request_header(self, name: str) -> HeaderValue | None:
        low = name.lower()
        for n, v in self.request_headers:
            if n.lower() == low:
                return v
        return None

    def response_header(self, name: str) -> HeaderValue | None:
        low = name.lower()
        for n, v in self.response_headers:
            if n.lower() == low:
                return v
        return None


def what_is_not_recorded(x: RecordedExchange) -> str | None:
    """Why the recording lacks part of `x` (without NOT_RECORDED_PREFIX), or None: what a copy of
    it (a subset, an export) must say too, or the copy would show a wedge or a cut made of it."""
    if x.not_recorded is not None:
        return x.not_recorded.removeprefix(NOT_RECORDED_PREFIX)
    return x.lost_line


@dataclass(frozen=True, slots=True)
class RecordingWarning:
    """A problem the loader stepped over: `where` is `file:line`."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class _Building:
    """Mutable state of one exchange while its records are replayed; `where` is its request's line."""

    __slots__ = ("fields", "data", "chunks", "where", "ws")

    def __init__(self, fields: dict[str, Any], where: str = "") -> None:
        self.fields = fields
        self.data: list[bytes] = []
        self.chunks: list[tuple[float, int]] = []
        self.where = where
        self.ws: list[WsMessage] = []


class _Dropped(Exception):
    """A record of an exchange whose request was already skipped with a warning: dropped quietly."""


class RecordingBuilder:
    """Rebuilds exchanges from journal records, tolerating damage.

    `add(record, where)` takes one decoded JSON line; a record that does not fit (unknown
    exchange, missing fields, a value of the wrong type or out of range) is skipped with a
    warning naming `where`. When a request record is skipped, so is its exchange: its later
    records are dropped without a warning each (one more says so when a record names an
    exchange whose request line is not in the journal at all), and a later request whose history
    builds on it is skipped too, the warning naming it, unless the skipped request's body was
    whole (a URL that does not parse costs only its own exchange). Pieces are collected so
    bodies can be joined later (a piece whose bytes do not hash to its id is damaged and
    skipped); `where_of(x)` is the line of exchange x's request; `finish()` returns the exchanges
    in request order. A reader that
    follows a journal as it grows asks `take_changed()` instead: only the exchanges the records
    added since it last asked changed, so it rebuilds no more than what is new.
    """

    def __init__(self) -> None:
        self.pieces: dict[str, bytes] = {}
        self.warnings: list[RecordingWarning] = []
        self.closed: list[dict[str, Any]] = []
        self._exchanges: dict[int, _Building] = {}
        self._unknown_kinds: set[str] = set()
        self._changed: set[int] = set()
        # Exchanges whose request record was skipped (their number was readable), and numbers
        # that records named without any request record: each warned about once.
        self._skipped: dict[int, str] = {}
        # The histories of skipped requests whose bodies were whole: later turns build on them.
        self._skipped_histories: dict[int, tuple[str, ...] | None] = {}
        self._orphans: set[int] = set()
        self._where = ""
        # The exchanges a damaged line may have held a record of, and that line; those of them
        # with a record after it (which shows the line was not their end).
        self._lost_after: dict[int, str] = {}
        self._recorded_after_loss: set[int] = set()

    def lost_line(self, where: str, head: bytes) -> None:
        """The reader could not read the line at `where` (not JSON, not UTF-8, too long, cut short);
        `head` is its first bytes. A record's line begins with its kind and exchange number, which
        a byte flip or a cut rarely reaches: when they can be read, the line is that exchange's
        (or, for a piece or a request, nobody's response); otherwise any exchange in flight may
        have lost a record to it."""
        kind = _LOST_KIND.search(head)
        xid = _LOST_XID.search(head)
        if kind is not None and kind[1] in (b"blob", b"req", b"close"):
            return  # a lost piece or request costs its bodies (checked at load), a close nothing
        self._lost(where, int(xid[1]) if kind is not None and xid is not None else None)

    def _lost(self, where: str, xid: int | None) -> None:
        """A line at `where` was lost; it held a record of exchange `xid`, or of any exchange in flight."""
        candidates = [xid] if xid is not None else list(self._exchanges)
        for x in candidates:
            b = self._exchanges.get(x)
            if b is not None and b.fields.get("t_end") is None and b.fields.get("error") is None:
                self._lost_after.setdefault(x, where)
                self._changed.add(x)

    def add(self, rec: Any, where: str) -> None:
        if not isinstance(rec, dict):
            self.warnings.append(RecordingWarning(where, "record is not a JSON object; skipped"))
            return
        kind = rec.get("k")
        if not isinstance(kind, str):
            # Named by its type: a damaged line's value may be a list nested too deep to print.
            kind = f"<{type(kind).__name__}>"
        handler = _HANDLERS.get(kind)
        if handler is None:
            if kind not in self._unknown_kinds:
                self._unknown_kinds.add(kind)
                self.warnings.append(RecordingWarning(where, f"unknown record kind {kind!r}; skipped"))
            return
        self._where = where  # the line the handler reads
        try:
            handler(self, rec)
        except _Dropped:
            return
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
            detail = exc.args[0] if exc.args else type(exc).__name__
            if kind == "req":
                self._skip_request(rec, where, str(detail))
            else:
                self.warnings.append(RecordingWarning(where, f"bad {kind!r} record ({detail}); skipped"))
                xid = rec.get("x")
                if kind not in ("blob", "close") and not (isinstance(xid, int) and xid in self._orphans):
                    self._lost(where, xid if isinstance(xid, int) and xid in self._exchanges else None)
            return
        if kind not in ("close", "blob") and rec["x"] in self._lost_after:
            self._recorded_after_loss.add(rec["x"])  # the lost line was not its end
        if kind == "close":
            self._changed.update(x for x in rec.get("inflight") or () if x in self._exchanges)
        elif kind != "blob":
            self._changed.add(rec["x"])

    def where_of(self, xid: int) -> str:
        """The journal line of exchange `xid`'s request record ("" when it has none)."""
        b = self._exchanges.get(xid)
        return b.where if b is not None else ""

    def _skip_request(self, rec: dict[str, Any], where: str, detail: str) -> None:
        """A request record that cannot be used: its exchange is skipped, and said so once."""
        xid = rec.get("x")
        known = isinstance(xid, int) and not isinstance(xid, bool) and xid not in self._exchanges
        if known:
            self._skipped[xid] = where
        what = f"exchange {xid}" if known else "a request"
        self.warnings.append(RecordingWarning(where, f"bad 'req' record ({detail}); {what} skipped"))

    # Handlers -----------------------------------------------------------------------------

    def _blob(self, rec: dict[str, Any]) -> None:
        pid = rec["id"]
        if not isinstance(pid, str):
            raise ValueError("id is not text")
        data = decode_payload(rec)
        if piece_id(data) != pid:
            raise ValueError("its bytes do not match its id: the line is damaged")
        self.pieces[pid] = data

    def _req(self, rec: dict[str, Any]) -> None:
        xid = _int(rec, "x")
        if xid in self._exchanges or xid in self._skipped:
            raise ValueError(f"exchange {xid} started twice")
        body = decode_body(rec.get("body", {"kind": "empty", "size": 0}), self._history_of)
        try:
            fields = _request_fields(rec, xid, body)
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
            # Its body is whole: the later turns that build on its history lose nothing.
            self._skipped_histories[xid] = body.messages
            raise
        self._exchanges[xid] = _Building(fields, self._where)

    def _resp(self, rec: dict[str, Any]) -> None:
        b = self._exchange(rec)
        status = _int(rec, "status")
        if not 100 <= status <= 999:
            raise ValueError(f"status {status} is not an HTTP status")
        b.fields.update(
            t_response=_float(rec, "t"),
            status=status,
            reason=_opt_str(rec.get("reason")),
            response_headers=decode_headers(rec.get("headers", [])),
            streamed=bool(rec["stream"]) if "stream" in rec else None,
            chunk_timing=rec.get("timing", True) is not False,
        )
        self._merge_conn(b, rec)

    def _merge_conn(self, b: _Building, rec: dict[str, Any]) -> None:
        conn = Connection.from_record(rec.get("conn"))
        if conn is not None:
            old = b.fields.get("conn")
            b.fields["conn"] = old.merged(conn) if old else conn

    def _data(self, rec: dict[str, Any]) -> None:
        b = self._exchange(rec)
        payload = decode_payload(rec)
        chunks = rec["c"]
        if not isinstance(chunks, list):
            raise ValueError("c is not a list")
        timed = [_chunk(c) for c in chunks]
        if sum(n for _, n in timed) != len(payload):
            raise ValueError("chunk sizes do not add up to the data")
        b.data.append(payload)
        b.chunks.extend(timed)

    def _end(self, rec: dict[str, Any]) -> None:
        self._exchange(rec).fields["t_end"] = _float(rec, "t")

    def _error(self, rec: dict[str, Any]) -> None:
        b = self._exchange(rec)
        msg = rec.get("msg")
        if msg is not None and not is_text(msg):
            raise ValueError("msg is not text")
        b.fields["t_error"] = _float(rec, "t")
        b.fields["error"] = msg or "error"
        self._merge_conn(b, rec)

    def _ws(self, rec: dict[str, Any]) -> None:
        b = self._exchange(rec)
        b.ws.append(decode_message(rec, _float(rec, "t")))

    def _wsclose(self, rec: dict[str, Any]) -> None:
        self._exchange(rec).fields["ws_close"] = decode_close(rec, _float(rec, "t"))

    def _close(self, rec: dict[str, Any]) -> None:
        inflight = rec.get("inflight") or []
        if not isinstance(inflight, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in inflight):
            raise ValueError("inflight is not a list of exchange numbers")
        self.closed.append(rec)
        for xid in inflight:
            b = self._exchanges.get(xid)
            if b is not None:
                b.fields["interrupted"] = True

    def add_write_failures(self, meta: Mapping[str, Any], where: str) -> None:
        """Mark the exchanges recording.json's `write_failures` lists as not recorded to the end
        (after the journal's records: an exchange that has its end is left as it is), and say
        once per failure what was lost; a damaged entry is skipped with a warning naming `where`."""
        entries = meta.get(WRITE_FAILURES)
        if entries is None:
            return
        if not isinstance(entries, list):
            self.warnings.append(RecordingWarning(where, f"{WRITE_FAILURES} is not a list; skipped"))
            return
        for entry in entries:
            try:
                t = _float(entry, "t")
                incomplete = [x for x in entry["incomplete"] if isinstance(x, int) and not isinstance(x, bool)]
                message = str(entry.get("message") or "write failed")
                detail = entry.get("detail")
            except (ValueError, TypeError, KeyError, AttributeError):
                self.warnings.append(RecordingWarning(where, f"bad {WRITE_FAILURES} entry; skipped"))
                continue
            why = detail if is_text(detail) else f"the recorder could not write from {t:.2f} s on ({message})"
            marked = 0
            for xid in incomplete:
                b = self._exchanges.get(xid)
                if b is None:
                    continue
                if b.fields.get("t_end") is not None or b.fields.get("error") is not None:
                    if is_text(detail):  # a copy of an exchange the original lacked part of
                        b.fields["lost_line"] = detail
                        self._changed.add(xid)
                        marked += 1
                    continue
                b.fields["not_recorded"] = NOT_RECORDED_PREFIX + why
                self._changed.add(xid)
                marked += 1
            self.warnings.append(RecordingWarning(where, f"{why}: {marked} exchange(s) not recorded to the end, "
                                                         "what came after is not in the recording"))

    def _history_of(self, xid: int) -> tuple[str, ...] | None:
        b = self._exchanges.get(xid)
        if b is not None:
            return b.fields["body"].messages
        if xid in self._skipped_histories:
            return self._skipped_histories[xid]
        skipped = self._skipped.get(xid)
        if skipped is not None:
            raise ValueError(f"its history builds on exchange {xid}, skipped at {skipped}")
        return None

    def _exchange(self, rec: dict[str, Any]) -> _Building:
        xid = _int(rec, "x")
        b = self._exchanges.get(xid)
        if b is not None:
            return b
        if xid in self._skipped or xid in self._orphans:
            raise _Dropped
        # Said once: the lines of an exchange whose request line was lost are one loss, not many.
        self._orphans.add(xid)
        raise ValueError(f"exchange {xid} has no request record (a damaged line?); its records are skipped")

    # ---------------------------------------------------------------------------------------

    def finish(self) -> list[RecordedExchange]:
        self._changed.clear()
        out = [self._built(x, b) for x, b in self._exchanges.items()]
        out.sort(key=lambda x: (x.t_request, x.xid))
        return out

    def take_changed(self) -> list[RecordedExchange]:
        """The exchanges that records added since the last call (or `finish`) started or changed."""
        out = [self._built(x, self._exchanges[x]) for x in sorted(self._changed)]
        self._changed.clear()
        return out

    def _built(self, xid: int, b: _Building) -> RecordedExchange:
        lost = self._lost_after.get(xid)
        fields = b.fields
        if lost is not None:
            unfinished = fields.get("t_end") is None and fields.get("error") is None
            # Still unfinished after a later record of it, or when the recorder's close record
            # listed it in flight: the lost line was not its end, and in flight is what it was.
            if not (unfinished and (xid in self._recorded_after_loss or fields.get("interrupted"))):
                fields = {**fields, "lost_line": f"{lost} is damaged and may have held part of it"}
        return _built(b, fields)


def _request_fields(rec: dict[str, Any], xid: int, body: Body) -> dict[str, Any]:
    """The fields of a request record but its body (decoded already), checked."""
    url, method = rec["url"], rec.get("method", "POST")
    if not is_text(url) or not is_text(method):
        raise ValueError("url or method is not text")
    _check_url(url)
    redacted = rec.get("redacted") or []
    if not isinstance(redacted, list) or not all(is_text(r) for r in redacted):
        raise ValueError("redacted is not a list of names")
    return {
        "xid": xid,
        "t_request": _float(rec, "t"),
        "method": method,
        "url": url,
        "http_version": _opt_str(rec.get("http")),
        "request_headers": decode_headers(rec.get("headers", [])),
        "body": body,
        "redacted": tuple(redacted),
        "conn": Connection.from_record(rec.get("conn")),
    }


def _built(b: _Building, fields: dict[str, Any] | None = None) -> RecordedExchange:
    fields = dict(b.fields if fields is None else fields)
    fields["chunks"] = tuple(b.chunks)
    fields["response_body"] = b"".join(b.data)
    fields["ws"] = tuple(b.ws)
    return RecordedExchange(**fields)


_HANDLERS: dict[str, Callable[[RecordingBuilder, dict[str, Any]], None]] = {
    "blob": RecordingBuilder._blob,
    "req": RecordingBuilder._req,
    "resp": RecordingBuilder._resp,
    "data": RecordingBuilder._data,
    "end": RecordingBuilder._end,
    "error": RecordingBuilder._error,
    "close": RecordingBuilder._close,
    "ws": RecordingBuilder._ws,
    "wsclose": RecordingBuilder._wsclose,
}


def _int(rec: Mapping[str, Any], key: str) -> int:
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{key} is not an integer")
    return v


def _is_number(v: Any) -> bool:
    """A finite JSON number (an int too large for a float is none)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


def _time(v: Any, what: str) -> float:
    """A journal time: a number of seconds from the recording's start, within MAX_OFFSET."""
    if not _is_number(v):
        raise ValueError(f"{what} is not a number")
    if not -MAX_OFFSET <= v <= MAX_OFFSET:
        raise ValueError(f"{what} {v:.3g} is out of range")
    return float(v)


def _float(rec: Mapping[str, Any], key: str) -> float:
    return _time(rec[key], key)


def _chunk(c: Any) -> tuple[float, int]:
    """One [time, length] entry of a data record's `c`."""
    if not (isinstance(c, list) and len(c) == 2):
        raise ValueError("a chunk is not [time, length]")
    t, n = c
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError("a chunk length is not a byte count")
    return _time(t, "a chunk time"), n


def _check_url(url: str) -> None:
    """A recorded URL that urllib cannot take apart (`http://[::1`, a port out of range) would stop
    every command that reads it: the line is damaged."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError as exc:
        raise ValueError(f"url {url[:80]!r} does not parse: {exc}") from None


def _opt_str(v: Any) -> str | None:
    return v if is_text(v) else None


def _opt_bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


# --------------------------------------------------------------------------------------------
# Metadata and migrations

@dataclass(frozen=True, slots=True)
class Migration:
    """How to turn format v into v + 1: a function for the metadata and one for each record
    (returning None drops the record)."""

    meta: Callable[[dict[str, Any]], dict[str, Any]]
    record: Callable[[Any], Any]


# MIGRATIONS[v] upgrades format v to v + 1. Format 1 is the first, so there are none yet.
MIGRATIONS: dict[int, Migration] = {}


def new_metadata(started_at: float, created: str, version: str, **extra: Any) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "kind": KIND,
        "started_at": started_at,
        "created": created,
        "proxycheck": version,
        **extra,
    }


def check_metadata(meta: Any, where: str, current: int = FORMAT) -> int:
    """The format version of a recording's metadata; BadInput when it cannot be read."""
    if not isinstance(meta, dict) or meta.get("kind") != KIND:
        raise BadInput(where, "not a proxycheck recording (its kind is not proxycheck.recording)")
    version = meta.get("format")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise BadInput(where, f"unknown recording format {version!r}")
    if version > current:
        raise BadInput(
            where,
            f"recording format {version} is newer than this proxycheck reads ({current}); "
            "upgrade proxycheck",
        )
    started = meta.get("started_at")
    if not _is_number(started):
        raise BadInput(where, "started_at is missing or not a number")
    if not 0 <= started <= MAX_WALL:
        raise BadInput(where, f"started_at {started:.6g} is not a wall-clock time (epoch seconds)")
    return version


def upgrade(
    meta: dict[str, Any],
    migrations: Mapping[int, Migration] = MIGRATIONS,
    current: int = FORMAT,
) -> tuple[dict[str, Any], Callable[[Any], Any]]:
    """Bring an older recording up to `current`, one version at a time: the new metadata, and a
    function that upgrades each of its records (None for a record that is dropped)."""
    version = meta["format"]
    steps: list[Callable[[Any], Any]] = []
    while version < current:
        step = migrations.get(version)
        if step is None:
            raise BadInput("", f"no migration from recording format {version} to {version + 1}")
        meta = {**step.meta(meta), "format": version + 1}
        steps.append(step.record)
        version += 1

    def upgrade_record(rec: Any) -> Any:
        for fn in steps:
            if rec is None:
                return None
            rec = fn(rec)
        return rec

    return meta, upgrade_record
