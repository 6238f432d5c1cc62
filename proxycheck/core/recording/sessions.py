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

The Responses API has a second way to continue a conversation: the request names the `id` of an
earlier response in `previous_response_id` and holds only the new input items. Such a request
is the next turn of the session whose exchange got that response (after an explicit key, before
every other rule), whatever its input holds. The cases around it:

- a fork (two requests naming the same response) stays one session: both are turns of the
  conversation of the response they name, numbered in the order they were sent (turn numbers
  count a conversation's requests, not the depth of a branch). A replay needs it so: the live id
  of the named response is known only inside the session that replayed it, turn after turn;
- a response id no earlier exchange got (the recording began mid-conversation, or the response
  came from elsewhere) groups the request by the other rules;
- a conversation may mix both ways: a request that resends the conversation instead of naming
  it is found by continuity, since the history of the session's last resending turn stays
  indexed while turns naming responses join it;
- a retry of a request naming a response (the same new items after a failure) is another
  attempt of its turn, as `retries` says.

A client whose WebSocket upgrade was refused and that then holds the same conversation over HTTP
(Codex CLI's fallback) changed transport: its refused upgrades are attempts of the first turn it
then sent over HTTP, in one session that says so (`Session.changed_transport`). The same client is
told by what the requests carry, never by time alone (`fell_back`): the same client session id
(Codex's `session-id` header on the upgrade and on every HTTP request; a request without one is
never joined), the same user agent and path, the HTTP request sent after the upgrade was refused
and within `FALLBACK_WINDOW` of it (Codex, retrying, falls back some 6.5 s later).

Retries are attempts of one turn, not new turns (`retries`): a request that re-sends the
conversation of a failed or unanswered request (the same history, or the same history shortened)
is attempt k of that request's turn. Think time is the gap between the end of turn k's last
attempt and the start of turn k+1's request; the gap before a retry is its backoff.

Names. A session's `id` is what it was grouped by: its explicit key as the request carried it,
or `sN` for a session found by continuity or connection. The key can be long: Claude Code's
`metadata.user_id` is a JSON object of a device id, an account id and a `session_id`, about 150
characters. So every session also has a short `label`, `s1`, `s2` ... in order of its first
turn's start, for everything a person reads, and a `key` (`readable_key`: the `session_id`
member when the explicit key is such a JSON object, else the key as it came; None for sessions
without one) for the line that says which label is which session. Labels never contradict ids:
a session found by continuity has its label as its id, and an explicit key shaped like a label
(`s7`) is that session's label, the other sessions numbered around it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from proxycheck.core.recording.bodies import prefix_digests

DEFAULT_SESSION_HEADERS = ("x-session-id", "x-conversation-id")
DEFAULT_SESSION_FIELDS = ("session_id", "conversation_id", "user", "metadata.user_id")
LABEL_PATTERN = re.compile(r"s[1-9][0-9]*")
# Headers in which a client names its own session on every request, the upgrade too (Codex CLI's
# `session-id`): what tells that a refused upgrade and an HTTP request are the same client's.
CLIENT_SESSION_HEADERS = ("session-id",)
# How long after a refused upgrade the same client's HTTP request is still its fallback (seconds).
FALLBACK_WINDOW = 60.0
# Claude Code before its JSON `metadata.user_id`: `user_<hash>_account_<uuid>_session_<uuid>`.
_SESSION_SUFFIX = re.compile(r"^user_.*_session_([0-9A-Za-z-]+)$")


def readable_key(key: str) -> str:
    """The part of an explicit session key that names the conversation: the `session_id` member
    of a JSON object (Claude Code's `metadata.user_id`), the `_session_<uuid>` tail of Claude
    Code's older `user_..._account_..._session_<uuid>`, else the key itself."""
    text = key.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            return key
        member = doc.get("session_id") if isinstance(doc, dict) else None
        return member if isinstance(member, str) and member.strip() else key
    found = _SESSION_SUFFIX.match(text)
    return found.group(1) if found else key


def turn_number(request: Mapping[str, Any] | None) -> int:
    """The turn of a parsed request body: the answers in its history, plus one. Hops and engines
    that see one request at a time use it.

    A `messages` list (chat, Anthropic) counts its assistant messages. A Responses API `input`
    list counts the model's turns among its items: a run of assistant messages and function calls
    (one answer may call several tools) is one turn, ended by what the client adds (a user message,
    a tool's output); reasoning items belong to the run they are in. Anything else is turn 1."""
    if request is None:
        return 1
    messages = request.get("messages")
    if type(messages) is list:
        return 1 + sum(1 for m in messages if type(m) is dict and m.get("role") == "assistant")
    items = request.get("input")
    if type(items) is not list:
        return 1
    turns, answering = 0, False
    for item in items:
        if type(item) is not dict:
            answering = False  # a bare string is a user message
            continue
        kind = item.get("type", "message")
        if kind in _MODEL_ITEMS or (kind == "message" and item.get("role") == "assistant"):
            turns += not answering
            answering = True
        elif kind == "message" or kind in _CLIENT_ITEMS:
            answering = False
    return 1 + turns


# Responses API input items the model produced, and those the client added (tool outputs).
_MODEL_ITEMS = frozenset({"function_call", "custom_tool_call", "local_shell_call", "computer_call", "web_search_call",
                          "file_search_call", "image_generation_call", "code_interpreter_call", "mcp_call"})
_CLIENT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output",
                           "computer_call_output", "mcp_approval_response"})


