"""The real inference engine the tests in this folder start: vLLM's CPU build (.venv-vllm) serving
SmolLM2-135M-Instruct (.models/smollm2-135m), both built by `make vllm`, started by
`proxycheck.io.vllm` (as the demo and the benchmarks start it).

`missing()` says, in one line naming the make target, why it cannot be started here; the stamps
`make vllm` leaves are what tells a whole build from one cut short.
"""

from __future__ import annotations

from pathlib import Path

from proxycheck.io.procs import Managed
from proxycheck.io.vllm import MAX_MODEL_LEN, SERVED_MODEL, VllmSetup, launch_vllm, wait_ready

REPO = Path(__file__).resolve().parents[2]
SETUP = VllmSetup.of_project(REPO)
VLLM_INSTALLED = REPO / ".venv-vllm" / ".installed"
MODEL_BUILT = SETUP.model / ".built"
# The engines' compute threads leave one core to the other tests beside them (measured: ready in 29 s,
# the first token of 2.6k tokens in 3.0 s, as fast as on both cores, which its threads shared badly).
RESERVED_CPUS = 1
# The second configuration: one knob changed. Prefix caching makes a replay of a conversation hit
# the cache its recording filled; without it every replay pays the whole prefill, as a first visit does.
NO_PREFIX_CACHING = "--no-enable-prefix-caching"

__all__ = ["MAX_MODEL_LEN", "NO_PREFIX_CACHING", "SERVED_MODEL", "SETUP", "missing", "start_vllms"]


def missing() -> str | None:
    """Why the engine cannot start here (one line naming `make vllm`), or None."""
    if not VLLM_INSTALLED.exists():
        return f"vLLM is not installed ({VLLM_INSTALLED.parent.name}/ missing): `make vllm` builds it"
    if not MODEL_BUILT.exists():
        return f"the model is not built ({SETUP.model.relative_to(REPO)}/ missing): `make vllm` builds it"
    return None


def start_vllms(*configurations: tuple[str, ...], kv_cache_gb: int = 2) -> list[Managed]:
    """One vLLM per configuration (its server flags), loading side by side, all ready; where one
    fails, every one is stopped."""
    engines = [launch_vllm(SETUP, *flags, kv_cache_gb=kv_cache_gb, reserved_cpus=RESERVED_CPUS)
               for flags in configurations]  # fmt: skip
    try:
        for engine in engines:
            wait_ready(engine)
    except BaseException:
        for engine in engines:
            engine.stop(grace=15)
        raise
    return engines
