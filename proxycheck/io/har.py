"""HAR 1.2 <-> recordings, and the writing of any import into a recording.

This module owns three things:

* `Imported` and `ImportResult`: the neutral shape of an exchange read from a foreign file (HAR
  here, mitmproxy `.flow` in `proxycheck.io.flowfile`), with times already turned into offsets
  from the import's start; and `write_recording`, which journals them with `RecordingWriter`
  (the default redaction policy applies, extended by what the file shows was redacted before).
* `read_har`: HAR files from browsers (Chrome, Firefox: `_` private fields, base64 bodies,
  `timings` with -1 for n/a, no `content.text` for event streams), from mitmproxy (`hardump`,
  `.zhar` compressed too) and from `har_document` below.
* `har_document` / `write_har`: a recording as HAR. Every exchange is an entry; exact recorded
  offsets, chunk arrival times, connection facts and redactions travel in `_proxycheck_*`
  fields, so that importing our own export gives back the same recording.

How a foreign entry becomes an exchange (entries are taken in `startedDateTime` order): the
request at its start; the response headers at start + blocked + dns + connect + send + wait
(values of -1 ignored); the body as ONE chunk at start + `time`, marked as carrying no arrival
times (`chunk_timing=False`); the end at the same time. A status of 0 or an `_error` makes the
exchange an error. HAR bodies are decoded (no Content-Encoding), so a foreign entry's
`Content-Encoding` and `Content-Length` headers are dropped; HTTP/2 pseudo-headers too.

Warnings and errors name entries as `log.entries[I]` (I counts from 0). JSON only: no mitmproxy.

What the journal could not hold is refused while reading, before the recording is created
(`check_importable`, for `.flow` imports too): an entry with a URL that does not parse, a time
that is not a finite number (NaN, 1e999) or lies absurdly far from the start, a status that is
not an HTTP status, is skipped with a warning; text that is not valid Unicode is kept as
`header_text` keeps it. A file that is no HAR document at all (not JSON, nested too deeply for
any HAR) is one BadInput naming it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import json
import math
import os
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence
from urllib.parse import parse_qsl, urlsplit

from proxycheck import __version__
from proxycheck.core.errors import BadInput
from proxycheck.core.protocol import dialects
from proxycheck.core.recording.capture import header_text
from proxycheck.core.recording.journal import MAX_WALL, NOT_RECORDED_PREFIX, RecordedExchange, what_is_not_recorded
from proxycheck.core.recording.websocket import WsClose, WsMessage, decode_close
from proxycheck.core.recording.redact import REDACTED, REDACTED_TEXT, HeaderValue, RedactionPolicy
from proxycheck.core.replay.marker import REPLAY_HEADER
from proxycheck.io.outputs import check_outputs, write_file
from proxycheck.io.storage import RecordingWriter

# Headers that describe the body's encoding on the wire: a HAR's text is decoded, so they lie.
_WIRE_ENCODING_HEADERS = frozenset({"content-encoding", "content-length"})
_TIMING_BEFORE_HEADERS = ("blocked", "dns", "connect", "send", "wait")
# Offsets from the import's start beyond this (about 30 years, in seconds) are damage, not time.
MAX_OFFSET = 1e9
# What a damaged entry may raise while it is read: it is skipped, the others are imported.
_ENTRY_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, binascii.Error)

# --------------------------------------------------------------------------------------------
# The neutral shape of imported exchanges


@dataclass
class ImportedResponse:
    """Response headers as seen at offset `t`."""

    t: float
    status: int
    reason: str | None
    headers: list[tuple[str, str]]
    http_version: str | None
    streamed: bool


@dataclass
class Imported:
    """One exchange read from a file; times are offsets from `ImportResult.started_at`."""

    where: str
    t_request: float
    method: str
    url: str
    http_version: str | None
    headers: list[tuple[str, str]]
    body: bytes
    conn: dict[str, Any] | None = None
    response: ImportedResponse | None = None
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    chunk_timing: bool = False
    t_end: float | None = None
    error: str | None = None
    t_error: float | None = None
    # The exchange number in the recording a proxycheck export came from: written in that order,
    # the import numbers its exchanges the same way.
    xid: int | None = None
    # Why the recording it was copied from lacks part of it (a full disk, a damaged line), without
    # NOT_RECORDED_PREFIX; None when it was recorded whole. The copy says so too (no invented wedge).
    not_recorded: str | None = None
    # A WebSocket session's messages (Chrome's `_webSocketMessages`) and how its socket ended.
    ws: list[WsMessage] = field(default_factory=list)
    ws_close: WsClose | None = None

    def is_llm(self) -> bool:
        headers = {n.lower(): v for n, v in self.headers}
        return dialects.detect(urlsplit(self.url).path or "/", self.body, headers) is not None

    def is_replay(self) -> bool:
        return any(n.lower() == REPLAY_HEADER for n, _ in self.headers)


@dataclass
class ImportResult:
    """What a file held: exchanges in request order, and what had to be stepped over."""

    started_at: float
    exchanges: list[Imported]
    warnings: list[str] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)
    # Names the file shows were redacted before (our own export): kept redacted on import.
    redacted_headers: set[str] = field(default_factory=set)
    redacted_query: set[str] = field(default_factory=set)
    redacted_body_paths: list[str] = field(default_factory=list)
    skipped_not_llm: int = 0
    skipped_replays: int = 0

    def keep(self, all_requests: bool) -> None:
        """Drop proxycheck's own replays always, and requests that are not LLM generation calls
        unless `all_requests` (counted in `skipped_*`)."""
        kept = []
        for x in self.exchanges:
            if x.is_replay():
                self.skipped_replays += 1
            elif not all_requests and not x.is_llm():
                self.skipped_not_llm += 1
            else:
                kept.append(x)
        self.exchanges = kept

    def policy(self) -> RedactionPolicy:
        return RedactionPolicy.default().extended(
            self.redacted_headers, self.redacted_query, self.redacted_body_paths
        )


class NotImportable(ValueError):
    """An exchange read from a file that cannot be imported; its message becomes the warning."""


def check_importable(x: Imported) -> None:
    """NotImportable (the reason) unless the journal can hold `x` as it is: a URL that parses, a
    method, an HTTP status, finite times within MAX_OFFSET of the start."""
    try:
        parts = urlsplit(x.url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise NotImportable(f"request url {x.url[:200]!r} is not a valid URL ({exc})") from None
    if not x.method or not x.method.isprintable() or " " in x.method:
        raise NotImportable(f"request method {x.method[:40]!r} is not an HTTP method")
    times = [x.t_request, x.t_end, x.t_error, *(t for t, _ in x.chunks)]
    if x.response is not None:
        times.append(x.response.t)
        if not 100 <= x.response.status <= 999:
            raise NotImportable(f"response status {x.response.status} is not an HTTP status")
    for t in times:
        if t is not None and not (math.isfinite(t) and abs(t) <= MAX_OFFSET):
            raise NotImportable(f"time {t!r} is not a usable time")


def write_recording(directory: str | os.PathLike[str], result: ImportResult) -> int:
    """Journal the imported exchanges into a new recording directory; returns how many."""
    writer = RecordingWriter(directory, result.policy(), source=result.source, wall=lambda: result.started_at)
    try:
        for x in result.exchanges:
            _write_one(writer, x)
    finally:
        writer.close("imported")
    return len(result.exchanges)


def _write_one(writer: RecordingWriter, x: Imported) -> None:
    xid = writer.request(x.method, x.url, x.headers, x.body, http_version=x.http_version, conn=x.conn, t=x.t_request)
    r = x.response
    if r is not None:
        writer.response(
            xid, r.status, r.reason, r.headers, streamed=r.streamed, http_version=r.http_version, t=r.t,
            chunk_timing=x.chunk_timing,
        )  # fmt: skip
        for t, chunk in x.chunks:
            writer.data(xid, chunk, t=t)
    for m in x.ws:
        writer.ws_message(xid, m.data, from_client=m.from_client, text=m.text, t=m.t)
    if x.ws_close is not None:
        c = x.ws_close
        writer.ws_close(xid, c.by, c.code, c.reason, t=c.t)
    if x.error is not None:
        writer.error(xid, x.error, t=x.t_error)
    elif x.t_end is not None:
        writer.end(xid, t=x.t_end)
    else:
        writer.flush()  # in flight: its bytes so far are kept, and close() marks it interrupted
    if x.not_recorded is not None:  # the original lacked part of it: no wedge, no cut made of that
        last = x.chunks[-1][0] if x.chunks else (r.t if r is not None else x.t_request)
        writer.copied_not_recorded(xid, last, x.not_recorded)


def check_out_directory(out: str | os.PathLike[str]) -> None:
    """BadInput unless `out` is absent or an empty directory (an import never mixes recordings)."""
    path = Path(out)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BadInput(str(path), "exists and is not an empty directory (choose a new --out)")


# --------------------------------------------------------------------------------------------
# Reading HAR


class _Skip(NotImportable):
    """A HAR entry that cannot be imported; its message becomes the warning."""


def read_har(path: str | os.PathLike[str]) -> ImportResult:
    """The exchanges of a HAR file (all of them; `ImportResult.keep` filters). BadInput naming
    the file when it is not a HAR document at all; a broken entry is skipped with a warning."""
    name = str(path)
    doc = _load_json(Path(path))
    entries = _entries(doc, name)
    log = doc["log"]
    own = log.get("_proxycheck_recording")
    warnings: list[str] = []
    if isinstance(own, dict) and not _is_start(own.get("started_at")):
        warnings.append(f"{name}: log._proxycheck_recording.started_at {own.get('started_at')!r} is not a time; "
                        "entries read as a foreign HAR's (their own start times)")  # fmt: skip
    own = own if isinstance(own, dict) and _is_start(own.get("started_at")) else None
    starts = _start_times(entries, name, warnings)
    if own is not None:
        started_at = float(own["started_at"])
    else:
        started_at = min(starts.values(), default=0.0)
    result = ImportResult(started_at, [], warnings, _source(name, log, own))
    for i in sorted(starts, key=lambda i: (starts[i], i)):
        where = f"{name}: log.entries[{i}]"
        try:
            x = _entry(entries[i], where, starts[i] - started_at, own is not None, result)
            check_importable(x)
            result.exchanges.append(x)
        except _ENTRY_ERRORS as exc:
            warnings.append(f"{where}: {_reason(exc)}; skipped")
    if all(x.xid is not None for x in result.exchanges):
        result.exchanges.sort(key=lambda x: x.xid or 0)
    else:
        result.exchanges.sort(key=lambda x: x.t_request)
    return result


def _load_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise BadInput(str(path), f"cannot read: {exc.strerror or exc}") from None
    if path.suffix.lower() == ".zhar":
        try:
            raw = zlib.decompress(raw)
        except zlib.error:
            raise BadInput(str(path), "not a zlib-compressed HAR file (.zhar)") from None
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise BadInput(str(path), "not a HAR file (not UTF-8 text)") from None
    except (ValueError, RecursionError) as exc:
        raise BadInput(str(path), f"not a HAR file (invalid JSON: {exc})") from None


def _entries(doc: Any, name: str) -> list[Any]:
    log = doc.get("log") if isinstance(doc, dict) else None
    entries = log.get("entries") if isinstance(log, dict) else None
    if not isinstance(entries, list):
        raise BadInput(name, "not a HAR file (no log.entries list)")
    return entries


def _start_times(entries: list[Any], name: str, warnings: list[str]) -> dict[int, float]:
    """Epoch start of each entry that has a readable `startedDateTime`."""
    out: dict[int, float] = {}
    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict):
                raise _Skip("not a JSON object")
            out[i] = parse_time(entry.get("startedDateTime"))
        except _Skip as exc:
            warnings.append(f"{name}: log.entries[{i}]: {exc}; skipped")
    return out


def parse_time(value: Any) -> float:
    """Epoch seconds of an ISO 8601 time (`Z` or an offset; UTC when it has none)."""
    if not isinstance(value, str):
        raise _Skip("no startedDateTime")
    try:
        when = _dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise _Skip(f"startedDateTime {value!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)
    epoch = when.timestamp()
    if not _is_start(epoch):
        raise _Skip(f"startedDateTime {value!r} is not a time a recording can start at")
    return epoch


def _is_start(value: Any) -> bool:
    """A wall-clock start a recording can hold (and write a date for)."""
    return _is_number(value) and 0 <= value <= MAX_WALL


def _source(name: str, log: Mapping[str, Any], own: Mapping[str, Any] | None) -> dict[str, Any]:
    creator = log.get("creator")
    source: dict[str, Any] = {"imported_from": name, "format": "har"}
    if isinstance(creator, dict) and isinstance(creator.get("name"), str):
        source["creator"] = header_text(f"{creator['name']} {creator.get('version') or ''}".strip())
    original = own.get("source") if own else None
    if isinstance(original, dict) and _json_clean(original):
        # What the recorder was told (session headers ...) still describes these exchanges.
        source = {**original, **source}
    return source


def _entry(entry: dict[str, Any], where: str, t0: float, own: bool, result: ImportResult) -> Imported:
    request = _obj(entry, "request")
    method, url = request.get("method"), request.get("url")
    if not isinstance(method, str) or not method or not isinstance(url, str) or not url:
        raise _Skip("request has no method or url")
    exact = entry.get("_proxycheck_times") if own else None
    exact = exact if isinstance(exact, dict) else None
    _note_redactions(entry, result)
    x = Imported(
        where=where,
        t_request=_float(exact["request"]) if exact else t0,
        method=header_text(method),
        url=header_text(url),
        http_version=_version(request.get("httpVersion")),
        headers=_headers(request.get("headers"), raw=exact is not None),
        body=_post_data(request.get("postData")),
        conn=_conn(entry, request, exact is not None),
    )
    if exact:
        xid = entry.get("_proxycheck_xid")
        x.xid = xid if _is_int(xid) else None
        _fill_exact(x, entry, exact)
    else:
        _fill_foreign(x, entry, t0, result)
    _fill_messages(x, entry, t0 - _start_of(entry, t0), exact is not None)
    return x


def _start_of(entry: Mapping[str, Any], t0: float) -> float:
    """The entry's start in epoch seconds: what a message's `time` is measured against."""
    started = entry.get("startedDateTime")
    return parse_time(started) if isinstance(started, str) else t0


def _fill_messages(x: Imported, entry: Mapping[str, Any], shift: float, own: bool) -> None:
    """Chrome's `_webSocketMessages` (epoch `time`s, `shift` making them offsets), with the exact
    offsets and the socket's end of a proxycheck export."""
    messages = entry.get("_webSocketMessages")
    if not isinstance(messages, list):
        return
    for m in messages:
        if not isinstance(m, dict) or m.get("type") not in ("send", "receive"):
            raise _Skip("a _webSocketMessages item is not a send or receive message")
        text = m.get("opcode", 1) == 1
        data = m.get("data", "")
        if not isinstance(data, str):
            raise _Skip("a WebSocket message's data is not text")
        raw = data.encode("utf-8", "surrogatepass") if text else base64.b64decode(data, validate=True)
        t = m.get("_proxycheck_t") if own and _is_number(m.get("_proxycheck_t")) else None
        when = float(t) if t is not None else float(m["time"]) + shift
        x.ws.append(WsMessage(when, m["type"] == "send", raw, text))
    end = entry.get("_proxycheck_ws_close") if own else None
    if isinstance(end, dict):
        x.ws_close = decode_close(end, float(end["t"]))


