"""The real inference engine the tests in this folder start: vLLM's CPU build (.venv-vllm) serving
SmolLM2-135M-Instruct (.models/smollm2-135m), both built by `make vllm`, started by
`proxycheck.io.vllm` (as the demo and the benchmarks start it), and measured once ready.

`missing()` says, in one line naming the make target, why it cannot be started here; the stamps
`make vllm` leaves are what tells a whole build from one cut short. `Engine` is a started engine
with its measured speed, which every case on it derives its prompt sizes and waits from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from proxycheck.core.testbed.engine_speed import EngineSpeed
from proxycheck.io.procs import Managed
from proxycheck.io.vllm import MAX_MODEL_LEN, SERVED_MODEL, VllmSetup, launch_vllm, measure_speed, wait_ready

REPO = Path(__file__).resolve().parents[2]
SETUP = VllmSetup.of_project(REPO)
VLLM_INSTALLED = REPO / ".venv-vllm" / ".installed"
MODEL_BUILT = SETUP.model / ".built"
# The engines' compute threads take one CPU and leave the other to the tests beside them: on two
# CPUs shared with three other test workers, threads bound to both wait on each other's barriers.
ENGINE_CORES = 1
# The second configuration: one knob changed. Prefix caching makes a replay of a conversation hit
# the cache its recording filled; without it every replay pays the whole prefill, as a first visit does.
NO_PREFIX_CACHING = "--no-enable-prefix-caching"

__all__ = ["MAX_MODEL_LEN", "NO_PREFIX_CACHING", "SERVED_MODEL", "SETUP", "Engine", "missing", "start_vllms"]


@dataclass(frozen=True)
class Engine:
    """A ready vLLM and its speed, measured on it once it was ready."""

    proc: Managed
    speed: EngineSpeed

    @property
    def url(self) -> str:
        return self.proc.url


def missing() -> str | None:
    """Why the engine cannot start here (one line naming `make vllm`), or None."""
    if not VLLM_INSTALLED.exists():
        return f"vLLM is not installed ({VLLM_INSTALLED.parent.name}/ missing): `make vllm` builds it"
    if not MODEL_BUILT.exists():
        return f"the model is not built ({SETUP.model.relative_to(REPO)}/ missing): `make vllm` builds it"
    return None


def start_vllms(*configurations: tuple[str, ...], kv_cache_gb: int = 2) -> list[Engine]:
    """One vLLM per configuration (its server flags), loading side by side, all ready and measured
    one after the other; where one fails, every one is stopped."""
    procs = [launch_vllm(SETUP, *flags, kv_cache_gb=kv_cache_gb, cores=ENGINE_CORES) for flags in configurations]
    try:
        for proc in procs:
            wait_ready(proc)
        return [Engine(proc, measure_speed(proc.url)) for proc in procs]
    except BaseException:
        for proc in procs:
            proc.stop(grace=15)
        raise
