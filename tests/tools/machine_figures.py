"""The figures of this machine that the tests depend on, printed by `make test` before the tests so
that a red run on a strange machine explains itself: its CPUs and their features, memory, load, and
the real engine's speed measured here (vLLM as tests/vllm/ starts it, when `make vllm` built it).

Never fails the run: what cannot be measured is said, and the tests then say it again.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "vllm"))

from proxycheck.core.errors import ProcessError  # noqa: E402
from proxycheck.core.testbed.engine_speed import settings_for  # noqa: E402
from proxycheck.io.vllm import launch_vllm, measure_speed, read_cpu, wait_ready  # noqa: E402


def main() -> int:
    cpu = read_cpu()
    print(f"machine: {cpu.describe()}")
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    print(f"machine: {pages * size / 2**30:.1f} GiB of memory, load average {os.getloadavg()[0]:.2f}, "
          f"Python {sys.version.split()[0]}")  # fmt: skip
    try:
        from vllm_engine import ENGINE_CORES, SETUP, missing
    except ImportError as e:
        print(f"real engine: not measured ({e})")
        return 0
    reason = missing()
    if reason:
        print(f"real engine: not measured: {reason}")
        return 0
    print(f"real engine: vLLM with {settings_for(cpu, ENGINE_CORES).describe()} (as tests/vllm/ starts it)")
    t0 = time.monotonic()
    proc = launch_vllm(SETUP, cores=ENGINE_CORES)
    try:
        wait_ready(proc)
        ready = time.monotonic() - t0
        speed = measure_speed(proc.url)
    except ProcessError as e:
        print(f"real engine: not measured: {str(e).splitlines()[0]}")
        return 0
    finally:
        proc.stop(grace=15)
    print(f"real engine: ready in {ready:.0f} s; {speed.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