@dataclass(frozen=True, slots=True)
class TurnInput:
    """What grouping needs to know of one exchange.

    `history` is the ordered ids of the request's messages (None when the API has none);
    `prompt` the prompt text for prompt-string APIs. `failed` says the exchange did not complete
    normally (any outcome but ok, in flight included), which makes a re-send of its conversation
    a retry rather than a new turn. `retry_count` is the request's `x-stainless-retry-count`
    (the OpenAI and Anthropic SDKs count their retries in it), `digest` its body's SHA-256.
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
    retry_count: int | None = None
    digest: str | None = None
    # The Responses API: the `id` of the response this exchange got, and the request's
    # `previous_response_id` (the response it continues; see the module docstring).
    response_id: str | None = None
    previous_response_id: str | None = None
    # A WebSocket upgrade answered without a socket (refused); the client's own session id
    # (`CLIENT_SESSION_HEADERS`) and its user agent: what `fell_back` compares.
    upgrade_refused: bool = False
    client_session: str | None = None
    agent: str | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """One conversation: its exchanges in order, and for each its conversation turn, its attempt
    within that turn, the think time before it (first attempts) or the backoff before it
    (retries); its names (`id`, `label`, `key`) as the module docstring says."""

    id: str
    grouped_by: str
    xids: tuple[int, ...]
    think_times: tuple[float | None, ...] = field(default=())
    label: str = ""
    key: str | None = None
    turn_numbers: tuple[int, ...] = ()
    attempt_numbers: tuple[int, ...] = ()
    backoffs: tuple[float | None, ...] = ()
    # The refused WebSocket upgrades this HTTP conversation followed (`fell_back`): it changed transport.
    changed_transport: tuple[int, ...] = ()

    @property
    def turns(self) -> int:
        """Conversation turns (a turn retried three times is one turn)."""
        return max(self.turn_numbers, default=len(self.xids))

    def attempts(self, turn: int) -> int:
        """How many exchanges turn `turn` took (1 when it was not retried)."""
        return sum(1 for t in self.turn_numbers if t == turn) or 1


@dataclass(frozen=True, slots=True)
class SessionName:
    """What a session is called, apart from its exchanges: what reports and run directories keep
    so that `check`, `diff RUN` and `minimize` name a session as `proxycheck sessions` does.
    `attempts` lists (xid, attempt, attempts) for the exchanges of turns that took more than one
    attempt, so a report says "turn 2, attempt 1 of 3" without the recording at hand."""

    id: str
    label: str
    key: str | None = None
    grouped_by: str = ""
    attempts: tuple[tuple[int, int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label, "key": self.key, "grouped_by": self.grouped_by,
                "attempts": [list(a) for a in self.attempts]}  # fmt: skip

    @classmethod
    def from_json(cls, doc: Any) -> "SessionName":
        """The SessionName `to_json` made; ValueError for anything else."""
        if not isinstance(doc, Mapping):
            raise ValueError("a session name is not a JSON object")
        sid, label, key, grouped_by = doc.get("id"), doc.get("label"), doc.get("key"), doc.get("grouped_by", "")
        if not isinstance(sid, str) or not isinstance(label, str) or not label:
            raise ValueError("a session name needs an id and a label")
        if key is not None and not isinstance(key, str) or not isinstance(grouped_by, str):
            raise ValueError(f"session {label}: key and grouped_by must be text")
        attempts = doc.get("attempts") or []
        ok = isinstance(attempts, list) and all(
            isinstance(a, list) and len(a) == 3 and all(type(n) is int for n in a) and 1 <= a[1] <= a[2]
            for a in attempts
        )
        if not ok:
            raise ValueError(f"session {label}: attempts must be [exchange, attempt, attempts] triples")
        return cls(sid, label, key, grouped_by, tuple((a[0], a[1], a[2]) for a in attempts))

    def attempt_of(self, xid: int | None) -> tuple[int, int]:
        """(attempt, attempts) of one of the session's exchanges; (1, 1) when its turn took one."""
        for x, attempt, attempts in self.attempts:
            if x == xid:
                return attempt, attempts
        return 1, 1

    def key_line(self, limit: int = 64) -> str | None:
        """`s1 = session 5c3e… (field:metadata.user_id)`: which label is which keyed session
        (None when the label is all there is to say)."""
        if self.key is None or self.key == self.label:
            return None
        return f"{self.label} = session {shorten(self.key, limit)} ({self.grouped_by or 'key'})"


