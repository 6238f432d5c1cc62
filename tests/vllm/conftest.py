"""The real engines of a test session: `vllm` (vLLM's defaults, prefix caching on) and
`vllm_uncached` (the same with prefix caching off), session-scoped, started together once
(vllm_engine.py), each measured once ready (`Engine.speed`), and stopped by their pids when the
session ends, whether its tests passed or failed.

Each engine holds about 5 GB and takes about a minute to start. The tests that use them live in one
file, test_vllm.py, which `--dist loadfile` keeps on one worker so that the engines start once;
every prompt size and wait in it is derived from the measured speed, so it fits a machine many
times slower or faster than another. The bench runs compared with each other are in
test_vllm_ab.py, marked `alone`. Where the engine is not built, its tests skip, naming `make vllm`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vllm_engine import NO_PREFIX_CACHING, Engine, missing, start_vllms


@pytest.fixture(scope="session")
def vllm_pair() -> Iterator[tuple[Engine, Engine]]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    engines = start_vllms((), (NO_PREFIX_CACHING,))
    try:
        yield engines[0], engines[1]
    finally:
        for engine in engines:
            engine.proc.stop(grace=15)


@pytest.fixture(scope="session")
def vllm(vllm_pair: tuple[Engine, Engine]) -> Engine:
    """vLLM serving SmolLM2-135M-Instruct as `vllm_engine.SERVED_MODEL` with its defaults, ready."""
    return vllm_pair[0]


@pytest.fixture(scope="session")
def vllm_uncached(vllm_pair: tuple[Engine, Engine]) -> Engine:
    """The same engine with prefix caching off: every request pays its whole prefill."""
    return vllm_pair[1]
