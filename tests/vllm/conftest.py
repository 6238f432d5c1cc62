"""The one real engine of a test session: `vllm`, a session-scoped fixture that starts vLLM once
(vllm_engine.py) and stops it by its pid when the session ends, whether its tests passed or failed.

The engine holds about 5 GB and takes about 40 s to start, so only one may run: the tests that
use it all live in ONE file, test_vllm.py, which `-n 3 --dist loadfile` keeps on one worker (the
only worker that then starts it). A test in another file of this folder would start a second engine
on whichever worker ran it. Where the engine is not built, its tests skip, naming `make vllm`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from vllm_engine import missing, start_vllm

from proxycheck.io.procs import Managed


@pytest.fixture(scope="session")
def vllm() -> Iterator[Managed]:
    """vLLM serving SmolLM2-135M-Instruct as `vllm_engine.SERVED_MODEL`, ready, shared by the session."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    engine = start_vllm()
    try:
        yield engine
    finally:
        engine.stop(grace=15)
