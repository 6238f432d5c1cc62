"""`proxycheck engine --listen HOST:PORT [--replay DIR]`: the reference engine (see
`proxycheck.io.engine`), answering synthetically or with the responses of a recording.

A synthetic text answer is exactly `max_tokens` long up to `--max-answer-tokens N` (default
`synth.DEFAULT_MAX_ANSWER_TOKENS`, 256; 0: no cap): a request for more (a harness's ceiling, such
as Claude Code's 128,000) gets N tokens, finishing `stop`/`end_turn` with usage counting N, as
an answer that ended on its own does. A request with `ignore_eos` is never capped."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from proxycheck.commandline.common import (
    non_negative_int, non_negative_number, parse_listen, positive_int, print_warnings, probability,
)
from proxycheck.core.errors import EXIT_OK, BadInput
from proxycheck.core.recording.sessions import DEFAULT_SESSION_HEADERS
from proxycheck.core.testbed import refusals, synth
from proxycheck.core.testbed.faultspec import parse_fault
from proxycheck.core.testbed.recorded_answers import ReplayMatcher
from proxycheck.io.recordings import open_recording


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "engine",
        help="run the reference engine (an SGLang/vLLM stand-in, no GPU)",
        description="Serve OpenAI chat/completions and responses, Anthropic messages and SGLang /generate with "
        "deterministic answers and a configurable timing model. GET /v1/responses with a WebSocket upgrade "
        "is the Responses API's WebSocket mode: a response.create message per turn, its events one message "
        "each, previous_response_id kept in the socket's memory; the first message of each turn carries "
        'what the engine received in its "proxycheck" member. A request may override its own timing '
        'with the body member "proxycheck": {"ttft": S, "token_interval": S} (seconds; only this engine '
        "honours it: proxycheck probe asks for slow streams with it).",
    )
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to listen on (port 0: any free port)")
    p.add_argument("--ttft-base", type=non_negative_number, default=0.05, metavar="S", help="time to first token, base (s)")
    p.add_argument("--ttft-per-kb", type=non_negative_number, default=0.002, metavar="S",
                   help="time to first token added per KiB of request body (s)")
    p.add_argument("--token-interval", type=non_negative_number, default=0.02, metavar="S", help="time between tokens (s)")
    p.add_argument("--keepalive-timeout", type=non_negative_number, default=5.0, metavar="S",
                   help="close idle keep-alive connections after S seconds (vLLM's default is 5)")
    p.add_argument("--tool-call-rate", type=probability, default=0.5, metavar="P",
                   help="probability that a turn offering tools answers with a tool call")
    p.add_argument("--tool-command", default=None, metavar="CMD",
                   help="a tool call goes to a shell tool whenever one is offered, with this command (default: "
                   "the safest tool offered, a shell given `ls`); e.g. \"sleep 3; ls\" makes a harness think for "
                   "3 s while its connection sits idle")
    p.add_argument("--jitter", type=probability, default=0.0, metavar="F",
                   help="scale each answer's TTFT and token interval by a random factor in 1 +- F (default 0)")
    p.add_argument("--sampling", action="store_true",
                   help="answer a request with temperature above 0 (or none: the default is 1) and no seed "
                   "differently each time, as a sampling engine does (words, tool calls, finish reason)")
    p.add_argument("--max-answer-tokens", type=non_negative_int, default=synth.DEFAULT_MAX_ANSWER_TOKENS, metavar="N",
                   help="cap text answers at N tokens: a request for more (a harness asking for its ceiling) is "
                   "answered with N, finishing as an answer that ended on its own (stop/end_turn); shorter "
                   "requests, and those with ignore_eos, get exactly max_tokens (default "
                   f"{synth.DEFAULT_MAX_ANSWER_TOKENS}; 0: no cap)")
    p.add_argument("--model", default="proxycheck-reference", help="model name for /v1/models")
    # What vLLM refuses before it generates, in its error bodies (core/testbed/refusals); by default
    # the engine refuses none of it.
    p.add_argument("--served-model", default=None, metavar="NAME",
                   help="serve only this model name, as vLLM does: a request naming another gets vLLM's 404 "
                   "(\"The model `X` does not exist\"); /v1/models lists NAME (default: any name is served)")
    p.add_argument("--max-model-len", type=positive_int, default=None, metavar="N",
                   help="a context window of N tokens, as vLLM's: a prompt of more (the engine's estimate, "
                   "about 4 characters a token) gets vLLM's 400 (\"This model's maximum context length is N "
                   "tokens\") (default: no window)")
    p.add_argument("--no-tool-parser", dest="tool_parser", action="store_false",
                   help="refuse tools as vLLM started without --enable-auto-tool-choice and --tool-call-parser "
                   "does: a chat or Anthropic request offering tools gets vLLM's 400 unless its tool_choice is "
                   "none")
    p.add_argument("--seed", type=int, default=0, help="changes every answer (default 0)")
    p.add_argument("--fault", action="append", default=[], metavar="SPEC",
                   help="inject a server fault: stall:after=K, close:after=K, pause:after=K,seconds=S, delay_headers:seconds=S, "
                   "status:code=C, drop_terminal, ws_close:after=K,code=C (WebSocket only: a close frame after K "
                   "messages); each may add from_turn=T and p=P (repeatable; with --replay, K counts recorded "
                   "chunks; on a WebSocket, faults apply per turn and K counts messages)")
    p.add_argument("--replay", metavar="DIR",
                   help="answer with the responses of this recording (matched by session and turn, else request "
                   "digest, else longest shared prefix), with their recorded status, headers and timing")
    p.add_argument("--replay-speed", type=non_negative_number, default=None, metavar="X",
                   help="with --replay: divide recorded times by X (2 = twice as fast, 0 = no waiting; default 1)")
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(run=run)


def load_replay(directory: str) -> ReplayMatcher:
    """The matcher for a recording; BadInput (before any server starts) when it is unusable."""
    loaded = open_recording(directory, session_headers=DEFAULT_SESSION_HEADERS)  # grouped as the matcher groups
    recording = loaded.recording
    print_warnings(loaded.warnings)
    if not recording.exchanges:
        raise BadInput(directory, "the recording holds no exchanges to replay")
    return ReplayMatcher(recording.exchanges, recording.piece, sessions=loaded.summaries)


def run(args: argparse.Namespace) -> int:
    # io.engine loads aiohttp: imported when the engine runs, not at every command's start.
    from proxycheck.io.engine import EngineConfig, announce, serve

    host, port = parse_listen(args.listen)
    faults = tuple(parse_fault(f) for f in args.fault)
    if args.access_log:  # aiohttp logs each request at INFO, which nothing prints unless told to
        access = logging.getLogger("aiohttp.access")
        access.setLevel(logging.INFO)
        access.addHandler(logging.StreamHandler(sys.stdout))
    if args.replay_speed is not None and args.replay is None:
        raise BadInput("--replay-speed", "only applies with --replay DIR")
    if args.sampling and args.replay is not None:
        raise BadInput("--sampling", "does not apply with --replay DIR (recorded answers are replayed as they are)")
    limits = refusals.Limits(args.served_model, args.max_model_len, args.tool_parser)
    if limits.any and args.replay is not None:
        raise BadInput("--served-model/--max-model-len/--no-tool-parser",
                       "do not apply with --replay DIR (recorded answers are replayed as they are)")
    if args.served_model is not None and not args.served_model.strip():
        raise BadInput("--served-model", "is empty: give the model name the engine serves")
    if args.tool_command is not None and not args.tool_command.strip():
        raise BadInput("--tool-command", "is empty: give the command a shell tool call should run")
    # Loaded before the server starts, so a bad recording is one line and exit 2, not a 500 later.
    replay = load_replay(args.replay) if args.replay is not None else None
    if replay is not None:
        print(f"proxycheck engine: replaying {len(replay)} exchange(s) of {args.replay}", flush=True)
    config = EngineConfig(
        timing=synth.Timing(args.ttft_base, args.ttft_per_kb, args.token_interval),
        tool_call_rate=args.tool_call_rate,
        seed=args.seed,
        model=args.model,
        keepalive_timeout=args.keepalive_timeout,
        faults=faults,
        access_log=args.access_log,
        replay=replay,
        replay_speed=1.0 if args.replay_speed is None else args.replay_speed,
        jitter=args.jitter,
        sampling=args.sampling,
        max_answer_tokens=args.max_answer_tokens or None,
        tool_command=args.tool_command,
        limits=limits,
    )
    try:
        asyncio.run(serve(config, host, port, ready=announce))
    except OSError as exc:
        raise BadInput(f"--listen {args.listen}", f"cannot listen: {exc.strerror or exc}") from None
    return EXIT_OK
