"""`proxycheck record --listen HOST:PORT --upstream URL --out DIR`: a recording proxy in one command.

This module owns running mitmdump as a child process with the recorder addon
(`proxycheck.hops.record`, passed by its file to `-s`), showing what is being recorded while it
runs, and stopping it so that nothing already recorded is lost:

* Modes: `reverse` (default; clients talk to HOST:PORT as if it were the upstream) runs
  `--mode reverse:URL`; `forward` runs an HTTP proxy (`--mode regular`), or `upstream:URL` when
  --upstream names the next proxy; `socks5` runs a SOCKS5 proxy (`--mode socks5`), for clients
  configured with `ALL_PROXY=socks5://HOST:PORT`. mitmproxy connects to the targets itself
  from that mode (it cannot chain it to another proxy), so --upstream is refused there.
* Before it starts: the output directory is checked as the recorder checks it
  (`proxycheck.io.storage.check_appendable`: not a file, not someone else's files, a recording
  this proxycheck can append to, made at this point); a problem is one line
  `proxycheck: PATH: PROBLEM`, exit 2.
* The point: `--point NAME` is `--set proxycheck_point=NAME`; without it the recorder names the
  point after the address clients connect to. Asked before mitmdump starts when that is known
  (--point, or --listen with an IP address and a port), and refused when it cannot be the point
  an existing recording holds (--listen HOST:0: the port is chosen at start).
* Start: mitmdump reports `listening at ADDR:PORT` once it listens (so `--listen HOST:0` works,
  and the real port is printed); a mitmdump that exits during start-up (port in use, an option
  the recorder refuses) is one line, `proxycheck: mitmdump did not start: ...`, and exit 2.
* Live view (rich, on stderr, about once a second; `proxycheck.report.live_view`): exchanges, in
  flight, failed and bytes come from reading the journal incrementally
  (`proxycheck.io.recordings.JournalTail`: only the new bytes each time); the session count
  follows the same records, analysing only the exchanges they changed, every few seconds.
* Stop (Ctrl-C or SIGTERM): mitmdump gets SIGINT, so the recorder closes the journal and marks
  in-flight exchanges as interrupted; after a bounded wait it is terminated. Then a summary line
  and the sessions table are printed on stdout.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from proxycheck.commandline.common import StopSignal, header_name, http_url, parse_listen, print_warnings
from proxycheck.core.errors import EXIT_OK, BadInput, ProcessError, ProxycheckError
from proxycheck.core.recording.journal import JOURNAL_FILE, META_FILE, point_name_problem, point_of
from proxycheck.io.jsonl import read_json_file
from proxycheck.io.procs import Managed, mitmdump_path
from proxycheck.io.storage import check_appendable

REFRESH = 1.0  # seconds between live-view updates
START_TIMEOUT = 60.0  # mitmdump takes a few seconds to import on a slow machine
STARTUP_SETTLE = 0.5  # mitmdump exits shortly *after* listening when start-up logged an error
STOP_TIMEOUT = 10.0  # how long the recorder may take to close the journal after SIGINT
_LISTENING = r"listening at \S+:(\d+)"


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "record",
        help="run a recording proxy (mitmdump with the recorder) and show what it records",
        description="Run mitmproxy with the proxycheck recorder between your client and the next hop, "
        "journaling every LLM exchange (streams pass through as they arrive). Ctrl-C stops it and "
        "prints the sessions recorded. Credentials are redacted before anything is written.",
    )
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to listen on (port 0: any free port)")
    p.add_argument("--upstream", type=http_url, metavar="URL",
                   help="reverse mode: the engine or next hop to forward to (required); "
                   "forward mode: an upstream HTTP proxy to chain to (optional)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="the recording (created; an existing recording is appended to)")
    p.add_argument("--mode", choices=("reverse", "forward", "socks5"), default="reverse",
                   help="reverse: clients talk to this address as to the upstream (default); "
                   "forward: clients use this address as their HTTP proxy; "
                   "socks5: clients use this address as their SOCKS5 proxy (ALL_PROXY=socks5://HOST:PORT)")
    p.add_argument("--redact-header", type=header_name, action="append", default=[], metavar="NAME",
                   help="also redact this header's value (repeatable; credentials are redacted by default)")
    p.add_argument("--session-header", type=header_name, action="append", default=[], metavar="NAME",
                   help="a request header that names the session (repeatable; default x-session-id, "
                   "x-conversation-id)")
    p.add_argument("--filter", metavar="EXPR",
                   help="record the flows matching this mitmproxy filter expression instead of LLM API requests")
    p.add_argument("--point", type=point_name, metavar="NAME",
                   help="the name of this recorder's point of observation, kept in the recording (default: the "
                   "address clients connect to, HOST:PORT, the real port also with --listen HOST:0)")
    p.set_defaults(run=run)


def point_name(text: str) -> str:
    problem = point_name_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


# --------------------------------------------------------------------------------------------
# Arguments -> mitmdump


def mitmdump_args(args: argparse.Namespace, host: str, port: int) -> list[str]:
    """mitmdump's command line for these arguments."""
    from proxycheck.hops import record as recorder  # for its file only; it imports mitmproxy (slow)

    if args.mode == "reverse":
        mode = f"reverse:{args.upstream}"
    elif args.mode == "socks5":
        mode = "socks5"
    else:
        mode = f"upstream:{args.upstream}" if args.upstream else "regular"
    argv = [
        mitmdump_path(), "--listen-host", host, "--listen-port", str(port), "--mode", mode,
        "-s", str(Path(recorder.__file__)), "--set", f"proxycheck_out={args.out}", "--set", "flow_detail=0",
    ]  # fmt: skip
    for name in args.redact_header:
        argv += ["--set", f"proxycheck_redact_headers={name}"]
    for name in args.session_header:
        argv += ["--set", f"proxycheck_session_header={name}"]
    if args.filter:
        argv += ["--set", f"proxycheck_filter={args.filter}"]
    if getattr(args, "point", None):  # not given: the recorder names it after its listen address
        argv += ["--set", f"proxycheck_point={args.point}"]
    return argv


