"""The reference engine: an aiohttp server that answers like SGLang/vLLM, without a GPU.

It serves OpenAI chat completions, completions and responses, Anthropic messages and SGLang
`/generate` (streamed and not), `/v1/models` and `/health`. Answers are planned by `proxycheck.core.testbed.synth`
(deterministic per request body, length = max_tokens up to a cap, `EngineConfig.max_answer_tokens`, 256
by default; tool calls when tools are offered, valid against their schemas) and
encoded by `proxycheck.core.testbed.wire`; this module only schedules the bytes in time: TTFT = base +
per-KB of prompt, then one token per interval, each event written as soon as it is due.

A request may ask for its own timing with the body member `"proxycheck": {"ttft": S,
"token_interval": S}` (`proxycheck.core.testbed.synth`, "The timing extension"; a malformed one gets a
400): `proxycheck probe` asks for slow streams with it. Every response carries
`x-proxycheck-request-sha256` and `x-proxycheck-request-bytes` of the body as received and, for
a JSON body, `x-proxycheck-request-canonical-sha256` (its canonical JSON) and
`x-proxycheck-request-parts` (what the model sees, part by part: `proxycheck.core.testbed.wire.
received_headers`), so a hop that alters requests is caught, told from one that only
re-serializes them, and described. Idle keep-alive connections are closed
after `keepalive_timeout` (5 s by default, like vLLM's uvicorn server), so hops that reuse stale
pooled connections fail here as they do in production.

With `EngineConfig.sampling` (`proxycheck engine --sampling`) a request that samples
(temperature above 0 or absent, and no seed: `synth.samples`) is answered with a fresh random
draw each time, as a real engine at temperature 1: other words, tool calls or not, other finish
reasons; at temperature 0 or with a seed it is answered the same way every time.

Replay mode (`EngineConfig.replay`, `proxycheck engine --replay DIR`): every POST, on any path,
is answered with a recorded response instead, chosen by `proxycheck.core.testbed.recorded_answers` (which also
plans the timeline); this module plays the plan: recorded status and headers, the body at its
recorded (scaled) times, then the recorded end: complete, a reset, or a held, silent connection.
Replayed answers also carry `x-proxycheck-replay-match: RULE xid=N`; a request that nothing
recorded answers gets a 404. Faults apply as in synthetic mode, counting recorded chunks instead
of events; `from_turn` counts assistant messages when the body has a message list, else it is the
matched session turn.

The Responses API (`/v1/responses`): each answer given while the request's `store` is not false
is kept in a bounded in-memory store (`proxycheck.core.testbed.response_store`: the 4096 most
recently used, lost when the engine stops), so a request naming it in `previous_response_id`
continues that conversation: the stored items count as turns (faults' `from_turn`) and as tool
rounds, as if they had been resent. An id the store does not hold gets the API's 400
(`previous_response_not_found`). Replay mode answers by the recording, store or not.

Its WebSocket mode (`GET /v1/responses` upgraded; `proxycheck.core.testbed.responses_socket`): each
`response.create` message is a turn, planned as the same create body sent by POST would be
(`Engine._turn`), its events sent one message each on the same timing model, with the same
faults, counted per turn (`close` drops the connection without a close frame; `ws_close` sends
one). Turns on one socket run in order. Each socket has a memory of its own (every response it
gave, `store` false too) in front of the engine's store, so an unstored response continues only on
its socket. A create with `generate: false` (a warm-up) generates nothing (`synth.warmup`). The
first message of each turn carries the digest headers in its `proxycheck` member. Not in replay
mode.

Told to refuse what vLLM refuses (`EngineConfig.limits`: `--served-model`, `--max-model-len`,
`--no-tool-parser`), a generation request is checked before it is planned and refused with vLLM's
status and body (`proxycheck.core.testbed.refusals`); by default nothing is refused.

Anthropic clients: extended thinking is planned by `synth.with_thinking`; `cache_control`
breakpoints are looked up in and written to the engine's `promptcache.PromptCache` (the usage
fields only; answers do not depend on it), so the answer cache is keyed by what the request read
and wrote too; `/v1/messages/count_tokens` answers the engine's own input estimate.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from aiohttp import WSCloseCode, WSMsgType, web
from multidict import CIMultiDict

from proxycheck.core.protocol import requestparts
from proxycheck.core.recording.sessions import turn_number
from proxycheck.core.testbed import refusals, responses_socket, synth, wire
from proxycheck.core.testbed.faultspec import ActiveFaults, FaultSpec, active_faults
from proxycheck.core.testbed.promptcache import NO_CACHE, CacheUse, PromptCache
from proxycheck.core.testbed.recorded_answers import COMPLETE, HOLD, Match, NoMatch, ReplayMatcher, ReplayPlan, plan_replay
from proxycheck.core.testbed.response_store import ResponseStore, UnknownResponse

SHA_HEADER, BYTES_HEADER = wire.SHA_HEADER, wire.BYTES_HEADER
CANONICAL_HEADER, PARTS_HEADER = wire.CANONICAL_HEADER, wire.PARTS_HEADER
TURN_HEADER = "x-proxycheck-turn"
MATCH_HEADER = "x-proxycheck-replay-match"
# How often a held (wedged) response looks whether its client is still there.
HOLD_POLL = 0.25

_CACHE_SIZE = 4096  # answers kept per engine (a few MB at most)

ROUTES = {
    "/v1/chat/completions": "openai_chat",
    "/v1/completions": "openai_completions",
    "/v1/messages": "anthropic_messages",
    "/v1/responses": "openai_responses",
    "/generate": "sglang_generate",
}


@dataclass
class EngineConfig:
    timing: synth.Timing = field(default_factory=synth.Timing)
    tool_call_rate: float = 0.5
    seed: int = 0
    model: str = "proxycheck-reference"
    keepalive_timeout: float = 5.0
    faults: tuple[FaultSpec, ...] = ()
    access_log: bool = False
    replay: ReplayMatcher | None = None  # answer with a recording instead of synthetic answers
    replay_speed: float = 1.0  # recorded times are divided by this; 0 = no waiting
    jitter: float = 0.0  # each answer's TTFT and token interval scaled by a random 1 +- jitter
    sampling: bool = False  # a request that samples (`synth.samples`) is answered anew each time
    # The longest text answer (None: exactly max_tokens, always); `ignore_eos` requests are never capped.
    max_answer_tokens: int | None = synth.DEFAULT_MAX_ANSWER_TOKENS
    # The command of a shell tool call (None: the safest tool offered, a shell given `ls`).
    tool_command: str | None = None
    # What a real engine refuses before generating (`refusals`: a model name, a context window, tools).
    limits: refusals.Limits = field(default_factory=refusals.Limits)


_JITTER = random.Random()  # not seeded: timing jitter differs from run to run, on purpose
_SAMPLING = random.Random()  # not seeded either: a sampling engine's draws differ from run to run


class _Closed(Exception):
    """The client went away while we were writing: nothing more to do for this request."""


@dataclass(frozen=True, slots=True)
class _Turn:
    """A generation request, planned (`Engine._turn`)."""

    digest: dict[str, str]  # the headers saying what was received (a fresh dict)
    request: dict[str, Any]  # as received (a WebSocket message: its create body)
    faults: ActiveFaults
    plan: synth.Plan
    encoded: wire.Wire


@dataclass(frozen=True, slots=True)
class _Refused:
    """A generation request answered with an error (`Engine._turn`)."""

    digest: dict[str, str]
    status: int
    message: str
    api_error: dict[str, Any] | None = None  # the API's own error body, when it has one


class Engine:
    """The request handlers, bound to one configuration."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.requests = 0
        self._cache: dict[tuple[str, str, bool, str, CacheUse], tuple[synth.Plan, wire.Wire]] = {}
        # The prompt prefixes Anthropic requests have written to the cache (their usage fields).
        self.prompt_cache = PromptCache()
        # What each body received is, by its raw digest: a replay sends the same bodies again and
        # again, and describing one walks all of it.
        self._received: dict[str, tuple[dict[str, str], requestparts.Parts | None]] = {}
        self.responses = ResponseStore()  # the Responses API's stored answers (previous_response_id)
        # Set when the server stops, so held (wedged) replays let go instead of delaying it.
        self.stopping = asyncio.Event()
        self._sockets: set[web.WebSocketResponse] = set()  # open Responses WebSockets

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        if self.config.replay is not None:
            # A recording may come from any API prefix (/openai/v1/..., /api/...): every POST.
            app.router.add_post("/{path:.*}", self.replay)
        else:
            for path, dialect in ROUTES.items():
                app.router.add_post(path, self._generation(dialect))
            app.router.add_post("/v1/messages/count_tokens", self.count_tokens)
            app.router.add_get("/v1/responses", self.responses_socket)
            app.on_shutdown.append(self.close_sockets)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        return app

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        limits = self.config.limits
        doc = {"object": "list", "data": [{"id": limits.served_model or self.config.model, "object": "model",
                                          "created": 0, "owned_by": "proxycheck",
                                          "max_model_len": limits.max_model_len or 131072}]}
        return web.json_response(doc)

    async def count_tokens(self, request: web.Request) -> web.Response:
        """Anthropic's `/v1/messages/count_tokens`: `{"input_tokens": N}` by the engine's own
        estimate (`synth.prompt_tokens_of`, as in usage), at once; not a generation, so no faults."""
        body = await request.read()
        is_json, req = requestparts.parse(body)
        digest, parts = self._describe(body, is_json, req)
        if not is_json or not isinstance(req, dict):
            return _error(400, "the request body is not a JSON object", digest)
        if parts is None:
            return _error(400, "the request body is nested too deeply", digest)
        return web.json_response({"input_tokens": synth.prompt_tokens_of(parts)}, headers=digest)

    def _generation(self, dialect: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        async def handler(request: web.Request) -> web.StreamResponse:
            return await self.generate(dialect, request)

        return handler

    async def generate(self, dialect: str, request: web.Request) -> web.StreamResponse:
        start = time.monotonic()
        body = await request.read()
        is_json, req = requestparts.parse(body)
        turn = self._turn(dialect, body, is_json, req)
        digest = turn.digest
        if isinstance(turn, _Refused):
            if turn.api_error is not None:
                return web.json_response(turn.api_error, status=turn.status, headers=digest)
            return _error(turn.status, turn.message, digest)
        faults, plan, encoded = turn.faults, turn.plan, turn.encoded
        if faults.delay_headers:
            await asyncio.sleep(faults.delay_headers)
        if faults.status:
            return _error(faults.status, f"injected fault: status {faults.status}", digest)
        if dialect == "openai_responses":
            self._remember(turn, self.responses)

        if req.get("stream") is not True:
            await _sleep_until(start + plan.ttft + plan.interval * max(encoded.steps - 1, 0))
            return web.Response(body=encoded.body, content_type="application/json", headers=digest)

        resp = web.StreamResponse(status=200, headers={**digest, "Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        try:
            await self._stream(request, resp, encoded, plan, start, faults)
        except _Closed:
            return resp
        return resp

    def _turn(self, dialect: str, body: bytes, is_json: bool, req: Any,
              memory: ResponseStore | None = None, create: dict[str, Any] | None = None) -> _Turn | _Refused:
        """One generation request planned: its digest headers, faults, plan and bytes, or why it
        is refused. `memory`: where a Responses request's `previous_response_id` is looked up
        (the engine's store by default; a WebSocket's memory); `create`: the Responses create
        body of a WebSocket message `req` (what is planned on)."""
        self.requests += 1
        digest, parts = self._describe(body, is_json, req)
        if not is_json:
            return _Refused(digest, 400, "the request body is not JSON")
        if not isinstance(req, dict):
            return _Refused(digest, 400, "the request body is not a JSON object")
        if parts is None:
            return _Refused(digest, 400, "the request body is nested too deeply")
        asked: dict[str, Any] = req if create is None else create
        try:
            synth.timing_extension(asked)  # checked before planning, so a bad one is a 400, not a 500
        except ValueError as exc:
            return _Refused(digest, 400, str(exc))
        if self.config.limits.any:
            refused = refusals.refusal(dialect, asked, synth.prompt_tokens_of(parts), self.config.limits)
            if refused is not None:
                return _Refused(digest, refused.status, refused.message, refused.body)
        conversation: dict[str, Any] = asked
        if dialect == "openai_responses":
            try:
                conversation = dict((memory or self.responses).expand(asked))
            except UnknownResponse as exc:
                return _Refused(digest, 400, str(exc), exc.error_body())
            turn = 1 + synth.assistant_turns(synth.conversation_of(dialect, conversation))
        else:
            turn = turn_number(asked)
        digest[TURN_HEADER] = str(turn)
        faults = active_faults(self.config.faults, turn=turn, draw=synth.seed_of(body, self.config.seed + self.requests))
        draw = _SAMPLING.getrandbits(64) if self.config.sampling and synth.samples(dialect, asked) else None
        plan, encoded = self._answer(dialect, conversation, body, digest[SHA_HEADER], parts, draw)
        if self.config.jitter:
            # Timing varies between identical requests, as a real engine's does (the content
            # does not): what a noise floor must absorb.
            j = self.config.jitter
            plan = replace(plan, ttft=plan.ttft * _JITTER.uniform(1 - j, 1 + j),
                           interval=plan.interval * _JITTER.uniform(1 - j, 1 + j))  # fmt: skip
        return _Turn(digest, asked, faults, plan, encoded)

    def _remember(self, turn: _Turn, store: ResponseStore) -> None:
        """Keep a Responses answer for `previous_response_id` (`store` decides what it keeps)."""
        store.remember(wire.responses_ids(turn.plan)[0], turn.request, wire.responses_output(turn.plan))

    def _describe(self, body: bytes, is_json: bool, doc: Any) -> tuple[dict[str, str], requestparts.Parts | None]:
        """The headers describing the body as received (a fresh dict: the caller adds to it) and
        its parts (None when it is not JSON)."""
        sha = hashlib.sha256(body).hexdigest()
        known = self._received.get(sha)
        if known is None:
            known = wire.received_headers(body, doc, is_json)
            if len(self._received) >= _CACHE_SIZE:
                self._received.pop(next(iter(self._received)))
            self._received[sha] = known
        return dict(known[0]), known[1]

    def _answer(self, dialect: str, req: dict[str, Any], body: bytes, sha: str,
                parts: requestparts.Parts, draw: int | None = None) -> tuple[synth.Plan, wire.Wire]:
        """The plan and its wire bytes; cached, because a replay sends the same bodies again and
        again and the engine must never be what limits a benchmark. The key is the raw digest:
        the timing extension and the body size (the time to the first token) are in the bytes.
        A sampled answer (`draw`, `--sampling`) is planned anew, never cached."""
        options = req.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        model = str(req.get("model") or self.config.model)
        cache_use = self.prompt_cache.use(req) if dialect == "anthropic_messages" else NO_CACHE
        key = (dialect, sha, include_usage, model, cache_use)
        cached = self._cache.get(key) if draw is None else None
        if cached is None:
            cfg = self.config
            plan = synth.plan(dialect, req, body, cfg.timing, tool_call_rate=cfg.tool_call_rate, seed=cfg.seed,
                              parts=parts, draw=draw, max_answer_tokens=cfg.max_answer_tokens,
                              tool_command=cfg.tool_command)
            meta = wire.Meta(model, int(time.time()), include_usage, request=req, prompt_cache=cache_use)
            cached = (plan, wire.encode(dialect, plan, meta))
            if draw is not None:
                return cached
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = cached
        return cached

    async def _stream(self, request: web.Request, resp: web.StreamResponse, encoded: wire.Wire,
                      plan: synth.Plan, start: float, faults: ActiveFaults) -> None:
        events = encoded.events
        if faults.drop_terminal:
            events = events[:-1]  # every dialect's encoder ends with its terminal marker

        async def write(batch: Sequence[bytes]) -> None:
            await _write(resp, batch[0] if len(batch) == 1 else b"".join(batch))

        sent = await _emit(events, plan, start, faults, (faults.stall_after, faults.close_after), write)
        await self._fault_ending(request, faults, sent, len(events))
        try:
            await resp.write_eof()
        except (ConnectionError, RuntimeError) as exc:
            raise _Closed from exc

    async def _fault_ending(self, request: web.Request, faults: ActiveFaults, sent: int, total: int) -> None:
        """After `sent` of an answer's `total` events: a stall holds the connection open and
        silent, then drops it; a close drops it. _Closed when either did."""
        if faults.stall_after is not None and sent >= faults.stall_after:
            # Hold the connection open and silent: the client sees a wedge, not an end.
            await self._hold(request, faults.stall_seconds)
            _hang_up(request)
            raise _Closed
        # K at or past the last event: the whole stream, terminal marker too, then the hang-up
        # before the body's end (a hop that cuts the connection right after [DONE]).
        if faults.close_after is not None and sent >= min(faults.close_after, total):
            _hang_up(request)
            raise _Closed

    # The Responses API's WebSocket mode -------------------------------------------------------

    async def responses_socket(self, request: web.Request) -> web.StreamResponse:
        """`GET /v1/responses`: with an upgrade, a WebSocket carrying turns (`responses_socket`
        in the core); without one, what a POST-only path answers a GET."""
        ws = web.WebSocketResponse(max_msg_size=0)  # a create message is as large as its request
        if not ws.can_prepare(request).ok:
            raise web.HTTPMethodNotAllowed(request.method, ["POST"])
        await ws.prepare(request)
        # The socket's own memory for previous_response_id, falling back to the engine's store.
        memory = ResponseStore(fallback=self.responses, keeps_unstored=True)
        # Turns run one after the other, in the order they came (the API's one lane): a turn
        # sent while one is being answered waits for it, as it would behind a wedged one.
        queue: asyncio.Queue[tuple[str | bytes, bool]] = asyncio.Queue()
        worker = asyncio.create_task(self._socket_worker(request, ws, queue, memory))
        self._sockets.add(ws)
        try:
            async for msg in ws:  # ends when the client closes (answered) or the connection goes
                if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    queue.put_nowait((msg.data, msg.type == WSMsgType.BINARY))
        finally:
            self._sockets.discard(ws)
            worker.cancel()
            try:
                await worker
            except (asyncio.CancelledError, _Closed):
                pass
        return ws

    async def _socket_worker(self, request: web.Request, ws: web.WebSocketResponse,
                             queue: asyncio.Queue[tuple[str | bytes, bool]], memory: ResponseStore) -> None:
        try:
            await self._socket_turns(request, ws, queue, memory)
        except (_Closed, asyncio.CancelledError):
            raise
        except Exception:
            # A bug of the engine's: said, and the socket closed as a failed server closes it,
            # never left open with nothing to answer its turns.
            logging.getLogger(__name__).exception("the WebSocket's turns failed")
            await ws.close(code=WSCloseCode.INTERNAL_ERROR, message=b"engine error")
            raise

    async def _socket_turns(self, request: web.Request, ws: web.WebSocketResponse,
                            queue: asyncio.Queue[tuple[str | bytes, bool]], memory: ResponseStore) -> None:
        while True:
            data, binary = await queue.get()
            start = time.monotonic()
            read = responses_socket.read_message(data, binary=binary)
            body = data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")
            if isinstance(read, responses_socket.Refusal):
                self.requests += 1
                digest = self._describe(body, *requestparts.parse(body))[0]
                await _send(ws, responses_socket.with_digest(responses_socket.refusal_error(read), digest))
                continue
            create, doc = read
            turn = self._turn("openai_responses", body, True, doc, memory=memory, create=create)
            if isinstance(turn, _Refused):
                error = (turn.api_error or {}).get("error") or {
                    "type": "invalid_request_error", "code": None, "message": turn.message, "param": None}
                event = responses_socket.error_event(turn.status, error)
                await _send(ws, responses_socket.with_digest(event, turn.digest))
                continue
            if create.get("generate") is False:
                turn = self._warmup(turn)
            faults = turn.faults
            if faults.delay_headers:
                await asyncio.sleep(faults.delay_headers)
            if faults.status:
                event = responses_socket.status_error(faults.status, f"injected fault: status {faults.status}")
                await _send(ws, responses_socket.with_digest(event, turn.digest))
                continue
            self._remember(turn, memory)
            self._remember(turn, self.responses)  # persisted as by POST, unless `store` is false
            await self._socket_answer(request, ws, turn, start)

    def _warmup(self, turn: _Turn) -> _Turn:
        """A turn that asked for no generation (`generate: false`): answered with nothing
        generated, under an id of its own that later turns continue (`synth.warmup`)."""
        plan = synth.warmup(turn.plan)
        meta = wire.Meta(str(turn.request.get("model") or self.config.model), int(time.time()), request=turn.request)
        return replace(turn, plan=plan, encoded=wire.encode("openai_responses", plan, meta))

    async def _socket_answer(self, request: web.Request, ws: web.WebSocketResponse, turn: _Turn, start: float) -> None:
        """One turn's events, one message each, at the times the timing model gives, with the
        faults that fire for it. _Closed when the connection is gone or closed by a fault."""
        faults = turn.faults
        messages = list(responses_socket.event_messages(turn.encoded))
        if faults.drop_terminal:
            messages = messages[:-1]
        step, first = messages[0]
        messages[0] = (step, responses_socket.with_digest(first, turn.digest))

        async def write(batch: Sequence[str]) -> None:
            for message in batch:
                await _send(ws, message)

        limits = (faults.stall_after, faults.close_after, faults.ws_close_after)
        sent = await _emit(tuple(messages), turn.plan, start, faults, limits, write)
        await self._fault_ending(request, faults, sent, len(messages))
        if faults.ws_close_after is not None and sent >= min(faults.ws_close_after, len(messages)):
            await ws.close(code=faults.ws_close_code, message=b"injected fault: ws_close")
            raise _Closed

    async def close_sockets(self, app: web.Application) -> None:
        """On shutdown: every open WebSocket closed with 1001 (going away)."""
        # At once: each waits a while for its client's answer to the close.
        await asyncio.gather(*(ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")
                               for ws in list(self._sockets)), return_exceptions=True)  # fmt: skip

    # Replay mode ---------------------------------------------------------------------------

    async def replay(self, request: web.Request) -> web.StreamResponse:
        """Answer with the recorded exchange that matches this request (or 404)."""
        body = await request.read()
        # Recorded times start when the recorder had the whole request, so ours start here too.
        start = time.monotonic()
        self.requests += 1
        headers = self._describe(body, *requestparts.parse(body))[0]
        matcher = self.config.replay
        if matcher is None:  # this route is installed in replay mode only
            raise web.HTTPNotFound()
        found = matcher.match(request.method, request.path_qs, request.headers.items(), body)
        if isinstance(found, NoMatch):
            return _error(404, found.reason, headers, "NotFoundError")
        headers[MATCH_HEADER] = found.header
        faults = self._replay_faults(found, body)
        if faults.status:
            await asyncio.sleep(faults.delay_headers)
            return _error(faults.status, f"injected fault: status {faults.status}", headers)
        plan = plan_replay(found.exchange, self.config.replay_speed, faults)
        return await self._play(request, plan, start, headers)

    def _replay_faults(self, found: Match, body: bytes) -> ActiveFaults:
        try:
            req = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            req = None
        if isinstance(req, dict) and isinstance(req.get("messages"), list):
            turn = turn_number(req)  # counted as in synthetic mode
        else:
            turn = found.turn or 1
        draw = synth.seed_of(body, self.config.seed + self.requests)
        return active_faults(self.config.faults, turn=turn, draw=draw)

    async def _play(self, request: web.Request, plan: ReplayPlan, start: float,
                    extra: dict[str, str]) -> web.StreamResponse:
        if plan.status is None:
            # No response headers were recorded: send none, then the recorded reset or wedge.
            await _sleep_until(start + plan.end_at)
            if plan.ending == HOLD:
                await self._hold(request, plan.hold_for)
            _hang_up(request)
            return web.Response()  # never sent: the connection is gone
        headers = _replay_headers(plan, extra)
        if not plan.streamed:
            await _sleep_until(start + plan.headers_at)
            body = b"".join(data for _, data in plan.writes)
            return web.Response(status=plan.status, reason=plan.reason, body=body, headers=headers)
        resp = web.StreamResponse(status=plan.status, reason=plan.reason, headers=headers)
        await _sleep_until(start + plan.headers_at)
        try:
            await resp.prepare(request)
            for at, data in plan.writes:
                await _sleep_until(start + at)
                await _write(resp, data)
            await _sleep_until(start + plan.end_at)
            if plan.ending == COMPLETE:
                await resp.write_eof()
                return resp
            if plan.ending == HOLD:
                await self._hold(request, plan.hold_for)
            _hang_up(request)  # ABORT, or a hold that ended
        except (ConnectionError, RuntimeError, _Closed):
            pass  # the client went away
        return resp

    async def _hold(self, request: web.Request, seconds: float | None) -> None:
        """Keep the connection open and silent for `seconds` (None: indefinitely), until the
        client goes away or the server stops."""
        deadline = None if seconds is None else time.monotonic() + seconds
        while _connected(request) and not self.stopping.is_set():
            wait = HOLD_POLL if deadline is None else min(HOLD_POLL, deadline - time.monotonic())
            if wait <= 0:
                return
            try:
                await asyncio.wait_for(self.stopping.wait(), wait)
            except TimeoutError:
                pass


def _replay_headers(plan: ReplayPlan, extra: dict[str, str]) -> CIMultiDict[str]:
    """The recorded headers (repeated names kept), with ours replacing any recorded ones."""
    headers: CIMultiDict[str] = CIMultiDict(plan.headers)
    for name, value in extra.items():
        headers[name] = value
    return headers


_T = TypeVar("_T")


async def _emit(events: Sequence[tuple[int, _T]], plan: synth.Plan, start: float, faults: ActiveFaults,
                limits: Sequence[int | None], write: Callable[[Sequence[_T]], Awaitable[None]]) -> int:
    """Write an answer's (step, event) at the times the plan gives them, up to the first of
    `limits` (the faults that stop it), with a `pause` fault's silence; the number written."""
    limit = min([len(events), *(k for k in limits if k is not None)])
    first_due = start + plan.ttft
    pause_at = faults.pause_after if faults.pause_after is not None else limit

    def due(i: int) -> float:  # events from the pause on come its seconds later
        return first_due + plan.interval * events[i][0] + (faults.pause_seconds if i >= pause_at else 0.0)

    sent = 0
    while sent < limit:
        await _sleep_until(due(sent))
        # Everything already due goes out in one write, as a socket buffer would carry it when
        # the server runs behind: the same bytes, far fewer system calls under load.
        now = time.monotonic()
        end = sent + 1
        while end < limit and due(end) <= now:
            end += 1
        await write([event for _, event in events[sent:end]])
        sent = end
    return sent


async def _send(ws: web.WebSocketResponse, message: str) -> None:
    try:
        await ws.send_str(message)
    except (ConnectionError, RuntimeError) as exc:
        raise _Closed from exc


async def _write(resp: web.StreamResponse, data: bytes) -> None:
    try:
        await resp.write(data)
    except (ConnectionError, RuntimeError) as exc:
        raise _Closed from exc


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _hang_up(request: web.Request) -> None:
    """Close the connection mid-response once what was written has gone out (the client sees
    the recorded bytes, then a reset); `transport.abort()` would discard bytes still buffered."""
    transport = request.transport
    if transport is not None:
        transport.close()


async def _sleep_until(deadline: float) -> None:
    # Sleeping to an absolute deadline keeps the token interval from drifting with write times.
    delay = deadline - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


def _error(status: int, message: str, headers: dict[str, str], kind: str | None = None) -> web.Response:
    kind = kind or ("BadRequestError" if status < 500 else "InternalServerError")
    doc = {"object": "error", "message": message, "type": kind, "code": status}
    return web.Response(status=status, body=json.dumps(doc), content_type="application/json", headers=headers)


async def serve(config: EngineConfig, host: str, port: int, ready: Callable[[str], None] | None = None) -> None:
    """Run until SIGINT/SIGTERM; `ready(url)` is called once the port accepts connections."""
    engine = Engine(config)
    runner = web.AppRunner(
        engine.app(),
        keepalive_timeout=config.keepalive_timeout,
        access_log=logging.getLogger("aiohttp.access") if config.access_log else None,
        handle_signals=False,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True)
    await site.start()
    bound = runner.addresses[0]
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    if ready is not None:
        ready(f"http://{shown}:{bound[1]}")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        engine.stopping.set()
        await runner.cleanup()


def announce(url: str) -> None:
    print(f"proxycheck engine listening on {url}", flush=True)
    sys.stdout.flush()
