"""What every command shares: exit statuses and how warnings are printed."""

from __future__ import annotations

import sys
from typing import Sequence

EXIT_OK, EXIT_FAULT, EXIT_BAD_INPUT = 0, 1, 2
MAX_WARNINGS = 10


def print_warnings(warnings: Sequence[str]) -> None:
    """Warnings on stderr, one line each, the first few only."""
    for w in warnings[:MAX_WARNINGS]:
        print(f"proxycheck: warning: {w}", file=sys.stderr)
    if len(warnings) > MAX_WARNINGS:
        print(f"proxycheck: warning: ... and {len(warnings) - MAX_WARNINGS} more", file=sys.stderr)
