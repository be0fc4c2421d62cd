"""Fixtures shared by the integration tests: the scripted LLM, servers, workers, databases."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from devtools.mockllm import MockLlmServer
from tests.harness import POSTGRES_URL, REDIS_URL, Server, Worker


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


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """A factory: ``start_server(agent_files, **kwargs)`` runs ``agents serve``; stopped at teardown."""
    servers: list[Server] = []

    def start(agent_files: list[Path], **kwargs: Any) -> Server:
        server = Server(agent_files, tmp_path, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """A factory: ``start_worker(agent_files, db=..., env=...)`` runs ``agents worker``."""
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
    """A Redis database emptied before and after the test. Fails if Redis is down."""
    url = REDIS_URL
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()
