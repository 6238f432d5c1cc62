"""mitmproxy `.flow` dumps (`mitmdump -w FILE`) -> recordings.

This module owns reading mitmproxy's own format with `mitmproxy.io.FlowReader` (it migrates
dumps of older mitmproxy versions; 11.x and 12.x are both supported) and turning HTTP flows into
the neutral `proxycheck.io.har.Imported` exchanges that `write_recording` journals. Flows that
are not HTTP (TCP, UDP, DNS) are left out, with one warning. A WebSocket session keeps its
messages, each with its time, and how its socket ended (`flow.websocket`), as the recorder
journals them.

Times come from mitmproxy's timestamps: the request at `request.timestamp_start`, the response
headers at `response.timestamp_start`, the body as ONE chunk at `response.timestamp_end`
(mitmproxy keeps no chunk arrival times, so the chunk is marked `chunk_timing=False`), the end at
the same time, and `flow.error` as an error. Bodies are the bytes on the wire (`raw_content`),
headers as they were. A response that was streamed through (`flow.response.stream`) has no body
in the dump: it is imported with its headers and an empty body, and a warning says so.

The whole file is read before anything is written, so a truncated or foreign file is one
`BadInput` naming the file, and no half recording is left behind. Warnings name flows as
`flow[I]` (I counts from 0, in file order).

The file's framing is checked before mitmproxy reads it (`_check_framing`): a dump is a sequence
of tnetstring dictionaries, each `LENGTH:DATA}`. A length prefix beyond the end of the file (a
truncated dump, or damage announcing terabytes, which mitmproxy would try to allocate) and an item
that is not a dictionary are one BadInput naming the file, the flow and the byte offset; so is a
dictionary mitmproxy cannot make a flow of.
"""

from __future__ import annotations

import os
from typing import Any

from proxycheck.core.errors import BadInput
from proxycheck.core.recording.capture import ConnectionBook, header_text
from proxycheck.core.recording.websocket import ABNORMAL, WsClose, WsMessage
from proxycheck.io.har import Imported, ImportedResponse, ImportResult, check_importable

# The tnetstring type of each top-level item a dump holds: a dictionary (a flow's state).
_DICT = ord("}")
_TYPE_NAMES = {ord(","): "a byte string", ord(";"): "a text string", ord("#"): "an integer", ord("^"): "a float",
               ord("!"): "a boolean", ord("~"): "a null", ord("]"): "a list"}  # fmt: skip
_MAX_DIGITS = 12  # as mitmproxy's reader: a longer length prefix is not a tnetstring
# What mitmproxy may raise on a dictionary that is no flow it knows (a damaged or foreign state).
_STATE_ERRORS = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError,
                 UnicodeError, MemoryError)  # fmt: skip


def read_flows(path: str | os.PathLike[str]) -> ImportResult:
    """The HTTP exchanges of a mitmproxy dump (all of them; `ImportResult.keep` filters)."""
    name = str(path)
    flows = _read_all(name)
    warnings: list[str] = []
    http_flows = [(i, f) for i, f in enumerate(flows) if _is_http(f)]
    others = len(flows) - len(http_flows)
    if others:
        warnings.append(f"{name}: {others} flow(s) that are not HTTP (TCP, UDP, DNS) left out")
    starts = [f.request.timestamp_start for _, f in http_flows if f.request.timestamp_start]
    started_at = min(starts, default=0.0)
    result = ImportResult(started_at, [], warnings, {"imported_from": name, "format": "mitmproxy-flow"})
    servers = _server_facts([f for _, f in http_flows])
    for i, f in http_flows:
        where = f"{name}: flow[{i}]"
        try:
            x = _exchange(f, where, started_at, warnings)
            x.conn = {**(x.conn or {}), **servers.get(id(f), {})} or None
            check_importable(x)
            result.exchanges.append(x)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:
            warnings.append(f"{where}: malformed flow ({type(exc).__name__}: {exc}); skipped")
    result.exchanges.sort(key=lambda x: x.t_request)
    return result


