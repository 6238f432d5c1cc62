"""Session grouping: explicit keys, conversation continuity, connections, think times, and the
names sessions are shown by (labels, readable keys)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.recording.sessions import SessionName, TurnInput, group, label_of, readable_key


def conversation(name: str, turns: int, start: float = 0.0, gap: float = 1.0, client: str | None = None) -> list[TurnInput]:
    """Turns of one chat: each re-sends the history plus the reply plus a new user message."""
    out = []
    history = [f"{name}-system"]
    t = start
    for k in range(turns):
        history = history + [f"{name}-user{k}"]
        out.append(TurnInput(xid=0, t_start=t, t_end=t + 0.5, history=tuple(history), client=client))
        history = history + [f"{name}-reply{k}"]
        t += 0.5 + gap
    return out


def numbered(turns: list[TurnInput]) -> list[TurnInput]:
    return [TurnInput(**{**{s: getattr(t, s) for s in TurnInput.__slots__}, "xid": i}) for i, t in enumerate(turns, 1)]


def test_interleaved_conversations_are_separated_by_continuity() -> None:
    a = conversation("a", 4, start=0.0)
    b = conversation("b", 3, start=0.2)
    turns = numbered(sorted(a + b, key=lambda t: t.t_start))
    sessions = group(turns)
    assert [s.id for s in sessions] == ["s1", "s2"]
    by_xid = {t.xid: t for t in turns}
    assert {by_xid[x].history[0] for x in sessions[0].xids} == {"a-system"}
    assert {by_xid[x].history[0] for x in sessions[1].xids} == {"b-system"}
    assert sessions[0].turns == 4 and sessions[1].turns == 3
    assert all(s.grouped_by == "continuity" for s in sessions)


def test_think_time_is_from_end_of_reply_to_next_request() -> None:
    (s,) = group(numbered(conversation("a", 3, gap=2.5)))
    assert s.think_times == (None, 2.5, 2.5)


def test_identical_first_prompts_on_different_connections_are_different_sessions() -> None:
    a = conversation("same", 2, start=0.0, client="c1")
    b = conversation("same", 2, start=0.1, client="c2")
    sessions = group(numbered(sorted(a + b, key=lambda t: t.t_start)))
    assert [s.turns for s in sessions] == [2, 2]


def test_a_retry_of_a_failed_turn_stays_in_the_session() -> None:
    turns = conversation("a", 2)
    failed = TurnInput(**{**{s: getattr(turns[1], s) for s in TurnInput.__slots__}, "failed": True, "t_end": None})
    retry = TurnInput(**{**{s: getattr(turns[1], s) for s in TurnInput.__slots__}, "t_start": 30.0, "t_end": 31.0})
    (s,) = group(numbered([turns[0], failed, retry]))
    assert s.xids == (1, 2, 3)
    assert s.think_times[2] is None  # the wedged turn never ended


def test_explicit_keys_win_over_content() -> None:
    turns = [
        TurnInput(xid=1, t_start=0, t_end=1, explicit_key="A", key_source="header:x-session-id", history=("m",)),
        TurnInput(xid=2, t_start=2, t_end=3, explicit_key="B", key_source="header:x-session-id", history=("m", "r", "n")),
        TurnInput(xid=3, t_start=4, t_end=5, explicit_key="A", key_source="header:x-session-id", history=("z",)),
    ]
    sessions = group(turns)
    assert [(s.id, s.xids, s.grouped_by) for s in sessions] == [
        ("A", (1, 3), "header:x-session-id"),
        ("B", (2,), "header:x-session-id"),
    ]


def test_prompt_apis_group_by_prompt_prefix() -> None:
    turns = [
        TurnInput(xid=1, t_start=0, t_end=1, prompt="SYS: Q1"),
        TurnInput(xid=2, t_start=0.5, t_end=1.5, prompt="OTHER: Q1"),
        TurnInput(xid=3, t_start=2, t_end=3, prompt="SYS: Q1 A1 Q2"),
        TurnInput(xid=4, t_start=4, t_end=5, prompt="SYS: Q1 A1 Q2 A2 Q3"),
    ]
    sessions = group(turns)
    assert [s.xids for s in sessions] == [(1, 3, 4), (2,)]


def test_bodies_without_structure_group_by_client_connection() -> None:
    turns = [
        TurnInput(xid=1, t_start=0, t_end=1, client="c1", route="POST /x"),
        TurnInput(xid=2, t_start=2, t_end=3, client="c1", route="POST /x"),
        TurnInput(xid=3, t_start=2.5, t_end=3, client="c2", route="POST /x"),
        TurnInput(xid=4, t_start=4, t_end=5),
    ]
    sessions = group(turns)
    assert [(s.xids, s.grouped_by) for s in sessions] == [((1, 2), "connection"), ((3,), "connection"), ((4,), "single")]


@settings(max_examples=60)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_any_interleaving_of_distinct_conversations_is_recovered(lengths, rnd) -> None:
    convs = [conversation(f"c{i}", n, start=rnd.random() * 5, gap=rnd.random() * 3) for i, n in enumerate(lengths)]
    turns = numbered(sorted((t for c in convs for t in c), key=lambda t: t.t_start))
    sessions = group(turns)
    by_xid = {t.xid: t for t in turns}
    found = sorted((by_xid[s.xids[0]].history[0], s.turns) for s in sessions)
    assert found == sorted((f"c{i}-system", n) for i, n in enumerate(lengths))
    for s in sessions:
        starts = [by_xid[x].t_start for x in s.xids]
        assert starts == sorted(starts)


def test_grouping_hashes_each_message_id_once(monkeypatch) -> None:
    # Near-linear: the work is one digest per message id of the input, however many sessions
    # are open (a pairwise comparison of sessions would grow with their square).
    import proxycheck.core.recording.sessions as sessions_mod

    calls = 0
    real = sessions_mod.hashlib.blake2b

    def counting(*args, **kwargs):
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(sessions_mod.hashlib, "blake2b", counting)
    turns = numbered([t for i in range(100) for t in conversation(f"c{i}", 20, start=i * 0.01)])
    assert len(group(turns)) == 100
    assert calls == sum(len(t.history) for t in turns)


# --------------------------------------------------------------------------------------------
# Names: labels in order of the first turn, readable keys

CLAUDE_SESSION = "5c3e8a0f-2b1d-4c6e-9f7a-0d1e2f3a4b5c"
CLAUDE_USER_ID = json.dumps(
    {"device_id": "9" * 64, "account_uuid": "", "session_id": CLAUDE_SESSION}, separators=(",", ":")
)


def keyed(xid: int, t: float, key: str, history: tuple[str, ...]) -> TurnInput:
    return TurnInput(xid=xid, t_start=t, t_end=t + 0.5, explicit_key=key, key_source="field:metadata.user_id",
                     history=history)  # fmt: skip


@pytest.mark.parametrize(
    "key, readable",
    [
        (CLAUDE_USER_ID, CLAUDE_SESSION),
        (f"user_{'a' * 64}_account_{CLAUDE_SESSION}_session_{CLAUDE_SESSION}", CLAUDE_SESSION),
        ("alpha", "alpha"),
        ('{"device_id": "x"}', '{"device_id": "x"}'),  # no session_id: the key as it came
        ('{"session_id": 7}', '{"session_id": 7}'),
        ("{not json", "{not json"),
        ("user_42", "user_42"),
    ],
)
def test_readable_key_is_the_session_id_a_harness_put_in_its_key(key: str, readable: str) -> None:
    assert readable_key(key) == readable


def test_labels_follow_first_turns_and_never_clash_with_continuity_ids() -> None:
    turns = [
        keyed(1, 0.0, CLAUDE_USER_ID, ("k-u1",)),
        TurnInput(xid=2, t_start=1.0, t_end=1.5, history=("c-u1",)),
        keyed(3, 2.0, "other", ("o-u1",)),
        TurnInput(xid=4, t_start=3.0, t_end=3.5, history=("c-u1", "c-r1", "c-u2")),
        keyed(5, 4.0, CLAUDE_USER_ID, ("k-u1", "k-r1", "k-u2")),
    ]
    sessions = group(turns)
    assert [(s.label, s.id, s.key, s.xids) for s in sessions] == [
        ("s1", CLAUDE_USER_ID, CLAUDE_SESSION, (1, 5)),
        ("s2", "s2", None, (2, 4)),  # continuity: its id is its label, not the keyed s1's
        ("s3", "other", "other", (3,)),
    ]


def test_a_key_shaped_like_a_label_is_its_sessions_label_and_nobody_elses() -> None:
    turns = [
        TurnInput(xid=1, t_start=0.0, t_end=0.5, history=("a",)),
        keyed(2, 1.0, "s1", ("b",)),
        TurnInput(xid=3, t_start=2.0, t_end=2.5, history=("c",)),
    ]
    sessions = group(turns)
    assert [(s.label, s.id) for s in sessions] == [("s2", "s2"), ("s1", "s1"), ("s3", "s3")]
    assert len({s.id for s in sessions}) == 3 and len({s.label for s in sessions}) == 3


def test_session_names_survive_json_and_say_which_label_is_which_key() -> None:
    name = SessionName(CLAUDE_USER_ID, "s1", CLAUDE_SESSION, "field:metadata.user_id")
    assert SessionName.from_json(json.loads(json.dumps(name.to_json()))) == name
    assert name.key_line() == f"s1 = session {CLAUDE_SESSION} (field:metadata.user_id)"
    assert SessionName("s2", "s2", None, "continuity").key_line() is None
    long = SessionName("k", "s3", "a" * 100 + "z" * 100, "header:x-session-id").key_line(limit=40)
    assert long == f"s3 = session {'a' * 19}…{'z' * 20} (header:x-session-id)"
    for bad in ([], {"id": "a"}, {"id": "a", "label": ""}, {"id": "a", "label": "s1", "key": 3}):
        with pytest.raises(ValueError):
            SessionName.from_json(bad)


def test_an_unknown_session_id_is_shown_as_itself_never_under_a_label() -> None:
    names = {"k": SessionName("k", "s1")}
    assert label_of(names, "k") == "s1"
    assert label_of(names, "s1") == "s1"  # an id that is a label-shaped key stays itself
    assert label_of(names, CLAUDE_USER_ID) == CLAUDE_SESSION  # by its readable key


# --------------------------------------------------------------------------------------------
# Retries: attempts of one turn, not new turns


def ex(xid: int, t: float, history: tuple[str, ...], *, end: float | None = 0.5, failed: bool = False,
       client: str | None = "c1", retry: int | None = None, key: str | None = None) -> TurnInput:  # fmt: skip
    return TurnInput(xid=xid, t_start=t, t_end=None if end is None else t + end, history=history, client=client,
                     failed=failed, retry_count=retry, explicit_key=key, key_source="header:x-session-id" if key else None)  # fmt: skip


def shape(s) -> list[tuple[int, int, int]]:  # type: ignore[no-untyped-def]
    """(xid, turn, attempt) of each exchange of a session."""
    return list(zip(s.xids, s.turn_numbers, s.attempt_numbers))


H1 = ("sys", "u1")
H2 = ("sys", "u1", "a1", "u2")
H3 = ("sys", "u1", "a1", "u2", "a2", "u3")


def test_an_sdk_retrying_a_504_twice_is_one_turn_in_three_attempts() -> None:
    turns = [
        ex(1, 0.0, H1),
        ex(2, 1.0, H2, failed=True, retry=0),  # 504
        ex(3, 2.0, H2, failed=True, retry=1),  # backoff 0.5 s, 504 again
        ex(4, 3.5, H2, retry=2),  # backoff 1.0 s, ok
        ex(5, 5.0, H3),
    ]
    (s,) = group(turns)
    assert s.turns == 3 and s.attempts(2) == 3
    assert shape(s) == [(1, 1, 1), (2, 2, 1), (3, 2, 2), (4, 2, 3), (5, 3, 1)]
    # Think time from the end of the turn's last attempt; the waits before retries are backoffs.
    assert s.think_times == (None, 0.5, None, None, 1.0)
    assert s.backoffs == (None, None, 0.5, 1.0, None)


def test_an_identical_re_send_after_a_success_is_a_new_turn() -> None:
    (s,) = group([ex(1, 0.0, H1), ex(2, 1.0, H1)])
    assert shape(s) == [(1, 1, 1), (2, 2, 1)] and s.think_times == (None, 0.5)


def test_an_identical_re_send_after_a_failure_is_an_attempt_even_without_the_header() -> None:
    (s,) = group([ex(1, 0.0, H1), ex(2, 1.0, H2, failed=True, end=None), ex(3, 30.0, H2, client="c2")])
    assert shape(s) == [(1, 1, 1), (2, 2, 1), (3, 2, 2)]
    assert s.backoffs[2] is None  # the wedged attempt never ended: no backoff to measure


def test_a_trimmed_history_after_a_413_is_an_attempt() -> None:
    big = ("sys", "u1", "a1", "tool-call", "huge-result", "a2", "u2")
    trimmed = ("sys", "u1", "a1", "tool-call", "small-result", "a2", "u2")  # one message cut down
    shorter = ("sys", "u1", "a1", "u2")  # or the tool round dropped
    for retry in (trimmed, shorter):
        (s,) = group([ex(1, 0.0, ("sys", "u1")), ex(2, 1.0, big, failed=True), ex(3, 2.0, retry)])
        assert shape(s) == [(1, 1, 1), (2, 2, 1), (3, 2, 2)], retry
    # The next turn builds on the history that got through.
    (s,) = group([ex(1, 0.0, big, failed=True), ex(2, 1.0, shorter), ex(3, 2.0, shorter + ("a3", "u3"))])
    assert shape(s) == [(1, 1, 1), (2, 1, 2), (3, 2, 1)]


def test_a_failure_then_a_request_that_goes_on_is_a_new_turn() -> None:
    # The harness kept the error in the history and went on: no re-send, a new turn.
    (s,) = group([ex(1, 0.0, H1, failed=True), ex(2, 1.0, H1 + ("error-note", "u2"))])
    assert shape(s) == [(1, 1, 1), (2, 2, 1)]


def test_another_conversation_that_shares_first_and_last_messages_is_not_a_retry() -> None:
    a = ("sys", "ua1", "aa1", "ua2", "aa2", "go on")
    b = ("sys", "ub1", "ab1", "go on")  # the same system prompt and a generic "go on"
    sessions = group([ex(1, 0.0, a, failed=True), ex(2, 1.0, b, client="c2")])
    assert [shape(s) for s in sessions] == [[(1, 1, 1)], [(2, 1, 1)]]


def test_the_retry_header_confirms_an_attempt_the_recorder_saw_succeed() -> None:
    # A hop outside the recorder failed the response the recorder saw complete: the SDK says so.
    (s,) = group([ex(1, 0.0, H1), ex(2, 1.0, H1, retry=1)])
    assert shape(s) == [(1, 1, 1), (2, 1, 2)]
    (s,) = group([ex(1, 0.0, H1), ex(2, 1.0, H1, retry=0)])
    assert shape(s) == [(1, 1, 1), (2, 2, 1)]


def test_two_sessions_sending_identical_first_requests_stay_two_sessions() -> None:
    # Both succeed, on their own connections.
    sessions = group([ex(1, 0.0, H1, client="a"), ex(2, 0.1, H1, client="b")])
    assert [shape(s) for s in sessions] == [[(1, 1, 1)], [(2, 1, 1)]]
    # A's fails, but B's was sent while A's was still running: not its retry. A's retry goes to A.
    sessions = group([
        ex(1, 0.0, H1, client="a", failed=True, end=1.0),
        ex(2, 0.5, H1, client="b"),
        ex(3, 2.0, H1, client="a2"),
        ex(4, 3.0, H2, client="b"),
        ex(5, 4.0, H2, client="a2"),
    ])  # fmt: skip
    assert [shape(s) for s in sessions] == [[(1, 1, 1), (3, 1, 2), (5, 2, 1)], [(2, 1, 1), (4, 2, 1)]]


def test_keyed_sessions_retry_the_turn_whose_request_is_re_sent() -> None:
    # Claude Code sends side requests (a title, a quota check) under the same key in between.
    turns = [
        ex(1, 0.0, H1, key="k"),
        ex(2, 1.0, H2, key="k", failed=True),
        ex(3, 1.6, ("title-prompt",), key="k"),
        ex(4, 2.0, H2, key="k"),
        ex(5, 3.0, ("other",), key="k", failed=True),
        ex(6, 4.0, H3, key="k"),  # not a re-send of 5
    ]
    (s,) = group(turns)
    assert shape(s) == [(1, 1, 1), (2, 2, 1), (3, 3, 1), (4, 2, 2), (5, 4, 1), (6, 5, 1)]
    assert s.backoffs[3] == 0.5


def test_prompt_apis_and_bare_bodies_retry_with_the_same_prompt_or_bytes() -> None:
    prompts = [
        TurnInput(xid=1, t_start=0, t_end=1, prompt="SYS: Q1", failed=True),
        TurnInput(xid=2, t_start=2, t_end=3, prompt="SYS: Q1"),
        TurnInput(xid=3, t_start=4, t_end=5, prompt="SYS: Q1 A1 Q2"),
    ]
    (s,) = group(prompts)
    assert shape(s) == [(1, 1, 1), (2, 1, 2), (3, 2, 1)]
    bare = [
        TurnInput(xid=1, t_start=0, t_end=1, client="c1", route="POST /x", digest="d1", failed=True),
        TurnInput(xid=2, t_start=2, t_end=3, client="c2", route="POST /x", digest="d1"),
        TurnInput(xid=3, t_start=4, t_end=5, client="c3", route="POST /x", digest="d2"),
    ]
    assert [shape(s) for s in group(bare)] == [[(1, 1, 1), (2, 1, 2)], [(3, 1, 1)]]


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(1, 5), st.lists(st.integers(0, 2), min_size=5, max_size=5)), min_size=1,
                max_size=6), st.randoms(use_true_random=False))  # fmt: skip
def test_any_interleaving_of_conversations_with_retries_is_recovered(convs, rnd) -> None:
    # Each conversation: n turns, turn k failing `retries[k]` times before it gets through, each
    # retry an identical re-send after the failure ended; sessions on connections of their own.
    turns: list[TurnInput] = []
    expected = []
    for i, (n, retries) in enumerate(convs):
        t = rnd.random() * 5
        history: tuple[str, ...] = (f"c{i}-sys",)
        shape_ = []
        for k in range(n):
            history = history + (f"c{i}-u{k}",)
            for attempt in range(retries[k] + 1):
                turns.append(TurnInput(xid=0, t_start=t, t_end=t + 0.3, history=history, client=f"c{i}-{k}-{attempt}",
                                       failed=attempt < retries[k]))  # fmt: skip
                shape_.append((k + 1, attempt + 1))
                t += 0.3 + rnd.random()
            history = history + (f"c{i}-a{k}",)
        expected.append(shape_)
    turns = numbered(sorted(turns, key=lambda t: t.t_start))
    found = sorted(list(zip(s.turn_numbers, s.attempt_numbers)) for s in group(turns))
    assert found == sorted(expected)


def test_the_retry_header_places_a_retry_sent_before_the_recorder_saw_the_failure_end() -> None:
    # An outer hop gave up at 1.0 s and the SDK retried at 1.2 s; the recorder's leg ended at 3 s.
    (s,) = group([ex(1, 0.0, H1, failed=True, end=3.0, retry=0), ex(2, 1.2, H1, client="c2", retry=1)])
    assert shape(s) == [(1, 1, 1), (2, 1, 2)]
    # Without the client's count, a request sent while the other still ran is another conversation.
    sessions = group([ex(1, 0.0, H1, failed=True, end=3.0), ex(2, 1.2, H1, client="c2")])
    assert [shape(s) for s in sessions] == [[(1, 1, 1)], [(2, 1, 1)]]
