"""Sessions of a recording end to end: the writer's files in, turns with outcomes out."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.recording.summary import summarize_sessions, to_json
from proxycheck.io.storage import RecordingWriter, load
from proxycheck.report.sessions_view import sessions_view

CHAT = "http://e/v1/chat/completions"
DONE = b"data: [DONE]\n\n"


def delta(text: str, finish: str | None = None) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


def chat(content: str, **extra) -> bytes:
    return json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": content}], **extra}).encode()


class Rec:
    """Writes exchanges with explicit times, then summarizes the recording as `sessions` does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.w = RecordingWriter(path)
        self.t = 0.0

    def exchange(self, body: bytes, *, url: str = CHAT, headers=(), status: int | None = 200, events=(), end: bool = True,
                 error: str | None = None, streamed: bool = True, client: str | None = None) -> int:
        self.t += 1.0
        x = self.w.request("POST", url, list(headers), body, t=self.t, conn={"client_id": client} if client else None)
        if status is not None:
            ctype = "text/event-stream" if streamed else "application/json"
            self.w.response(x, status, "", [("content-type", ctype)], streamed=streamed, t=self.t + 0.1)
        for i, ev in enumerate(events):
            self.w.data(x, ev, t=self.t + 0.2 + i * 0.01)
        if error is not None:
            self.w.error(x, error, t=self.t + 0.5)
        elif end:
            self.w.end(x, t=self.t + 0.5)
        return x

    def turns(self):
        self.w.close()
        rec = load(self.path)
        sessions = summarize_sessions(rec.exchanges, rec.piece)
        return {t.xid: t for s in sessions for t in s.turns}, sessions


