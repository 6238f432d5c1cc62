"""`proxycheck engine --listen HOST:PORT`: the reference engine (see `proxycheck.io.engine`)."""

from __future__ import annotations

import argparse
import asyncio

from proxycheck.commands.common import EXIT_OK
from proxycheck.core.errors import BadInput


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[v6]:PORT` or `:PORT` (loopback); port 0 lets the system choose."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise BadInput(f"--listen {text}", "expected HOST:PORT, e.g. 127.0.0.1:30000")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _rate(text: str) -> float:
    value = _non_negative(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0 and 1")
    return value


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "engine",
        help="run the reference engine (an SGLang/vLLM stand-in, no GPU)",
        description="Serve OpenAI chat/completions, Anthropic messages and SGLang /generate with "
        "deterministic answers and a configurable timing model.",
    )
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to listen on (port 0: any free port)")
    p.add_argument("--ttft-base", type=_non_negative, default=0.05, metavar="S", help="time to first token, base (s)")
    p.add_argument("--ttft-per-kb", type=_non_negative, default=0.002, metavar="S",
                   help="time to first token added per KiB of request body (s)")
    p.add_argument("--token-interval", type=_non_negative, default=0.02, metavar="S", help="time between tokens (s)")
    p.add_argument("--keepalive-timeout", type=_non_negative, default=5.0, metavar="S",
                   help="close idle keep-alive connections after S seconds (vLLM's default is 5)")
    p.add_argument("--tool-call-rate", type=_rate, default=0.5, metavar="P",
                   help="probability that a turn offering tools answers with a tool call")
    p.add_argument("--model", default="proxycheck-reference", help="model name for /v1/models")
    p.add_argument("--seed", type=int, default=0, help="changes every answer (default 0)")
    p.add_argument("--fault", action="append", default=[], metavar="SPEC",
                   help="inject a server fault: stall:after=K, close:after=K, delay_headers:seconds=S, "
                   "status:code=C, drop_terminal; each may add from_turn=T and p=P (repeatable)")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from proxycheck.core import synth
    from proxycheck.core.faultspec import parse_fault
    from proxycheck.io.engine import EngineConfig, announce, serve

    host, port = parse_listen(args.listen)
    config = EngineConfig(
        timing=synth.Timing(args.ttft_base, args.ttft_per_kb, args.token_interval),
        tool_call_rate=args.tool_call_rate,
        seed=args.seed,
        model=args.model,
        keepalive_timeout=args.keepalive_timeout,
        faults=tuple(parse_fault(f) for f in args.fault),
        access_log=args.access_log,
    )
    try:
        asyncio.run(serve(config, host, port, ready=announce))
    except OSError as exc:
        raise BadInput(f"--listen {args.listen}", f"cannot listen: {exc.strerror or exc}") from None
    return EXIT_OK
