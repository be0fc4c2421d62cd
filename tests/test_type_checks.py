"""The type check of docs/getting-started.md §1: scripts/test runs mypy after ruff over every
package pyproject.toml installs, and nothing silences it wholesale (no ignored module, no
ignore without its error code and its reason)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.harness import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: an ignore names its codes and says why after them: ``# type: ignore[code]  # reason``
REASONED_IGNORE = re.compile(r"# type: ignore\[[a-z-]+(, [a-z-]+)*\]  # \S")


def _product_files() -> list[Path]:
    packages = [pattern.removesuffix("*") for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]]
    return [
        path
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    ]


def test_the_mypy_configuration_ignores_no_module_wholesale() -> None:
    config = PYPROJECT["tool"]["mypy"]
    assert "mypy_django_plugin.main" in config["plugins"]
    assert "mypy_drf_plugin.main" in config["plugins"]
    for key in ("ignore_errors", "ignore_missing_imports", "disable_error_code", "follow_imports"):
        assert key not in config, key
    for override in config.get("overrides", []):
        # only third-party modules without types, each named
        assert set(override) == {"module", "ignore_missing_imports"}, override
        assert all(not name.startswith(("agent", "tools_app", "sessions_app", "console_app", "devtools"))
                   for name in override["module"]), override


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    unreasoned = []
    for path in _product_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"#\s*mypy:", line) or (
                "type: ignore" in line and not REASONED_IGNORE.search(line)
            ):
                unreasoned.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert unreasoned == []


def test_scripts_test_runs_mypy_after_ruff() -> None:
    script = (ROOT / "scripts" / "test").read_text()
    ruff, mypy, pytest = (script.index(f".venv/bin/{tool}") for tool in ("ruff", "mypy", "pytest"))
    assert ruff < mypy < pytest
