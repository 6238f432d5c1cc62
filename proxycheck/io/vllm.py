"""vLLM as a process proxycheck starts: the real engine of `demo --engine vllm`, the real-engine
tests (tests/vllm/) and the real-engine benchmarks.

`VllmSetup` says which Python has vLLM (the CPU build `make vllm` puts in .venv-vllm) and which
model it serves (SmolLM2-135M-Instruct in .models/smollm2-135m, also from `make vllm`);
`VllmSetup.missing()` says, in one line naming the make target, why it cannot start here.
`start_vllm` (`launch_vllm`, then `wait_ready`) runs `python -m vllm.entrypoints.openai.api_server`
(the `vllm` script of this build fails with PackageNotFoundError) on a loopback port as a `Managed`
process: its own process group (the engine core is a child process), stopped by its pid, started
with the settings that make it fast on this CPU (`read_cpu`, `core.testbed.engine_speed.settings_for`:
float32 without native bfloat16 math, its compute threads bound explicitly). vLLM binds its port
before it has loaded the model, so an accepting port is not readiness: it is ready once GET /health
answers 200. `measure_speed` then measures it (first tokens of a short and a long prompt, decode
speed), which the demo, the tests and the benchmarks derive their timeouts and prompt sizes from.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from proxycheck.core.errors import ProcessError
from proxycheck.core.testbed.engine_speed import CpuFacts, EngineSpeed, cpu_facts, settings_for
from proxycheck.io.procs import Managed, free_port

SERVED_MODEL = "smollm2-135m"
MAX_MODEL_LEN = 8192  # the model's own window
# The start measured on 2 shared cores with --enforce-eager (the first start after `make vllm`
# is not slower: nothing is compiled): 29-40 s on an AVX-512 machine, 51-67 s on an AVX2 EPYC. Without
# --enforce-eager vLLM compiles its graph at every start (ready in 84 s on the former) for about 17%
# more tokens/s (69 against 57 on one stream).
MEASURED_START_SECONDS = 60
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


def read_cpu() -> CpuFacts:
    """This machine's processor, as far as this process may use it."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return cpu_facts(cpuinfo, tuple(sorted(os.sched_getaffinity(0))))


def start_vllm(setup: VllmSetup, *args: str, timeout: float = START_TIMEOUT, kv_cache_gb: int = 2,
               cores: int | None = None) -> Managed:  # fmt: skip
    """vLLM serving `setup.model` as SERVED_MODEL on a loopback port, ready (GET /health is 200);
    `args` are more server flags. `kv_cache_gb`: its KV cache (VLLM_CPU_KVCACHE_SPACE)."""
    return wait_ready(launch_vllm(setup, *args, kv_cache_gb=kv_cache_gb, cores=cores), timeout)


def launch_vllm(setup: VllmSetup, *args: str, kv_cache_gb: int = 2, cores: int | None = None) -> Managed:
    """vLLM started, not yet ready (`wait_ready`): engines launched together load side by side.
    `cores`: how many CPUs its compute threads take (all when None; fewer leave the rest to other
    work). A `--dtype` among `args` overrides the one chosen for this CPU."""
    settings = settings_for(read_cpu(), cores)
    port = free_port()
    dtype = () if any(a.startswith("--dtype") for a in args) else ("--dtype", settings.dtype)
    argv = [
        str(setup.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(setup.model),
        "--served-model-name", SERVED_MODEL, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager", *dtype, *args,
    ]  # fmt: skip
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gb),
        "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, settings.bind)),
        "OMP_NUM_THREADS": str(len(settings.bind)),  # else vLLM reduces torch's threads to one
        "HF_HUB_OFFLINE": "1",  # the model is a local folder: nothing to fetch
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
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


# The speed measurement: a short prompt (SHORT_WORDS pasted) answered with DECODE_TOKENS tokens,
# then a prompt pasting LONG_WORDS words ("line0 line1 ...", as the tests paste: about 900 tokens)
# answered with one.
DECODE_TOKENS = 24
SHORT_WORDS = 4
LONG_WORDS = 250
MEASURE_TIMEOUT = 300.0  # one request's bound: a 900-token prefill took 6.6 s on one slow core


def measure_speed(url: str, model: str = SERVED_MODEL, *, timeout: float = MEASURE_TIMEOUT) -> EngineSpeed:
    """The speed of the engine at `url` now, on one stream: a warm-up, then a short prompt's first
    token and decode pace, then a long prompt's first token. Each prompt starts with a word of its
    own, so a prefix cache holds none of it. A request that fails is a ProcessError saying so."""
    _stream(url, model, _prompt(SHORT_WORDS), 2, timeout)  # the first request after the start is slower
    short = _stream(url, model, _prompt(SHORT_WORDS), DECODE_TOKENS, timeout)
    long = _stream(url, model, _prompt(LONG_WORDS), 1, timeout)
    gaps = short.times[-1] - short.times[0]
    per_token = gaps / (len(short.times) - 1) if len(short.times) > 1 else short.times[0]
    return EngineSpeed(first_token=short.times[0], per_token=per_token, short_tokens=short.prompt_tokens,
                       long_first_token=long.times[0], long_tokens=long.prompt_tokens,
                       long_words=LONG_WORDS, short_words=SHORT_WORDS)  # fmt: skip


@dataclass(frozen=True)
class _Streamed:
    times: list[float]  # seconds from the send to each chunk with text
    prompt_tokens: int


def _prompt(words: int) -> str:
    return f"{uuid.uuid4().hex} Here is the file:\n" + " ".join(f"line{i}" for i in range(words))


def _stream(url: str, model: str, prompt: str, max_tokens: int, timeout: float) -> _Streamed:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True, "temperature": 0,
            "ignore_eos": True, "stream_options": {"include_usage": True}}  # fmt: skip
    request = urllib.request.Request(f"{url}/v1/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json"})  # fmt: skip
    times: list[float] = []
    tokens = 0
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            for line in answer:
                if not line.startswith(b"data: {"):
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("usage"):
                    tokens = int(chunk["usage"].get("prompt_tokens") or 0)
                if any(choice.get("text") for choice in chunk.get("choices") or ()):
                    times.append(time.monotonic() - t0)
    except (OSError, ValueError) as e:  # URLError, a timeout, a reset, a broken chunk
        raise ProcessError(f"measuring the engine at {url}: {e}") from e
    if not times or not tokens:
        raise ProcessError(f"measuring the engine at {url}: its stream had no text or no usage")
    return _Streamed(times, tokens)
