"""A refused WebSocket upgrade and the HTTP conversation the same client then held (Codex CLI's
fallback) are one session that changed transport (`sessions.fell_back`); other clients' upgrades
and conversations never join, whatever their timing."""

from __future__ import annotations

from proxycheck.core.recording.sessions import FALLBACK_WINDOW, TurnInput, fell_back, group

CODEX = "codex_exec/0.171.0"


def upgrade(xid: int, t: float, session: str | None = "sess-a", *, agent: str = CODEX, client: str | None = None,
            path: str = "/v1/responses") -> TurnInput:  # fmt: skip
    return TurnInput(xid=xid, t_start=t, t_end=t + 0.01, client=client or f"conn{xid}", route=f"GET {path}",
                     failed=True, upgrade_refused=True, client_session=session, agent=agent)  # fmt: skip


def post(xid: int, t: float, items: tuple[str, ...], session: str | None = "sess-a", *, agent: str = CODEX,
         client: str | None = None) -> TurnInput:  # fmt: skip
    return TurnInput(xid=xid, t_start=t, t_end=t + 0.1, history=items, client=client or f"conn{xid}",
                     route="POST /v1/responses", client_session=session, agent=agent)  # fmt: skip


def shape(sessions) -> list[list[tuple[int, int, int]]]:  # type: ignore[no-untyped-def]
    return [list(zip(s.xids, s.turn_numbers, s.attempt_numbers)) for s in sessions]


def conversation(first: int, t: float, session: str | None = "sess-a", *, agent: str = CODEX) -> list[TurnInput]:
    user = f"u-{session}"  # each client's own prompt
    return [post(first, t, (user,), session, agent=agent), post(first + 1, t + 0.2, (user, "a", "o"), session, agent=agent)]


def test_the_refused_upgrades_are_earlier_attempts_of_the_first_http_turn() -> None:
    sessions = group([upgrade(1, 0.0), upgrade(2, 0.05), *conversation(3, 0.08)])
    assert shape(sessions) == [[(1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 2, 1)]]
    assert sessions[0].changed_transport == (1, 2)
    assert sessions[0].backoffs[1:3] == (0.04, 0.02)  # the gaps between the attempts


def test_two_clients_at_once_keep_their_own_upgrades_and_conversations() -> None:
    # b's upgrade is refused just before a's conversation starts, on the same path, from the
    # same harness: only the session id tells them apart, and it does.
    turns = [upgrade(1, 0.0, "sess-a"), upgrade(2, 0.01, "sess-b"), *conversation(3, 0.05, "sess-a"),
             *conversation(5, 0.06, "sess-b")]  # fmt: skip
    sessions = group(turns)
    assert sorted(shape(sessions)) == [[(1, 1, 1), (3, 1, 2), (4, 2, 1)], [(2, 1, 1), (5, 1, 2), (6, 2, 1)]]
    assert sorted(s.changed_transport for s in sessions) == [(1,), (2,)]


def test_without_a_client_session_id_nothing_is_joined() -> None:
    # The same connection, the same agent, right after: still no evidence it is the same client.
    sessions = group([upgrade(1, 0.0, None, client="c"), *conversation(2, 0.05, None)])
    assert shape(sessions) == [[(1, 1, 1)], [(2, 1, 1), (3, 2, 1)]]
    assert not any(s.changed_transport for s in sessions)


def test_another_agent_path_order_or_a_long_gap_is_not_a_fallback() -> None:
    up = upgrade(1, 10.0)
    assert fell_back(up, post(2, 10.05, ("u",)))
    assert not fell_back(up, post(2, 10.05, ("u",), agent="claude-cli/2.0"))  # the same id from another harness
    assert not fell_back(up, post(2, 10.05, ("u",), "sess-b"))
    assert not fell_back(upgrade(1, 10.0, path="/v1/realtime"), post(2, 10.05, ("u",)))
    assert not fell_back(up, post(2, 9.0, ("u",)))  # sent before the upgrade was refused
    assert not fell_back(up, post(2, 10.02 + FALLBACK_WINDOW, ("u",)))
    assert not fell_back(post(2, 0.0, ("u",)), post(3, 0.5, ("u", "a", "o")))  # no upgrade at all
    # An upgrade the server agreed to (a socket) is no refusal: its session stays its own.
    agreed = TurnInput(xid=1, t_start=0.0, t_end=1.0, client="c1", route="GET /v1/responses", client_session="sess-a",
                       agent=CODEX)  # fmt: skip
    assert shape(group([agreed, *conversation(2, 1.5)])) == [[(1, 1, 1)], [(2, 1, 1), (3, 2, 1)]]


def test_a_late_conversation_of_the_same_session_id_is_joined_only_within_the_window() -> None:
    sessions = group([upgrade(1, 0.0), *conversation(2, 1.0 + FALLBACK_WINDOW)])
    assert shape(sessions) == [[(1, 1, 1)], [(2, 1, 1), (3, 2, 1)]]
