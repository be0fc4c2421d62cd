"""Fixtures shared by the integration tests: the scripted LLM, servers, workers, databases, and the
hooks that put each test in its layer (docs/testing.md §1)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from devtools.mockllm import MockLlmServer
from tests.harness import POSTGRES_URL, REDIS_URL, Processes, Server, Worker
from tests.layers import is_suite_code, starts_a_process

#: Fixtures that start real processes or servers (``agents serve``, ``agents worker``, the scripted
#: model, any other process): a test that uses one, even through another fixture, is marked
#: ``integration``.
INTEGRATION_FIXTURES = frozenset({"llm_server", "processes", "start_server", "start_worker"})
#: Fixtures that need the machine's PostgreSQL or Redis: their tests are marked ``scaled_out``.
SCALED_OUT_FIXTURES = frozenset({"postgres_url", "redis_url"})


def layers(item: pytest.Item) -> set[str]:
    """The layers of a test: ``browser`` for the tests of ``test_*_browser.py`` or marked so,
    ``scaled_out`` for a user of :data:`SCALED_OUT_FIXTURES` or marked so, and ``integration`` for
    those and for a user of :data:`INTEGRATION_FIXTURES` or marked so."""
    fixtures = set(getattr(item, "fixturenames", ()))
    found = {name for name in ("integration", "scaled_out", "browser") if item.get_closest_marker(name)}
    # the pages' tests drive chromium, whatever fixtures they use
    if item.path.name.endswith("_browser.py"):
        found.add("browser")
    if fixtures & SCALED_OUT_FIXTURES:
        found.add("scaled_out")
    if fixtures & INTEGRATION_FIXTURES or found & {"scaled_out", "browser"}:
        found.add("integration")
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by :func:`layers` (docs/testing.md §1), so that ``-m "not integration"``
    leaves the in-process layer only. A test may also mark itself."""
    for item in items:
        for name in sorted(layers(item)):
            if item.get_closest_marker(name) is None:
                item.add_marker(getattr(pytest.mark, name))


def _process_start(item: pytest.Function) -> str | None:
    """How the test ``item`` starts a process by its own code or its fixtures' (tests/layers.py)."""
    found = starts_a_process(item.obj)
    if found is not None:
        return f"{item.originalname} -> {found}"
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        for definition in definitions:
            if not is_suite_code(definition.func, item.module.__name__):
                continue
            found = starts_a_process(definition.func)
            if found is not None:
                return f"fixture {name} -> {found}"
    return None


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> Any:
    """Refuse at collection an in-process test that starts a process (docs/testing.md §1): it has
    to use the ``processes`` fixture (or another of :data:`INTEGRATION_FIXTURES`), which makes it an
    integration test, so that the in-process layer starts none."""
    made = yield
    for item in made if isinstance(made, list) else [made]:
        if not isinstance(item, pytest.Function) or "integration" in layers(item):
            continue
        found = _process_start(item)
        if found is not None:
            raise collector.CollectError(
                f"{item.nodeid} starts a process ({found}) but is no integration test:"
                " start it through the processes fixture (tests/conftest.py)"
            )
    return made


@pytest.fixture
def processes() -> Iterator[Processes]:
    """Starts processes for a test (``processes.run(argv, ...)``, ``processes.popen(argv, ...)``),
    which makes it an integration test; what is still running at teardown is killed."""
    started = Processes()
    yield started
    started.stop()


@pytest.fixture
def llm_server() -> Iterator[Callable[[dict[str, Any]], MockLlmServer]]:
    """A factory: ``llm_server(script)`` starts a scripted LLM on a free port; stopped at teardown."""
    servers: list[MockLlmServer] = []

    def start(script: dict[str, Any]) -> MockLlmServer:
        server = MockLlmServer(script).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _services_first(request: pytest.FixtureRequest) -> None:
    """Set up the test's PostgreSQL and Redis fixtures before its processes, so that they are torn
    down after them: a Redis database released while a server still renews its fleet membership
    there would reach the next test that takes it (pytest-xdist runs them back to back)."""
    for name in sorted(SCALED_OUT_FIXTURES & set(request.fixturenames)):
        request.getfixturevalue(name)


@pytest.fixture
def start_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """A factory: ``start_server(agent_files, **kwargs)`` runs ``agents serve``; stopped at teardown."""
    _services_first(request)
    servers: list[Server] = []

    def start(agent_files: list[Path], **kwargs: Any) -> Server:
        server = Server(agent_files, tmp_path, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def start_worker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """A factory: ``start_worker(agent_files, db=..., env=...)`` runs ``agents worker``."""
    _services_first(request)
    workers: list[Worker] = []

    def start(agent_files: list[Path], **kwargs: Any) -> Worker:
        worker = Worker(agent_files, tmp_path, **kwargs)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards. Fails if PostgreSQL is down."""
    name = f"agents_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis database of its own for one test, emptied before and after. Fails if Redis is down.

    Test runs share the machine's Redis (other checkouts, parallel workers): each test takes one of
    the databases 1-15 with a lock key in database 0 (expiring, in case a run is killed), so that
    no run empties another's broker.
    """
    base, _, _ = REDIS_URL.rpartition("/")
    locks = redis.Redis.from_url(f"{base}/0")
    owner = uuid.uuid4().hex
    deadline = time.monotonic() + 120
    while True:
        number = next((n for n in range(1, 16) if locks.set(f"agents-tests:db:{n}", owner, nx=True, ex=900)), None)
        if number is not None:
            break
        assert time.monotonic() < deadline, "no free Redis database for the test"
        time.sleep(0.5)
    url = f"{base}/{number}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()
    if locks.get(f"agents-tests:db:{number}") == owner.encode():
        locks.delete(f"agents-tests:db:{number}")
    locks.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, hand the answers it checked to the controller, which reports them."""
    from tests import contract

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["contract_checked"] = dict(contract.CHECKED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Add up, in the controller, what each pytest-xdist worker checked (see above)."""
    from tests import contract

    contract.CHECKED.update(getattr(node, "workeroutput", {}).get("contract_checked", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say how many answers the run checked against /openapi.json (tests/contract.py)."""
    from tests import contract

    if contract.CHECKED:
        terminalreporter.write_line(
            f"contract: {sum(contract.CHECKED.values())} answers checked against /openapi.json"
            f" ({len(contract.CHECKED)} operation and status pairs)"
        )
