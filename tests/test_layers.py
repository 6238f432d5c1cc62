"""The package's layers, checked on its import graph (every import, also those inside functions and
under TYPE_CHECKING): core < io, report < hops, commandline < commands < cli. No module imports a
higher layer,
io and report (renderings of the core's values) do not import each other,
the pure core imports no I/O stack, no import cycle anywhere in proxycheck, and no command module
imports another one (what they share is proxycheck.commandline, below them). The
checkers are fed a bad graph too, so that they are known to be able to fail."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Mapping

import proxycheck

PACKAGE = Path(proxycheck.__file__).parent
LAYERS = {"core": 0, "io": 1, "report": 1, "hops": 2, "commandline": 2, "commands": 3, "cli": 4, "__main__": 4}
IO_STACKS = {"httpx", "httpcore", "aiohttp", "mitmproxy", "rich", "asyncio", "socket", "time"}
NOT_COMMANDS = {"proxycheck.commands"}  # the package itself: every module inside it is one command

# Inside the core, each capability builds on the ones below it (docs/design.md, "Layers"); the
# capabilities of the top row are siblings and do not import one another.
CORE_LEVELS = {"errors": 0, "stats": 0, "protocol": 1, "exchange": 2, "recording": 3,
               "replay": 4, "testbed": 4, "diagnose": 4, "bench": 4, "probe": 4, "minimize": 4, "points": 5}  # fmt: skip

Graph = Mapping[str, set[str]]


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ("proxycheck", *path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module `name` imports (absolute names; `from A import B` is A.B when that is a module)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
    return found


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    return {name: imports_of(name, path, set(names)) for name, path in names.items()}


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "proxycheck":
        return None
    if len(parts) == 1:
        return 0  # the package itself: its version
    return LAYERS.get(parts[1])


def _part(module: str) -> str:
    """The part of proxycheck a module belongs to (`io`, `report`, ...)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "proxycheck" else ""


def layer_violations(graph: Graph) -> list[str]:
    found = []
    for module, imported in sorted(graph.items()):
        mine = layer_of(module)
        for other in sorted(imported):
            theirs = layer_of(other)
            if mine is not None and theirs is not None and theirs > mine:
                found.append(f"{module} imports {other} (a higher layer)")
            elif {_part(module), _part(other)} == {"io", "report"}:
                found.append(f"{module} imports {other} (io and report stand side by side)")
            if module.startswith("proxycheck.core") and other.split(".")[0] in IO_STACKS:
                found.append(f"{module} imports {other} (the core is pure)")
    return found


def core_violations(graph: Graph) -> list[str]:
    """Imports between the core's capabilities that go up, or sideways along the top row."""
    def capability(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["proxycheck", "core"] else None

    found = []
    for module, imported in sorted(graph.items()):
        mine = capability(module)
        for other in sorted(imported):
            theirs = capability(other)
            if mine is None or theirs is None or mine == theirs:
                continue
            if theirs not in CORE_LEVELS or mine not in CORE_LEVELS:
                found.append(f"{module} or {other}: a capability of the core without a level")
            elif CORE_LEVELS[theirs] >= CORE_LEVELS[mine]:
                found.append(f"{module} imports {other} (core.{theirs} is not below core.{mine})")
    return found


def cycles(graph: Graph) -> list[list[str]]:
    """The import cycles among proxycheck's modules (each found once, from its first module)."""
    inside = {m: {o for o in imported if o in graph and o != m} for m, imported in graph.items()}
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for other in sorted(inside[module]):
            if state.get(other) == 1:
                found.append(path[path.index(other) :] + [other])
            elif other not in state:
                visit(other)
        path.pop()
        state[module] = 2

    for module in sorted(inside):
        if module not in state:
            visit(module)
    return found


def command_imports(graph: Graph) -> list[str]:
    commands = {m for m in graph if m.startswith("proxycheck.commands.") and m not in NOT_COMMANDS}
    shared = {m for m in graph if m in NOT_COMMANDS or m.startswith("proxycheck.commandline")}
    return [f"{module} imports the command {other}" for module in sorted(commands | shared)
            for other in sorted(graph[module] & commands) if other != module]  # fmt: skip


def test_the_graph_is_the_whole_package() -> None:
    graph = import_graph()
    assert {"proxycheck.cli", "proxycheck.commands.check", "proxycheck.core.errors", "proxycheck.io.runstore",
            "proxycheck.report.progress", "proxycheck.hops.record"} <= set(graph)  # fmt: skip
    assert all(layer_of(m) is not None for m in graph), [m for m in graph if layer_of(m) is None]
    assert "proxycheck.io.diagnosis" in graph["proxycheck.commands.check"]  # an import inside a function


def test_no_module_imports_a_higher_layer_and_the_core_is_pure() -> None:
    assert layer_violations(import_graph()) == []


def test_the_cores_capabilities_build_on_the_ones_below() -> None:
    assert core_violations(import_graph()) == []


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_no_command_imports_another() -> None:
    assert command_imports(import_graph()) == []


def test_the_checkers_can_fail() -> None:
    bad = {
        "proxycheck.core.x": {"proxycheck.io.y", "httpx"},
        "proxycheck.io.y": {"proxycheck.report.z", "proxycheck.core.x"},
        "proxycheck.report.z": {"proxycheck.io.y"},
        "proxycheck.commands.a": {"proxycheck.commands.b", "proxycheck.commandline.common"},
        "proxycheck.commands.b": set(),
        "proxycheck.commandline.common": {"proxycheck.commands.a"},
    }
    assert layer_violations(bad) == [
        "proxycheck.commandline.common imports proxycheck.commands.a (a higher layer)",
        "proxycheck.core.x imports httpx (the core is pure)",
        "proxycheck.core.x imports proxycheck.io.y (a higher layer)",
        "proxycheck.io.y imports proxycheck.report.z (io and report stand side by side)",
        "proxycheck.report.z imports proxycheck.io.y (io and report stand side by side)",
    ]
    assert ["proxycheck.core.x", "proxycheck.io.y", "proxycheck.core.x"] in cycles(bad)
    core = {
        "proxycheck.core.exchange.machine": {"proxycheck.core.replay.plan", "proxycheck.core.protocol.sse"},
        "proxycheck.core.diagnose.verdict": {"proxycheck.core.bench.perf", "proxycheck.core.diagnose.advice"},
        "proxycheck.core.replay.plan": {"proxycheck.core.exchange.outcomes", "proxycheck.core.errors"},
    }
    assert core_violations(core) == [
        "proxycheck.core.diagnose.verdict imports proxycheck.core.bench.perf (core.bench is not below core.diagnose)",
        "proxycheck.core.exchange.machine imports proxycheck.core.replay.plan (core.replay is not below core.exchange)",
    ]
    assert ["proxycheck.io.y", "proxycheck.report.z", "proxycheck.io.y"] in cycles(bad)
    assert command_imports(bad) == ["proxycheck.commandline.common imports the command proxycheck.commands.a",
                                    "proxycheck.commands.a imports the command proxycheck.commands.b"]  # fmt: skip


def test_imports_are_found_in_every_form(tmp_path: Path) -> None:
    source = tmp_path / "mod.py"
    source.write_text("import httpx\nfrom rich.table import Table\nimport os, aiohttp.web\n"
                      "def f():\n    from proxycheck.io import runstore\n    from . import sibling\n")  # fmt: skip
    known = {"proxycheck.io.runstore", "proxycheck.core.sibling"}
    found = imports_of("proxycheck.core.mod", source, known)
    assert {"httpx", "rich.table", "aiohttp.web", "proxycheck.io.runstore", "proxycheck.core.sibling"} <= found
