"""Events its transport frames itself (`MessageData`: a WebSocket turn's messages) in the exchange
machine: the same outcomes as the SSE stream that carries the same events, and the same watchdogs.
Events in, outcome out, no socket."""

from __future__ import annotations

import json

from proxycheck.core.exchange.machine import (
    BodyData,
    ExchangeMachine,
    MessageData,
    RequestSent,
    ResponseHeaders,
    StreamClosed,
    WatchdogExpired,
)
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.recording.websocket import sse_event

SSE = (("content-type", "text/event-stream"),)
EVENTS = [{"type": "response.created", "response": {"id": "r1"}}]
EVENTS += [{"type": "response.output_text.delta", "item_id": "m1", "delta": w} for w in ("a", "b", "c")]
EVENTS += [{"type": "response.completed", "response": {"id": "r1", "status": "completed", "output": []}}]


def started(wd: Watchdogs = Watchdogs(headers=10.0, stall=2.0)) -> ExchangeMachine:
    m = ExchangeMachine(dialect="openai_responses", streamed=True, watchdogs=wd, request_body=b"{}")
    m.handle(RequestSent(100.0))
    m.handle(ResponseHeaders(100.0, 200, SSE))
    return m


def test_messages_read_as_the_stream_of_the_same_events() -> None:
    by_message, by_stream = started(), started()
    for i, event in enumerate(EVENTS):
        text = json.dumps(event)
        by_message.handle(MessageData(100.1 + i * 0.1, text, len(text)))
        by_stream.handle(BodyData(100.1 + i * 0.1, sse_event(text.encode())))
    assert by_message.answer_ended and by_stream.answer_ended
    for m in (by_message, by_stream):
        m.handle(StreamClosed(100.7))
    a, b = by_message.observation(clock_origin=0.0, reused=True, idle=None, connection=1), \
        by_stream.observation(clock_origin=0.0, reused=True, idle=None, connection=1)  # fmt: skip
    assert a.outcome is b.outcome is Outcome.OK
    assert a.content_events == b.content_events == 3 and a.result == b.result and a.result is not None
    assert a.result.terminal and [e.kind for e in a.events] == [e.kind for e in b.events]


def test_a_silence_between_messages_is_judged_by_the_watchdogs() -> None:
    m = started(Watchdogs(headers=10.0, stall=2.0))
    text = json.dumps(EVENTS[1])
    wait = m.handle(MessageData(100.2, text, len(text)))
    assert wait is not None and wait.at == 102.2  # the stall watchdog from the last progress
    m.handle(WatchdogExpired(wait.at, wait.watchdog))
    assert m.ending is not None and m.ending.outcome is Outcome.STALL_MID_STREAM
