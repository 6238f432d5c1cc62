"""A long recording for `bench_check.py` (c), made in seconds: minutes of agent traffic written in the
recorder's own format at synthetic times, with real requests and real answers.

The sessions are the synthetic coding agent's (`proxycheck.core.testbed.conversation`): OpenAI chat
streaming requests whose history grows turn by turn with tool calls and their results. Each turn's
request is sent once, straight to the reference engine, and its answer (headers, bytes, chunk
arrival times relative to the send) is what the recording holds; only the times between turns are
made up: session starts spread over the recording, think times drawn from a range (seeded). The
journal is then written in time order through `proxycheck.io.storage.RecordingWriter` on a clock
that reads the synthetic time, as the recorder at hop `edge` (a reverse proxy to `gateway`) would
have written it: the edge's upstream URL and Host, the client's and server's connection facts (a
new connection when the think time outlasts httpx's 5 s keep-alive, as an SDK client's), chunks
flushed every half second.

One session wedges: its request at `wedge_turn` gets the first `stall_after` events of its answer
(what a hop that stalls mid-stream forwards), then silence until the client gives up after
`client_wait` seconds ("Client disconnected.", as mitmproxy reports it), and the session goes no
further. It carries a large system prompt (a repository map), so that a fault hop's `min_body`
picks its requests alone (`Answered.min_body`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import httpx

from proxycheck.core.protocol.analysis import analyze_stream
from proxycheck.core.testbed.conversation import Conversation, ConversationConfig
from proxycheck.io.agent import endpoint_url
from proxycheck.io.storage import RecordingWriter

DIALECT = "openai_chat"
KEEPALIVE_EXPIRY = 5.0  # httpx's default: an idle pooled connection is closed after this long
FLUSH_EVERY = 0.5  # the recorder's flush timer
USER_AGENT = "python-httpx/0.28.1"
# A scaled-down recording's client still waits this long before giving up on the stall: check takes
# a wait shorter than its patience threshold (2 s, or 5 times the longest recorded gap between
# events) for a person cancelling a stream, and would not derive its stall watchdog from it.
MIN_CLIENT_WAIT_SCALED = 3.0


@dataclass(frozen=True)
class LongSpec:
    """The recording's shape: `sessions` (the wedged one included) over `duration` seconds,
    think times uniform in `think`, each clean session `turns` turns at most (drawn), its start
    uniform over the first `start_span` of the recording; the wedged session sends its
    `wedge_turn` at `wedge_at` x duration and waits `client_wait` s after the stall."""

    sessions: int = 50
    duration: float = 600.0
    think: tuple[float, float] = (5.0, 60.0)
    turns: tuple[int, int] = (3, 20)
    start_span: float = 0.8
    wedge_at: float = 0.6
    wedge_turn: int = 3
    stall_after: int = 4
    client_wait: float = 30.0
    max_tokens: int = 40
    tool_result_bytes: int = 2000
    seed: int = 1
    fetch_concurrency: int = 12

    def scaled(self, scale: float) -> "LongSpec":
        """The same shape in `scale` of the time: duration, think times and the client's patience
        scaled (that at least MIN_CLIENT_WAIT_SCALED), the sessions and their turns kept."""
        if scale == 1:
            return self
        lo, hi = self.think
        return LongSpec(**{**self.__dict__, "duration": self.duration * scale, "think": (lo * scale, hi * scale),
                           "client_wait": max(MIN_CLIENT_WAIT_SCALED, self.client_wait * scale)})  # fmt: skip


@dataclass
class Fetched:
    """One turn as the engine answered it, times from the send."""

    body: bytes
    status: int
    reason: str | None
    headers: list[tuple[str, str]]
    headers_at: float
    chunks: list[tuple[float, bytes]]
    end_at: float


@dataclass
class Scheduled:
    """One turn placed on the recording's clock."""

    session: int
    turn: int
    start: float
    think: float | None
    fetched: Fetched
    client: str
    server: str
    reused: bool
    wedged: bool = False