@pytest.mark.parametrize(
    "kwargs,outcome,detail",
    [
        ({"events": [delta("hi"), delta("", "stop"), DONE]}, Outcome.OK, ""),
        ({"events": [delta("hi")]}, Outcome.TRUNCATED, "ended without a terminal marker"),
        ({"events": [delta("hi"), b'data: {"choices":[{"ind']}, Outcome.TRUNCATED, "1 with content"),
        ({"events": [b": keep-alive\n\n", delta("hi"), DONE]}, Outcome.OK, ""),
        ({"events": [delta("hi"), b"data: {not json\n\n", DONE]}, Outcome.OK, ""),
        ({"events": [b"data: {not json\n\n", b"data: ][\n\n"]}, Outcome.MALFORMED_STREAM, "2 bad event(s)"),
        ({"events": [delta("hi"), b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n']},
         Outcome.STREAM_ERROR, "server_error: overloaded"),
        ({"status": 413, "events": [b"too large"], "streamed": False}, Outcome.HTTP_ERROR, "HTTP 413"),
        ({"events": [delta("hi")], "error": "peer closed connection without sending complete message body"},
         Outcome.RESET, "1 event(s), 1 with content"),
        ({"status": None, "error": "Server connection to ('127.0.0.1', 1) failed: Connection refused"},
         Outcome.CONNECT_ERROR, "Connection refused"),
        ({"status": None, "error": "read timed out"}, Outcome.STALL_BEFORE_HEADERS, "timed out"),
        ({"events": [delta("a")], "error": "timeout"}, Outcome.STALL_MID_STREAM, "1 with content"),
        ({"events": [delta("a"), delta("b")], "end": False}, Outcome.IN_FLIGHT, "2 event(s)"),
        ({"status": None, "end": False}, Outcome.IN_FLIGHT, "no response headers"),
        ({"streamed": False, "events": [b'{"choices":[{"index":0,"message":{"content":"hi"},"finish_reason":"stop"}]}']},
         Outcome.OK, ""),
        ({"streamed": False, "events": [b'{"choices":[{"index":0,"mes']}, Outcome.MALFORMED_STREAM, ""),
    ],
)
def test_each_recorded_turn_gets_its_outcome(tmp_path: Path, kwargs, outcome: Outcome, detail: str) -> None:
    r = Rec(tmp_path / "rec")
    x = r.exchange(chat("q"), **kwargs)
    turns, _ = r.turns()
    assert turns[x].outcome is outcome
    assert detail in turns[x].detail


def test_sessions_by_explicit_header_and_by_continuity(tmp_path: Path) -> None:
    r = Rec(tmp_path / "rec")
    ok = [delta("r"), delta("", "stop"), DONE]
    a1 = r.exchange(chat("a"), headers=[("X-Session-Id", "alpha")], events=ok)
    b1 = r.exchange(chat("b"), events=ok)
    a2 = r.exchange(chat("totally different"), headers=[("x-session-id", "alpha")], events=ok)
    history = [{"role": "user", "content": "b"}, {"role": "assistant", "content": "r"}, {"role": "user", "content": "c"}]
    b2 = r.exchange(json.dumps({"model": "m", "stream": True, "messages": history}).encode(), events=ok)
    _, sessions = r.turns()
    assert [(s.id, s.grouped_by, [t.xid for t in s.turns]) for s in sessions] == [
        ("alpha", "header:x-session-id", [a1, a2]),
        ("s2", "continuity", [b1, b2]),
    ]
    # Labels in order of the first turn; the continuity session's id is its label, never the
    # label of the keyed session before it.
    assert [(s.label, s.key) for s in sessions] == [("s1", "alpha"), ("s2", None)]
    assert sessions[1].turns[1].think_time == pytest.approx(1.5)  # ends at +0.5, next starts 2 s later


def test_completions_sessions_follow_long_prompts(tmp_path: Path) -> None:
    r = Rec(tmp_path / "rec")
    url = "http://e/v1/completions"
    done = [b'data: {"choices":[{"index":0,"text":"x","finish_reason":"stop"}]}\n\n', DONE]
    p1 = "SYSTEM " * 100 + "Q1"  # longer than a piece: stored aside, read back for grouping
    x1 = r.exchange(json.dumps({"prompt": p1, "stream": True}).encode(), url=url, events=done)
    x2 = r.exchange(json.dumps({"prompt": "unrelated", "stream": True}).encode(), url=url, events=done)
    x3 = r.exchange(json.dumps({"prompt": p1 + " A1 Q2", "stream": True}).encode(), url=url, events=done)
    _, sessions = r.turns()
    assert [[t.xid for t in s.turns] for s in sessions] == [[x1, x3], [x2]]
    assert sessions[0].dialect == "openai_completions"


def test_ttft_and_duration_come_from_recorded_times(tmp_path: Path) -> None:
    r = Rec(tmp_path / "rec")
    x = r.exchange(chat("q"), events=[b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n', delta("a"),
                                      delta("", "stop"), DONE])
    turns, _ = r.turns()
    assert turns[x].ttft == pytest.approx(0.21)  # the role-only chunk at +0.20 is not content
    assert turns[x].duration == pytest.approx(0.5)
    assert turns[x].finish_reason == "stop"


def test_a_turn_retried_after_504s_is_one_turn_whose_outcome_is_its_last_attempts(tmp_path: Path) -> None:
    r = Rec(tmp_path / "rec")
    ok = [delta("r"), delta("", "stop"), DONE]
    turn2 = json.dumps({"model": "m", "stream": True, "messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "r"}, {"role": "user", "content": "b"}]}).encode()
    x1 = r.exchange(chat("a"), events=ok)
    x2 = r.exchange(turn2, headers=[("X-Stainless-Retry-Count", "0")], status=504, events=[b"gateway timeout"], streamed=False)
    x3 = r.exchange(turn2, headers=[("X-Stainless-Retry-Count", "1")], status=504, events=[b"gateway timeout"], streamed=False)
    x4 = r.exchange(turn2, headers=[("X-Stainless-Retry-Count", "2")], events=ok)
    _, (s,) = r.turns()
    assert [(t.xid, t.turn, t.attempt, t.attempts, t.retry_count) for t in s.turns] == [
        (x1, 1, 1, 1, None), (x2, 2, 1, 3, 0), (x3, 2, 2, 3, 1), (x4, 2, 3, 3, 2)]
    assert [t.think_time for t in s.turns] == [None, pytest.approx(0.5), None, None]
    assert [t.backoff for t in s.turns] == [None, None, pytest.approx(0.5), pytest.approx(0.5)]
    assert (s.turn_count, s.retries, dict(s.outcomes)) == (2, 2, {"ok": 2})
    doc = to_json("rec", [s], [])["sessions"][0]
    assert [(t["turn"], t["attempt"], t["attempts"], t["outcome"]) for t in doc["turns"]] == [
        (1, 1, 1, "ok"), (2, 1, 3, "http_error"), (2, 2, 3, "http_error"), (2, 3, 3, "ok")]
    assert (doc["turn_count"], doc["retries"], doc["outcomes"]) == (2, 2, {"ok": 2})
    assert s.name.attempts == ((x2, 1, 3), (x3, 2, 3), (x4, 3, 3))

    # As `proxycheck sessions` shows it: one turn in three attempts, the failed ones listed.
    console = Console(width=120, record=True, color_system=None, file=io.StringIO())
    console.print(sessions_view("rec", [s]))
    out = console.export_text()
    row = next(line for line in out.splitlines() if line.startswith("│ s1"))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[2] == "2" and cells[5] == "1 ok · 2 ok (3 attempts)"
    assert "rec: 1 session(s), 4 exchange(s) (2 of them retries)" in out
    assert cells[4] == "0.5"  # the think time before turn 2; backoffs are not think time
    assert "s1 turn 2, attempt 1 of 3: http_error" in out and "s1 turn 2, attempt 2 of 3: http_error" in out
    assert out.count("retried: ok on attempt 3") == 2


def test_a_retried_turn_that_never_got_through_keeps_its_last_failure(tmp_path: Path) -> None:
    r = Rec(tmp_path / "rec")
    r.exchange(chat("a"), status=504, events=[b"x"], streamed=False)
    r.exchange(chat("a"), status=None, end=False)
    _, (s,) = r.turns()
    assert [(t.turn, t.attempt, t.outcome) for t in s.turns] == [(1, 1, Outcome.HTTP_ERROR), (1, 2, Outcome.IN_FLIGHT)]
    assert dict(s.outcomes) == {"in_flight": 1}