def check_arguments(args: argparse.Namespace) -> tuple[str, int]:
    """The listen address; BadInput for arguments that cannot work (before anything starts)."""
    host, port = parse_listen(args.listen)
    if args.mode == "reverse" and not args.upstream:
        raise BadInput("--upstream", "required in reverse mode (the URL of the engine or next hop)")
    if args.mode == "socks5" and args.upstream:
        raise BadInput("--upstream", "not in socks5 mode: the recorder connects to the targets its clients name "
                                     "itself (mitmproxy cannot chain SOCKS mode to another proxy); put it in "
                                     "front of the engine, or behind the SOCKS hop in reverse mode")  # fmt: skip
    # The recorder asks the same question of the directory; asked here, a problem is one line before
    # mitmdump starts (the recorder in a running proxy only warns, so that traffic goes on).
    point = getattr(args, "point", None)
    check_appendable(args.out, point=point or listen_point_of(host, port))
    if not point and port == 0:
        _refuse_a_pointed_recording(Path(args.out), host)
    if args.filter and args.filter.strip():
        # Asked here too: mitmdump may report its listening address before the addon refuses it.
        from proxycheck.hops.record import parse_filter  # it imports mitmproxy (slow)

        try:
            parse_filter(args.filter.strip())
        except ValueError as exc:
            raise BadInput("--filter", str(exc)) from None
    return host, port


def listen_point_of(host: str, port: int) -> str | None:
    """The point name the recorder will derive from --listen, when it is known before clients
    connect: an IP address and a port (a host name or a wildcard address is named by the address
    clients reach, port 0 by the port the system picks)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if port == 0 or ip.is_unspecified:
        return None
    # Its module imports mitmproxy (slow); `run` imports it for the recorder's file anyway.
    from proxycheck.hops.record import listen_point

    return listen_point((host, port))


def _refuse_a_pointed_recording(out: Path, host: str) -> None:
    """Without --point on port 0, the point is named after a port chosen at start: an existing
    recording's point it would never be (the recorder would refuse it at the first request, in a
    warning the live view does not show)."""
    meta_path = out / META_FILE
    if not meta_path.is_file():
        return
    recorded_at = point_of(read_json_file(meta_path), str(meta_path))  # check_appendable read it already
    if recorded_at is not None:
        name = recorded_at["name"]
        raise BadInput(str(out), f"recorded at point {name}; a recording holds one point, and with --listen "
                                 f"{host}:0 this one is named after a port chosen at start (give --point {name} "
                                 "to append, or another --out)")  # fmt: skip


# --------------------------------------------------------------------------------------------
# Running


def start_recorder(argv: list[str], host: str) -> Managed:
    """mitmdump, listening; BadInput with its own error when it does not start."""
    # Port 0 for Managed: readiness is mitmdump's own "listening at" line, never a port that
    # some other process may already hold.
    try:
        proc = Managed(argv, host, 0, name="mitmdump", port_pattern=_LISTENING)
    except OSError as exc:
        raise BadInput("mitmdump", f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    try:
        proc.wait_ready(START_TIMEOUT)
    except ProcessError:
        raise BadInput("mitmdump", f"did not start: {startup_error(proc.log_tail(20000))}") from None
    except BaseException:
        proc.stop()  # Ctrl-C while starting: mitmdump has its own process group, so it would stay
        raise
    deadline = time.monotonic() + STARTUP_SETTLE
    while time.monotonic() < deadline and proc.alive():
        time.sleep(0.05)
    if not proc.alive():
        proc.stop()
        raise BadInput("mitmdump", f"did not start: {startup_error(proc.log_tail(20000))}")
    return proc


_NOISE = re.compile(r"^(Traceback|\s|Error(s)? logged during startup|Try specifying a different port)")
_STAMP = re.compile(r"^\[\d\d:\d\d:\d\d\.\d+\]\s*")


def startup_error(log: str) -> str:
    """The line of mitmdump's output that says why it did not start."""
    lines = [_STAMP.sub("", line).rstrip() for line in log.splitlines()]
    for line in lines:
        if line.startswith("mitmproxy.exceptions.OptionsError:"):
            return line.split("OptionsError:", 1)[1].strip()
    for line in lines:
        if line.startswith("/") and "mitmdump: " in line:  # mitmdump's own usage errors
            return line.split("mitmdump: ", 1)[1]
    for line in lines:
        if ("error" in line.lower() or "failed" in line.lower()) and not _NOISE.match(line):
            return re.sub(r"^\[Errno \d+\]\s*", "", line)
    meaningful = [line for line in lines if line and not _NOISE.match(line)]
    return meaningful[-1] if meaningful else "it exited without saying why"


