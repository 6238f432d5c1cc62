"""The reference engine's store of its own Responses API answers, for `previous_response_id`.

A Responses request may continue an earlier response by its id instead of resending the
conversation. The engine keeps, for each response it gave while `store` was not false, the
request's own input items, its output items and the id it continued from: a chain, so memory
grows with the conversation, not with its square. `expand` rebuilds the whole conversation of a
request that names a previous response (stored items first, then its own input), which is what
the engine plans on (tool rounds) and counts turns in.

Bounded: the most recently used `capacity` responses (4096 by default); continuing a response
refreshes its whole chain, its oldest response first (so that one is the first of it to go). An id the store does not hold (never given, stored with `store`
false, evicted, or given by an engine that has since restarted) is unknown: the API's 400
(`previous_response_not_found`). An ancestor evicted while its descendant was kept cuts the chain there:
the conversation starts at the oldest response still held.

A WebSocket's memory (the Responses API's WebSocket mode, `responses_socket`) is a store of
its own that keeps every response the socket gave, `store` false too, and falls back to the
engine's store for the ids it did not give: the real API keeps a socket's responses in the
socket's memory and finds the persisted ones (`store` not false) from any connection.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_CAPACITY = 4096


class UnknownResponse(LookupError):
    """A `previous_response_id` the store does not hold."""

    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        self.response_id = response_id

    def error_body(self) -> dict[str, Any]:
        """The API's error body for it (sent with status 400)."""
        return {"error": {"message": f"Previous response with id '{self.response_id}' not found.",
                          "type": "invalid_request_error", "param": "previous_response_id",
                          "code": "previous_response_not_found"}}  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Stored:
    previous: str | None
    items: tuple[Any, ...]  # the request's own input items, then the response's output items


def input_items(req: Mapping[str, Any]) -> list[Any]:
    """A Responses request's `input` as a list of items (a string is one user message)."""
    value = req.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def previous_id(req: Mapping[str, Any]) -> str | None:
    value = req.get("previous_response_id")
    return value if isinstance(value, str) and value else None


class ResponseStore:
    """Responses by id, least recently used first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, fallback: ResponseStore | None = None,
                 keeps_unstored: bool = False) -> None:  # fmt: skip
        self.capacity = capacity
        self._by_id: OrderedDict[str, _Stored] = OrderedDict()
        # Where an id this store does not hold is looked up (a chain may cross from one to it).
        self.fallback = fallback
        self.keeps_unstored = keeps_unstored  # a socket's memory keeps `store: false` answers too

    def _holder(self, response_id: str) -> ResponseStore | None:
        store: ResponseStore | None = self
        while store is not None and response_id not in store._by_id:
            store = store.fallback
        return store

    def __len__(self) -> int:
        return len(self._by_id)

    def history(self, response_id: str) -> list[Any]:
        """The conversation up to and including response `response_id`, oldest item first;
        UnknownResponse when it is not held."""
        if self._holder(response_id) is None:
            raise UnknownResponse(response_id)
        chain: list[tuple[ResponseStore, str]] = []
        seen: set[str] = set()
        at: str | None = response_id
        while at is not None and at not in seen and (holder := self._holder(at)) is not None:
            chain.append((holder, at))
            seen.add(at)
            at = holder._by_id[at].previous
        # Refreshed oldest first, so the oldest ancestor is the first of the chain to go.
        for holder, at in reversed(chain):
            holder._by_id.move_to_end(at)
        return [item for holder, at in reversed(chain) for item in holder._by_id[at].items]

    def expand(self, req: Mapping[str, Any]) -> Mapping[str, Any]:
        """`req` with its conversation in full: unchanged when it names no previous response,
        else with the stored items before its own `input`. UnknownResponse for an unknown id."""
        previous = previous_id(req)
        if previous is None:
            return req
        return {**req, "input": self.history(previous) + input_items(req)}

    def remember(self, response_id: str, req: Mapping[str, Any], output: list[Any]) -> None:
        """Keep a response given to `req` (the request as received, not expanded), unless the
        request said `store: false` (a socket's memory keeps it then too)."""
        if req.get("store") is False and not self.keeps_unstored:
            return
        self._by_id[response_id] = _Stored(previous_id(req), (*input_items(req), *output))
        self._by_id.move_to_end(response_id)
        while len(self._by_id) > self.capacity:
            self._by_id.popitem(last=False)
