"""The Responses API's WebSocket mode, the reference engine's side of it: what a client's message
asks for, and the messages the engine answers with.

A client opens one WebSocket on `GET /v1/responses` and, for each turn, sends a text message
`{"type": "response.create", ...}` whose other members are the Responses create body (`stream`
is implied; `stream` and `background` are ignored when sent). The engine answers with the
events the SSE stream of `POST /v1/responses` carries, each event's JSON one text message, up to
the terminal one; a turn it refuses gets one `error` event in the API's shape
(`{"type": "error", "status": 400, "error": {"type", "code", "message", "param"}}`) and the
socket stays open. A create with `generate: false` (a warm-up) is answered with nothing
generated (`synth.warmup`).

The digest headers of an HTTP answer (`wire.received_headers`, `x-proxycheck-turn`) cannot ride
on a message: the first message of each turn (`response.created`, or the `error` event) carries
them, the same names and values, in a member of its own, `DIGEST_MEMBER`, which clients ignore.
What they describe is the client's message as received (its UTF-8 bytes); what the model sees of
it is what it sees of the same create body sent by POST (`type` is not part of it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from proxycheck.core.testbed.wire import Wire

CREATE = "response.create"
# The member of a turn's first message that says what the engine received.
DIGEST_MEMBER = "proxycheck"
# Members of a create message that are not the create body.
_NOT_BODY = ("type",)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A message the engine answers with an `error` event (the socket stays open)."""

    status: int
    code: str
    message: str
    param: str | None = None


def read_message(data: str | bytes, *, binary: bool = False) -> tuple[dict[str, Any], Any] | Refusal:
    """A client's message: (the create body, the parsed message) for `response.create`, else
    the refusal it gets."""
    if binary:
        return Refusal(400, "invalid_message", "binary messages are not accepted: send each event as a text message")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return Refusal(400, "invalid_json", "the message is not JSON")
    if not isinstance(doc, dict):
        return Refusal(400, "invalid_json", "the message is not a JSON object", None)
    kind = doc.get("type")
    if kind != CREATE:
        shown = json.dumps(kind)[:80] if kind is not None else "missing"
        return Refusal(400, "invalid_value", f"unknown event type {shown}: the one supported is {CREATE!r}", "type")
    return {k: v for k, v in doc.items() if k not in _NOT_BODY}, doc


def error_event(status: int, error: Mapping[str, Any]) -> dict[str, Any]:
    """The `error` event for a refused turn: `error` holds type, code, message and param."""
    return {"type": "error", "status": status, "error": dict(error)}


def refusal_error(refusal: Refusal) -> dict[str, Any]:
    kind = "invalid_request_error" if refusal.status < 500 else "server_error"
    return error_event(refusal.status, {"type": kind, "code": refusal.code, "message": refusal.message,
                                        "param": refusal.param})  # fmt: skip


def status_error(status: int, message: str) -> dict[str, Any]:
    """An `error` event for an HTTP-like status (the engine's `status` fault)."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return error_event(status, {"type": kind, "code": None, "message": message, "param": None})


def event_messages(encoded: Wire) -> tuple[tuple[int, str], ...]:
    """The events of a Responses SSE answer (`wire.openai_responses`) as WebSocket messages:
    (step, the event's JSON) each; the JSON carries the event's `type`."""
    out = []
    for step, data in encoded.events:
        _, sep, rest = data.partition(b"\ndata: ")
        if not sep or not rest.endswith(b"\n\n"):
            raise ValueError("not a Responses SSE event")  # every event the encoder writes is one
        out.append((step, rest[:-2].decode()))
    return tuple(out)


def with_digest(message: str | Mapping[str, Any], digest: Mapping[str, str]) -> str:
    """The message (JSON text, or a document) with `DIGEST_MEMBER` saying what was received."""
    doc = json.loads(message) if isinstance(message, str) else dict(message)
    doc[DIGEST_MEMBER] = dict(digest)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