def _fill_foreign(x: Imported, entry: dict[str, Any], t0: float, result: ImportResult) -> None:
    """Response, body and ending of a browser's or mitmproxy's entry (times from `timings`)."""
    response = entry.get("response") if isinstance(entry.get("response"), dict) else {}
    timings = entry.get("timings") if isinstance(entry.get("timings"), dict) else {}
    t_headers = t0 + sum(_ms(timings.get(k)) for k in _TIMING_BEFORE_HEADERS) / 1000
    total = entry.get("time")
    if _is_number(total) and total >= 0:
        t_done = t0 + float(total) / 1000
    else:
        t_done = t_headers + _ms(timings.get("receive")) / 1000
    t_done = max(t_done, t_headers)
    status = response.get("status")
    error = response.get("_error") or entry.get("_error")
    if _is_int(status) and status > 0:
        headers = _headers(response.get("headers"), raw=False)
        x.response = ImportedResponse(
            t_headers, int(status), _opt_str(response.get("statusText")), headers,
            _version(response.get("httpVersion")), _is_event_stream(headers),
        )  # fmt: skip
        body = _content(response.get("content"), x.where, result.warnings)
        if body:
            x.chunks = [(t_done, body)]
    if error or not (_is_int(status) and status > 0):
        x.error, x.t_error = header_text(str(error or "no response (HAR status 0)")), t_done
    else:
        x.t_end = t_done