def _read_all(name: str) -> list[Any]:
    from mitmproxy import exceptions
    from mitmproxy.io import FlowReader

    flows: list[Any] = []
    try:
        with open(name, "rb") as f:
            _check_framing(f, name)
            f.seek(0)
            for flow in FlowReader(f).stream():
                flows.append(flow)
    except OSError as exc:
        raise BadInput(name, f"cannot read: {exc.strerror or exc}") from None
    except exceptions.FlowReadException as exc:
        detail = str(exc) or "invalid data"
        raise BadInput(name, f"not a readable mitmproxy flow file (flow[{len(flows)}]: {detail}; truncated or "
                             "not a dump?)") from None  # fmt: skip
    except _STATE_ERRORS as exc:
        raise BadInput(name, f"not a readable mitmproxy flow file (flow[{len(flows)}] is not a flow mitmproxy "
                             f"knows: {type(exc).__name__}: {str(exc)[:200]})") from None  # fmt: skip
    return flows


def _check_framing(f: Any, name: str) -> None:
    """Each top-level tnetstring of the dump is `LENGTH:DATA}` and lies inside the file; BadInput
    naming the flow and its byte offset otherwise. Reads only the prefixes (seeks over the data)."""
    size = os.fstat(f.fileno()).st_size
    head = f.read(4)
    if head.startswith(b"\xef\xbb\xbf{") or head.startswith(b"{"):
        return  # a HAR file named .flow: mitmproxy's reader reads those itself
    f.seek(0)
    index = 0
    while True:
        at = f.tell()
        digits = b""
        c = f.read(1)
        if not c:
            return
        while c.isdigit() and len(digits) <= _MAX_DIGITS:
            digits += c
            c = f.read(1)
        if len(digits) > _MAX_DIGITS:
            raise BadInput(name, f"not a readable mitmproxy flow file (flow[{index}] at byte {at} announces a "
                                 f"length of more than {_MAX_DIGITS} digits)")  # fmt: skip
        if not digits or c != b":":
            raise BadInput(name, f"not a readable mitmproxy flow file (flow[{index}] at byte {at} has no length "
                                 "prefix, LENGTH:DATA)")  # fmt: skip
        length = int(digits)
        end = f.tell() + length  # the type byte's offset
        if end >= size:
            left = max(size - f.tell(), 0)
            raise BadInput(name, f"not a readable mitmproxy flow file (truncated: flow[{index}] at byte {at} "
                                 f"announces {length} bytes, the file ends {left} bytes later)")  # fmt: skip
        f.seek(end)
        kind = f.read(1)[0]
        if kind != _DICT:
            what = _TYPE_NAMES.get(kind, f"of unknown type {chr(kind)!r}")
            raise BadInput(name, f"not a readable mitmproxy flow file (flow[{index}] at byte {at} is {what}, "
                                 "not a dictionary: a flow)")  # fmt: skip
        index += 1


def _is_http(flow: Any) -> bool:
    from mitmproxy import http

    return isinstance(flow, http.HTTPFlow) and flow.request is not None


def _exchange(f: Any, where: str, started_at: float, warnings: list[str]) -> Imported:
    request = f.request
    t_request = request.timestamp_start - started_at
    x = Imported(
        where=where,
        t_request=t_request,
        method=request.method,
        url=header_text(request.url),
        http_version=request.http_version or None,
        headers=_headers(request.headers),
        body=request.raw_content or b"",
        conn=_conn(f),
    )
    if request.raw_content is None:
        warnings.append(f"{where}: the request body was streamed and not kept; imported empty")
    t_last = (request.timestamp_end or request.timestamp_start) - started_at
    if f.response is not None:
        t_last = _response(x, f.response, started_at, where, warnings)
    if f.websocket is not None:
        t_last = _socket(x, f.websocket, started_at, t_last)
    if f.error is not None:
        x.error = f.error.msg or "error"
        x.t_error = max((f.error.timestamp or 0.0) - started_at, t_last)
    elif f.websocket is not None and x.ws_close is not None and not x.ws_close.clean:
        # A cut without a close frame (wsproto's 1006): the side whose connection dropped.
        x.error, x.t_error = ("client" if f.websocket.closed_by_client else "server") + " disconnected", t_last
    elif f.response is not None and (f.response.timestamp_end or f.websocket is not None):
        x.t_end = t_last
    return x


