"""Which tests start processes, read from their code at collection (docs/testing.md §1).

A test of the in-process layer must not start a process. The conftest asks :func:`starts_a_process`
about every collected test and refuses, as a collection error, one that does without being an
integration test. The check reads the code of the test function, of the fixtures it uses and of the
helpers they call that are defined in the test suite (``tests/`` or the test's own module), and
looks for a process-starting callable of the standard library: ``subprocess``, ``os.fork`` and
friends, ``multiprocessing``, ``asyncio``'s subprocesses, ``pty``. What the product code under test
starts (a bash tool, a Lua child, an MCP server) is the behaviour being tested, not the test's own
process, and is not followed.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import functools
import importlib
import inspect
import multiprocessing
import os
import pty
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The test suite's folder: helpers defined under it are read too.
TESTS = Path(__file__).resolve().parent


def _starters() -> dict[int, str]:
    """The standard library's process-starting callables, by ``id``, with the name a message uses."""
    names = {
        subprocess: ("Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"),
        os: ("system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp", "spawnl", "spawnle",
             "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe"),
        multiprocessing: ("Process", "Pool", "get_context"),
        concurrent.futures: ("ProcessPoolExecutor",),
        asyncio: ("create_subprocess_exec", "create_subprocess_shell"),
        pty: ("fork", "spawn"),
    }
    return {
        id(getattr(module, name)): f"{module.__name__}.{name}"
        for module, attributes in names.items()
        for name in attributes
        if hasattr(module, name)
    }


STARTERS = _starters()


@functools.cache
def _in_suite(module_name: str) -> bool:
    """Whether the imported module ``module_name`` is a file under :data:`TESTS`."""
    path = getattr(sys.modules.get(module_name), "__file__", None)
    return path is not None and Path(path).resolve().is_relative_to(TESTS)


def is_suite_code(obj: Any, home: str) -> bool:
    """Whether ``obj`` is a function or class written in the test suite or in the module ``home``."""
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return False
    module_name = getattr(obj, "__module__", None) or ""
    return module_name == home or _in_suite(module_name)


def _references(tree: ast.AST) -> Iterator[ast.expr]:
    """Every name or dotted attribute the code reads, outside annotations (a type is no call)."""
    skip = {"annotation", "returns"}

    def walk(node: ast.AST) -> Iterator[ast.expr]:
        if isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            yield node
        for field, value in ast.iter_fields(node):
            if field in skip:
                continue
            children = value if isinstance(value, list) else [value]
            for child in children:
                if isinstance(child, ast.AST):
                    yield from walk(child)

    yield from walk(tree)


def _resolve(node: ast.expr, namespace: dict[str, Any]) -> Any:
    """The object a name or dotted attribute stands for in ``namespace``; None when it cannot say."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in namespace:
        return None
    value = namespace[node.id]
    for part in reversed(parts):
        try:
            value = inspect.getattr_static(value, part)
        except AttributeError:
            return None
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
    return value


def _imported(tree: ast.AST, home: str) -> dict[str, Any]:
    """The names the imports written inside ``tree`` bind (a test may import ``subprocess`` in its
    body); an import that fails here is left out."""
    names: dict[str, Any] = {}
    for node in ast.walk(tree):
        try:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.partition(".")[0]
                    names[alias.asname or top] = importlib.import_module(alias.name if alias.asname else top)
            elif isinstance(node, ast.ImportFrom):
                package = home.rpartition(".")[0] if node.level else None
                module = importlib.import_module("." * node.level + (node.module or ""), package)
                for alias in node.names:
                    names[alias.asname or alias.name] = getattr(module, alias.name)
        except (ImportError, AttributeError, TypeError, ValueError):
            continue
    return names


def _source(obj: Any) -> ast.AST | None:
    """The syntax tree of a function or class; None when its source is not at hand."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except (OSError, TypeError, SyntaxError):
        return None


#: What :func:`starts_a_process` found, by function or class: the suite's helpers are read once.
_FOUND: dict[Any, str | None] = {}


def starts_a_process(obj: Callable[..., Any]) -> str | None:
    """How the test function, fixture or helper ``obj`` starts a process, or None if it does not.

    Args:
        obj: a function or class of the test suite.
    Returns:
        the chain that leads to the process start, e.g. ``"agents -> subprocess.run"``; None when
        no call reaches one. Calls through objects the code cannot name statically (a fixture's
        value, ``self``) are not followed: the fixtures are checked on their own.
    """
    if obj in _FOUND:
        return _FOUND[obj]
    # a helper that reaches itself again adds nothing on the way round
    _FOUND[obj] = None
    tree = _source(obj)
    if tree is None:
        return None
    home = getattr(obj, "__module__", "") or ""
    module = sys.modules.get(home)
    namespace = dict(vars(module)) if module is not None else {}
    namespace.update(getattr(obj, "__globals__", {}))
    namespace.update(_imported(tree, home))
    found: str | None = None
    for node in _references(tree):
        target = _resolve(node, namespace)
        if target is None:
            continue
        if id(target) in STARTERS:
            found = STARTERS[id(target)]
        elif target is not obj and is_suite_code(target, home):
            inner = starts_a_process(target)
            if inner is not None:
                found = f"{target.__qualname__} -> {inner}"
        if found is not None:
            break
    _FOUND[obj] = found
    return found
