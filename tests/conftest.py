"""Shared test set-up: hypothesis profiles (deterministic and deadline-free in CI, where the
machine is shared and slow), paths to fixtures, and the process factories: `engines` and
`mitmdumps` (one test's) and `module_engines` and `module_mitmdumps` (one module's), whose
processes are stopped by their pid when the fixture ends (tests/processes.py). The real engine's
tests are collected first (`pytest_collection_modifyitems`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from processes import EngineFactory, MitmdumpFactory, stopped_at_the_end

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

FIXTURES = Path(__file__).parent / "fixtures"

# The real-client helpers (tests/clients/sdk.py) serve the proxy matrix too.
sys.path.insert(0, str(Path(__file__).parent / "clients"))


@pytest.fixture
def engines() -> Iterator[EngineFactory]:
    """`engines(*args)`: a reference engine for this test."""
    yield from stopped_at_the_end(EngineFactory())


@pytest.fixture(scope="module")
def module_engines() -> Iterator[EngineFactory]:
    """`module_engines(*args)`: a reference engine the module's tests share."""
    yield from stopped_at_the_end(EngineFactory())


@pytest.fixture
def mitmdumps() -> Iterator[MitmdumpFactory]:
    """`mitmdumps(*args)`, `.faults(upstream, ...)`, `.recorder(upstream, out)`: hops for this test."""
    yield from stopped_at_the_end(MitmdumpFactory())


@pytest.fixture(scope="module")
def module_mitmdumps() -> Iterator[MitmdumpFactory]:
    """The same hops, shared by the module's tests."""
    yield from stopped_at_the_end(MitmdumpFactory())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real engine's tests first: their file is the longest (several minutes on a slow CPU) and
    `--dist loadfile` hands files to workers in this order, so it starts at once instead of last."""
    items.sort(key=lambda item: not item.nodeid.startswith("tests/vllm/"))  # stable: the rest keep their order
