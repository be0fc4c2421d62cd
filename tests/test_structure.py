"""The layout rules of docs/architecture.md §1: no import cycle between the project's
modules, dependencies pointing one way down the layers of :data:`LAYERS`, and no module over 600
lines. Imports inside functions count everywhere: an import moved into a function still runs."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.harness import ROOT

#: The project's packages from the ground floor up: a module may import its own package and the
#: packages below it, never one above (docs/architecture.md §1).
LAYERS = (
    "foundation",
    "agentfiles",
    "tools_app",
    "agents_app",
    "sessions_app",
    "hooks_app",
    "console_app",
    "agentsite",
)
#: Packages beside the layers: they import no other package of the project, and only the wiring
#: (the top layer) imports them.
APART = ("devtools",)
PACKAGES = (*LAYERS, *APART)


def _modules(root: Path = ROOT) -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")) if (root / package).is_dir() else []:
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(root).with_suffix("").parts)
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


def _graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = _modules(root)
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


def _against_the_layers(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports ``(module, imported)`` of ``graph`` that point up the layers or into or out of
    a package apart."""

    def package(module: str) -> str:
        return module.partition(".")[0]

    wrong = set()
    for name, targets in graph.items():
        for target in targets:
            here, there = package(name), package(target)
            if here == there:
                continue
            if here in APART or (there in APART and here != LAYERS[-1]):
                wrong.add((name, target))
            elif there in LAYERS and LAYERS.index(there) > LAYERS.index(here):
                wrong.add((name, target))
    return wrong


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_every_import_points_down_the_layers() -> None:
    graph = _graph()
    assert {name.partition(".")[0] for name in graph} == set(PACKAGES)
    assert _against_the_layers(graph) == set()


def test_the_layer_check_catches_an_import_up_even_inside_a_function(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "foundation/__init__.py": "",
            "foundation/errors.py": "def owner():\n    from sessions_app.models import Session\n    return Session\n",
            "foundation/env.py": "import os\n",
            "agentfiles/__init__.py": "",
            "agentfiles/schema.py": "from foundation import env\nfrom tools_app.base import Tool\n",
            "tools_app/__init__.py": "",
            "tools_app/base.py": "from agentfiles.schema import x\nfrom foundation.errors import owner\n",
            "sessions_app/__init__.py": "",
            "sessions_app/models.py": "from foundation.errors import owner\nfrom tools_app import base\n",
            "devtools/__init__.py": "import foundation.env\n",
            "console_app/__init__.py": "import devtools\n",
            "agentsite/__init__.py": "import devtools\nfrom sessions_app.models import Session\n",
        },
    )
    assert _against_the_layers(_graph(tmp_path)) == {
        ("foundation.errors", "sessions_app.models"),
        ("agentfiles.schema", "tools_app.base"),
        ("devtools", "foundation.env"),
        ("console_app", "devtools"),
    }


def test_no_module_over_600_lines() -> None:
    lines = {name: path.read_text().count("\n") for name, path in _modules().items()}
    assert {name: count for name, count in lines.items() if count > 600} == {}
