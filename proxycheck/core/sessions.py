"""Session grouping: which recorded exchanges are the turns of one conversation.

A harness rarely says which conversation a request belongs to, so grouping uses, in order:

1. an explicit key, when the request carries one (headers `x-session-id`, `x-conversation-id`;
   body fields `session_id`, `conversation_id`, `user`, `metadata.user_id`; configurable);
2. conversation continuity: turn k+1 re-sends turn k's history and appends the reply and new
   messages, so its message list *starts with* turn k's. Each session's latest history is
   indexed by a digest of its message-id prefix, and a new turn looks up the digests of its own
   prefixes, longest first: O(messages) per turn, near-linear overall. Message ids are the piece
   ids of the recording (hashes of each message's bytes), so no content is read. Prompt-string
   APIs (completions, SGLang `/generate`) use the same idea on the prompt text;
3. the client connection, as a last hint (and to break ties between identical conversations).

Think time is the gap between the end of turn k's response and the start of turn k+1's request.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from proxycheck.core.bodies import prefix_digests

DEFAULT_SESSION_HEADERS = ("x-session-id", "x-conversation-id")
DEFAULT_SESSION_FIELDS = ("session_id", "conversation_id", "user", "metadata.user_id")


def turn_number(request: Mapping[str, Any] | None) -> int:
    """The turn of a parsed request body: the assistant messages in its history, plus one (1 when
    it has no `messages` list). Hops and engines that see one request at a time use it."""
    messages = request.get("messages") if request is not None else None
    if type(messages) is not list:
        return 1
    return 1 + sum(1 for m in messages if type(m) is dict and m.get("role") == "assistant")


@dataclass(frozen=True, slots=True)
class TurnInput:
    """What grouping needs to know of one exchange.

    `history` is the ordered ids of the request's messages (None when the API has none);
    `prompt` the prompt text for prompt-string APIs. `failed` says the exchange did not complete
    normally, which makes an identical re-send a retry rather than a new conversation.
    """

    xid: int
    t_start: float
    t_end: float | None = None
    explicit_key: str | None = None
    key_source: str | None = None
    history: tuple[str, ...] | None = None
    prompt: str | None = None
    client: str | None = None
    route: str = ""
    failed: bool = False


@dataclass(frozen=True, slots=True)
class Session:
    """One conversation: its exchanges in order and the think time before each turn."""

    id: str
    grouped_by: str
    xids: tuple[int, ...]
    think_times: tuple[float | None, ...] = field(default=())

    @property
    def turns(self) -> int:
        return len(self.xids)


@dataclass(slots=True)
class _Open:
    """A session being built."""

    id: str
    grouped_by: str
    turns: list[TurnInput]
    tip: bytes | None = None  # digest of the last turn's full history
    tip_prompt: str | None = None

    @property
    def last(self) -> TurnInput:
        return self.turns[-1]


def _prompt_digest(prompt: str) -> bytes:
    return hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def group(turns: Sequence[TurnInput]) -> list[Session]:
    """Group exchanges (in any order) into sessions, ordered by their first turn."""
    ordered = sorted(turns, key=lambda t: (t.t_start, t.xid))
    sessions: list[_Open] = []
    by_key: dict[str, _Open] = {}
    by_tip: dict[bytes, list[_Open]] = {}
    by_prompt_len: dict[int, dict[bytes, list[_Open]]] = {}
    by_client: dict[tuple[str, str], _Open] = {}
    counter = 0

    def new_session(turn: TurnInput, grouped_by: str, sid: str | None = None) -> _Open:
        nonlocal counter
        if sid is None:
            counter += 1
            sid = f"s{counter}"
        s = _Open(sid, grouped_by, [turn])
        sessions.append(s)
        return s

    def pick(candidates: list[_Open], turn: TurnInput, exact: bool) -> _Open | None:
        usable = []
        for s in candidates:
            last = s.last
            if exact and not (last.failed or (turn.client and last.client == turn.client)):
                continue  # an identical request on another connection is another conversation
            usable.append(s)
        if not usable:
            return None
        # Prefer the same client connection, then the session whose last turn ended latest
        # before this one started (the reply this turn builds on).
        def rank(s: _Open) -> tuple[int, float]:
            same = 1 if turn.client and s.last.client == turn.client else 0
            end = s.last.t_end if s.last.t_end is not None and s.last.t_end <= turn.t_start else -1.0
            return same, end

        return max(usable, key=rank)

    for turn in ordered:
        if turn.explicit_key is not None:
            s = by_key.get(turn.explicit_key)
            if s is None:
                s = by_key[turn.explicit_key] = new_session(turn, turn.key_source or "key", turn.explicit_key)
            else:
                s.turns.append(turn)
            continue

        chosen: _Open | None = None
        if turn.history is not None:
            digests = prefix_digests(turn.history)
            for k in range(len(turn.history), 0, -1):
                candidates = by_tip.get(digests[k])
                if candidates:
                    chosen = pick(candidates, turn, exact=(k == len(turn.history)))
                    if chosen is not None:
                        candidates.remove(chosen)
                        break
            if chosen is None:
                chosen = new_session(turn, "continuity")
            else:
                chosen.turns.append(turn)
            chosen.tip = digests[-1]
            by_tip.setdefault(chosen.tip, []).append(chosen)
        elif turn.prompt is not None:
            chosen = _match_prompt(turn, by_prompt_len, pick)
            if chosen is None:
                chosen = new_session(turn, "continuity")
            else:
                chosen.turns.append(turn)
            chosen.tip_prompt = turn.prompt
            by_prompt_len.setdefault(len(turn.prompt), {}).setdefault(_prompt_digest(turn.prompt), []).append(chosen)
        else:
            key = (turn.client or "", turn.route)
            prev = by_client.get(key) if turn.client else None
            if prev is not None and prev.last.t_end is not None and prev.last.t_end <= turn.t_start:
                prev.turns.append(turn)
                chosen = prev
            else:
                chosen = new_session(turn, "connection" if turn.client else "single")
            by_client[key] = chosen

    return [_close(s) for s in sessions]


def _match_prompt(turn: TurnInput, by_len: dict[int, dict[bytes, list[_Open]]], pick) -> _Open | None:  # type: ignore[no-untyped-def]
    prompt = turn.prompt or ""
    # Longest earlier prompt that this prompt starts with; one digest per distinct length.
    for length in sorted((n for n in by_len if 0 < n <= len(prompt)), reverse=True):
        candidates = by_len[length].get(_prompt_digest(prompt[:length]))
        if candidates:
            chosen = pick(candidates, turn, exact=(length == len(prompt)))
            if chosen is not None:
                candidates.remove(chosen)
                return chosen
    return None


def _close(s: _Open) -> Session:
    thinks: list[float | None] = [None]
    for prev, cur in zip(s.turns, s.turns[1:]):
        thinks.append(None if prev.t_end is None else round(cur.t_start - prev.t_end, 6))
    return Session(s.id, s.grouped_by, tuple(t.xid for t in s.turns), tuple(thinks))