@dataclass
class Answered:
    """Every session's turns as the engine answered them (the wedged session last), the clean
    sessions' starts, every session's think times (index k: before turn k + 1), the largest clean
    request body, and how long asking took."""

    starts: list[float]
    sessions: list[list[Fetched]]
    thinks: list[list[float]]
    largest_clean_body: int
    seconds: float

    @property
    def min_body(self) -> int:
        """The gateway's `min_body`: above every clean request, below the wedged session's."""
        return self.largest_clean_body + 1024


@dataclass
class LongRecording:
    """What was written: facts to check the listing and a verdict against."""

    path: Path
    sessions: int
    exchanges: int
    span: float  # from the first request to the last record of an exchange
    wedged_xid: int
    wedged_start: float
    wedged_session_bytes: tuple[int, ...]


def _repository_map(size: int, rng: random.Random) -> str:
    """A coding harness's large system prompt addition: a map of the repository's files."""
    dirs = ("src/app", "src/app/storage", "src/app/http", "tests", "tests/integration", "docs", "tools")
    words = ("cache", "client", "config", "export", "header", "limit", "parser", "retry", "stream", "sync")
    lines = ["\n\nRepository map (path: symbols):"]
    length = len(lines[0])
    while length < size:
        line = (f"\n{rng.choice(dirs)}/{rng.choice(words)}_{rng.randrange(100)}.py: "
                + ", ".join(f"{rng.choice(words)}_{rng.choice(words)}()" for _ in range(rng.randint(2, 6))))  # fmt: skip
        lines.append(line)
        length += len(line)
    return "".join(lines)[:size]


def _encode(conversation: Conversation, extra_system: str) -> bytes:
    body = conversation.request_body()
    if extra_system:
        body["messages"][0]["content"] += extra_system
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


async def _fetch(client: httpx.AsyncClient, url: str, body: bytes, gate: asyncio.Semaphore) -> Fetched:
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    async with gate:
        t0 = time.monotonic()
        async with client.stream("POST", url, content=body, headers=headers) as resp:
            headers_at = time.monotonic() - t0
            chunks = [(time.monotonic() - t0, chunk) async for chunk in resp.aiter_raw()]
            end_at = time.monotonic() - t0
            raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in resp.headers.raw]
            return Fetched(body, resp.status_code, resp.reason_phrase or None, raw, headers_at, chunks, end_at)


def _reply(fetched: Fetched) -> tuple[str, tuple]:
    result = analyze_stream(DIALECT, fetched.chunks, fetched.end_at).result
    if result is None or fetched.status != 200:
        raise RuntimeError(f"the engine answered {fetched.status} without a readable stream")
    return result.text, result.tool_calls


async def _session_turns(client: httpx.AsyncClient, url: str, spec: LongSpec, name: str, turns: int,
                         extra_system: str, gate: asyncio.Semaphore,
                         fits: Callable[[list[Fetched]], bool]) -> list[Fetched]:  # fmt: skip
    """The turns of one session, each answered by the engine; `fits(fetched_so_far)` says whether
    another turn still fits in the recording."""
    conversation = Conversation(ConversationConfig(DIALECT, name, max_tokens=spec.max_tokens,
                                                   tool_result_bytes=spec.tool_result_bytes, seed=spec.seed))  # fmt: skip
    out: list[Fetched] = []
    while len(out) < turns and fits(out):
        fetched = await _fetch(client, url, _encode(conversation, extra_system), gate)
        out.append(fetched)
        conversation.add_reply(*_reply(fetched))
    return out


def _cut_after_events(chunks: list[tuple[float, bytes]], events: int) -> list[tuple[float, bytes]]:
    """The chunks up to the end of the `events`-th SSE event: what a hop stalling after that many
    events forwards."""
    joined = b"".join(c for _, c in chunks)
    end, pos = 0, 0
    for _ in range(events):
        found = joined.find(b"\n\n", pos)
        if found < 0:
            raise RuntimeError(f"the answer has fewer than {events} events")
        end = pos = found + 2
    out, taken = [], 0
    for t, chunk in chunks:
        if taken >= end:
            break
        piece = chunk[: end - taken]
        out.append((t, piece))
        taken += len(piece)
    return out


