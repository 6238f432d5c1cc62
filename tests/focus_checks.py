"""What the tests of `check`'s focus share (tests/test_check_focus*.py, test_check_widening.py, test_check_routes_at_once.py):
the reference engine and fault hops they chain, a long recording with one wedged session, running
`check` into a run directory, and the waits a run actually sent."""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from processes import EngineFactory, MitmdumpFactory, write_chain
from timed_recordings import Session, Turn, write

from proxycheck import cli
from proxycheck.io.procs import Managed
from proxycheck.io.runstore import load_run

BIG = 6000  # the system prompt of the session a `min_body` fault picks
WEDGE_AT_3 = ["stall_after=2", "from_turn=3", f"min_body={BIG}", "stall_seconds=30"]


@dataclass
class Parts:
    engine: Managed
    hops: dict[str, Managed]

    def chain(self, tmp: Path, *names: str) -> Path:
        return write_chain(tmp / "chain.toml", self.engine.url, [(name, self.hops[name].url) for name in names])


# The hops the tests chain: name -> (upstream: the engine or another hop, fault options).
HOPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gateway": ("engine", tuple(WEDGE_AT_3)),
    "edge": ("gateway", ()),
    "idler": ("engine", ("idle_blackhole=2", "stall_seconds=30")),
    "clean": ("engine", ()),
    "limit": ("engine", ("max_concurrent=4",)),
    "wedger": ("limit", tuple(WEDGE_AT_3)),
}


def start_parts(engines: EngineFactory, mitmdumps: MitmdumpFactory, *names: str) -> Parts:
    """The engine and the hops `names` (inner ones first), each stopped by its factory."""
    engine = engines("--token-interval", "0.003", "--ttft-per-kb", "0")
    hops: dict[str, Managed] = {}
    for name in names:
        upstream, faults = HOPS[name]
        hops[name] = mitmdumps.faults(engine if upstream == "engine" else hops[upstream], *faults)
    return Parts(engine, hops)


def long_recording(tmp: Path, engine: Managed, *, sessions: int = 12, cluster: int = 1,
                   wedge_thinks: tuple[float, float] = (20, 30), words: int = 8) -> Path:  # fmt: skip
    """`sessions` sessions over about ten minutes, think times of 20-40 s; `wedged` (the first,
    with a large system prompt) fails at its turn 3 after `wedge_thinks`, on a connection of its
    own per turn; `cluster` - 1 clean sessions in flight beside it; answers of `words` tokens."""
    clean = Turn(think=25)
    wedged = Session(start=0, turns=[Turn(), Turn(think=wedge_thinks[0]), Turn(think=wedge_thinks[1], fails=True),
                                     clean, clean], system=BIG, new_connections=True, name="wedged")  # fmt: skip
    beside = [Session(start=0.05 * (i + 1), turns=[Turn(), Turn(think=wedge_thinks[0]), Turn(think=wedge_thinks[1]),
                                                   clean], new_connections=True)
              for i in range(cluster - 1)]  # fmt: skip
    later = [Session(start=120 + 40 * i, turns=[Turn(), clean, Turn(think=40), clean, clean], new_connections=True)
             for i in range(sessions - cluster)]  # fmt: skip
    return write(tmp / "rec", engine.url, [wedged, *beside, *later], answer_words=words)


def check(tmp: Path, recording: Path, chain: Path, *argv: str) -> tuple[int, dict, Path]:
    out = Path(tempfile.mkdtemp(prefix="run-", dir=tmp))
    path = tmp / "v.json"
    status = cli.main(["check", str(recording), "--chain", str(chain), "--out", str(out), "--json", str(path), *argv])
    return status, json.loads(path.read_text()), out


def sent_thinks(run_dir: Path) -> dict[str, list[float]]:
    """Per session and route repetition, the waits between the end of a turn and the next request."""
    by: dict[tuple[str, str, int], list] = defaultdict(list)
    for obs in load_run(run_dir).observations:
        by[(obs.session, obs.route, obs.repetition)].append(obs)
    out: dict[str, list[float]] = {}
    for (session, _, _), observations in by.items():
        observations.sort(key=lambda o: o.t_start)
        waits = [b.t_start - (a.t_start + (a.end or 0.0)) for a, b in zip(observations, observations[1:])]
        out.setdefault(session, waits)
    return out


