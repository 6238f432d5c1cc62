"""The real engines of a test session: `vllm` (vLLM's defaults, prefix caching on) and
`vllm_uncached` (the same with prefix caching off), session-scoped, started together once
(vllm_engine.py) and stopped by their pids when the session ends, whether its tests passed or failed.

Each engine holds about 5 GB and takes about 40 s to start. The tests that use them all live in
ONE file, test_vllm.py, marked `alone`: `make test` runs them after the parallel tests, in one
process with nothing beside them, so the engines start once and the timings they compare (a long
prefill against a hop's read timeout, bench runs of two configurations) are not the other tests'
load. Where the engine is not built, its tests skip, naming `make vllm`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vllm_engine import NO_PREFIX_CACHING, missing, start_vllms

from proxycheck.io.procs import Managed


@pytest.fixture(scope="session")
def vllm_pair() -> Iterator[tuple[Managed, Managed]]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    engines = start_vllms((), (NO_PREFIX_CACHING,))
    try:
        yield engines[0], engines[1]
    finally:
        for engine in engines:
            engine.stop(grace=15)


@pytest.fixture(scope="session")
def vllm(vllm_pair: tuple[Managed, Managed]) -> Managed:
    """vLLM serving SmolLM2-135M-Instruct as `vllm_engine.SERVED_MODEL` with its defaults, ready."""
    return vllm_pair[0]


@pytest.fixture(scope="session")
def vllm_uncached(vllm_pair: tuple[Managed, Managed]) -> Managed:
    """The same engine with prefix caching off: every request pays its whole prefill."""
    return vllm_pair[1]
