"""vLLM as a process proxycheck starts: the real engine of `demo --engine vllm`, the real-engine
tests (tests/vllm/) and the real-engine benchmarks.

`VllmSetup` says which Python has vLLM (the CPU build `make vllm` puts in .venv-vllm) and which
model it serves (SmolLM2-135M-Instruct in .models/smollm2-135m, also from `make vllm`);
`VllmSetup.missing()` says, in one line naming the make target, why it cannot start here.
`start_vllm` (`launch_vllm`, then `wait_ready`) runs `python -m vllm.entrypoints.openai.api_server`
(the `vllm` script of this build fails with PackageNotFoundError) on a loopback port as a `Managed` process: its own process group
(the engine core is a child process), stopped by its pid. vLLM binds its port before it has loaded
the model, so an accepting port is not readiness: it is ready once GET /health answers 200.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from proxycheck.core.errors import ProcessError
from proxycheck.io.procs import Managed, free_port

SERVED_MODEL = "smollm2-135m"
MAX_MODEL_LEN = 8192  # the model's own window
# The start measured on 2 shared cores with --enforce-eager (the first start after `make vllm`
# is not slower: nothing is compiled). Without --enforce-eager vLLM compiles its graph at every
# start (ready in 84 s here) for about 17% more tokens/s (69 against 57 on one stream).
MEASURED_START_SECONDS = 40
# The bound is several times the measured start: a start competes with whatever else runs.
START_TIMEOUT = 240.0
STOP_GRACE = 15.0


@dataclass(frozen=True)
class VllmSetup:
    """Where vLLM and its model are; by default, where `make vllm` builds them under `root`."""

    python: Path
    model: Path
    built_by: str = "make vllm"

    @classmethod
    def of_project(cls, root: Path) -> VllmSetup:
        return cls(python=root / ".venv-vllm" / "bin" / "python", model=root / ".models" / "smollm2-135m")

    def missing(self) -> str | None:
        """Why vLLM cannot start with this setup (one line naming `built_by`), or None."""
        if not self.python.exists():
            return f"vLLM is not installed ({self.python} missing): `{self.built_by}` builds it"
        if not (self.model / "config.json").exists():
            return f"the model is not built ({self.model}/config.json missing): `{self.built_by}` builds it"
        return None


def start_vllm(setup: VllmSetup, *args: str, timeout: float = START_TIMEOUT, kv_cache_gb: int = 2) -> Managed:
    """vLLM serving `setup.model` as SERVED_MODEL on a loopback port, ready (GET /health is 200);
    `args` are more server flags. `kv_cache_gb`: its KV cache (VLLM_CPU_KVCACHE_SPACE)."""
    return wait_ready(launch_vllm(setup, *args, kv_cache_gb=kv_cache_gb), timeout)


def launch_vllm(setup: VllmSetup, *args: str, kv_cache_gb: int = 2, reserved_cpus: int = 0) -> Managed:
    """vLLM started, not yet ready (`wait_ready`): engines launched together load side by side.
    `reserved_cpus`: cores its compute threads leave to other work (VLLM_CPU_NUM_OF_RESERVED_CPU)."""
    port = free_port()
    argv = [
        str(setup.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(setup.model),
        "--served-model-name", SERVED_MODEL, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager", *args,
    ]  # fmt: skip
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb),
        "HF_HUB_OFFLINE": "1",  # the model is a local folder: nothing to fetch
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    if reserved_cpus:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(reserved_cpus)
    return Managed(argv, "127.0.0.1", port, name="vllm", env=env)


def wait_ready(proc: Managed, timeout: float = START_TIMEOUT) -> Managed:
    """`proc` once ready; stopped (by its pid) when it exits or is not ready within `timeout`."""
    try:
        _wait_healthy(proc, timeout)
    except BaseException:
        proc.stop(grace=STOP_GRACE)
        raise
    return proc


def _wait_healthy(proc: Managed, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ProcessError(f"vllm exited with status {proc.proc.returncode} before it was ready:\n{proc.log_tail()}")
        try:
            with urllib.request.urlopen(proc.url + "/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise ProcessError(f"vllm was not ready within {timeout:.0f} s:\n{proc.log_tail()}")
