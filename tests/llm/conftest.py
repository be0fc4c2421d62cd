"""Fixtures for the LLM tests: real mock-llm servers, and fast retry backoff."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from agents_app import llm
from devtools.mockllm import MockLlmServer


@pytest.fixture
def mock_llm() -> Iterator[Callable[[dict[str, Any]], MockLlmServer]]:
    """A factory: ``mock_llm(script)`` starts a MockLlmServer on a free port; all stop at teardown."""
    servers: list[MockLlmServer] = []

    def start(script: dict[str, Any]) -> MockLlmServer:
        server = MockLlmServer(script).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep retry backoff tiny so that the retry tests take milliseconds, not seconds."""
    monkeypatch.setattr(llm, "RETRY_BASE_DELAY", 0.01)
    monkeypatch.setattr(llm, "RETRY_MAX_DELAY", 0.05)
