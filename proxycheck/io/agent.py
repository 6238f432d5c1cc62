"""The synthetic agent's client loop: sessions of streamed turns over httpx, each turn observed.

Each session behaves like an application built on the OpenAI or Anthropic SDK: ONE
`httpx.AsyncClient` for its whole life (connection pooling and keep-alive across turns, so a hop
that mishandles idle or reused connections shows up), the proxy given as the client's proxy, and a
read timeout as the wedge detector. Sessions run concurrently. What to send comes from
`proxycheck.core.testbed.conversation`; observing each turn (timing, watchdogs, the outcome taxonomy of
docs/design.md) is `proxycheck.io.observe.observe_httpx`, the replayer's own observer, so the agent and
the replayer judge a turn alike; this module runs the sessions and reports their turns. Failures
are data: every httpx error ends up as a turn outcome, never as an exception out of `run_agent`.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit, urlunsplit

import httpx

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.exchange.outcomes import Outcome
from proxycheck.core.exchange.watchdogs import Watchdogs
from proxycheck.core.testbed.agent import AgentOptions, AgentRun, SessionReport, TurnReport
from proxycheck.core.testbed.conversation import ENDPOINTS, Conversation, ConversationConfig
from proxycheck.io.observe import ConnState, Observed, observe_httpx

ANTHROPIC_VERSION = "2023-06-01"


def endpoint_url(base_url: str, dialect: str) -> str:
    """The dialect's endpoint under `base_url`, which may or may not end in /v1 (the OpenAI SDK's
    base URL does, the Anthropic SDK's does not)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if not path.endswith("/v1"):
        path += "/v1"
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/{ENDPOINTS[dialect]}", parts.query, ""))


def request_headers(options: AgentOptions, session: str) -> dict[str, str]:
    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    if options.dialect == "anthropic_messages":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    if options.session_id_header:
        headers[options.session_id_header] = session
    return headers


async def run_agent(options: AgentOptions) -> AgentRun:
    """Run every session concurrently to its end; never raises for what the network did."""
    url = endpoint_url(options.base_url, options.dialect)
    started, t0 = time.time(), time.monotonic()
    ids = [f"s{i}" for i in range(1, options.sessions + 1)]
    reports = await asyncio.gather(*(run_session(options, url, sid, t0) for sid in ids))
    return AgentRun(options, url, started, time.monotonic() - t0, tuple(reports))


def new_client(options: AgentOptions) -> httpx.AsyncClient:
    """A client like the SDKs make: pooled keep-alive connections and a read timeout.

    `trust_env=False`: the only proxy is the one given, so a stray HTTP_PROXY in the environment
    cannot silently add a hop to the chain under test."""
    timeout = httpx.Timeout(
        connect=options.connect_timeout,
        read=options.read_timeout,
        write=options.read_timeout,
        pool=options.connect_timeout,
    )
    return httpx.AsyncClient(proxy=options.proxy, timeout=timeout, trust_env=False)


async def run_session(options: AgentOptions, url: str, session: str, t0: float) -> SessionReport:
    """One agent: turn after turn on one client until T turns are done or (on-fail stop) one fails."""
    config = ConversationConfig(
        options.dialect, session, options.model, options.max_tokens, options.tool_result_bytes, options.seed,
        options.tools,
    )
    conversation = Conversation(config)
    headers = request_headers(options, session)
    connections = ConnState()
    turns: list[TurnReport] = []
    async with new_client(options) as client:
        for turn in range(1, options.turns + 1):
            if turn > 1 and options.think > 0:
                await asyncio.sleep(options.think)
            observed = await exchange(client, url, headers, conversation.encode(), options, t0, connections)
            report = turn_report(observed.observation, session, turn, conversation.message_count)
            turns.append(report)
            result = observed.result
            text = result.text if result else ""
            if report.outcome is Outcome.OK:
                conversation.add_reply(text, result.tool_calls if result else ())
            elif options.on_fail == "stop":
                break  # what a wedged harness does: this conversation goes no further
            else:
                conversation.add_interrupted(text, report.outcome.value)
    return SessionReport(session, tuple(turns))


def watchdogs(options: AgentOptions) -> Watchdogs:
    """The agent's one read timeout, as an SDK's: it bounds the wait for headers and every
    silence after them (silence meaning no content: keep-alive comments do not count)."""
    return Watchdogs(connect=options.connect_timeout, headers=options.read_timeout, stall=options.read_timeout)


async def exchange(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: bytes,
    options: AgentOptions,
    t0: float,
    connections: ConnState,
) -> Observed:
    """POST one streamed request and read its response to the end, a failure, or a stall."""
    return await observe_httpx(
        client, "POST", url, headers, body, dialect=options.dialect, streamed=True,
        watchdogs=watchdogs(options), clock_origin=t0, conn_state=connections,
    )  # fmt: skip


def turn_report(obs: Observation, session: str, turn: int, messages: int) -> TurnReport:
    """A turn as the agent reports it, from its observation."""
    result = obs.result
    return TurnReport(
        session=session,
        turn=turn,
        start=obs.t_start,
        request_bytes=obs.request_bytes,
        messages=messages,
        outcome=obs.outcome,
        detail=obs.detail,
        status=obs.status,
        # Numbered when a response came on it: before headers, a reused connection is unknown.
        connection=obs.connection if obs.status is not None else None,
        ttft=obs.ttft,
        duration=obs.end,
        events=sum(1 for e in obs.events if e.kind != "comment"),
        content_events=obs.content_events,
        comments=obs.comments,
        response_bytes=obs.response_bytes,
        finish_reason=result.finish_reason if result else None,
        tool_calls=tuple(c.name or "?" for c in result.tool_calls) if result else (),
        completion_tokens=result.completion_tokens if result else None,
    )
