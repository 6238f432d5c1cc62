"""The replay plan (proxycheck.core.replay.plan): sessions and turns in order with their think
times and connections, the headers and exact bodies to send, pacing, watchdog defaults derived
from a recording, and chained bodies that carry the replayed replies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.errors import BadInput
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.protocol.result import Choice, Result, StreamError, ToolCall
from proxycheck.core.recording.redact import REDACTED, RedactionPolicy
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.core.replay.plan import (
    ChainedSession,
    PlannedSession,
    PlannedTurn,
    RecordedOutcome,
    Watchdogs,
    derive_watchdogs,
    p99,
    pace_factor,
    parse_pace,
    plan_sessions,
    replay_headers,
    start_delay,
    think_delay,
)
from proxycheck.io.storage import RecordingWriter, load

EXAMPLE = Path(__file__).resolve().parents[3] / "replays" / "example-agent"
CHAT = "http://gw:4000/v1/chat/completions"
MESSAGES = "http://gw:4000/v1/messages"
DONE = b"data: [DONE]\n\n"


def delta(text: str, finish: str | None = None) -> bytes:
    doc = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


CLEAN = (
    b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}\n\n',
    DONE,
)


def chat(*contents: str, session: str | None = None, **extra: Any) -> bytes:
    body: dict[str, Any] = {"model": "m", "stream": True, **extra}
    body["messages"] = [{"role": "user", "content": c} for c in contents]
    if session:
        body["metadata"] = {"user_id": session}
    return json.dumps(body).encode()


class Rec:
    """Writes exchanges at explicit times, then plans the recording as `replay` would."""

    def __init__(self, path: Path, policy: RedactionPolicy | None = None) -> None:
        self.path = path
        self.w = RecordingWriter(path, policy)

    def add(self, t: float, body: bytes, *, url: str = CHAT, method: str = "POST", headers=(), client=None,
            http: str | None = "HTTP/1.1", headers_after: float = 0.1, events=CLEAN,
            gap: float = 0.05, end: bool = True, error: str | None = None, status: int | None = 200,
            error_after: float = 0.01) -> int:
        x = self.w.request(method, url, list(headers), body, t=t, http_version=http,
                           conn={"client_id": client} if client else None)
        if status is not None:
            self.w.response(x, status, "OK", [("content-type", "text/event-stream")], streamed=True,
                            t=t + headers_after)
        last = t + headers_after
        for i, ev in enumerate(events):
            last = t + headers_after + (i + 1) * gap
            self.w.data(x, ev, t=last)
        if error is not None:
            self.w.error(x, error, t=last + error_after)
        elif end:
            self.w.end(x, t=last + 0.01)
        return x

    def plan(self, **kw: Any) -> list[PlannedSession]:
        self.w.close()
        rec = load(self.path)
        return plan_sessions(rec.exchanges, rec.piece, summarize_sessions(rec.exchanges, rec.piece), **kw)


# -- sessions, turns, think times, connections ----------------------------------------------------


def test_example_sessions_and_turns_in_recorded_order() -> None:
    rec = load(EXAMPLE)
    plan = plan_sessions(rec.exchanges, rec.piece, summarize_sessions(rec.exchanges, rec.piece))
    assert [(s.id, s.start, s.dialect) for s in plan] == [("s1", 0.0, "openai_chat"), ("s2", 2.0, "anthropic_messages")]
    s1, s2 = plan
    assert [(t.turn, t.xid, t.think_time) for t in s1.turns] == [(1, 1, None), (2, 2, 1.4), (3, 3, 2.1), (4, 4, 6.0)]
    assert [(t.turn, t.xid, t.think_time) for t in s2.turns] == [(1, 5, None), (2, 6, 3.2)]
    assert [t.new_connection for t in s1.turns] == [True, False, False, False]
    assert [t.client_id for t in s2.turns] == ["c2", "c2"]
    first = s1.turns[0]
    assert (first.session, first.method, first.url) == ("s1", "POST", "http://127.0.0.1:4000/v1/chat/completions")
    assert first.dialect == "openai_chat" and first.streamed and first.http_version == "HTTP/1.1"
    # The redacted authorization is not sent (the route brings its own), and it is listed.
    assert first.headers == (("content-type", "application/json"), ("user-agent", "example-agent/1.0"))
    assert first.redacted == ("header:authorization",)
    last = s1.turns[-1].recorded
    assert last.outcome is Outcome.IN_FLIGHT and last.duration is None
    ok = s1.turns[0].recorded
    assert ok.outcome is Outcome.OK and ok.ttft == 0.38 and ok.duration == 0.65 and ok.status == 200
    assert ok.result is not None and ok.result.tool_calls[0].id == "call_read_file"
    assert ok.gaps and all(abs(g - 0.03) < 1e-6 for g in ok.gaps)


def test_example_bodies_are_byte_exact() -> None:
    rec = load(EXAMPLE)
    plan = plan_sessions(rec.exchanges, rec.piece, summarize_sessions(rec.exchanges, rec.piece))
    by_xid = {x.xid: x for x in rec.exchanges}
    for turn in (t for s in plan for t in s.turns):
        ex = by_xid[turn.xid]
        assert turn.body == rec.request_body(ex)
        assert hashlib.sha256(turn.body).hexdigest() == ex.body.sha256


def test_same_client_connection_reuses_and_a_change_opens_a_new_one(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    for i, (t, client) in enumerate([(1.0, "c1"), (3.0, "c1"), (5.0, "c2"), (7.0, "c2"), (9.0, "c1")]):
        r.add(t, chat(*[f"q{j}" for j in range(i + 1)], session="S"), client=client)
    (session,) = r.plan()
    assert [t.turn for t in session.turns] == [1, 2, 3, 4, 5]
    assert [t.new_connection for t in session.turns] == [True, False, True, False, True]
    # Each request comes 2 s after the previous one's start; the response takes 0.26 s.
    assert [t.think_time for t in session.turns] == [None, 1.74, 1.74, 1.74, 1.74]


def test_without_connection_facts_only_a_failure_opens_a_new_connection(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, chat("a", session="S"))
    r.add(3.0, chat("a", "b", session="S"), error="peer closed connection", events=[delta("x")])
    r.add(5.0, chat("a", "b", session="S"))
    r.add(7.0, chat("a", "b", "c", session="S"))
    r.add(9.0, chat("a", "b", "c", "d", session="S"), end=False)
    r.add(11.0, chat("a", "b", "c", "d", "e", session="S"))
    (session,) = r.plan()
    assert [t.recorded.outcome for t in session.turns][:2] == [Outcome.OK, Outcome.RESET]
    assert [t.new_connection for t in session.turns] == [True, False, True, False, False, True]
    # The turn after one that never ended has no recorded think time.
    assert session.turns[5].think_time is None and session.turns[4].think_time == 1.74


def test_sessions_come_in_recorded_start_order_relative_to_the_first_request(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(4.5, chat("late"))
    r.add(2.0, chat("early"))
    r.add(3.0, chat("middle"))
    plan = r.plan()
    assert [(s.turns[0].body, s.start) for s in plan] == [(chat("early"), 0.0), (chat("middle"), 1.0),
                                                          (chat("late"), 2.5)]


def test_non_llm_exchanges_are_skipped_unless_asked(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, b"", url="http://gw:4000/v1/models", method="GET", events=[b'{"data":[]}'])
    r.add(2.0, chat("hi"))
    r.add(3.0, json.dumps({"model": "e", "input": ["x"]}).encode(), url="http://gw:4000/v1/embeddings")
    plan = r.plan()
    assert [[t.dialect for t in s.turns] for s in plan] == [["openai_chat"]]
    assert plan[0].start == 1.0  # still measured from the recording's first request
    rec = load(tmp_path / "r")
    full = plan_sessions(rec.exchanges, rec.piece, summarize_sessions(rec.exchanges, rec.piece), include_non_llm=True)
    assert sorted(t.xid for s in full for t in s.turns) == [1, 2, 3]
    get = next(t for s in full for t in s.turns if t.xid == 1)
    assert (get.method, get.dialect, get.body, get.streamed) == ("GET", None, b"", True)


def test_bodies_are_sent_byte_for_byte(tmp_path: Path) -> None:
    odd = (b'{ "model" :"m",\n  "messages":[ {"role":"user","content":"caf\\u00e9 \xc3\xa9"} ,'
           b'{"role":"user","content":"x"}],"stream":true }')
    big = json.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * 300_000}]}).encode()
    not_json = b"\xff\xfe not json at all " * 40
    r = Rec(tmp_path / "r")
    for i, body in enumerate([odd, big, not_json]):
        r.add(1.0 + i, body, url=CHAT if body is not not_json else "http://gw:4000/v1/chat/completions?x=1")
    plan = r.plan()
    assert sorted(t.body for s in plan for t in s.turns) == sorted([odd, big, not_json])


def test_a_damaged_piece_is_refused(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, chat("hello"))
    r.w.close()
    rec = load(tmp_path / "r")
    sessions = summarize_sessions(rec.exchanges, rec.piece)
    with pytest.raises(BadInput, match="SHA-256"):
        plan_sessions(rec.exchanges, lambda pid: rec.piece(pid).replace(b"hello", b"HELLO"), sessions)


def test_http2_and_streaming_facts_are_carried(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode(), http="HTTP/2.0")
    (session,) = r.plan()
    assert session.turns[0].http_version == "HTTP/2.0"
    assert session.turns[0].streamed  # the recorded response was a stream


# -- headers -------------------------------------------------------------------------------------


def test_hop_by_hop_connection_named_redacted_and_proxycheck_headers_are_dropped() -> None:
    recorded = (
        ("Host", "gw:4000"),
        ("Connection", "keep-alive, X-Trace-Hop"),
        ("connection", "Upgrade"),
        ("X-Trace-Hop", "1"),
        ("Keep-Alive", "timeout=5"),
        ("Proxy-Connection", "keep-alive"),
        ("Transfer-Encoding", "chunked"),
        ("TE", "trailers"),
        ("Trailer", "x-digest"),
        ("Upgrade", "h2c"),
        ("Content-Length", "42"),
        ("Proxy-Authorization", "Basic abc"),
        ("Authorization", REDACTED),
        ("x-api-key", REDACTED),
        ("X-Proxycheck-Replay", "run-1"),
        ("x-proxycheck-session", "s1"),
        (":authority", "gw:4000"),
        ("Content-Type", "application/json"),
        ("anthropic-version", "2023-06-01"),
        ("Accept", "text/event-stream"),
        ("accept", "application/json"),
    )
    assert replay_headers(recorded) == (
        ("Content-Type", "application/json"),
        ("anthropic-version", "2023-06-01"),
        ("Accept", "text/event-stream"),
        ("accept", "application/json"),
    )


def test_planned_headers_filter_what_the_recording_holds(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r", RedactionPolicy.default())
    headers = [("Host", "gw"), ("Connection", "close, x-hop"), ("x-hop", "1"), ("Authorization", "Bearer sk-secret"),
               ("x-proxycheck-replay", "old"), ("content-type", "application/json"), ("x-session-id", "S")]
    r.add(1.0, chat("hi"), headers=headers)
    (session,) = r.plan()
    assert session.turns[0].headers == (("content-type", "application/json"), ("x-session-id", "S"))


# -- pacing --------------------------------------------------------------------------------------


def planned(turn: int = 2, think: float | None = 2.0, **kw: Any) -> PlannedTurn:
    fields: dict[str, Any] = dict(
        session="s1", turn=turn, xid=turn, method="POST", url=CHAT, dialect="openai_chat", streamed=True,
        http_version="HTTP/1.1", headers=(), body=b"{}", think_time=think, new_connection=turn == 1,
        client_id=None, recorded=RecordedOutcome(Outcome.OK),
    )
    fields.update(kw)
    return PlannedTurn(**fields)


@pytest.mark.parametrize("pace,expected,start", [("recorded", 2.0, 8.0), ("fast", 0.0, 0.0), (0.5, 1.0, 4.0),
                                                 (2, 4.0, 16.0)])
def test_think_and_start_delays_scale_with_the_pace(pace, expected: float, start: float) -> None:
    assert think_delay(planned(think=2.0), pace) == expected
    assert start_delay(PlannedSession("s1", "continuity", None, 8.0, (planned(),)), pace) == start


def test_no_or_negative_recorded_think_time_waits_nothing() -> None:
    assert think_delay(planned(turn=1, think=None), "recorded") == 0.0
    assert think_delay(planned(think=-0.4), "recorded") == 0.0


def test_pace_parsing() -> None:
    assert parse_pace("recorded") == "recorded" and parse_pace(" FAST ") == "fast"
    assert parse_pace("0.5") == 0.5 and parse_pace("0") == 0.0
    assert pace_factor("recorded") == 1.0 and pace_factor("fast") == 0.0 and pace_factor(3) == 3.0
    for bad in ("-1", "nan", "inf", "slow", ""):
        with pytest.raises(ValueError):
            parse_pace(bad)
    with pytest.raises(ValueError):
        pace_factor(True)  # type: ignore[arg-type]


def test_the_example_runs_in_recorded_order_with_recorded_waits() -> None:
    rec = load(EXAMPLE)
    plan = plan_sessions(rec.exchanges, rec.piece, summarize_sessions(rec.exchanges, rec.piece))
    assert [start_delay(s, 0.5) for s in plan] == [0.0, 1.0]
    assert [think_delay(t, 0.5) for t in plan[0].turns] == [0.0, 0.7, 1.05, 3.0]
    assert [think_delay(t, "fast") for t in plan[0].turns] == [0.0] * 4


# -- watchdogs -----------------------------------------------------------------------------------


def gapped(path: Path, gap: float, *, keepalive: bool = False, headers_after: float = 0.1) -> list[PlannedSession]:
    r = Rec(path)
    events = [delta(f"w{i}") for i in range(30)] + [delta("", "stop"), DONE]
    if keepalive:  # a comment between every two content events: half the content gap
        events = [e for ev in events for e in (ev, b": keep-alive\n\n")]
        gap = gap / 2
    r.add(1.0, chat("q"), events=events, gap=gap, headers_after=headers_after)
    return r.plan()


def test_short_gaps_give_the_floor_and_long_gaps_five_times_the_p99(tmp_path: Path) -> None:
    fast = derive_watchdogs(gapped(tmp_path / "fast", 0.2))
    assert fast.without_patience() == Watchdogs(connect=10.0, headers=30.0, stall=10.0, total=300.0)
    # A client that says nothing of its patience: assumed 600 s, said as assumed.
    assert (fast.patience_headers, fast.patience_stall) == (600.0, 600.0) and "assumed" in fast.patience_from
    slow = derive_watchdogs(gapped(tmp_path / "slow", 4.0))
    assert slow.stall == pytest.approx(20.0)
    # 32 events 4 s apart after 0.1 s to headers, ended 0.01 s after the last: three times that.
    assert slow.total == pytest.approx(3 * (0.1 + 32 * 4.0 + 0.01)) and slow.headers == 30.0


def test_keep_alive_comments_are_not_content_gaps(tmp_path: Path) -> None:
    # Content every 4 s, a comment in between every 2 s: the content gap decides.
    assert derive_watchdogs(gapped(tmp_path / "r", 4.0, keepalive=True)).stall == pytest.approx(20.0)


def test_headers_and_total_grow_with_what_the_recording_took(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, chat("slow prefill"), headers_after=15.0)
    r.add(2.0, chat("long answer"), events=[delta("x")] * 50 + [delta("", "stop"), DONE], gap=4.0)
    wd = derive_watchdogs(r.plan())
    assert wd.headers == pytest.approx(45.0)
    assert wd.total == pytest.approx(3 * (0.1 + 52 * 4.0 + 0.01))
    assert wd.stall == pytest.approx(20.0) and wd.connect == 10.0


def test_failed_exchanges_do_not_widen_the_watchdogs(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, chat("ok"))
    r.add(2.0, chat("wedged"), events=[delta("a"), delta("b")], gap=60.0, error="read timed out")
    r.add(3.0, chat("never"), headers_after=100.0, end=False)
    wd = derive_watchdogs(r.plan())
    assert (wd.connect, wd.headers, wd.stall) == (10.0, 30.0, 10.0)
    # The 60 s gap the client sat through (the stream went on after it) is no watchdog's measure,
    # but the patience is well past it.
    assert wd.patience_stall == pytest.approx(600.0) and wd.total == 300.0


def test_the_replay_waits_no_longer_than_the_recorded_client_did(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, chat("ok"), events=[delta("a"), delta("b", "stop"), DONE], gap=0.05)
    # The client gave up 4 s after the last content of a stream, and 6 s after sending a request
    # that never got its headers (6.1 s after the request): the replay judges silence as that client did.
    r.add(2.0, chat("stalled"), events=[delta("a"), delta("b")], gap=0.05, error="Client disconnected.", error_after=4.0)
    r.add(9.0, chat("no headers"), status=None, events=[], error="Client disconnected.", error_after=6.0)
    wd = derive_watchdogs(r.plan())
    assert wd.stall == pytest.approx(4.0) and wd.headers == pytest.approx(6.1)
    assert wd.patience_stall == pytest.approx(4.0) and wd.patience_headers == pytest.approx(6.1)
    assert wd.stall_limit == pytest.approx(4.0) and "gave up" in wd.patience_from


def test_a_person_cancelling_a_stream_or_a_hop_cutting_it_is_no_patience(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    r.add(1.0, chat("ok"), events=[delta("a")] * 3 + [delta("b", "stop"), DONE], gap=0.5)
    # Esc pressed 0.3 s into a stream; a wait shorter than five times a gap the recording shows
    # (0.5 s); a cut the client did not make; a patience longer than the default.
    r.add(2.0, chat("cancelled"), events=[delta("a")], error="Client disconnected.", error_after=0.3)
    r.add(3.0, chat("impatient"), events=[delta("a")], error="Client disconnected.", error_after=2.4)
    r.add(4.0, chat("cut"), events=[delta("a")], error="Server disconnected.", error_after=3.0)
    r.add(5.0, chat("patient"), events=[delta("a")], error="Client disconnected.", error_after=300.0)
    wd = derive_watchdogs(r.plan())
    # The watchdog marks a slow answer at 10 s; the silence fails where the patient client gave up.
    assert wd.stall == 10.0 and wd.patience_stall == pytest.approx(300.0)


def test_watchdog_overrides() -> None:
    derived = Watchdogs(headers=45.0, stall=20.0)
    assert derived.with_overrides(stall=3) == Watchdogs(connect=10.0, headers=45.0, stall=3.0, total=300.0)
    # A stated watchdog is that phase's limit: the patience no longer extends it.
    patient = derived.with_patience(600.0, 600.0, "the SDK's")
    assert patient.with_overrides(stall=3).stall_limit == 3.0 and patient.with_overrides(stall=3).headers_limit == 600.0
    assert patient.with_overrides(stall=3, headers=5).patience_from == ""
    assert derived.with_overrides() == derived
    assert derived.with_overrides(connect=1.5, total=60).total == 60.0
    for bad in ({"stall": 0}, {"headers": -1.0}, {"total": float("inf")}, {"connect": "5"}):
        with pytest.raises(ValueError):
            derived.with_overrides(**bad)


def test_p99_is_nearest_rank() -> None:
    assert p99([]) == 0.0
    assert p99([0.2] * 10 + [3.0]) == 3.0  # fewer than 100 values: the largest
    assert p99([0.1] * 199 + [50.0]) == 0.1  # one outlier in 200 is above the 99th percentile


# -- chained mode --------------------------------------------------------------------------------


def reply(text: str = "", *calls: tuple[str | None, str, str], reasoning: str = "", terminal: bool = True,
          dialect: str = "openai_chat") -> Result:
    tool_calls = tuple(ToolCall.build(i, cid, name, args) for i, (cid, name, args) in enumerate(calls))
    return Result(dialect, (Choice(0, text, reasoning, tool_calls, "stop"),), terminal=terminal)


def session_of(bodies: list[dict[str, Any]], dialect: str = "openai_chat") -> PlannedSession:
    turns = tuple(
        planned(turn=i, think=None if i == 1 else 1.0, dialect=dialect, body=json.dumps(b).encode())
        for i, b in enumerate(bodies, start=1)
    )
    return PlannedSession("s1", "continuity", dialect, 0.0, turns)


SYS = {"role": "system", "content": "be brief"}
U1 = {"role": "user", "content": "fix the parser"}
A1_TOOL = {"role": "assistant", "content": None, "name": "agent",
           "tool_calls": [{"id": "call_A", "type": "function",
                           "function": {"name": "read_file", "arguments": '{"path":"a"}'}}]}
T1 = {"role": "tool", "tool_call_id": "call_A", "content": "contents of a"}
A2_TEXT = {"role": "assistant", "content": "It is fixed."}
U2 = {"role": "user", "content": "thanks, now run the tests"}
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]


def openai_bodies() -> list[dict[str, Any]]:
    base = {"model": "m", "stream": True, "tools": TOOLS}
    return [
        {**base, "messages": [SYS, U1]},
        {**base, "messages": [SYS, U1, A1_TOOL, T1]},
        {**base, "messages": [SYS, U1, A1_TOOL, T1, A2_TEXT, U2]},
    ]


def without_messages(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "messages"}


def test_openai_tool_call_reply_keeps_the_recorded_ids_and_tool_results() -> None:
    bodies = openai_bodies()
    chained = ChainedSession(session_of(bodies))
    assert chained.body_for(1) == json.dumps(bodies[0]).encode()
    chained.record_reply(1, reply("Let me look.", ("call_REPLAYED", "read_file", '{"path":"b"}')))
    for turn in (2, 3):
        body = json.loads(chained.body_for(turn))
        msg = body["messages"][2]
        assert msg == {"role": "assistant", "content": "Let me look.", "name": "agent",
                       "tool_calls": [{"id": "call_A", "type": "function",
                                       "function": {"name": "read_file", "arguments": '{"path":"b"}'}}]}
        # Everything else stays as recorded, the tool result still answers call_A.
        recorded = bodies[turn - 1]
        assert without_messages(body) == without_messages(recorded)
        assert [m for i, m in enumerate(body["messages"]) if i != 2] == \
            [m for i, m in enumerate(recorded["messages"]) if i != 2]
    raw = chained.body_for(2)
    assert raw == json.dumps(json.loads(raw), separators=(",", ":")).encode()  # compact re-serialization


def test_openai_text_reply_replaces_the_recorded_answer_in_every_later_turn() -> None:
    bodies = openai_bodies()
    chained = ChainedSession(session_of(bodies))
    chained.record_reply(1, reply("", ("call_X", "read_file", '{"path":"a"}')))
    chained.record_reply(2, reply("Replayed answer."))
    assert chained.body_for(2) == json.dumps(bodies[1]).encode()  # the same call: byte-exact
    third = json.loads(chained.body_for(3))
    assert third["messages"][4] == {"role": "assistant", "content": "Replayed answer."}
    assert third["messages"][2] == A1_TOOL


def test_a_failed_turn_keeps_the_recorded_reply() -> None:
    bodies = openai_bodies()
    chained = ChainedSession(session_of(bodies))
    chained.record_reply(1, reply("partial", ("call_X", "read_file", '{"pa'), terminal=False))
    chained.record_reply(2, None)
    assert chained.body_for(2) == json.dumps(bodies[1]).encode()
    assert chained.body_for(3) == json.dumps(bodies[2]).encode()
    errored = Result("openai_chat", (Choice(0, "x"),), terminal=True, errors=(StreamError("e", "boom"),))
    chained.record_reply(2, reply("good"))
    chained.record_reply(2, errored)  # a later failure of the same turn forgets the earlier reply
    assert chained.body_for(3) == json.dumps(bodies[2]).encode()


def test_more_or_fewer_replayed_calls_keep_the_request_valid() -> None:
    bodies = openai_bodies()
    chained = ChainedSession(session_of(bodies))
    # Two replayed calls for one recorded call: the extra call has no recorded result to answer it.
    chained.record_reply(1, reply("", ("c1", "read_file", '{"path":"x"}'), ("c2", "run_tests", "{}")))
    calls = json.loads(chained.body_for(2))["messages"][2]["tool_calls"]
    assert [(c["id"], c["function"]["arguments"]) for c in calls] == [("call_A", '{"path":"x"}')]
    # A text-only replay where a call was recorded: the recorded call stays (its result follows).
    chained.record_reply(1, reply("No tools needed."))
    msg = json.loads(chained.body_for(2))["messages"][2]
    assert msg["content"] == "No tools needed." and msg["tool_calls"] == A1_TOOL["tool_calls"]
    # Nothing to put in the slot (no text, no call that pairs): the recorded reply stays.
    chained.record_reply(2, reply("", ("c9", "read_file", "{}")))
    assert json.loads(chained.body_for(3))["messages"][4] == A2_TEXT


def test_openai_reasoning_is_replaced_only_where_the_harness_sent_it_back() -> None:
    a1 = {"role": "assistant", "content": "Done.", "reasoning_content": "recorded thoughts"}
    stripped = {"role": "assistant", "content": "Done."}
    bodies = [{"messages": [U1]}, {"messages": [U1, a1, U2]}, {"messages": [U1, stripped, U2, A2_TEXT, U2]}]
    chained = ChainedSession(session_of(bodies))
    chained.record_reply(1, reply("Replayed.", reasoning="replayed thoughts"))
    assert json.loads(chained.body_for(2))["messages"][1] == {"role": "assistant", "content": "Replayed.",
                                                                "reasoning_content": "replayed thoughts"}
    # Turn 3's harness stripped the old reasoning; the reply is still found and replaced there.
    assert json.loads(chained.body_for(3))["messages"][1] == {"role": "assistant", "content": "Replayed."}


ANTHROPIC_A1 = {"role": "assistant", "content": [
    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
    {"type": "text", "text": "Reading it."},
    {"type": "tool_use", "id": "toolu_A", "name": "read_file", "input": {"path": "a"}},
]}
ANTHROPIC_R1 = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "data"}]}


def anthropic_bodies() -> list[dict[str, Any]]:
    base = {"model": "claude", "max_tokens": 100, "stream": True, "system": "be brief"}
    cached = {"cache_control": {"type": "ephemeral"}}
    u1_cached = {"role": "user", "content": [{"type": "text", "text": "fix it", **cached}]}
    u1 = {"role": "user", "content": [{"type": "text", "text": "fix it"}]}
    r1_cached = {**ANTHROPIC_R1, "content": [{**ANTHROPIC_R1["content"][0], **cached}]}
    return [
        {**base, "messages": [u1_cached]},
        {**base, "messages": [u1, ANTHROPIC_A1, r1_cached]},  # the harness moved cache_control
        {**base, "messages": [u1, ANTHROPIC_A1, ANTHROPIC_R1, {"role": "assistant", "content": "All good."},
                              {"role": "user", "content": "thanks"}]},
    ]


def test_anthropic_tool_use_blocks_keep_their_ids_and_thinking_stays() -> None:
    bodies = anthropic_bodies()
    chained = ChainedSession(session_of(bodies, "anthropic_messages"))
    chained.record_reply(1, reply("Opening b.", ("toolu_R", "read_file", '{"path": "b"}'),
                                  dialect="anthropic_messages"))
    chained.record_reply(2, reply("Replayed summary.", dialect="anthropic_messages"))
    expected = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        {"type": "text", "text": "Opening b."},
        {"type": "tool_use", "id": "toolu_A", "name": "read_file", "input": {"path": "b"}},
    ]}
    second, third = (json.loads(chained.body_for(t)) for t in (2, 3))
    assert second["messages"][1] == expected and third["messages"][1] == expected
    assert third["messages"][3] == {"role": "assistant", "content": "Replayed summary."}
    # Only the assistant replies changed; the cache_control edits of each turn are kept.
    for body, recorded in ((second, bodies[1]), (third, bodies[2])):
        assert body["system"] == recorded["system"] and body["max_tokens"] == 100
        assert [m for m in body["messages"] if m["role"] != "assistant"] == \
            [m for m in recorded["messages"] if m["role"] != "assistant"]


def test_anthropic_text_block_is_added_or_dropped_as_the_replay_says() -> None:
    bodies = anthropic_bodies()
    chained = ChainedSession(session_of(bodies, "anthropic_messages"))
    chained.record_reply(1, reply("", ("x", "read_file", "not json"), dialect="anthropic_messages"))
    content = json.loads(chained.body_for(2))["messages"][1]["content"]
    assert [b["type"] for b in content] == ["thinking", "tool_use"]  # no empty text block
    assert content[1] == {"type": "tool_use", "id": "toolu_A", "name": "read_file", "input": {}}
    no_text = {"role": "assistant", "content": [ANTHROPIC_A1["content"][2]]}
    other = ChainedSession(session_of([{"messages": [U1]}, {"messages": [U1, no_text, ANTHROPIC_R1]}],
                                      "anthropic_messages"))
    other.record_reply(1, reply("Now with words.", ("x", "read_file", '{"path":"a"}'), dialect="anthropic_messages"))
    assert json.loads(other.body_for(2))["messages"][1]["content"] == [
        {"type": "text", "text": "Now with words."}, ANTHROPIC_A1["content"][2]]


def test_a_retried_turn_hands_its_slot_to_the_retry() -> None:
    bodies = openai_bodies()
    session = session_of([bodies[0], bodies[0], bodies[1]])
    chained = ChainedSession(session)
    chained.record_reply(1, reply("first try", ("c", "read_file", '{"path":"1"}')))
    chained.record_reply(2, reply("retry", ("c", "read_file", '{"path":"2"}')))
    assert json.loads(chained.body_for(3))["messages"][2]["content"] == "retry"


def test_prompt_apis_and_unparseable_bodies_are_exact_only() -> None:
    prompt = [{"model": "m", "prompt": "Q: hi\nA:"}, {"model": "m", "prompt": "Q: hi\nA: hello\nQ: more\nA:"}]
    completions = ChainedSession(session_of(prompt, "openai_completions"))
    completions.record_reply(1, reply("bye", dialect="openai_completions"))
    assert not completions.chained(2)
    assert completions.body_for(2) == json.dumps(prompt[1]).encode()
    raw = PlannedSession("s", "continuity", "openai_chat", 0.0, (planned(turn=1, body=b"\xff not json"),))
    assert not ChainedSession(raw).chained(1) and ChainedSession(raw).body_for(1) == b"\xff not json"
    with pytest.raises(ValueError):
        completions.body_for(7)


def trimmed(body: dict[str, Any]) -> dict[str, Any]:
    def trim(m: dict[str, Any]) -> dict[str, Any]:
        if m["role"] == "assistant" and isinstance(m.get("content"), str):
            return {**m, "content": m["content"].strip()}
        return m

    return {**body, "messages": [trim(m) for m in body["messages"]]}


def test_example_recording_chains() -> None:
    rec = load(EXAMPLE)
    plan = plan_sessions(rec.exchanges, rec.piece, summarize_sessions(rec.exchanges, rec.piece))
    for session in plan:
        chained = ChainedSession(session)
        for turn in session.turns:
            assert chained.chained(turn.turn)
            # The recorded replies fed back give the recorded bodies, except that this harness
            # trimmed the whitespace the stream ended its answers with.
            got, recorded = json.loads(chained.body_for(turn.turn)), json.loads(turn.body)
            assert trimmed(got) == trimmed(recorded)
            chained.record_reply(turn.turn, turn.recorded.result)
        changed = ChainedSession(session)
        changed.record_reply(1, reply("CHANGED", ("z", "read_file", '{"path":"zz"}'), dialect=session.dialect or ""))
        second = json.loads(changed.body_for(2))
        assert "CHANGED" in json.dumps(second["messages"]) and json.loads(session.turns[1].body) != second


# -- property: only assistant replies change -----------------------------------------------------

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
args = st.dictionaries(st.sampled_from(["path", "n", "q"]), st.one_of(st.integers(), texts), max_size=2)
replies = st.tuples(texts, st.lists(st.tuples(st.sampled_from(["read_file", "run_tests"]), args), max_size=2),
                    st.booleans())
user_turns = st.lists(texts, min_size=1, max_size=2)


def build_session(dialect: str, turns: list[tuple[list[str], tuple[str, list, bool]]]):
    """Recorded bodies in a harness's shapes, and the Result each recorded reply parses to."""
    history: list[dict[str, Any]] = []
    bodies, results = [], []
    for n, (users, (text, calls, reasoning)) in enumerate(turns, start=1):
        history += [{"role": "user", "content": u} for u in users]
        bodies.append({"model": "m", "stream": True, "messages": list(history)})
        ids = [f"id_{n}_{i}" for i in range(len(calls))]
        results.append(reply(text, *[(i, name, json.dumps(a)) for i, (name, a) in zip(ids, calls)],
                             reasoning="why" if reasoning else "", dialect=dialect))
        if dialect == "openai_chat":
            msg: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
            if calls:
                msg["tool_calls"] = [
                    {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(a)}}
                    for i, (name, a) in zip(ids, calls)
                ]
            if reasoning:
                msg["reasoning_content"] = "why"
            history.append(msg)
            history += [{"role": "tool", "tool_call_id": i, "content": "out"} for i in ids]
        else:
            blocks = ([{"type": "text", "text": text}] if text else []) + [
                {"type": "tool_use", "id": i, "name": name, "input": a} for i, (name, a) in zip(ids, calls)]
            history.append({"role": "assistant", "content": blocks if calls else text or "(empty)"})
            if calls:
                history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "out"}
                                                            for i in ids]})
    return bodies, results


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["openai_chat", "anthropic_messages"]),
       st.lists(st.tuples(user_turns, replies), min_size=1, max_size=5),
       st.lists(replies, min_size=5, max_size=5))
