"""Replay matching and playback plans: recordings written into tmp dirs (or the shipped example)
in, the recorded exchange that answers each request and the timeline to play it on out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxycheck.core.recording.bodies import split_body
from proxycheck.core.recording.journal import RecordedExchange
from proxycheck.core.recording.redact import REDACTED
from proxycheck.core.recording.summary import summarize_sessions
from proxycheck.core.testbed.faultspec import ActiveFaults
from proxycheck.core.testbed.recorded_answers import (
    ABORT,
    COMPLETE,
    HOLD,
    Match,
    NoMatch,
    ReplayMatcher,
    common_prefix,
    plan_replay,
    response_headers,
    route_key,
)
from proxycheck.io.storage import Recording, RecordingWriter, load

EXAMPLE = Path(__file__).resolve().parents[3] / "replays" / "example-agent"
CHAT = "http://gw/v1/chat/completions"
COMPLETIONS = "http://gw/v1/completions"
GENERATE = "http://gw/generate"
DONE = b"data: [DONE]\n\n"


def delta(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


def chat(*contents: str, **extra) -> bytes:
    """A chat body whose history alternates user and assistant messages."""
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": c} for i, c in enumerate(contents)]
    return json.dumps({"model": "m", "stream": True, "messages": msgs, **extra}).encode()


class Rec:
    """Writes exchanges one second apart, then loads them and builds the matcher."""

    def __init__(self, path: Path) -> None:
        self.w = RecordingWriter(path)
        self.path = path
        self.t = 0.0

    def add(self, body: bytes, *, url: str = CHAT, headers=(), events=None, error: str | None = None,
            client: str | None = None) -> int:
        self.t += 1.0
        x = self.w.request("POST", url, list(headers), body, t=self.t, conn={"client_id": client} if client else None)
        self.w.response(x, 200, "OK", [("content-type", "text/event-stream")], streamed=True, t=self.t + 0.1)
        for i, ev in enumerate(events if events is not None else [delta(f"answer {x}"), DONE]):
            self.w.data(x, ev, t=self.t + 0.2 + i * 0.01)
        if error is not None:
            self.w.error(x, error, t=self.t + 0.5)
        else:
            self.w.end(x, t=self.t + 0.5)
        return x

    def load(self) -> tuple[ReplayMatcher, Recording]:
        self.w.close()
        rec = load(self.path)
        return ReplayMatcher(rec.exchanges, rec.piece), rec


def ask(m: ReplayMatcher, body: bytes, path: str = "/v1/chat/completions", headers=(), method: str = "POST"):
    return m.match(method, path, list(headers), body)


def session_of(n: int) -> list[bytes]:
    """The bodies of an n-turn chat conversation."""
    out, history = [], []
    for turn in range(1, n + 1):
        history = history + [f"question {turn}"]
        out.append(chat(*history))
        history = history + [f"answer {turn}"]
    return out


# ------------------------------------------------------------------------------------------------
# Rule 1: session and turn


def test_every_example_turn_is_answered_by_itself_by_session_and_turn() -> None:
    rec = load(EXAMPLE)
    m = ReplayMatcher(rec.exchanges, rec.piece)
    placed = {t.xid: (s.id, t.turn) for s in summarize_sessions(rec.exchanges, rec.piece) for t in s.turns}
    for ex in rec.exchanges:
        found = ask(m, rec.request_body(ex), ex.path)
        assert isinstance(found, Match)
        assert (found.rule, found.exchange.xid, found.detail) == ("session", ex.xid, "same history")
        assert (found.session, found.turn) == placed[ex.xid]
        assert found.header == f"session xid={ex.xid}"


def test_a_chained_turn_continues_the_previous_turns_history(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    xs = [r.add(b) for b in session_of(3)]
    m, _ = r.load()
    # A chained replay re-sends turn 2's history, the reply it got (other bytes), a new question.
    chained = chat("question 1", "answer 1", "question 2", "answer 2, as replayed", "question 3")
    found = ask(m, chained)
    assert isinstance(found, Match)
    assert (found.rule, found.exchange.xid, found.turn, found.detail) == ("session", xs[2], 3, "continues turn 2")


def test_the_same_history_with_other_fields_is_the_same_turn(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    xs = [r.add(b) for b in session_of(3)]
    m, _ = r.load()
    rewritten = chat("question 1", "answer 1", "question 2", model="renamed-by-a-hop")
    found = ask(m, rewritten)
    assert isinstance(found, Match) and (found.rule, found.exchange.xid) == ("session", xs[1])


def test_continuing_past_the_last_recorded_turn_falls_to_the_longest_prefix(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    xs = [r.add(b) for b in session_of(2)]
    m, _ = r.load()
    found = ask(m, chat("question 1", "answer 1", "question 2", "answer 2", "question 3"))
    assert isinstance(found, Match)
    assert (found.rule, found.exchange.xid, found.detail) == ("prefix", xs[1], "shares 3 message(s)")


@pytest.mark.parametrize("where", ["header", "field"])
def test_a_session_key_tells_identical_requests_apart(tmp_path: Path, where: str) -> None:
    r = Rec(tmp_path / "r")
    keyed = {}
    for key in ("alpha", "beta"):
        if where == "header":
            keyed[key] = r.add(chat("same question"), headers=[("x-session-id", key)])
        else:
            keyed[key] = r.add(chat("same question", user=key))
    m, _ = r.load()
    for key in ("beta", "alpha", "beta"):
        if where == "header":
            found = ask(m, chat("same question"), headers=[("X-Session-Id", key)])
        else:
            found = ask(m, chat("same question", user=key))
        assert isinstance(found, Match) and found.rule == "session"
        assert (found.exchange.xid, found.session) == (keyed[key], key)
        assert found.detail.startswith(f"key {key!r}")


def test_an_unknown_session_key_places_by_continuity(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    xs = [r.add(b, headers=[("x-session-id", "recorded")]) for b in session_of(2)]
    m, _ = r.load()
    found = ask(m, session_of(2)[1], headers=[("x-session-id", "new-run-uuid")])
    assert isinstance(found, Match) and (found.rule, found.exchange.xid) == ("session", xs[1])


def test_a_recorded_retry_is_served_in_turn(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    first, second = session_of(2)
    r.add(first, client="c1")
    wedged = r.add(second, client="c1", events=[delta("half")], error="timeout")
    retry = r.add(second, client="c1")
    m, _ = r.load()
    got = [ask(m, second) for _ in range(4)]
    assert all(isinstance(g, Match) and g.rule == "session" and g.turn in (2, 3) for g in got)
    assert [g.exchange.xid for g in got] == [wedged, retry, wedged, retry]


def test_prompt_apis_are_placed_by_prompt_continuity(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    p1 = "Once upon a time there was a proxy."
    p2 = p1 + " It buffered everything. Then what?"
    x1 = r.add(json.dumps({"prompt": p1, "max_tokens": 8}).encode(), url=COMPLETIONS)
    x2 = r.add(json.dumps({"prompt": p2, "max_tokens": 8}).encode(), url=COMPLETIONS)
    m, _ = r.load()
    same = ask(m, json.dumps({"prompt": p2, "max_tokens": 99}).encode(), "/v1/completions")
    assert isinstance(same, Match) and (same.rule, same.exchange.xid, same.detail) == ("session", x2, "same history")
    onward = ask(m, json.dumps({"prompt": p1 + " It streamed."}).encode(), "/v1/completions")
    assert isinstance(onward, Match) and (onward.rule, onward.exchange.xid) == ("session", x2)
    altered = ask(m, json.dumps({"prompt": p1[:-1] + "!"}).encode(), "/v1/completions")
    assert isinstance(altered, Match) and (altered.rule, altered.exchange.xid) == ("prefix", x1)
    assert altered.detail == f"shares {len(p1) - 1} prompt characters"
    assert isinstance(ask(m, json.dumps({"prompt": "Unrelated"}).encode(), "/v1/completions"), NoMatch)


# ------------------------------------------------------------------------------------------------
# Rules 2 and 3: digest, then longest shared prefix


def test_bodies_without_a_history_match_by_digest_then_by_bytes(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    ids = list(range(200))
    body = json.dumps({"input_ids": ids, "sampling_params": {"max_new_tokens": 8}, "stream": True}).encode()
    x = r.add(body, url=GENERATE)
    m, _ = r.load()
    exact = ask(m, body, "/generate")
    assert isinstance(exact, Match) and (exact.rule, exact.exchange.xid, exact.session) == ("digest", x, "s1")
    tail = json.dumps({"input_ids": ids, "sampling_params": {"max_new_tokens": 64}, "stream": True}).encode()
    near = ask(m, tail, "/generate")
    assert isinstance(near, Match) and (near.rule, near.exchange.xid) == ("prefix", x)
    # A few shared bytes say only that both are JSON of one API: not a match.
    other = json.dumps({"input_ids": [7, 8, 9], "sampling_params": {}}).encode()
    assert isinstance(ask(m, other, "/generate"), NoMatch)


def respelled(body: bytes) -> bytes:
    """The same JSON as a re-serializing gateway writes it: members reversed, spaced, escaped."""

    def flip(doc):
        if isinstance(doc, dict):
            return {k: flip(v) for k, v in reversed(list(doc.items()))}
        return [flip(v) for v in doc] if isinstance(doc, list) else doc

    return json.dumps(flip(json.loads(body)), indent=1, ensure_ascii=True).encode()


def test_a_re_serialized_body_has_the_digest_of_its_content(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    ids = list(range(50))
    streamed = json.dumps({"input_ids": ids, "sampling_params": {"temperature": 0.5}, "stream": True}).encode()
    whole = json.dumps({"input_ids": ids, "sampling_params": {"temperature": 0.5}, "stream": False}).encode()
    xs = [r.add(streamed, url=GENERATE), r.add(whole, url=GENERATE)]
    turns = session_of(3)
    chats = [r.add(b) for b in turns]
    m, _ = r.load()
    for body, x in ((streamed, xs[0]), (whole, xs[1])):
        found = ask(m, respelled(body).replace(b"0.5", b"5e-1"), "/generate")
        # The same content, other bytes: the digest rule, and never the body that differs in
        # a member (stream) that decides the shape of the answer.
        assert isinstance(found, Match) and (found.rule, found.exchange.xid) == ("digest", x), found
    # A re-serialized chat turn: its messages have other bytes (no continuity on their ids),
    # its content is the recorded turn's.
    found = ask(m, respelled(turns[1]))
    assert isinstance(found, Match) and found.exchange.xid == chats[1] and found.rule == "digest", found


def test_a_rewritten_first_question_shares_the_system_prompt_only(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    sys_msg = {"role": "system", "content": "You are an agent."}
    bodies = []
    for turn_msgs in ([sys_msg, {"role": "user", "content": "q1"}],
                      [sys_msg, {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
                       {"role": "user", "content": "q2"}]):
        bodies.append(json.dumps({"model": "m", "messages": turn_msgs}).encode())
    x1, _ = [r.add(b) for b in bodies]
    m, _ = r.load()
    edited = json.dumps({"model": "m", "messages": [sys_msg, {"role": "user", "content": "q1, edited by a hop"}]})
    found = ask(m, edited.encode())
    # Every turn shares one message; the one of the closest length answers.
    assert isinstance(found, Match) and (found.rule, found.exchange.xid, found.turn) == ("prefix", x1, 1)


def test_requests_match_only_their_own_route(tmp_path: Path) -> None:
    r = Rec(tmp_path / "r")
    x = r.add(chat("hello"))
    m, _ = r.load()
    assert isinstance(ask(m, chat("hello"), "/openai/v1/chat/completions?x=1"), Match)  # any API prefix
    wrong = ask(m, chat("hello"), "/v1/messages")
    assert isinstance(wrong, NoMatch)
    assert wrong.reason == "the recording has no POST anthropic_messages exchange (it has: POST openai_chat)"
    assert isinstance(ask(m, chat("hello"), method="PUT"), NoMatch)
    unrelated = ask(m, chat("never said"))
    assert isinstance(unrelated, NoMatch) and "none shares a message" in unrelated.reason
    assert route_key("post", "/api/v1/chat/completions/") == ("POST", "openai_chat")
    assert route_key("POST", "/v1/embeddings") == ("POST", "/v1/embeddings")
    assert len(m) == 1 and x == 1


# ------------------------------------------------------------------------------------------------
# Playback plans


def exchange(chunks=((1.5, b"ab"), (1.6, b"cd"), (1.8, b"ef")), *, status: int | None = 200, t_end: float | None = 2.0,
             error: str | None = None, t_error: float | None = None, streamed: bool = True, headers=None,
             reason: str | None = "OK") -> RecordedExchange:
    return RecordedExchange(
        xid=1, t_request=1.0, method="POST", url=CHAT, http_version="HTTP/1.1", request_headers=(),
        body=split_body(chat("q")).body, t_response=1.2 if status is not None else None, status=status, reason=reason,
        response_headers=headers if headers is not None else (("content-type", "text/event-stream"),),
        streamed=streamed if status is not None else None,
        chunks=tuple((t, len(c)) for t, c in chunks), response_body=b"".join(c for _, c in chunks),
        t_end=t_end, error=error, t_error=t_error,
    )


def times(plan) -> list[float]:
    return [round(t, 6) for t, _ in plan.writes]


def test_a_streamed_response_plays_at_its_recorded_offsets_scaled() -> None:
    ex = exchange()
    one = plan_replay(ex, 1.0)
    assert (one.status, one.reason, one.streamed, one.ending) == (200, "OK", True, COMPLETE)
    assert round(one.headers_at, 6) == 0.2 and times(one) == [0.5, 0.6, 0.8] and round(one.end_at, 6) == 1.0
    assert b"".join(d for _, d in one.writes) == ex.response_body
    two = plan_replay(ex, 2.0)
    assert round(two.headers_at, 6) == 0.1 and times(two) == [0.25, 0.3, 0.4]
    fast = plan_replay(ex, 0.0)
    assert fast.headers_at == 0 and times(fast) == [0, 0, 0] and fast.end_at == 0


def test_a_non_streamed_response_comes_whole_after_the_recorded_delay() -> None:
    plan = plan_replay(exchange(((1.9, b'{"ok":'), (1.95, b"true}")), streamed=False, t_end=2.0), 1.0)
    assert plan.streamed is False and round(plan.headers_at, 6) == 1.0
    assert [d for _, d in plan.writes] == [b'{"ok":true}'] and plan.ending == COMPLETE


def test_in_flight_and_failed_exchanges_end_as_recorded() -> None:
    wedge = plan_replay(exchange(t_end=None), 1.0)
    assert (wedge.ending, wedge.hold_for, round(wedge.end_at, 6)) == (HOLD, None, 0.8) and len(wedge.writes) == 3
    reset = plan_replay(exchange(t_end=None, error="peer closed", t_error=2.5), 1.0)
    assert (reset.ending, round(reset.end_at, 6)) == (ABORT, 1.5)
    silent = plan_replay(exchange((), status=None, t_end=None), 1.0)
    assert (silent.status, silent.writes, silent.ending) == (None, (), HOLD)
    refused = plan_replay(exchange((), status=None, t_end=None, error="refused", t_error=1.3), 1.0)
    assert (refused.status, refused.ending, round(refused.end_at, 6)) == (None, ABORT, 0.3)


def test_hop_by_hop_and_redacted_headers_are_not_replayed() -> None:
    recorded = (("Content-Type", "text/event-stream"), ("Content-Length", "10"), ("Transfer-Encoding", "chunked"),
                ("Connection", "keep-alive, X-Trace"), ("Keep-Alive", "timeout=5"), ("X-Trace", "1"),
                ("Set-Cookie", REDACTED), ("X-Dup", "a"), ("X-Dup", "b"), ("X-Bad", "a\r\nInjected: 1"))
    assert response_headers(recorded) == (("Content-Type", "text/event-stream"), ("X-Dup", "a"), ("X-Dup", "b"))
    assert plan_replay(exchange(reason=""), 1.0).reason is None  # HTTP/2: no reason phrase


def test_faults_reshape_a_replayed_stream() -> None:
    ex = exchange()
    late = plan_replay(ex, 1.0, ActiveFaults(delay_headers=0.5))
    assert round(late.headers_at, 6) == 0.7 and times(late) == [1.0, 1.1, 1.3] and round(late.end_at, 6) == 1.5
    stall = plan_replay(ex, 1.0, ActiveFaults(stall_after=2, stall_seconds=30.0))
    assert ([d for _, d in stall.writes], stall.ending, stall.hold_for) == ([b"ab", b"cd"], HOLD, 30.0)
    assert round(stall.end_at, 6) == 0.6
    close = plan_replay(ex, 1.0, ActiveFaults(close_after=0, stall_after=2))
    assert (close.writes, close.ending, round(close.end_at, 6)) == ((), ABORT, 0.2)
    assert plan_replay(ex, 1.0, ActiveFaults(stall_after=3)) == plan_replay(ex, 1.0)  # fewer chunks than K
    whole = plan_replay(exchange(streamed=False), 1.0, ActiveFaults(stall_after=1))
    assert whole.ending == COMPLETE and len(whole.writes) == 1  # as in synthetic mode: streams only


def test_drop_terminal_cuts_the_last_event() -> None:
    body = [(1.3, delta("a")), (1.4, delta("b")[:10]), (1.5, delta("b")[10:] + DONE[:4]), (1.6, DONE[4:])]
    plan = plan_replay(exchange(body), 1.0, ActiveFaults(drop_terminal=True))
    assert b"".join(d for _, d in plan.writes) == delta("a") + delta("b") and plan.ending == COMPLETE
    assert times(plan) == [0.3, 0.4, 0.5]


@given(
    sizes=st.lists(st.integers(1, 40), max_size=12),
    gaps=st.lists(st.floats(0, 2, allow_nan=False), min_size=12, max_size=12),
    speed=st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    ending=st.sampled_from(["end", "error", "in_flight"]),
)
def test_a_plan_sends_every_recorded_byte_in_order(sizes, gaps, speed, ending) -> None:
    t, pos, chunks = 1.2, 0, []
    for size, gap in zip(sizes, gaps):
        t += gap
        chunks.append((t, bytes((pos + i) % 256 for i in range(size))))
        pos += size
    ex = exchange(chunks, t_end=t + 0.1 if ending == "end" else None, error="x" if ending == "error" else None,
                  t_error=t + 0.1 if ending == "error" else None)
    plan = plan_replay(ex, speed)
    assert b"".join(d for _, d in plan.writes) == ex.response_body
    offsets = [at for at, _ in plan.writes]
    assert offsets == sorted(offsets) and all(at >= plan.headers_at for at in offsets)
    assert all(at <= plan.end_at for at in offsets)
    assert plan.ending == {"end": COMPLETE, "error": ABORT, "in_flight": HOLD}[ending]


@given(st.lists(st.integers(0, 3), max_size=30), st.lists(st.integers(0, 3), max_size=30))
def test_common_prefix_is_the_naive_one(a, b) -> None:
    naive = 0
    while naive < min(len(a), len(b)) and a[naive] == b[naive]:
        naive += 1
    assert common_prefix(tuple(a), tuple(b)) == naive
    assert common_prefix(bytes(a), bytes(b)) == naive
    assert common_prefix("".join(map(str, a)), "".join(map(str, b))) == naive
