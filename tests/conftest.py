"""Shared test set-up: hypothesis profiles (deterministic and deadline-free in CI, where the
machine is shared and slow), and paths to fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

FIXTURES = Path(__file__).parent / "fixtures"

# The real-client helpers (tests/clients/sdk.py) serve the proxy matrix too.
sys.path.insert(0, str(Path(__file__).parent / "clients"))