def _fill_exact(x: Imported, entry: dict[str, Any], exact: Mapping[str, Any]) -> None:
    """Response, body and ending of an entry that proxycheck exported (exact recorded times)."""
    response = _obj(entry, "response")
    if exact.get("response") is not None:
        status = response.get("_proxycheck_status", response.get("status"))
        if not _is_int(status):
            raise _Skip("response status is not an integer")
        streamed = entry.get("_proxycheck_streamed")
        headers = _headers(response.get("headers"), raw=True)
        x.response = ImportedResponse(
            _float(exact["response"]), int(status), _opt_str(response.get("statusText")), headers,
            _version(response.get("httpVersion")),
            streamed if isinstance(streamed, bool) else _is_event_stream(headers),
        )  # fmt: skip
        body = _content(response.get("content"), x.where, [])
        x.chunks = _exact_chunks(entry.get("_proxycheck_chunks"), body, exact)
        x.chunk_timing = entry.get("_proxycheck_chunk_timing") is not False
    not_recorded = entry.get("_proxycheck_not_recorded")
    if isinstance(not_recorded, str) and not_recorded:
        x.not_recorded = header_text(not_recorded).removeprefix(NOT_RECORDED_PREFIX)
    if exact.get("error") is not None:
        x.error = header_text(str(response.get("_error") or entry.get("_error") or "error"))
        x.t_error = _float(exact["error"])
    elif exact.get("end") is not None:
        x.t_end = _float(exact["end"])