def test_recorded_replies_give_recorded_bodies_and_others_change_only_replies(dialect, turns, others) -> None:
    bodies, results = build_session(dialect, turns)
    session = session_of(bodies, dialect)
    same = ChainedSession(session)
    for n, result in enumerate(results, start=1):
        same.record_reply(n, result)
    for n, body in enumerate(bodies, start=1):
        assert json.loads(same.body_for(n)) == body
        assert same.body_for(n) == session.turns[n - 1].body

    changed = ChainedSession(session)
    for n, (text, calls, _) in enumerate(others, start=1):
        if n <= len(bodies):
            changed.record_reply(n, reply(text, *[(f"new{n}", name, json.dumps(a)) for name, a in calls],
                                          dialect=dialect))
    for n, body in enumerate(bodies, start=1):
        got = json.loads(changed.body_for(n))
        assert without_messages(got) == without_messages(body)
        assert len(got["messages"]) == len(body["messages"])
        for new, old in zip(got["messages"], body["messages"]):
            if old["role"] != "assistant":
                assert new == old
            else:
                assert new["role"] == "assistant" and _call_ids(new) == _call_ids(old)


def _call_ids(message: dict[str, Any]) -> list[str]:
    if "tool_calls" in message:
        return [c["id"] for c in message["tool_calls"]]
    content = message["content"]
    return [b["id"] for b in content if b["type"] == "tool_use"] if isinstance(content, list) else []
