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
    """Per route and repetition: exchanges done of all, and counts by outcome. A rich live
    display when the stream is a terminal, else one plain line per route when it ends. A context
    manager: leaving it stops the display (also on Ctrl-C)."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.counts: Counter[str] = Counter()
        self.total = 0
        self.label = ""
        self.live: Live | None = None
        if stream.isatty():
            self.live = Live(console=Console(file=stream), refresh_per_second=8, transient=False)
            self.live.start()

    def __enter__(self) -> "ReplayProgress":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.stop()

    def _line(self) -> str:
        done = sum(self.counts.values())
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "-"
        return f"{self.label}: {done}/{self.total} exchanges; {counts}"

    def route_started(self, route: Route, repetition: int, turns: int) -> None:
        self.counts = Counter()
        self.total = turns
        self.label = f"{route.name} #{repetition}"
        self._refresh()

    def request(self, route: Route, turn: PlannedTurn, url: str, headers: dict[str, str], body: bytes) -> None:
        pass

    def observed(self, obs: Observation) -> None:
        self.counts[obs.outcome.value] += 1
        self._refresh()

    def route_ended(self, route: Route, repetition: int) -> None:
        if self.live is not None:
            self.live.console.print(self._line())
        else:
            print(f"proxycheck: {self._line()}", file=self.stream, flush=True)

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._line())

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
