"""The test layers (docs/testing.md §1): the conftest marks each test by the fixtures it uses, and
refuses at collection an in-process test that starts a process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness import PROCESS_TIMEOUT, ROOT, Processes, base_env

LAYERS = ("integration", "scaled_out", "browser")


def _layers(request: pytest.FixtureRequest) -> set[str]:
    return {name for name in LAYERS if request.node.get_closest_marker(name) is not None}


def test_an_in_process_test_is_in_no_layer(request: pytest.FixtureRequest) -> None:
    assert _layers(request) == set()


def test_a_test_that_can_start_processes_is_an_integration_test(
    request: pytest.FixtureRequest, start_server: Any, start_worker: Any, llm_server: Any, processes: Any
) -> None:
    assert _layers(request) == {"integration"}


def test_a_test_that_needs_redis_or_postgresql_is_scaled_out_and_integration(
    request: pytest.FixtureRequest, redis_url: str
) -> None:
    assert _layers(request) == {"integration", "scaled_out"}


@pytest.mark.browser
def test_a_browser_test_is_an_integration_test(request: pytest.FixtureRequest) -> None:
    assert _layers(request) == {"integration", "browser"}


def test_the_layers_are_declared_and_markers_are_strict(request: pytest.FixtureRequest) -> None:
    declared = {line.split(":", 1)[0] for line in request.config.getini("markers")}
    assert set(LAYERS) <= declared
    assert request.config.option.strict_markers or "--strict-markers" in request.config.getini("addopts")
    assert request.config.option.strict_config or "--strict-config" in request.config.getini("addopts")


#: The project's layer hooks and fixtures, for a pytest run in a folder of its own.
_CONFTEST = "from tests.conftest import layers, processes, pytest_collection_modifyitems, pytest_pycollect_makeitem\n"
_INI = """[pytest]
addopts = -p no:randomly -p no:cacheprovider --strict-markers
markers =
    integration: starts processes
    scaled_out: needs PostgreSQL or Redis
    browser: drives chromium
"""
#: Tests that start a process without being integration tests, one file each: the whole way down
#: (a helper of their module, an import in their body, a fixture, the harness's server).
_REFUSED = {
    "test_helper.py": (
        "import subprocess, sys\n\n"
        "def _python(code):\n    return subprocess.run([sys.executable, '-c', code], check=True)\n\n"
        "def test_in_process():\n    assert True\n\n"
        "def test_through_a_helper():\n    _python('pass')\n",
        "test_through_a_helper -> _python -> subprocess.run",
    ),
    "test_local_import.py": (
        "def test_forks():\n    from multiprocessing import Process\n    Process(target=print).start()\n",
        "test_forks -> multiprocessing.Process",
    ),
    "test_fixture.py": (
        "import os, pytest\n\n"
        "@pytest.fixture\ndef child():\n    os.system('true')\n\n"
        "def test_uses_it(child):\n    pass\n",
        "fixture child -> os.system",
    ),
    "test_harness.py": (
        "from tests.harness import Server\n\n"
        "def test_serves(tmp_path):\n    Server([], tmp_path)\n",
        "test_serves -> Server -> Process -> subprocess.Popen",
    ),
}
_ALLOWED = """import subprocess, sys, pytest

def test_in_process():
    assert True

def test_through_the_fixture(processes):
    assert processes.run([sys.executable, '-c', 'pass']).returncode == 0

@pytest.mark.integration
def test_marked():
    subprocess.run([sys.executable, '-c', 'pass'], check=True)
"""


def _pytest_in(folder: Path, processes: Processes, *args: str) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``args`` in ``folder``, with the project's hooks (``_CONFTEST``)."""
    (folder / "conftest.py").write_text(_CONFTEST)
    (folder / "pytest.ini").write_text(_INI)
    env = base_env(PYTHONPATH=str(ROOT))
    return processes.run(
        [sys.executable, "-m", "pytest", "-q", *args], cwd=folder, env=env, capture_output=True, text=True,
        timeout=PROCESS_TIMEOUT,
    )


def test_a_test_that_starts_a_process_without_the_integration_fixture_is_refused_at_collection(
    tmp_path: Path, processes: Processes
) -> None:
    for name, (source, _) in _REFUSED.items():
        (tmp_path / name).write_text(source)
    done = _pytest_in(tmp_path, processes, *_REFUSED)
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout + done.stderr
    assert f"Interrupted: {len(_REFUSED)} errors during collection" in done.stdout
    for name, (_, chain) in _REFUSED.items():
        assert f"ERROR {name}" in done.stdout
        assert f"starts a process ({chain}) but is no integration test" in done.stdout, done.stdout
    assert "passed" not in done.stdout


def test_a_test_that_starts_a_process_through_the_fixture_or_marked_is_collected_and_runs(
    tmp_path: Path, processes: Processes
) -> None:
    (tmp_path / "test_allowed.py").write_text(_ALLOWED)
    done = _pytest_in(tmp_path, processes, "test_allowed.py", "-m", "integration")
    assert done.returncode == pytest.ExitCode.OK, done.stdout + done.stderr
    assert "2 passed, 1 deselected" in done.stdout
