"""Session grouping: explicit keys, conversation continuity, connections, think times."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxycheck.core.sessions import TurnInput, group


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
    import proxycheck.core.sessions as sessions_mod

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
