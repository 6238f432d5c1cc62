"""The processes tests start: the reference engine and mitmdump hops, each one kept by the factory
that started it and stopped by its pid when the fixture holding that factory ends, whether the test
passed or failed. The fixtures (`engines`, `mitmdumps` and their module-scoped twins) are in
conftest.py; this module owns what they hand out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from proxycheck.io.agent import AgentOptions, run_agent
from proxycheck.io.procs import Managed, start_engine, start_mitmdump

ADDONS = Path(__file__).resolve().parents[1] / "addons"
FAULTS = ADDONS / "faults.py"
RECORD = ADDONS / "record.py"


class _Started:
    """Every process this factory started, stopped together (newest first: a hop before its upstream)."""

    def __init__(self) -> None:
        self._started: list[Managed] = []

    def _keep(self, proc: Managed) -> Managed:
        self._started.append(proc)
        return proc

    def stop_all(self) -> None:
        while self._started:
            self._started.pop().stop()  # by pid: SIGTERM to its group, SIGKILL after a grace period


class EngineFactory(_Started):
    """`engines(*args)`: `python -m proxycheck engine --listen 127.0.0.1:0 ARGS` (`--fault SPEC`,
    `--token-interval`, `--sampling`, ...), ready on the port the system picked."""

    def __call__(self, *args: str) -> Managed:
        return self._keep(start_engine(*args))


class MitmdumpFactory(_Started):
    """`mitmdumps(*args)`: mitmdump with those arguments (its mode, scripts, options), ready on the
    port the system picked; `faults(...)` and `recorder(...)` for the two addons in reverse mode."""

    def __call__(self, *args: str) -> Managed:
        return self._keep(start_mitmdump(*args))

    def faults(self, upstream: Managed | str, *options: str) -> Managed:
        """A reverse hop in front of `upstream` running addons/faults.py, each of `options`
        (`name=value`) set as its `proxycheck_fault_name`."""
        sets = [arg for option in options for arg in ("--set", f"proxycheck_fault_{option}")]
        return self("--mode", f"reverse:{_url(upstream)}", "-s", str(FAULTS), *sets)

    def recorder(self, upstream: Managed | str, out: Path, *args: str) -> Managed:
        """A reverse hop in front of `upstream` running addons/record.py, recording into `out`."""
        return self("--mode", f"reverse:{_url(upstream)}", "-s", str(RECORD), "--set", f"proxycheck_out={out}", *args)

    def record_agent(self, upstream: Managed | str, out: Path, **options: object) -> Path:
        """A recording in `out` of the synthetic agent's sessions (`options`: AgentOptions fields) made
        through a recorder in front of `upstream`; every session must end well. The recorder is
        stopped once it has written all; returns `out`."""
        recorder = self.recorder(upstream, out)
        assert asyncio.run(run_agent(AgentOptions(base_url=recorder.url, **options))).ok  # type: ignore[arg-type]
        time.sleep(1.5)  # the recorder flushes its last chunks within a second
        recorder.stop()
        return out


def _url(upstream: Managed | str) -> str:
    return upstream if isinstance(upstream, str) else upstream.url


Factory = TypeVar("Factory", EngineFactory, MitmdumpFactory)


def stopped_at_the_end(factory: Factory) -> Iterator[Factory]:
    """The body of a fixture that hands out `factory` and stops what it started at teardown."""
    try:
        yield factory
    finally:
        factory.stop_all()
