"""Progress on stderr while a command sends traffic: a replay's (and a check's) exchanges per route
and repetition, a probe's findings as each probe ends, a minimization's steps. A rich live display
when the stream is a terminal, else plain lines (a log or a CI job reads them)."""

from __future__ import annotations

import sys
from collections import Counter
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.live import Live

from proxycheck.core.exchange.observation import Observation
from proxycheck.core.probe.findings import TITLES, ProbeResult, cell_text
from proxycheck.core.replay.chain import Route
from proxycheck.core.replay.plan import PlannedTurn


class ReplayProgress:
    """Per route and repetition: exchanges done of all, and counts by outcome; several at once
    when routes are replayed at once (`check --parallel-routes`). A rich live display when the
    stream is a terminal, else one plain line per route and repetition when it ends. A context
    manager: leaving it stops the display (also on Ctrl-C)."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.running: dict[tuple[str, int], tuple[Counter[str], int]] = {}  # in progress: counts, exchanges planned
        self.live: Live | None = None
        if stream.isatty():
            self.live = Live(console=Console(file=stream), refresh_per_second=8, transient=False)
            self.live.start()

    def __enter__(self) -> "ReplayProgress":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.stop()

    def _line(self, key: tuple[str, int]) -> str:
        counts, total = self.running[key]
        done = sum(counts.values())
        said = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"
        return f"{key[0]} #{key[1]}: {done}/{total} exchanges; {said}"

    def route_started(self, route: Route, repetition: int, turns: int) -> None:
        self.running[(route.name, repetition)] = (Counter(), turns)
        self._refresh()

    def request(self, route: Route, turn: PlannedTurn, url: str, headers: dict[str, str], body: bytes) -> None:
        pass

    def observed(self, obs: Observation) -> None:
        running = self.running.get((obs.route, obs.repetition))
        if running is not None:
            running[0][obs.outcome.value] += 1
            self._refresh()

    def route_ended(self, route: Route, repetition: int) -> None:
        key = (route.name, repetition)
        if key not in self.running:
            return
        line = self._line(key)
        del self.running[key]
        if self.live is not None:
            self.live.console.print(line)
            self._refresh()
        else:
            print(f"proxycheck: {line}", file=self.stream, flush=True)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update("\n".join(self._line(key) for key in self.running))

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


class ProbeProgress:
    """One line on stderr per probe and route, as each ends (probes take seconds each)."""

    def finished(self, result: ProbeResult) -> None:
        print(f"proxycheck: {result.route}: {TITLES.get(result.probe, result.probe)}: {cell_text(result)}",
              file=sys.stderr, flush=True)  # fmt: skip


def minimize_progress(line: str) -> None:
    """A step of a minimization, as one line on stderr."""
    print(f"proxycheck: minimize: {line}", file=sys.stderr, flush=True)
