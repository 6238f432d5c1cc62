"""The recorder: a mitmproxy addon that journals the LLM exchanges passing through a proxy.

This module owns the recorder hop: `mitmdump -s addons/record.py --set proxycheck_out=DIR` (or
this file itself with `-s`), in mitmdump, mitmweb or mitmproxy, in regular, reverse and upstream
modes, over HTTP/1.1 and HTTP/2, plain or TLS, on mitmproxy 11.0.x and 12.x. What it writes is
the recording format of `proxycheck.core.recording.journal`, through `proxycheck.io.storage`'s
`RecordingWriter` (which redacts, and makes files 0600 and directories 0700). Which responses
are teed, how chunk bursts are merged and the connection bookkeeping are pure rules in
`proxycheck.core.recording.capture`.

How each requirement maps onto mitmproxy's hooks (checked in
`mitmproxy/proxy/layers/http/__init__.py`, 11.0.2 and 12.3.1):

* Options (`load`, `configure`): declared with `loader.add_option`; `configure` validates their
  values (a filter that does not parse, a bad header name) and raises `OptionsError`, which makes
  mitmdump exit with that message, as every addon's `--set` does. It (re)opens the writer when
  the output, point, redaction or session options change. No output directory: the recorder stays idle
  and says so once. What is found in the output directory never stops mitmdump: a path that is a
  file, a recording of a newer format, an unreadable or damaged recording.json, a journal that is
  a directory (`proxycheck.io.storage.check_appendable`, which `proxycheck record` asks too, before
  it starts mitmdump) is one warning naming the path and the problem, and traffic passes
  unrecorded, at start-up as when the options change while it runs.
* The point (`configure`, `request`): `proxycheck_point` names the point of observation this
  recorder is (1-64 characters of letters, digits and `. _ : @ [ ] -`, else OptionsError); empty,
  the point is named after the address the client connected to (`flow.client_conn.sockname`,
  `HOST:PORT`, IPv6 as `[HOST]:PORT`: the real port also when listening on port 0) on the first
  recorded request. recording.json keeps it (`point`, with the host name). One recording holds
  one point: a recording made at another point is refused as every unusable directory is (one
  warning, traffic passes unrecorded), at open for a named point, at the first request for a
  derived one (nothing is written into it then); an older recording without a point takes this
  one. A changed `proxycheck_point` reopens the writer, as a changed output does.
* What is recorded (`request`): by default the paths `dialects.detect` recognizes (LLM
  generation endpoints); `proxycheck_filter` takes a mitmproxy filter expression instead. Other
  flows pass untouched. A request carrying `x-proxycheck-replay` (a proxycheck replay) is never
  recorded, only counted, and the count is logged at shutdown; nor is a flow mitmproxy itself
  replays (`flow.is_replay`, e.g. the replay button of mitmweb): it is not the client's traffic.
* Journaled at arrival (`request`): the exchange is written when the request is complete, before
  it goes upstream, so a request that never gets an answer is in the recording (in flight).
  Large bodies are journaled in a worker thread so the proxy's event loop keeps streaming
  other flows meanwhile (the hook is async: awaiting delays only this flow).
* Streams pass through untouched (`responseheaders`): mitmproxy buffers a response unless
  `flow.response.stream` is set in this hook. SSE and chunked NDJSON (and anything mitmproxy
  will stream anyway: `stream_large_bodies`, another addon's stream callable) get a tee as the
  stream callable: each chunk is passed on as it is, its arrival time and bytes are held in
  memory, and the flush timer hands them to the writer. The tee never withholds: it returns the
  chunk itself, never `b""` (which ends a chunked HTTP/1 body on mitmproxy 11), except for the
  final end-of-message call. A callable another addon set first is composed with, not replaced:
  the tee records what that callable returns, which is what the client gets. Other responses
  are buffered by mitmproxy as usual and recorded whole in `response`.
* WebSocket sessions (`websocket_message`, `websocket_end`, `proxycheck.hops.record_ws`): an
  upgrade mitmproxy agreed to is not ended by `response` but by its socket's end; every whole
  message is journaled as it passes (a client message's credentials redacted), then how the
  socket ended (a close frame, or a cut).
* Requests that mitmproxy streams (`requestheaders`, only under `stream_large_bodies`): a
  request tee collects the body as it passes, since mitmproxy keeps no streamed bytes.
* Ends (`response`, `error`): `response` runs once the upstream body has ended (for a streamed
  response, just before mitmproxy sends the end of the message) and writes `end`; `error`
  (resets, timeouts, killed flows, clients that left) writes `error` with mitmproxy's message.
* Survives wedges and crashes (`running`, `done`): a timer task started in `running` writes the
  held chunks and flushes the writer every half second, so kill -9 loses at most the last
  second; `done` (SIGINT, SIGTERM, a script reload) stops the timer, writes what is held and
  closes the writer, which marks the exchanges still in flight as interrupted.
* Connection facts (`request`, `responseheaders`, `response`/`error`, `server_disconnected`):
  the `req` record carries the client side (`client_id`, `http_version`, `tls`); the `resp`
  record the server side, known once headers came (`server_id`, `server_reused`,
  `server_idle`: how long the connection sat idle since its previous exchange ended, and `peer`:
  the address at the other end of the upstream connection, the upstream proxy in upstream
  mode). Reuse is tracked per server connection id over every flow, recorded or not, and
  forgotten when the connection closes.
* Never breaks traffic: every hook is wrapped. An exception while recording a flow is logged
  once, recording of that flow stops (its exchange gets an `error` record saying so, when the
  writer can still write) and the flow goes on byte-identical. A `StorageError` (unwritable
  directory, full disk) is one warning; recording stops and traffic goes on, and the writer notes
  in the recording which exchanges were in flight then (not recorded to the end, not a wedge).

Cost per streamed chunk (it runs on the loop that carries every flow): the tee appends the
chunk and a `time.monotonic()` to a list. The writer's work, a few microseconds a chunk, is done
on the timer, after bursts of chunks that arrived within `COALESCE` seconds of each other are
merged into one (`capture.coalesce`): under full load mitmproxy hands over tens of thousands of
chunks a second, far finer than any timing analysis resolves.

Times: mitmproxy's own timestamps (request start, response headers, response end) are wall
clock; they are converted to offsets on the writer's monotonic clock by their age, so one
recording never mixes two clocks. Chunk arrivals and ends are read from the monotonic clock.
"""

