"""`proxycheck agent`: a synthetic coding agent that drives an engine (directly or through a proxy)
with concurrent multi-turn, tool-calling, streamed sessions and reports every turn's outcome.

This module owns the arguments (validated here, so a bad value is one `proxycheck: ...` line and
exit status 2) and the exit status of a run: 0 when every turn of every session was ok, 1 when
any failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from rich.console import Console

from proxycheck.commandline.common import (
    header_name,
    http_url,
    non_negative_int,
    non_negative_seconds,
    positive_int,
    positive_seconds,
)
from proxycheck.core.errors import EXIT_FAULT, EXIT_OK
from proxycheck.core.testbed.agent import AgentOptions
from proxycheck.core.testbed.conversation import DIALECTS
from proxycheck.report.agent_view import agent_view, to_json


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "agent",
        help="drive an engine with synthetic multi-turn agent sessions",
        description="Run concurrent synthetic coding-agent sessions against an engine (directly or "
        "through a proxy): each session keeps one HTTP client with keep-alive, streams every turn, "
        "answers tool calls with tool results so the context grows, and reports each turn's outcome. "
        "Exit status 0 when every turn was ok, 1 when any failed, 2 for bad arguments.",
    )
    p.add_argument("--base-url", required=True, type=http_url, metavar="URL",
                   help="the engine or the first hop (with or without a trailing /v1)")
    p.add_argument("--proxy", type=http_url, metavar="URL", help="a forward HTTP proxy for every session's client")
    p.add_argument("--dialect", choices=DIALECTS, default="openai_chat", help="API to speak (default: openai_chat)")
    p.add_argument("--model", default="proxycheck-agent", help="model name sent in every request")
    p.add_argument("--sessions", type=positive_int, required=True, metavar="N", help="concurrent sessions")
    p.add_argument("--turns", type=positive_int, required=True, metavar="T", help="turns per session")
    p.add_argument("--think", type=non_negative_seconds, default=1.0, metavar="S",
                   help="seconds between a turn's end and the next request (default: 1)")
    p.add_argument("--read-timeout", type=positive_seconds, default=60.0, metavar="S",
                   help="the wedge detector: no bytes, or no content progress, for S seconds (default: 60)")
    p.add_argument("--connect-timeout", type=positive_seconds, default=10.0, metavar="S",
                   help="seconds to establish a connection (default: 10)")
    p.add_argument("--max-tokens", type=positive_int, default=256, metavar="N",
                   help="max_tokens per turn (default: 256)")
    p.add_argument("--tool-result-bytes", type=non_negative_int, default=2000, metavar="N",
                   help="size of each synthetic tool result (default: 2000)")
    p.add_argument("--no-tools", dest="tools", action="store_false",
                   help="offer no tools (for a model served without tool calls): each follow-up message pastes "
                        "a test output of --tool-result-bytes instead, so the context still grows")
    p.add_argument("--session-id-header", type=header_name, metavar="NAME",
                   help="send the session id (s1, s2, ...) in this request header")
    p.add_argument("--on-fail", choices=("stop", "continue"), default="stop",
                   help="after a failed turn: end that session (default, as a wedged harness does) or go on")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic conversation (default: 0)")
    p.add_argument("--json", action="store_true", help="print JSON (schema proxycheck.agent/1)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # io.agent loads httpx: imported when the agent runs, not at every command's start.
    from proxycheck.io.agent import run_agent

    options = AgentOptions(
        base_url=args.base_url,
        sessions=args.sessions,
        turns=args.turns,
        dialect=args.dialect,
        model=args.model,
        proxy=args.proxy,
        think=args.think,
        read_timeout=args.read_timeout,
        connect_timeout=args.connect_timeout,
        max_tokens=args.max_tokens,
        tool_result_bytes=args.tool_result_bytes,
        session_id_header=args.session_id_header,
        on_fail=args.on_fail,
        seed=args.seed,
        tools=args.tools,
    )
    result = asyncio.run(run_agent(options))
    if args.json:
        json.dump(to_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        Console(highlight=False).print(agent_view(result))
    return EXIT_OK if result.ok else EXIT_FAULT