def _socket(x: Imported, ws: Any, started_at: float, t_last: float) -> float:
    """A WebSocket session's messages (each with its time) and how its socket ended, as the
    recorder journals them (`proxycheck.hops.record_ws`); returns the offset of its end."""
    for m in ws.messages:
        t = (m.timestamp or started_at) - started_at
        x.ws.append(WsMessage(t, bool(m.from_client), bytes(m.content), bool(m.is_text)))
        t_last = max(t_last, t)
    if ws.timestamp_end is not None or ws.close_code is not None:
        end = max((ws.timestamp_end or 0.0) - started_at, t_last)
        code = ws.close_code
        if code is None or code == ABNORMAL:
            x.ws_close = WsClose(end, None, ABNORMAL, ws.close_reason or "")
        else:
            x.ws_close = WsClose(end, "client" if ws.closed_by_client else "server", code, ws.close_reason or "")
        t_last = end
    return t_last


def _response(x: Imported, response: Any, started_at: float, where: str, warnings: list[str]) -> float:
    """Fill in the response; returns the offset of its last known moment."""
    t_headers = (response.timestamp_start or started_at) - started_at
    headers = _headers(response.headers)
    ctype = response.headers.get("content-type", "")
    body = response.raw_content
    x.response = ImportedResponse(
        t=t_headers,
        status=response.status_code,
        reason=header_text(response.reason) if response.reason else None,
        headers=headers,
        http_version=response.http_version or None,
        streamed=body is None or "event-stream" in ctype.lower(),
    )
    t_last = max((response.timestamp_end or 0.0) - started_at, t_headers)
    if body is None:
        warnings.append(
            f"{where}: the response was streamed through and mitmproxy kept no body; "
            "imported with its headers and an empty body"
        )
    elif body:
        x.chunks = [(t_last, body)]
    return t_last


def _headers(headers: Any) -> list[tuple[str, str]]:
    return [(header_text(k), header_text(v)) for k, v in headers.items(multi=True)]


def _conn(f: Any) -> dict[str, Any] | None:
    """The client side of an exchange, as the recorder notes it with the request."""
    out: dict[str, Any] = {}
    client = f.client_conn
    if client is not None and client.id:
        out["client_id"] = client.id
        out["tls"] = bool(client.tls_established)
    if f.request.http_version:
        out["http_version"] = f.request.http_version
    return out or None


def _server_facts(flows: list[Any]) -> dict[int, dict[str, Any]]:
    """The server side of each flow that reached a server, as the recorder notes it: the server
    connection, whether the exchange reused it and how long it sat idle before. The flows' begin
    (request sent) and end moments are replayed through the recorder's own bookkeeping."""
    events: list[tuple[float, int, Any]] = []
    for f in flows:
        server = f.server_conn
        if server is None or not server.timestamp_start or not server.id:
            continue
        events.append((f.request.timestamp_end or f.request.timestamp_start, 1, f))
        done = (f.response.timestamp_end if f.response is not None else None) or (f.error.timestamp if f.error else None)
        if done:
            events.append((done, 0, f))  # at the same moment, an end comes before a begin
    book = ConnectionBook()
    out: dict[int, dict[str, Any]] = {}
    for t, kind, f in sorted(events, key=lambda e: (e[0], e[1])):
        server = f.server_conn
        if kind == 0:
            book.end(server.id, t)
            continue
        reused, idle = book.begin(server.id, t)
        facts: dict[str, Any] = {"server_id": server.id, "server_reused": reused}
        if idle is not None:
            facts["server_idle"] = round(idle, 6)
        peer = _address(server.peername) or _address(server.address)
        if peer:
            facts["peer"] = peer
        out[id(f)] = facts
    return out


def _address(address: Any) -> str | None:
    if not address:
        return None
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