def _exact_chunks(spec: Any, body: bytes, exact: Mapping[str, Any]) -> list[tuple[float, bytes]]:
    """The body cut back into its recorded chunks; one chunk at the end when they do not fit."""
    if isinstance(spec, list) and spec:
        sizes = [(_float(t), n) for t, n in spec]
        if all(_is_int(n) and n >= 0 for _, n in sizes) and sum(n for _, n in sizes) == len(body):
            out, pos = [], 0
            for t, n in sizes:
                out.append((t, body[pos : pos + n]))
                pos += n
            return out
    if not body:
        return []
    last = exact.get("end") or exact.get("error") or exact.get("response")
    return [(_float(last), body)]


def _note_redactions(entry: dict[str, Any], result: ImportResult) -> None:
    """Values exported as `[redacted]` stay redacted: their names extend the import's policy."""
    for part in ("request", "response"):
        obj = entry.get(part)
        headers = obj.get("headers") if isinstance(obj, dict) else None
        for h in headers if isinstance(headers, list) else ():
            if isinstance(h, dict) and h.get("value") == REDACTED_TEXT and isinstance(h.get("name"), str):
                result.redacted_headers.add(h["name"].lower())
    for item in entry.get("_proxycheck_redacted") or ():
        kind, _, name = str(item).partition(":")
        if kind == "header":
            result.redacted_headers.add(name)
        elif kind == "query":
            result.redacted_query.add(name)
        elif kind == "body" and name not in result.redacted_body_paths:
            result.redacted_body_paths.append(name)