def shorten(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, its head and its tail kept around an ellipsis: keys
    of one client share long heads (a device id) and differ in their tails."""
    if len(text) <= limit:
        return text
    head = max(1, (limit - 1) // 2)
    return f"{text[:head]}…{text[len(text) - max(1, limit - 1 - head):]}"


def label_of(names: Mapping[str, SessionName], session_id: str) -> str:
    """The label of a session id. An id no name is known for (a run written before runs kept
    them) is never shown under a label it might not have: it is shown by its readable key, and
    a long one by its head and tail (keys of one device share a long head, not their tails)."""
    name = names.get(session_id)
    if name is not None:
        return name.label
    return shorten(readable_key(session_id), 40)


def think_time(previous_end: float | None, start: float) -> float | None:
    """The wait before a request: from the end (or error) of the exchange it follows to its
    start, to the microsecond; None when that exchange never ended. The one rule for think
    times and backoffs, in the session listing and in the replay plan alike."""
    return None if previous_end is None else round(start - previous_end, 6)


def attempt_text(turn: int, attempt: int, attempts: int) -> str:
    """`turn 3` or `turn 3, attempt 2 of 3`: a turn as reports name it."""
    return f"turn {turn}" if attempts <= 1 else f"turn {turn}, attempt {attempt} of {attempts}"


# --------------------------------------------------------------------------------------------
# Retries

RETRY_WINDOW = 8  # exchanges of a keyed session searched for the request a retry re-sends


def retries(earlier: TurnInput, turn: TurnInput) -> bool:
    """Whether `turn` is another attempt at `earlier`: it re-sends `earlier`'s conversation after
    `earlier` failed or went unanswered (SDKs retry 408/409/429/5xx and connection errors;
    harnesses re-send after a stall, Claude Code a trimmed history after a 413), or the client
    says it retries (`x-stainless-retry-count` above 0).

    A re-send is the same history, or that history shortened: the same first and last messages
    (the user's question), no more messages, and most of them found in the earlier history
    (trimmed ones have other ids). Prompt-string APIs need the same prompt; bodies without
    either, the same bytes. A retry starts after the failure it retries had ended (or, when the
    client counts it as a retry, after it started), so an identical request sent while the other
    was still running is another conversation. Without a failure or the client's word, a re-send
    is a new turn (a user asking the same again)."""
    confirmed = turn.retry_count is not None and turn.retry_count > 0
    if not (earlier.failed or confirmed):
        return False
    # The client's own count may come before the recorder saw the failure end (a hop outside
    # the recorder gave up first); without it, a retry follows the end of what it retries.
    if turn.t_start < earlier.t_start or (not confirmed and earlier.t_end is not None and turn.t_start < earlier.t_end):
        return False
    if turn.history is not None and earlier.history is not None:
        return resends(earlier.history, turn.history)
    if turn.prompt is not None and earlier.prompt is not None:
        return turn.prompt == earlier.prompt
    return turn.digest is not None and turn.digest == earlier.digest


def fell_back(upgrade: TurnInput, turn: TurnInput) -> bool:
    """Whether `turn` is the same client going on over HTTP after its `upgrade` was refused: the
    same client session id (none: never), user agent and path, sent after the refusal ended and
    within FALLBACK_WINDOW of it (see the module docstring)."""
    if not upgrade.upgrade_refused or turn.upgrade_refused or upgrade.client_session is None:
        return False
    if turn.client_session != upgrade.client_session or turn.agent != upgrade.agent:
        return False
    if upgrade.route.split(" ", 1)[-1] != turn.route.split(" ", 1)[-1]:
        return False
    after = upgrade.t_end if upgrade.t_end is not None else upgrade.t_start
    return 0.0 <= turn.t_start - after <= FALLBACK_WINDOW


def _fallbacks(ordered: Sequence[TurnInput]) -> dict[int, list[TurnInput]]:
    """The refused upgrades each exchange is the HTTP fallback of (by the exchange's xid): each
    upgrade joins the first later exchange that `fell_back` to it."""
    out: dict[int, list[TurnInput]] = {}
    for i, upgrade in enumerate(ordered):
        if upgrade.upgrade_refused and upgrade.client_session is not None:
            target = next((t for t in ordered[i + 1 :] if fell_back(upgrade, t)), None)
            if target is not None:
                out.setdefault(target.xid, []).append(upgrade)
    return out


def resends(old: Sequence[str], new: Sequence[str]) -> bool:
    """`new` is the history `old` again, whole or shortened (see `retries`)."""
    if tuple(new) == tuple(old):
        return True
    if not new or len(new) > len(old) or new[0] != old[0] or new[-1] != old[-1]:
        return False
    seen = set(old)
    return 2 * sum(1 for m in new if m in seen) > len(new)


# --------------------------------------------------------------------------------------------
# Grouping


@dataclass(slots=True)
class _Open:
    """A session being built: its exchanges, each one's turn and attempt, and where it is indexed."""

    id: str
    grouped_by: str
    label: str
    exchanges: list[TurnInput] = field(default_factory=list)
    turn_no: list[int] = field(default_factory=list)
    attempt_no: list[int] = field(default_factory=list)
    turns: int = 0
    latest: dict[int, int] = field(default_factory=dict)  # turn -> index of its latest attempt
    tip: bytes | None = None  # digest of the last exchange's full history
    tip_prompt: tuple[int, bytes] | None = None  # (length, digest) of the last exchange's prompt
    last_key: str | None = None  # what a retry of the last exchange would share with it
    upgrades: list[int] = field(default_factory=list)  # refused upgrades joined (`fell_back`)

    @property
    def last(self) -> TurnInput:
        return self.exchanges[-1]

    def add(self, turn: TurnInput, attempt_of: int | None = None) -> None:
        """Append `turn`: a new turn, or another attempt at the turn of exchange `attempt_of`."""
        if attempt_of is None:
            self.turns += 1
            number, attempt = self.turns, 1
        else:
            number, attempt = self.turn_no[attempt_of], self.attempt_no[self.latest[self.turn_no[attempt_of]]] + 1
        self.latest[number] = len(self.exchanges)
        self.turn_no.append(number)
        self.attempt_no.append(attempt)
        self.exchanges.append(turn)

    def place(self, turn: TurnInput, attempt_of: int | None, upgrades: Sequence[TurnInput]) -> None:
        """`add`, the refused `upgrades` it fell back from first, as earlier attempts of its turn."""
        for upgrade in upgrades:
            self.add(upgrade, attempt_of)
            attempt_of = len(self.exchanges) - 1 if attempt_of is None else attempt_of
            self.upgrades.append(upgrade.xid)
        self.add(turn, attempt_of)

    def retried(self, turn: TurnInput) -> int | None:
        """The index of the recent exchange `turn` retries: the latest attempt of its turn."""
        for i in range(len(self.exchanges) - 1, max(-1, len(self.exchanges) - 1 - RETRY_WINDOW), -1):
            if self.latest[self.turn_no[i]] == i and retries(self.exchanges[i], turn):
                return i
        return None


def _prompt_digest(prompt: str) -> bytes:
    return hashlib.blake2b(prompt.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _last_key(turn: TurnInput, prompt_digest: bytes | None) -> str | None:
    """What a retry of `turn` shares with it, for looking retries up: its last message, its
    prompt, or its body."""
    if turn.history:
        return "m:" + turn.history[-1]
    if prompt_digest is not None:
        return "p:" + prompt_digest.hex()
    return "b:" + turn.digest if turn.digest else None


def group(turns: Sequence[TurnInput]) -> list[Session]:
    """Group exchanges (in any order) into sessions, ordered by their first turn; retries become
    attempts of the turn they retry (`retries`)."""
    ordered = sorted(turns, key=lambda t: (t.t_start, t.xid))
    fallbacks = _fallbacks(ordered)
    joined = {upgrade.xid for upgrades in fallbacks.values() for upgrade in upgrades}
    sessions: list[_Open] = []
    by_key: dict[str, _Open] = {}
    by_tip: dict[bytes, list[_Open]] = {}
    by_prompt_len: dict[int, dict[bytes, list[_Open]]] = {}
    by_client: dict[tuple[str, str], _Open] = {}
    by_last: dict[str, list[_Open]] = {}
    by_response: dict[str, list[_Open]] = {}  # a response id -> the sessions whose exchange got it
    # Explicit keys shaped like labels are those sessions' labels: no other session gets them.
    reserved = {t.explicit_key for t in ordered if t.explicit_key is not None and LABEL_PATTERN.fullmatch(t.explicit_key)}
    counter = 0

    def next_label() -> str:
        nonlocal counter
        while True:
            counter += 1
            if f"s{counter}" not in reserved:
                return f"s{counter}"

    def new_session(grouped_by: str, key: str | None = None) -> _Open:
        if key is not None:
            s = _Open(key, grouped_by, key if key in reserved else next_label())
        else:
            label = next_label()
            s = _Open(label, grouped_by, label)
        sessions.append(s)
        return s

    def rank(s: _Open, turn: TurnInput) -> tuple[int, float]:
        # Prefer the same client connection, then the session whose last exchange ended latest
        # before this one started (the reply this turn builds on, the failure it retries).
        same = 1 if turn.client and s.last.client == turn.client else 0
        end = s.last.t_end if s.last.t_end is not None and s.last.t_end <= turn.t_start else -1.0
        return same, end

    def pick(candidates: list[_Open], turn: TurnInput, exact: bool) -> _Open | None:
        # An identical request after a success is a new turn on the same connection (a user
        # asking again), another conversation on another one; after a failure it was a retry.
        usable = [s for s in candidates if not exact or (turn.client and s.last.client == turn.client)]
        return max(usable, key=lambda s: rank(s, turn)) if usable else None

    def unindex(s: _Open) -> None:
        if s.tip is not None and s in by_tip.get(s.tip, ()):
            by_tip[s.tip].remove(s)
        if s.tip_prompt is not None:
            listed = by_prompt_len.get(s.tip_prompt[0], {}).get(s.tip_prompt[1], [])
            if s in listed:
                listed.remove(s)
        if s.last_key is not None and s in by_last.get(s.last_key, ()):
            by_last[s.last_key].remove(s)

    def index(s: _Open, turn: TurnInput, digests: list[bytes] | None, prompt_digest: bytes | None) -> None:
        if digests is not None:
            s.tip = digests[-1]
            by_tip.setdefault(s.tip, []).append(s)
        elif prompt_digest is not None and turn.prompt is not None:
            s.tip_prompt = (len(turn.prompt), prompt_digest)
            by_prompt_len.setdefault(len(turn.prompt), {}).setdefault(prompt_digest, []).append(s)
        s.last_key = _last_key(turn, prompt_digest)
        if s.last_key is not None:
            by_last.setdefault(s.last_key, []).append(s)
        if turn.history is None and turn.prompt is None and turn.client:
            by_client[(turn.client, turn.route)] = s

    def answered(s: _Open, turn: TurnInput) -> None:
        if turn.response_id is not None:
            by_response.setdefault(turn.response_id, []).append(s)

    def continues(turn: TurnInput) -> _Open | None:
        # The session whose exchange got the response this request names; among several (an
        # engine that repeats ids), the one it follows most closely, as for continuity.
        named = by_response.get(turn.previous_response_id) if turn.previous_response_id else None
        return max(named, key=lambda s: rank(s, turn)) if named else None

    for turn in ordered:
        if turn.xid in joined:
            continue  # a refused upgrade: placed with the HTTP request it fell back to
        upgrades = fallbacks.get(turn.xid, ())
        if turn.explicit_key is not None:
            s = by_key.get(turn.explicit_key)
            if s is None:
                s = by_key[turn.explicit_key] = new_session(turn.key_source or "key", turn.explicit_key)
                s.place(turn, None, upgrades)
            else:
                s.place(turn, s.retried(turn), upgrades)
            answered(s, turn)
            continue

        named = continues(turn)
        if named is not None:
            # Only the new input items: the turn joins the conversation of the response it names.
            # The session's history tip stays indexed (a later request may resend the whole
            # conversation instead); what a retry of this exchange shares with it moves here.
            if named.last_key is not None and named in by_last.get(named.last_key, ()):
                by_last[named.last_key].remove(named)
            named.place(turn, named.retried(turn), upgrades)
            named.last_key = _last_key(turn, None)
            if named.last_key is not None:
                by_last.setdefault(named.last_key, []).append(named)
            if turn.history is None and turn.prompt is None and turn.client:
                by_client[(turn.client, turn.route)] = named
            answered(named, turn)
            continue

        digests = prefix_digests(turn.history) if turn.history is not None else None
        prompt_digest = _prompt_digest(turn.prompt) if turn.history is None and turn.prompt is not None else None
        chosen: _Open | None = None
        # A retry first: a re-send of a failed exchange's conversation is that exchange's turn.
        key = _last_key(turn, prompt_digest)
        retried = [s for s in by_last.get(key, ()) if retries(s.last, turn)] if key is not None else []
        if retried:
            chosen = max(retried, key=lambda s: rank(s, turn))
            unindex(chosen)
            chosen.place(turn, len(chosen.exchanges) - 1, upgrades)
            index(chosen, turn, digests, prompt_digest)
            answered(chosen, turn)
            continue
        if turn.history is not None:
            assert digests is not None
            for k in range(len(turn.history), 0, -1):
                candidates = by_tip.get(digests[k])
                if candidates:
                    chosen = pick(candidates, turn, exact=(k == len(turn.history)))
                    if chosen is not None:
                        break
            grouped_by = "continuity"
        elif turn.prompt is not None:
            chosen = _match_prompt(turn, by_prompt_len, pick)
            grouped_by = "continuity"
        else:
            prev = by_client.get((turn.client, turn.route)) if turn.client else None
            if prev is not None and prev.last.t_end is not None and prev.last.t_end <= turn.t_start:
                chosen = prev
            grouped_by = "connection" if turn.client else "single"
        if chosen is None:
            chosen = new_session(grouped_by)
        else:
            unindex(chosen)
        chosen.place(turn, None, upgrades)
        index(chosen, turn, digests, prompt_digest)
        answered(chosen, turn)

    return [_close(s) for s in sessions]


def _match_prompt(turn: TurnInput, by_len: dict[int, dict[bytes, list[_Open]]], pick) -> _Open | None:  # type: ignore[no-untyped-def]
    prompt = turn.prompt or ""
    # Longest earlier prompt that this prompt starts with; one digest per distinct length.
    for length in sorted((n for n in by_len if 0 < n <= len(prompt)), reverse=True):
        candidates = by_len[length].get(_prompt_digest(prompt[:length]))
        if candidates:
            chosen = pick(candidates, turn, exact=(length == len(prompt)))
            if chosen is not None:
                return chosen
    return None


def _close(s: _Open) -> Session:
    """Think time before each first attempt (from the end of the exchange before it: the last
    attempt of the turn before), backoff before each retry (from the end of the attempt before)."""
    thinks: list[float | None] = []
    backoffs: list[float | None] = []
    latest: dict[int, TurnInput] = {}
    for i, cur in enumerate(s.exchanges):
        number = s.turn_no[i]
        if s.attempt_no[i] > 1:
            prev = latest[number]
            thinks.append(None)
            backoffs.append(think_time(prev.t_end, cur.t_start))
        else:
            prev = s.exchanges[i - 1] if i else None
            thinks.append(think_time(prev.t_end if prev is not None else None, cur.t_start))
            backoffs.append(None)
        latest[number] = cur
    key = readable_key(s.id) if s.exchanges[0].explicit_key is not None else None
    return Session(s.id, s.grouped_by, tuple(t.xid for t in s.exchanges), tuple(thinks), s.label, key,
                   tuple(s.turn_no), tuple(s.attempt_no), tuple(backoffs), tuple(s.upgrades))  # fmt: skip
