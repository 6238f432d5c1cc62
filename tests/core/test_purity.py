"""The pure core never imports the I/O stacks (docs/design.md, "Layers"): checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import proxycheck.core

CORE = Path(proxycheck.core.__file__).parent
FORBIDDEN = {"httpx", "httpcore", "aiohttp", "mitmproxy", "rich", "asyncio", "socket", "time"}
OUTER = ("proxycheck.io", "proxycheck.report", "proxycheck.cli")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_sources_exist() -> None:
    assert len(list(CORE.rglob("*.py"))) >= 8


def test_core_imports_no_io_stack_and_no_outer_layer() -> None:
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top in FORBIDDEN or name.startswith(OUTER):
                offenders.append(f"{path.name}: {name}")
    assert offenders == []


def test_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    # The check above must be able to fail: it finds imports in every form.
    bad = tmp_path / "bad.py"
    bad.write_text("import httpx\nfrom rich.table import Table\nimport os, aiohttp.web\n")
    assert {"httpx", "rich.table", "aiohttp.web"} <= imported_modules(bad)