# No `from __future__ import annotations` here: mitmproxy runs a `-s` script without putting it
# in sys.modules, and dataclasses then cannot resolve string annotations (see docs/mitmproxy.md).
import asyncio
import ipaddress
import logging
import time
import weakref
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import ctx, exceptions, flowfilter, http
from mitmproxy.addonmanager import Loader
from mitmproxy.proxy.server_hooks import ServerConnectionHookData
from mitmproxy.utils import human
from mitmproxy.version import VERSION as MITMPROXY_VERSION

from proxycheck.core.errors import BadInput, ProxycheckError, StorageError
from proxycheck.core.protocol import dialects
from proxycheck.core.protocol.httpsyntax import HEADER_NAME
from proxycheck.core.recording.capture import ConnectionBook, coalesce, header_text, safe_mode, tee_response
from proxycheck.core.recording.journal import POINT_NAME, point_name_problem
from proxycheck.core.recording.redact import RedactionPolicy
from proxycheck.core.recording.sessions import DEFAULT_SESSION_HEADERS
from proxycheck.core.replay.marker import REPLAY_HEADER
from proxycheck.hops import record_ws
from proxycheck.io.storage import RecordingWriter, check_appendable

__all__ = ["REPLAY_HEADER", "Recorder", "RecorderConfig", "addons", "listen_point", "parse_config"]

logger = logging.getLogger(__name__)

PREFIX = "proxycheck_"
FLUSH_EVERY = 0.5  # seconds between timer flushes: kill -9 loses at most about this much
COALESCE = 0.001  # chunks arriving within this many seconds of each other are journaled as one
HOLD_MAX = 256 << 10  # bytes held for one exchange before they go to the writer without the timer
THREAD_BODY = 256 << 10  # request bodies at least this large are journaled in a worker thread