async def _answer(engine_url: str, spec: LongSpec) -> Answered:
    """See `answer_sessions`. Draws come from one seeded stream, whatever the engine's timing."""
    t0 = time.monotonic()
    rng = random.Random(f"long-recording:{spec.seed}")
    url = endpoint_url(engine_url, DIALECT)
    clean = spec.sessions - 1
    starts = [0.0] + sorted(rng.uniform(0, spec.start_span * spec.duration) for _ in range(clean - 1))
    budgets = [rng.randint(*spec.turns) for _ in range(clean)]
    most = max(spec.turns[1], spec.wedge_turn)
    thinks = [[rng.uniform(*spec.think) for _ in range(most)] for _ in range(spec.sessions)]
    margin = 3.0  # a last turn starts early enough to end within the recording

    def fits_from(start: float, session_thinks: list[float]) -> Callable[[list[Fetched]], bool]:
        def fits(done: list[Fetched]) -> bool:
            return start + sum(f.end_at for f in done) + sum(session_thinks[1 : len(done) + 1]) <= spec.duration - margin

        return fits

    gate = asyncio.Semaphore(spec.fetch_concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0), trust_env=False,
                                 limits=httpx.Limits(max_connections=spec.fetch_concurrency)) as client:  # fmt: skip
        clean_turns = await asyncio.gather(*(
            _session_turns(client, url, spec, f"agent-{i + 1:02d}", budgets[i], "", gate, fits_from(starts[i], thinks[i]))
            for i in range(clean)
        ))  # fmt: skip
        largest = max(len(f.body) for turns in clean_turns for f in turns)
        # The wedged session's first request already passes the gateway's min_body (largest + 1 KiB).
        extra = _repository_map(largest + 2048 - len(_encode(Conversation(ConversationConfig(DIALECT, "x")), "")),
                                random.Random(f"repository-map:{spec.seed}"))  # fmt: skip
        wedged = await _session_turns(client, url, spec, f"agent-{spec.sessions:02d}", spec.wedge_turn, extra, gate,
                                      lambda done: True)  # fmt: skip
    return Answered(starts, [*clean_turns, wedged], thinks, largest, time.monotonic() - t0)


def _schedule(spec: LongSpec, starts: list[float], sessions: list[list[Fetched]],
              thinks: list[list[float]]) -> list[Scheduled]:  # fmt: skip
    out: list[Scheduled] = []
    wedged_index = len(sessions) - 1
    for i, turns in enumerate(sessions):
        session_thinks = thinks[i]
        if i == wedged_index:
            # Placed so that its wedged turn is sent at wedge_at x duration.
            before = sum(f.end_at for f in turns[:-1]) + sum(session_thinks[1 : len(turns)])
            start = spec.wedge_at * spec.duration - before
        else:
            start = starts[i]
        t, client, server, conn = start, "", "", 0
        for k, fetched in enumerate(turns):
            think = session_thinks[k] if k else None
            if k:
                t += think  # type: ignore[operator]
            reused = think is not None and think < KEEPALIVE_EXPIRY
            if not reused:
                conn += 1
                client, server = f"client-{i + 1}-{conn}", f"server-{i + 1}-{conn}"
            wedged = i == wedged_index and k == len(turns) - 1
            out.append(Scheduled(i, k + 1, t, think, fetched, client, server, reused, wedged))
            t += fetched.end_at
    return out


def answer_sessions(engine_url: str, spec: LongSpec) -> Answered:
    """The sessions of `spec`, each turn's request sent once to the engine at `engine_url` and its
    answer kept (a few sessions at a time: `spec.fetch_concurrency`)."""
    return asyncio.run(_answer(engine_url, spec))


