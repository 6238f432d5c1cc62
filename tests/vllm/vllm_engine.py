"""The real inference engine the tests in this folder start: vLLM's CPU build (.venv-vllm) serving
SmolLM2-135M-Instruct (.models/smollm2-135m), both built by `make vllm`, started by
`proxycheck.io.vllm` (as the demo and the benchmarks start it).

`missing()` says, in one line naming the make target, why it cannot be started here; the stamps
`make vllm` leaves are what tells a whole build from one cut short.
"""

from __future__ import annotations

from pathlib import Path

from proxycheck.io.procs import Managed
from proxycheck.io.vllm import MAX_MODEL_LEN, SERVED_MODEL, VllmSetup
from proxycheck.io.vllm import start_vllm as _start

REPO = Path(__file__).resolve().parents[2]
SETUP = VllmSetup.of_project(REPO)
VLLM_INSTALLED = REPO / ".venv-vllm" / ".installed"
MODEL_BUILT = SETUP.model / ".built"

__all__ = ["MAX_MODEL_LEN", "SERVED_MODEL", "SETUP", "missing", "start_vllm"]


def missing() -> str | None:
    """Why the engine cannot start here (one line naming `make vllm`), or None."""
    if not VLLM_INSTALLED.exists():
        return f"vLLM is not installed ({VLLM_INSTALLED.parent.name}/ missing): `make vllm` builds it"
    if not MODEL_BUILT.exists():
        return f"the model is not built ({SETUP.model.relative_to(REPO)}/ missing): `make vllm` builds it"
    return None


def start_vllm(*args: str, kv_cache_gb: int = 2) -> Managed:
    """vLLM on a loopback port, ready; `args` are more server flags."""
    return _start(SETUP, *args, kv_cache_gb=kv_cache_gb)