# (name without PREFIX, type, default, help)
_OPTIONS: tuple[tuple[str, Any, Any, str], ...] = (
    ("out", str, "", "Directory of the recording the proxycheck recorder writes (empty: the recorder is idle)."),
    (
        "filter",
        str,
        "",
        "Record the flows matching this mitmproxy filter expression instead of the LLM API paths "
        "proxycheck knows (evaluated when the request is complete).",
    ),
    (
        "point",
        str,
        "",
        "The name of this recorder's point of observation, kept in the recording (1-64 characters of letters, "
        "digits and . _ : @ [ ] -; empty: the address clients connect to, HOST:PORT).",
    ),
    ("redact", bool, True, "Redact credentials (headers, query parameters, body paths) before they are written."),
    ("redact_headers", Sequence[str], [], "More request and response header names whose values are redacted."),
    ("redact_query", Sequence[str], [], "More URL query parameter names whose values are redacted."),
    (
        "redact_body",
        Sequence[str],
        [],
        "Dotted JSON paths in request bodies whose values are redacted (e.g. metadata.api_key).",
    ),
    (
        "session_header",
        Sequence[str],
        list(DEFAULT_SESSION_HEADERS),
        "Request headers that name the session of a request; stored in the recording's metadata.",
    ),
)
_NAMES = frozenset(name for name, *_ in _OPTIONS)


@dataclass(frozen=True, slots=True)
class RecorderConfig:
    """The validated options (names without PREFIX)."""

    out: str = ""
    filter: str = ""
    point: str = ""  # empty: named after the listen address on the first recorded request
    redact: bool = True
    redact_headers: tuple[str, ...] = ()
    redact_query: tuple[str, ...] = ()
    redact_body: tuple[str, ...] = ()
    session_header: tuple[str, ...] = DEFAULT_SESSION_HEADERS

    @property
    def policy(self) -> RedactionPolicy:
        if not self.redact:
            return RedactionPolicy.off()
        return RedactionPolicy.default().extended(self.redact_headers, self.redact_query, self.redact_body)

    def needs_new_writer(self, other: "RecorderConfig") -> bool:
        """Whether going from `other` to this needs the recording reopened (the filter does not)."""
        def reopened_by(c: "RecorderConfig") -> tuple[Any, ...]:
            return (c.out, c.point, c.policy, c.session_header)

        return reopened_by(self) != reopened_by(other)


def parse_filter(expr: str) -> Any:
    """A mitmproxy filter expression, parsed; ValueError (naming it) when mitmproxy refuses it."""
    try:
        return flowfilter.parse(expr)
    except ValueError:
        raise ValueError(f"{expr!r} is not a mitmproxy filter expression") from None


def parse_config(options: Any) -> tuple[RecorderConfig, Any]:
    """The recorder's options validated, and the parsed filter (None: the LLM paths); one
    OptionsError names every bad value."""
    raw = {name: getattr(options, PREFIX + name) for name in _NAMES}
    problems: list[str] = []
    out = raw["out"].strip()  # what is at that path is not an option's value: `_open_writer` checks it
    expr = raw["filter"].strip()
    parsed = None
    if expr:
        try:
            parsed = parse_filter(expr)
        except ValueError as exc:
            problems.append(f"{PREFIX}filter: {exc}")
    point = raw["point"]
    if point and (problem := point_name_problem(point)) is not None:
        problems.append(f"{PREFIX}point: {problem}")
    problems += _bad_names(raw)
    if problems:
        raise exceptions.OptionsError("; ".join(problems))
    config = RecorderConfig(
        out=out,
        filter=expr,
        point=point,
        redact=raw["redact"],
        redact_headers=tuple(raw["redact_headers"]),
        redact_query=tuple(raw["redact_query"]),
        redact_body=tuple(raw["redact_body"]),
        session_header=tuple(raw["session_header"]),
    )
    return config, parsed


def _bad_names(raw: dict[str, Any]) -> list[str]:
    """Problems with the header names, query names and body paths among the options."""
    problems = []
    checks: tuple[tuple[str, Callable[[str], bool], str], ...] = (
        ("redact_headers", lambda v: bool(HEADER_NAME.fullmatch(v)), "a header name"),
        ("session_header", lambda v: bool(HEADER_NAME.fullmatch(v)), "a header name"),
        ("redact_query", lambda v: bool(v) and not set(v) & set("&=#"), "a query parameter name"),
        ("redact_body", lambda v: all(v.split(".")), "a dotted JSON path"),
    )
    for name, ok, what in checks:
        bad = [v for v in raw[name] if not ok(v)]
        if bad:
            problems.append(f"{PREFIX}{name}: {', '.join(map(repr, bad))} is not {what}")
    return problems