def write_long_recording(directory: Path, gateway_url: str, spec: LongSpec, answered: Answered) -> LongRecording:
    """Write the recording of the `answered` sessions into `directory` (see the module docstring),
    as recorded by a reverse proxy to `gateway_url`."""
    schedule = _schedule(spec, answered.starts, answered.sessions, answered.thinks)
    now = [0.0]
    last = max(s.start + s.fetched.end_at for s in schedule)
    wall = time.time() - last - spec.client_wait - 5.0  # the recording started that long ago
    writer = RecordingWriter(directory, source={"recorder": "mitmproxy", "mode": [f"reverse:{gateway_url}"],
                                                "synthetic": "benchmarks/long_recording.py"},
                             clock=lambda: now[0], wall=lambda: wall)  # fmt: skip
    url = gateway_url.rstrip("/") + "/v1/chat/completions"
    host = gateway_url.split("://", 1)[1].rstrip("/")
    # Every record of every exchange as (time, order, action), written in time order.
    actions: list[tuple[float, int, Any]] = []
    xids: dict[int, int] = {}
    last_end: dict[str, float] = {}  # when each server connection's previous exchange ended
    wedged_start = 0.0
    wedged_bytes: list[int] = []

    for n, turn in enumerate(schedule):
        f, t = turn.fetched, turn.start

        def request(n: int = n, turn: Scheduled = turn, f: Fetched = f, t: float = t) -> None:
            headers = [("Host", host), ("Accept-Encoding", "gzip, deflate, br, zstd"), ("Connection", "keep-alive"),
                       ("User-Agent", USER_AGENT), ("content-type", "application/json"),
                       ("accept", "text/event-stream"), ("Content-Length", str(len(f.body)))]  # fmt: skip
            xids[n] = writer.request("POST", url, headers, f.body, http_version="HTTP/1.1", t=t,
                                     conn={"client_id": turn.client, "http_version": "HTTP/1.1", "tls": False})  # fmt: skip

        conn: dict[str, Any] = {"server_id": turn.server, "server_reused": turn.reused, "peer": host}
        if turn.reused:
            conn["server_idle"] = round(t - last_end[turn.server], 6)

        def response(n: int = n, f: Fetched = f, t: float = t, conn: dict[str, Any] = conn) -> None:
            writer.response(xids[n], f.status, f.reason, f.headers, streamed=True, http_version="HTTP/1.1",
                            conn=conn, t=t + f.headers_at)  # fmt: skip

        actions.append((t, len(actions), request))
        actions.append((t + f.headers_at, len(actions), response))
        chunks = _cut_after_events(f.chunks, spec.stall_after) if turn.wedged else f.chunks
        for at, data in chunks:
            actions.append((t + at, len(actions), lambda n=n, data=data, at=t + at: writer.data(xids[n], data, t=at)))
        if turn.wedged:
            gave_up = t + chunks[-1][0] + spec.client_wait
            actions.append((gave_up, len(actions), lambda n=n, at=gave_up: writer.error(xids[n], "Client disconnected.", t=at)))
            wedged_start = t
        else:
            done = t + f.end_at
            actions.append((done, len(actions), lambda n=n, at=done: writer.end(xids[n], t=at)))
            last_end[turn.server] = done
        if turn.session == schedule[-1].session:
            wedged_bytes.append(len(f.body))

    actions.sort(key=lambda a: (a[0], a[1]))
    next_flush = FLUSH_EVERY
    for t, _, act in actions:
        while t >= next_flush:
            now[0] = next_flush
            writer.flush()
            next_flush += FLUSH_EVERY
        now[0] = t
        act()
    end = max(a[0] for a in actions)
    now[0] = end + 5.0
    writer.close("mitmproxy stopped")
    wedged_xid = next(xids[n] for n, s in enumerate(schedule) if s.wedged)
    return LongRecording(directory, len({s.session for s in schedule}), len(schedule), end - min(s.start for s in schedule),
                         wedged_xid, wedged_start, tuple(wedged_bytes))  # fmt: skip
