"""The layout rules of the README's "How it is built": no import cycle between the project's
modules (imports inside functions count), dependencies pointing one way between the apps, and no
module over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.harness import ROOT

PACKAGES = ("agentsite", "agents_app", "tools_app", "sessions_app", "console_app", "devtools")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")) if (ROOT / package).is_dir() else []:
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # importing a submodule runs its package's __init__, which is not a dependency on it
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_walker_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_between_the_projects_modules() -> None:
    graph = _graph()
    assert "sessions_app.services.sessions" in graph
    assert _cycles(graph) == []


def test_agents_and_tools_never_import_sessions() -> None:
    wrong = {
        (name, target)
        for name, targets in _graph().items()
        if name.startswith(("agents_app", "tools_app"))
        for target in targets
        if target.startswith("sessions_app")
    }
    assert wrong == set()



def test_no_module_over_600_lines() -> None:
    lines = {name: path.read_text().count("\n") for name, path in _modules().items()}
    assert {name: count for name, count in lines.items() if count > 600} == {}