# ------------------------------------------------------------------------------------------------
# per-flow state


@dataclass(slots=True, eq=False)
class _Capture:
    """One recorded exchange while its flow is alive."""

    writer: RecordingWriter  # the recording it was journaled in (options may change meanwhile)
    xid: int
    what: str  # "METHOD path", for log lines
    tee: Callable[[bytes], Any] | None = None  # the response tee, as set as the stream callable
    streamed: bool = False
    stopped: bool = False  # finished, or recording it failed: nothing more is written for it
    # Chunks not yet given to the writer, and their time.monotonic() arrivals: a list of bytes
    # and an array of floats, so holding a chunk allocates no object the garbage collector tracks.
    held: list[bytes] = field(default_factory=list)
    held_times: array = field(default_factory=lambda: array("d"))
    held_bytes: int = 0


@dataclass(slots=True, eq=False)
class _RequestTee:
    """Collects a request body that mitmproxy streams upstream (it keeps none of it)."""

    inner: Callable[[bytes], Any] | None
    body: bytearray = field(default_factory=bytearray)

    def __call__(self, chunk: bytes) -> Any:
        out, parts = _sendable(chunk if self.inner is None else self.inner(chunk))
        for part in parts:
            self.body += part
        return out


def _limit(option: str) -> int | None:
    """A size option of mitmproxy in bytes (None when unset or not parseable)."""
    try:
        return human.parse_size(getattr(ctx.options, option, None))
    except ValueError:
        return None


def _content_length(headers: http.Headers) -> int | None:
    if "transfer-encoding" in headers:
        return None
    try:
        return int(headers.get("content-length", ""))
    except ValueError:
        return None


def _headers(headers: http.Headers) -> list[tuple[str, str]]:
    return [(header_text(k), header_text(v)) for k, v in headers.items(multi=True)]


def _address(address: Any) -> str | None:
    if not address:
        return None
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _sendable(out: Any) -> tuple[Any, tuple[bytes, ...]]:
    """What another addon's stream callable returned (bytes or an iterable of bytes), as what
    to pass on to mitmproxy and the bytes in it."""
    if isinstance(out, (bytes, bytearray)):
        return out, (bytes(out),) if out else ()
    sent = list(out)  # an iterable may be one-shot: send and record the same parts
    return sent, tuple(bytes(part) for part in sent if part)


def _take_held(capture: _Capture) -> tuple[list[bytes], array]:
    """The chunks an exchange holds and their times, emptying its buffers in place (the tee
    holds on to those very objects)."""
    chunks, times = capture.held[:], capture.held_times[:]
    del capture.held[:], capture.held_times[:]
    capture.held_bytes = 0
    return chunks, times


