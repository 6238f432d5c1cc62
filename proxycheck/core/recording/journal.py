"""The recording format, version 1: what the recorder journals and the loader rebuilds.

A recording is a directory:

    recording.json   metadata, written once: {"format": 1, "kind": "proxycheck.recording",
                     "started_at": <epoch seconds>, "created": <ISO time>, "proxycheck": <version>}
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

An exchange with a `req` and neither `end` nor `error` is *in flight*: the evidence of a wedge.
A header value that carried a secret is stored as `{"redacted":true}`.

BODY is a request body cut into content-addressed pieces (message-level deduplication, byte-exact
when joined): see `proxycheck.core.recording.bodies`. Its history may build on an earlier exchange's
(`"history": {"base": X, "keep": N, "add": [ids]}`), so a growing session costs O(new messages).

Everything here is pure: records in, records out. File handling is in `proxycheck.io.storage`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from proxycheck.core.errors import BadInput
from proxycheck.core.recording.bodies import Body, decode_body
from proxycheck.core.recording.redact import REDACTED, Headers, HeaderValue

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

# --------------------------------------------------------------------------------------------
# Records


def encode_headers(headers: Iterable[tuple[str, HeaderValue]]) -> list[list[Any]]:
    return [[n, {"redacted": True} if v is REDACTED else v] for n, v in headers]


def decode_headers(rec: Any) -> Headers:
    if not isinstance(rec, list):
        raise ValueError("headers is not a list")
    out: list[tuple[str, HeaderValue]] = []
    for item in rec:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise ValueError("bad header entry")
        value = item[1]
        if isinstance(value, dict) and value.get("redacted"):
            out.append((item[0], REDACTED))
        elif isinstance(value, str):
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
        return base64.b64decode(rec["b64"], validate=True)
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
        if not isinstance(rec, dict):
            return None
        names = Connection.__slots__  # type: ignore[attr-defined]
        return Connection(**{k: rec.get(k) for k in names})

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


@dataclass(frozen=True, slots=True)
class RecordingWarning:
    """A problem the loader stepped over: `where` is `file:line`."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class _Building:
    """Mutable state of one exchange while its records are replayed."""

    __slots__ = ("fields", "data", "chunks")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        self.data: list[bytes] = []
        self.chunks: list[tuple[float, int]] = []


class RecordingBuilder:
    """Rebuilds exchanges from journal records, tolerating damage.

    `add(record, where)` takes one decoded JSON line; a record that does not fit (unknown
    exchange, missing fields) is skipped with a warning naming `where`. Pieces are collected so
    bodies can be joined later; `finish()` returns the exchanges in request order. A reader that
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

    def add(self, rec: Any, where: str) -> None:
        if not isinstance(rec, dict):
            self.warnings.append(RecordingWarning(where, "record is not a JSON object; skipped"))
            return
        kind = rec.get("k")
        handler = _HANDLERS.get(kind)  # type: ignore[arg-type]
        if handler is None:
            if kind not in self._unknown_kinds:
                self._unknown_kinds.add(str(kind))
                self.warnings.append(RecordingWarning(where, f"unknown record kind {kind!r}; skipped"))
            return
        try:
            handler(self, rec)
        except (ValueError, TypeError, KeyError) as exc:
            detail = exc.args[0] if exc.args else type(exc).__name__
            self.warnings.append(RecordingWarning(where, f"bad {kind!r} record ({detail}); skipped"))
            return
        if kind == "close":
            self._changed.update(x for x in rec.get("inflight") or () if x in self._exchanges)
        elif kind != "blob":
            self._changed.add(rec["x"])

    # Handlers -----------------------------------------------------------------------------

    def _blob(self, rec: dict[str, Any]) -> None:
        pid = rec["id"]
        if not isinstance(pid, str):
            raise ValueError("id is not text")
        self.pieces[pid] = decode_payload(rec)

    def _req(self, rec: dict[str, Any]) -> None:
        xid = _int(rec, "x")
        if xid in self._exchanges:
            raise ValueError(f"exchange {xid} started twice")
        url, method = rec["url"], rec.get("method", "POST")
        if not isinstance(url, str) or not isinstance(method, str):
            raise ValueError("url or method is not text")
        redacted = rec.get("redacted") or []
        self._exchanges[xid] = _Building(
            {
                "xid": xid,
                "t_request": _float(rec, "t"),
                "method": method,
                "url": url,
                "http_version": _opt_str(rec.get("http")),
                "request_headers": decode_headers(rec.get("headers", [])),
                "body": decode_body(rec.get("body", {"kind": "empty", "size": 0}), self._history_of),
                "redacted": tuple(str(r) for r in redacted),
                "conn": Connection.from_record(rec.get("conn")),
            }
        )

    def _resp(self, rec: dict[str, Any]) -> None:
        b = self._exchange(rec)
        b.fields.update(
            t_response=_float(rec, "t"),
            status=_int(rec, "status"),
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
        timed = [(float(t), int(n)) for t, n in chunks]
        if sum(n for _, n in timed) != len(payload):
            raise ValueError("chunk sizes do not add up to the data")
        b.data.append(payload)
        b.chunks.extend(timed)

    def _end(self, rec: dict[str, Any]) -> None:
        self._exchange(rec).fields["t_end"] = _float(rec, "t")

    def _error(self, rec: dict[str, Any]) -> None:
        b = self._exchange(rec)
        b.fields["t_error"] = _float(rec, "t")
        b.fields["error"] = str(rec.get("msg") or "error")
        self._merge_conn(b, rec)

    def _close(self, rec: dict[str, Any]) -> None:
        self.closed.append(rec)
        for xid in rec.get("inflight") or []:
            b = self._exchanges.get(xid)
            if b is not None:
                b.fields["interrupted"] = True

    def _history_of(self, xid: int) -> tuple[str, ...] | None:
        b = self._exchanges.get(xid)
        return b.fields["body"].messages if b is not None else None

    def _exchange(self, rec: dict[str, Any]) -> _Building:
        xid = _int(rec, "x")
        b = self._exchanges.get(xid)
        if b is None:
            raise ValueError(f"exchange {xid} has no request record")
        return b

    # ---------------------------------------------------------------------------------------

    def finish(self) -> list[RecordedExchange]:
        self._changed.clear()
        out = [_built(b) for b in self._exchanges.values()]
        out.sort(key=lambda x: (x.t_request, x.xid))
        return out

    def take_changed(self) -> list[RecordedExchange]:
        """The exchanges that records added since the last call (or `finish`) started or changed."""
        out = [_built(self._exchanges[x]) for x in sorted(self._changed)]
        self._changed.clear()
        return out


def _built(b: _Building) -> RecordedExchange:
    fields = dict(b.fields)
    fields["chunks"] = tuple(b.chunks)
    fields["response_body"] = b"".join(b.data)
    return RecordedExchange(**fields)


_HANDLERS: dict[str, Callable[[RecordingBuilder, dict[str, Any]], None]] = {
    "blob": RecordingBuilder._blob,
    "req": RecordingBuilder._req,
    "resp": RecordingBuilder._resp,
    "data": RecordingBuilder._data,
    "end": RecordingBuilder._end,
    "error": RecordingBuilder._error,
    "close": RecordingBuilder._close,
}


def _int(rec: Mapping[str, Any], key: str) -> int:
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{key} is not an integer")
    return v


def _float(rec: Mapping[str, Any], key: str) -> float:
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{key} is not a number")
    return float(v)


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


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
    if not isinstance(meta.get("started_at"), (int, float)):
        raise BadInput(where, "started_at is missing or not a number")
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