def _headers(value: Any, *, raw: bool) -> list[tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Skip("headers is not a list")
    out = []
    for h in value:
        if not (isinstance(h, dict) and isinstance(h.get("name"), str) and isinstance(h.get("value", ""), str)):
            raise _Skip("a header is not a {name, value} object")
        name = header_text(h["name"])
        if name.startswith(":"):
            continue  # HTTP/2 pseudo-headers (Chrome lists them); they are not header fields
        if not raw and name.lower() in _WIRE_ENCODING_HEADERS:
            continue
        out.append((name, header_text(h.get("value", ""))))
    return out


def _post_data(value: Any) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, dict):
        raise _Skip("request.postData is not an object")
    return _decode_text(value.get("text"), value.get("encoding"), "request.postData")


def _content(value: Any, where: str, warnings: list[str]) -> bytes:
    if not isinstance(value, dict):
        return b""
    text = value.get("text")
    if text is None:
        size = value.get("size")
        if (_is_int(size) and size > 0) or "event-stream" in str(value.get("mimeType", "")):
            warnings.append(
                f"{where}: the HAR holds no response body ({value.get('mimeType') or 'no type'}); "
                "imported with its headers and an empty body"
            )
        return b""
    return _decode_text(text, value.get("encoding"), "response.content")


def _decode_text(text: Any, encoding: Any, what: str) -> bytes:
    if text is None:
        return b""
    if not isinstance(text, str):
        raise _Skip(f"{what}.text is not a string")
    if encoding == "base64":
        try:
            # Some writers wrap base64 in lines; anything else outside the alphabet is damage.
            return base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            raise _Skip(f"{what}.text is not valid base64") from None
    if encoding not in (None, ""):
        raise _Skip(f"{what}.encoding {encoding!r} is not supported")
    return text.encode("utf-8", "surrogatepass")