def listening_address(log: str, host: str) -> str:
    found = re.findall(_LISTENING, log)
    port = found[-1] if found else "?"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def run(args: argparse.Namespace) -> int:
    host, port = check_arguments(args)
    argv = mitmdump_args(args, host, port)
    proc = start_recorder(argv, host)
    crashed = False
    try:
        address = listening_address(proc.log_tail(20000), host)
        print(f"proxycheck record: listening at {address} ({_describe(args)}), recording to {args.out}; Ctrl-C stops",
              file=sys.stderr, flush=True)  # fmt: skip
        with StopSignal() as stop:
            crashed = _watch(proc, Path(args.out), stop.event, address)
    finally:
        status = _stop(proc)
    _final_report(args.out)
    if crashed:
        raise ProxycheckError(f"mitmdump: exited with status {status} while recording: {startup_error(proc.log_tail())}")
    return EXIT_OK


def _describe(args: argparse.Namespace) -> str:
    if args.mode == "reverse":
        return f"reverse proxy to {args.upstream}"
    if args.mode == "socks5":
        return "SOCKS5 proxy"
    return f"forward proxy via {args.upstream}" if args.upstream else "forward proxy"


def _watch(proc: Any, out: Path, stop: threading.Event, address: str) -> bool:
    """Show the live view until asked to stop; True when mitmdump died on its own."""
    # Imported here, as rich is: they load only once a recording runs, not with every command.
    from rich.console import Console
    from rich.live import Live

    from proxycheck.io.recordings import JournalTail, SessionCount
    from proxycheck.report.live_view import live_line

    tail, counter = JournalTail(out / JOURNAL_FILE), SessionCount(out)
    started = time.monotonic()
    console = Console(stderr=True, highlight=False)
    # Transient: once stopped, the final report replaces the live line.
    with Live(console=console, auto_refresh=False, transient=True) as live:
        while not stop.is_set():
            if not proc.alive():
                return True
            now = time.monotonic()
            counter.add(tail.poll())
            counter.maybe_update(now, tail.offset)
            live.update(live_line(tail, counter.sessions, address, now - started), refresh=True)
            stop.wait(REFRESH)
    return False


def _stop(proc: Any) -> int | None:
    """SIGINT mitmdump (the recorder then closes the journal), wait, then make sure it is gone."""
    if proc.alive():
        try:
            os.killpg(proc.pid, signal.SIGINT)  # mitmdump runs in its own process group
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + STOP_TIMEOUT
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    return proc.stop()


def _final_report(out: str) -> None:
    from proxycheck.io.recordings import open_recording

    try:
        loaded = open_recording(out)
        recording, sessions = loaded.recording, loaded.summaries
    except ProxycheckError:
        print(f"proxycheck record: {out}: nothing recorded", flush=True)
        return
    print_warnings([str(w) for w in recording.warnings])
    interrupted = sum(1 for x in recording.exchanges if x.interrupted)
    note = f", {interrupted} interrupted in flight" if interrupted else ""
    print(f"proxycheck record: {out}: {len(sessions)} session(s), {len(recording.exchanges)} exchange(s){note}",
          flush=True)  # fmt: skip
    if sessions:
        from rich.console import Console

        from proxycheck.report.sessions_view import sessions_view

        Console(highlight=False).print(sessions_view(out, sessions))