def listen_point(sockname: Any) -> str | None:
    """The point name of a listen address (a socket's address tuple): "HOST:PORT", IPv6 as
    "[HOST]:PORT", an IPv4-mapped IPv6 address as IPv4, a link-local scope left out; None when it
    is no IP address (a Unix socket, a mode without one)."""
    if not isinstance(sockname, tuple) or len(sockname) < 2 or not isinstance(sockname[1], int):
        return None
    try:
        ip = ipaddress.ip_address(str(sockname[0]).split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    name = f"[{ip.compressed}]:{sockname[1]}" if ip.version == 6 else f"{ip.compressed}:{sockname[1]}"
    return name if POINT_NAME.fullmatch(name) else None


def _offset(writer: RecordingWriter, wall: float | None) -> float:
    """The writer-clock offset of a mitmproxy wall-clock timestamp, found from its age."""
    now = writer.now()
    if wall is None:
        return now
    return now - max(0.0, time.time() - wall)


class Recorder:
    """The recorder addon (see the module docstring for how it uses mitmproxy's hooks)."""

    def __init__(self) -> None:
        self.config = RecorderConfig()
        self.writer: RecordingWriter | None = None
        self._point_known = False  # the writer's point is this recorder's (named by the option or checked)
        self._filter: Any = None  # a parsed mitmproxy filter, None for the LLM paths
        self._captures: weakref.WeakKeyDictionary[http.HTTPFlow, _Capture] = weakref.WeakKeyDictionary()
        self._request_tees: weakref.WeakKeyDictionary[http.HTTPFlow, _RequestTee] = weakref.WeakKeyDictionary()
        self._holding: set[_Capture] = set()  # captures with chunks not yet given to their writer
        self._book = ConnectionBook()
        self._timer: asyncio.Task[None] | None = None
        self._warned: set[str] = set()
        self.replayed = 0  # requests skipped for carrying REPLAY_HEADER
        self.recorded = 0  # exchanges journaled in the current writer

    # ---------------------------------------------------------------------------------------
    # options and lifecycle

    def load(self, loader: Loader) -> None:
        for name, typespec, default, help_text in _OPTIONS:
            loader.add_option(PREFIX + name, typespec, default, help_text)

    def configure(self, updated: set[str]) -> None:
        if not any(name.startswith(PREFIX) and name[len(PREFIX) :] in _NAMES for name in updated):
            return
        config, parsed = parse_config(ctx.options)
        old, self.config, self._filter = self.config, config, parsed
        if self.writer is None or config.needs_new_writer(old):
            self._open_writer()

    def running(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().create_task(self._flush_loop())

    def done(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._close_writer("mitmproxy stopped")
        if self.replayed:
            logger.info(
                f"proxycheck recorder: {self.replayed} replayed request(s) ({REPLAY_HEADER}) passed through unrecorded"
            )

    def _open_writer(self) -> None:
        self._close_writer("options changed")
        out = self.config.out
        if not out:
            self._warn_once("no-out", f"proxycheck recorder: {PREFIX}out is not set; nothing is recorded")
            return
        source = {
            "recorder": "mitmproxy",
            "mitmproxy": MITMPROXY_VERSION,
            "mode": [safe_mode(m) for m in getattr(ctx.options, "mode", ())],
            "session_headers": list(self.config.session_header),
        }
        point = self.config.point or None  # None: named after the listen address on the first request
        try:
            check_appendable(out, point=point)
            # The monotonic clock, explicitly: held chunk times are converted onto it.
            self.writer = RecordingWriter(out, self.config.policy, source=source, clock=time.monotonic, point=point)
            self._point_known = point is not None
        except ProxycheckError as exc:  # BadInput (what is there), StorageError (cannot write there)
            self._warn_once(f"open:{out}:{exc}", f"proxycheck recorder: {exc}; traffic passes unrecorded")
            return
        except Exception as exc:  # whatever else the directory holds: it must not stop the proxy
            self._warn_once(f"open:{out}:{type(exc).__name__}",
                            f"proxycheck recorder: {out}: cannot open the recording ({type(exc).__name__}: {exc}); "
                            "traffic passes unrecorded")  # fmt: skip
            return
        redaction = "on" if self.config.redact else "OFF"
        what = f"flows matching {self.config.filter!r}" if self.config.filter else "LLM API requests"
        where = f"point {point}" if point else "the point named after the listen address"
        logger.info(f"proxycheck recorder: recording {what} to {out} as {where} (redaction {redaction})")

    def _close_writer(self, reason: str) -> None:
        writer, self.writer = self.writer, None
        if writer is None:
            return
        self._release_all()
        try:
            writer.close(reason)
        except StorageError as exc:
            self._warn_once(f"close:{writer.directory}", f"proxycheck recorder: {exc}")
        logger.info(f"proxycheck recorder: {self.recorded} exchange(s) recorded in {writer.directory}")
        self.recorded = 0

    async def _flush_loop(self) -> None:
        """Write held chunks and flush the writer every FLUSH_EVERY seconds (a stalled stream's
        last chunks would otherwise wait for the next chunk, which never comes)."""
        while True:
            await asyncio.sleep(FLUSH_EVERY)
            self._release_all()
            writer = self.writer
            if writer is None:
                continue
            try:
                writer.flush()
            except StorageError as exc:
                self._storage_failed(writer, exc)
            except Exception:
                self._warn_once("flush", "proxycheck recorder: flushing the recording failed", exc_info=True)

    # ---------------------------------------------------------------------------------------
    # hooks: thin wrappers that keep any exception from reaching mitmproxy

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "requestheaders", self._on_requestheaders)

    async def request(self, flow: http.HTTPFlow) -> None:
        try:
            await self._on_request(flow)
        except Exception as exc:
            self._failed(flow, "request", exc)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "responseheaders", self._on_responseheaders)

    def response(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "response", self._on_response)

    def error(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "error", self._on_error)

    def websocket_message(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "websocket_message", self._on_websocket_message)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        self._guarded(flow, "websocket_end", self._on_websocket_end)

    def server_disconnected(self, data: ServerConnectionHookData) -> None:
        self._book.forget(data.server.id)

    def _guarded(self, flow: http.HTTPFlow, where: str, fn: Callable[[http.HTTPFlow], None]) -> None:
        try:
            fn(flow)
        except Exception as exc:
            self._failed(flow, where, exc)

    def _failed(self, flow: http.HTTPFlow, where: str, exc: Exception) -> None:
        capture = self._captures.get(flow)
        if capture is not None:
            self._capture_failed(capture, where, exc)
        elif isinstance(exc, StorageError):
            self._storage_failed(self.writer, exc)
        else:
            self._log_failure(f"{flow.request.method} {flow.request.path}", where, exc)

    def _capture_failed(self, capture: _Capture, where: str, exc: Exception) -> None:
        """Stop recording this exchange (or, for a StorageError, the whole recording) and log it
        once; its flow goes on as mitmproxy would carry it without the recorder."""
        already = capture.stopped
        capture.stopped = True
        _take_held(capture)
        self._holding.discard(capture)
        if isinstance(exc, StorageError):
            self._storage_failed(capture.writer, exc)
            return
        if already:
            return
        try:  # so that the exchange does not look like a wedge; the writer may be what failed
            capture.writer.error(capture.xid, f"proxycheck recorder failed ({where}: {type(exc).__name__})")
        except Exception:
            pass
        self._log_failure(capture.what, where, exc)

    @staticmethod
    def _log_failure(what: str, where: str, exc: Exception) -> None:
        logger.error(
            f"proxycheck recorder: the {where} hook failed on {what}; this flow goes on unrecorded", exc_info=exc
        )

    def _storage_failed(self, writer: RecordingWriter | None, exc: StorageError) -> None:
        """A disk problem: warn once and stop recording into that writer; traffic goes on. A
        writer that is no longer current was closed on purpose: its late records are moot."""
        if writer is None or writer is not self.writer:
            return
        self.writer = None
        self._warn_once(f"storage:{writer.directory}", f"proxycheck recorder: {exc}; recording stopped, traffic goes on")
        try:
            writer.close("storage error")
        except Exception:
            pass

    def _warn_once(self, key: str, message: str, *, exc_info: bool = False) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        logger.warning(message, exc_info=exc_info)

    # ---------------------------------------------------------------------------------------
    # requests

    def _on_requestheaders(self, flow: http.HTTPFlow) -> None:
        request = flow.request
        if self.writer is None or REPLAY_HEADER in request.headers or flow.is_replay or not self._candidate(flow):
            return
        limit = _limit("stream_large_bodies")
        size = _content_length(request.headers)
        # mitmproxy switches a body of unknown size to streaming only once more than the limit
        # has come in, and then passes the bytes on without keeping them: collect from the start.
        streams = bool(request.stream) or (limit is not None and size != 0 and (size is None or size > limit))
        if not streams:
            return  # mitmproxy buffers it: the `request` hook sees the whole body
        tee = _RequestTee(request.stream if callable(request.stream) else None)
        self._request_tees[flow] = tee
        request.stream = tee

    def _candidate(self, flow: http.HTTPFlow) -> bool:
        """Whether the flow may be recorded, judged from the request line and headers."""
        if self._filter is not None:
            return bool(self._filter(flow))
        return dialects.detect(flow.request.path) is not None

    async def _on_request(self, flow: http.HTTPFlow) -> None:
        writer = self.writer
        request = flow.request
        if writer is None:
            return
        if REPLAY_HEADER in request.headers:
            self.replayed += 1
            return
        if flow.is_replay:
            return
        tee = self._request_tees.pop(flow, None)
        body = bytes(tee.body) if tee is not None else (request.raw_content or b"")
        if not self._wanted(flow, body):
            return
        if not self._point_known and not self._name_point(writer, flow):
            return
        args = (request.method, header_text(request.url), _headers(request.headers), body)
        kwargs: dict[str, Any] = {
            "http_version": request.http_version,
            "conn": {
                "client_id": flow.client_conn.id,
                "http_version": request.http_version,
                "tls": bool(flow.client_conn.tls_established),
            },
            "t": _offset(writer, request.timestamp_start),
        }
        try:
            if len(body) >= THREAD_BODY:
                # Redacting, cutting and writing a large body takes milliseconds: not on the loop
                # that carries every other flow's stream.
                xid = await asyncio.to_thread(writer.request, *args, **kwargs)
            else:
                xid = writer.request(*args, **kwargs)
        except StorageError as exc:
            self._storage_failed(writer, exc)
            return
        self._captures[flow] = _Capture(writer, xid, f"{request.method} {request.path}")
        self.recorded += 1

    def _name_point(self, writer: RecordingWriter, flow: http.HTTPFlow) -> bool:
        """Name the recording's point after the address this request's client connected to (a
        recorder without proxycheck_point, on its first recorded request); False when the
        recording holds another point: refused as at open, nothing written into it. Run on the
        event loop, never in a thread: the first request names the point, the later ones see it."""
        name = listen_point(flow.client_conn.sockname)
        if name is None:
            return True  # no IP address to name it after: the recording stays without a point (its directory names it)
        try:
            writer.name_point(name)
        except BadInput as exc:
            if writer is self.writer:
                self.writer = None
                self._warn_once(f"open:{writer.directory}:{exc}", f"proxycheck recorder: {exc}; traffic passes unrecorded")
                writer.discard()
            return False
        self._point_known = True
        return True

    def _wanted(self, flow: http.HTTPFlow, body: bytes) -> bool:
        if self._filter is not None:
            return bool(self._filter(flow))
        path = flow.request.path
        dialect = dialects.detect(path)
        if dialect == "sglang_generate":  # another engine's /generate is told apart by its body
            dialect = dialects.detect(path, body, flow.request.headers)
        return dialect is not None

    # ---------------------------------------------------------------------------------------
    # responses

    def _on_responseheaders(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        assert response is not None
        server = self._server_facts(flow)
        capture = self._live(flow)
        streamed = tee_response(
            content_type=response.headers.get("content-type"),
            content_length=_content_length(response.headers),
            chunked="chunked" in response.headers.get("transfer-encoding", "").lower(),
            already_streamed=bool(response.stream),
            stream_large_bodies=_limit("stream_large_bodies"),
        )
        if capture is None:
            # Not recorded (a replay passing through, filtered out, not an LLM call): a stream
            # still passes as it comes. Left alone, mitmproxy would buffer it whole.
            if streamed and not response.stream:
                response.stream = True
            return
        capture.writer.response(
            capture.xid,
            response.status_code,
            header_text(response.reason) if response.reason else None,
            _headers(response.headers),
            streamed=streamed,
            http_version=response.http_version,
            conn=server,
            t=_offset(capture.writer, response.timestamp_start),
        )
        if streamed:
            capture.streamed = True
            capture.tee = self._tee(capture, response.stream if callable(response.stream) else None)
            response.stream = capture.tee

    def _server_facts(self, flow: http.HTTPFlow) -> dict[str, Any] | None:
        """The server side of the exchange, noted in the book for every flow that reached a
        server (the next exchange on the connection needs to know this one happened)."""
        server = flow.server_conn
        if server is None or server.timestamp_start is None:
            return None  # answered without an upstream (an addon made the response)
        reused, idle = self._book.begin(server.id, flow.request.timestamp_end or time.time())
        facts: dict[str, Any] = {"server_id": server.id, "server_reused": reused}
        if idle is not None:
            facts["server_idle"] = round(idle, 6)
        # In upstream mode the flow's server is the origin and `via` the proxy actually
        # connected to (peername stays None): the peer is whoever is at the other end of the
        # TCP connection.
        via = server.via[1] if server.via else None
        peer = _address(via) or _address(server.peername) or _address(server.address)
        if peer:
            facts["peer"] = peer
        return facts

    def _tee(self, capture: _Capture, inner: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
        """The response stream callable. It runs on mitmproxy's event loop for every chunk, then
        once with b"" at the end of the message: it must be quick and must never withhold."""
        clock = time.monotonic
        held, held_times = capture.held, capture.held_times
        holding = self._holding

        def tee(chunk: bytes) -> Any:
            out = chunk if inner is None else inner(chunk)
            if type(out) is bytes:
                parts: tuple[bytes, ...] = (out,) if out else ()  # b"": the end of the message
            else:
                out, parts = _sendable(out)
            if parts and not capture.stopped:
                try:
                    now = clock()
                    for part in parts:
                        held.append(part)
                        held_times.append(now)
                        capture.held_bytes += len(part)
                    if capture.held_bytes >= HOLD_MAX:
                        self._release(capture)
                    else:
                        holding.add(capture)
                except Exception as exc:
                    self._capture_failed(capture, "stream", exc)
            return out

        return tee

    def _release(self, capture: _Capture) -> None:
        """Give an exchange's held chunks to its writer, bursts merged (see COALESCE)."""
        self._holding.discard(capture)
        chunks, times = _take_held(capture)
        if not chunks or capture.stopped:
            return
        writer = capture.writer
        shift = writer.now() - time.monotonic()  # monotonic time -> recording offset
        for t, data in coalesce(times, chunks, COALESCE):
            writer.data(capture.xid, data, t=t + shift)

    def _release_all(self) -> None:
        for capture in list(self._holding):
            try:
                self._release(capture)
            except Exception as exc:
                self._capture_failed(capture, "flush", exc)

    def _on_response(self, flow: http.HTTPFlow) -> None:
        response = flow.response
        assert response is not None
        self._ended(flow, response.timestamp_end)
        capture = self._live(flow)
        if capture is None:
            return
        if flow.websocket is not None:
            return  # an upgrade agreed to: the socket's end ends the exchange (`record_ws`)
        writer = capture.writer
        if capture.streamed:
            if response.stream is not capture.tee:
                self._tee_lost()
            self._release(capture)
            writer.end(capture.xid)
        else:
            if response.stream:
                self._tee_lost()  # streamed by someone after `responseheaders`: the body went by unseen
            end = _offset(writer, response.timestamp_end)
            writer.data(capture.xid, response.raw_content or b"", t=end)
            writer.end(capture.xid, t=end)
        capture.stopped = True  # kept (weakly, with its flow) so that a late failure finds it

    def _on_websocket_message(self, flow: http.HTTPFlow) -> None:
        capture = self._live(flow)
        if capture is not None:
            record_ws.write_message(capture.writer, capture.xid, flow, _offset)

    def _on_websocket_end(self, flow: http.HTTPFlow) -> None:
        capture = self._live(flow)
        if capture is None:
            return
        record_ws.write_end(capture.writer, capture.xid, flow, _offset)
        capture.stopped = True

    def _tee_lost(self) -> None:
        self._warn_once(
            "tee-lost",
            "proxycheck recorder: another addon set flow.response.stream after the recorder did; such "
            "responses are recorded without (all of) their body. Load the recorder after that addon.",
        )

    def _on_error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow, None)
        self._request_tees.pop(flow, None)
        capture = self._live(flow)
        if capture is None:
            return
        self._release(capture)
        # Without response headers the server facts were never journaled; a request that died
        # on a reused, long-idle connection is the stale keep-alive wedge, so keep them.
        server = self._server_facts(flow) if flow.response is None else None
        capture.writer.error(capture.xid, flow.error.msg if flow.error is not None else "error", conn=server)
        capture.stopped = True

    def _ended(self, flow: http.HTTPFlow, wall: float | None) -> None:
        """Note in the book that the flow's use of its server connection is over."""
        server = flow.server_conn
        if server is not None and server.timestamp_start is not None and flow.response is not None:
            self._book.end(server.id, wall or time.time())

    def _live(self, flow: http.HTTPFlow) -> _Capture | None:
        capture = self._captures.get(flow)
        return capture if capture is not None and not capture.stopped else None


addons = [Recorder()]