def _conn(entry: Mapping[str, Any], request: Mapping[str, Any], own: bool) -> dict[str, Any] | None:
    if own:
        conn = entry.get("_proxycheck_conn")
        return dict(conn) if isinstance(conn, dict) and _json_clean(conn) else None
    out: dict[str, Any] = {}
    # A browser's `connection` names its socket, which is the client's connection to the next hop.
    if isinstance(entry.get("connection"), (str, int)) and not isinstance(entry.get("connection"), bool):
        out["client_id"] = header_text(str(entry["connection"]))[:200]
    if isinstance(entry.get("serverIPAddress"), str) and entry["serverIPAddress"]:
        out["peer"] = header_text(entry["serverIPAddress"])[:200]
    version = _version(request.get("httpVersion"))
    if version:
        out["http_version"] = version
    return out or None


def _is_event_stream(headers: Iterable[tuple[str, str]]) -> bool:
    return any(n.lower() == "content-type" and "event-stream" in v.lower() for n, v in headers)


def _obj(entry: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = entry.get(key)
    if not isinstance(value, dict):
        raise _Skip(f"no {key} object")
    return value


def _ms(value: Any) -> float:
    """A HAR timing in ms; -1 (n/a), missing or junk count as 0."""
    return float(value) if _is_number(value) and value > 0 else 0.0


def _float(value: Any) -> float:
    if not _is_number(value):
        raise _Skip(f"time {value!r} is not a number")
    return float(value)


def _is_number(value: Any) -> bool:
    """A finite JSON number (NaN and 1e999 are no times or sizes)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _opt_str(value: Any) -> str | None:
    return header_text(value) if isinstance(value, str) else None


def _version(value: Any) -> str | None:
    return header_text(value) if isinstance(value, str) and value else None


def _json_clean(value: Any, depth: int = 0) -> bool:
    """Whether a JSON value can be written to a recording as it is: finite numbers, text that is
    valid Unicode, not nested absurdly deep."""
    if depth > 32:
        return False
    if isinstance(value, dict):
        return all(_json_clean(k, depth + 1) and _json_clean(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return all(_json_clean(v, depth + 1) for v in value)
    if isinstance(value, str):
        return header_text(value) == value
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int))


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, NotImportable) else f"malformed entry ({type(exc).__name__}: {exc})"


# --------------------------------------------------------------------------------------------
# Writing HAR


def har_document(recording: Any) -> dict[str, Any]:
    """A loaded `Recording` as a HAR 1.2 document (a JSON-ready dict); BadInput naming the
    recording when a time in it cannot be written as a date."""
    started_at = float(recording.meta["started_at"])
    try:
        return _har_log(recording, started_at)
    except (ValueError, OverflowError, OSError) as exc:
        raise BadInput(str(getattr(recording, "directory", "")), f"a time in the recording cannot be written "
                                                                  f"as a HAR date ({exc})") from None  # fmt: skip


def _har_log(recording: Any, started_at: float) -> dict[str, Any]:
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "proxycheck", "version": __version__},
            "pages": [],
            "entries": [_har_entry(recording, x, started_at) for x in recording.exchanges],
            "_proxycheck_recording": {
                "started_at": started_at,
                "created": recording.meta.get("created"),
                "source": recording.meta.get("source") or {},
            },
        }
    }


def write_har(document: Mapping[str, Any], target: str) -> None:
    """Write HAR JSON to `target` (atomically, owner-only: it holds prompts) or stdout for `-`."""
    try:
        # allow_nan=False: NaN is not JSON, and no HAR reader would take it.
        text = json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False)
        try:
            data = text.encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate the recording kept: written as a JSON escape
            data = json.dumps(document, indent=1, allow_nan=False).encode("ascii") + b"\n"
    except ValueError as exc:
        raise BadInput(target, f"cannot write the recording as HAR ({exc})") from None
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    check_outputs(files={"--har": target})
    write_file(target, data)


def _har_entry(recording: Any, x: RecordedExchange, started_at: float) -> dict[str, Any]:
    body = recording.request_body(x)
    entry: dict[str, Any] = {
        "startedDateTime": iso_time(started_at + x.t_request),
        "time": 0.0,
        "request": _har_request(x, body),
        "response": _har_response(x),
        "cache": {},
        "timings": _har_timings(x),
        "_proxycheck_times": {"request": x.t_request, "response": x.t_response, "end": x.t_end, "error": x.t_error},
        "_proxycheck_chunks": [[t, n] for t, n in x.chunks],
        "_proxycheck_chunk_timing": x.chunk_timing,
        "_proxycheck_streamed": x.streamed,
        "_proxycheck_xid": x.xid,
    }
    entry["time"] = sum(v for v in entry["timings"].values() if v > 0)
    if x.conn is not None:
        entry["_proxycheck_conn"] = {k: v for k in x.conn.__slots__ if (v := getattr(x.conn, k)) is not None}
        if x.conn.client_id:
            entry["connection"] = x.conn.client_id
    if x.redacted:
        entry["_proxycheck_redacted"] = list(x.redacted)
    if x.in_flight:
        entry["_proxycheck_inflight"] = True
    if (lacking := what_is_not_recorded(x)) is not None:  # no wedge: the recording lacks part of it
        entry["_proxycheck_not_recorded"] = lacking
    if x.ws or x.ws_close is not None:  # a WebSocket session: its messages as Chrome writes them
        entry["_resourceType"] = "websocket"
        entry["_webSocketMessages"] = [_har_message(m, started_at) for m in x.ws]
        if x.ws_close is not None:
            c = x.ws_close
            entry["_proxycheck_ws_close"] = {"t": c.t, "by": c.by, "code": c.code, "reason": c.reason}
    return entry


def _har_message(m: WsMessage, started_at: float) -> dict[str, Any]:
    """One message as Chrome's HAR has it (`time` in epoch seconds, `opcode` 1 text, 2 binary;
    a binary one's data in base64, as Chrome writes it), its offset kept exactly beside it."""
    data = m.data.decode("utf-8", "surrogatepass") if m.text else base64.b64encode(m.data).decode("ascii")
    return {"type": "send" if m.from_client else "receive", "time": started_at + m.t, "opcode": 1 if m.text else 2,
            "data": data, "_proxycheck_t": m.t}  # fmt: skip


def iso_time(epoch: float) -> str:
    return _dt.datetime.fromtimestamp(epoch, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _har_headers(headers: Sequence[tuple[str, HeaderValue]]) -> list[dict[str, str]]:
    return [{"name": n, "value": REDACTED_TEXT if v is REDACTED else str(v)} for n, v in headers]


def _har_request(x: RecordedExchange, body: bytes) -> dict[str, Any]:
    query = urlsplit(x.url).query
    request: dict[str, Any] = {
        "method": x.method,
        "url": x.url,
        "httpVersion": x.http_version or "",
        "cookies": [],
        "headers": _har_headers(x.request_headers),
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(query, keep_blank_values=True)],
        "headersSize": -1,
        "bodySize": len(body),
    }
    if body or x.method in ("POST", "PUT", "PATCH"):
        ctype = x.request_header("content-type")
        request["postData"] = {"mimeType": ctype if isinstance(ctype, str) else "", **_text_fields(body)}
    return request


def _har_response(x: RecordedExchange) -> dict[str, Any]:
    ctype = x.response_header("content-type")
    response: dict[str, Any] = {
        # In flight: no complete response, which HAR readers know as status 0.
        "status": 0 if x.status is None or x.in_flight else x.status,
        "statusText": x.reason or "",
        "httpVersion": x.http_version or "",
        "cookies": [],
        "headers": _har_headers(x.response_headers),
        "content": {
            "size": len(x.response_body),
            "mimeType": ctype if isinstance(ctype, str) else "",
            **_text_fields(x.response_body),
        },
        "redirectURL": "",
        "headersSize": -1,
        "bodySize": len(x.response_body) if x.status is not None else -1,
    }
    if x.in_flight and x.status is not None:
        response["_proxycheck_status"] = x.status
    if x.error is not None:
        response["_error"] = x.error
    return response


def _text_fields(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"text": base64.b64encode(data).decode("ascii"), "encoding": "base64"}


def _har_timings(x: RecordedExchange) -> dict[str, float]:
    """send 0, wait = headers - request, receive = end - headers (ms); unknown parts 0."""
    last = x.t_end if x.t_end is not None else x.t_error
    if last is None and x.chunks:
        last = x.chunks[-1][0]
    if x.t_response is None:
        wait = 0.0 if last is None else last - x.t_request
        receive = 0.0
    else:
        wait = x.t_response - x.t_request
        receive = 0.0 if last is None else last - x.t_response
    return {
        "blocked": -1, "dns": -1, "connect": -1, "ssl": -1, "send": 0.0,
        "wait": round(max(wait, 0.0) * 1000, 3), "receive": round(max(receive, 0.0) * 1000, 3),
    }  # fmt: skip
