"""Fixtures of the in-process service tests: one loaded agent, and the tasks sent after commit.

The services run in the test's own process and database transaction. Nothing is patched: the
agent is loaded from a real agent file (its model is never called), and the run tasks that the
services send once their transaction commits go to a recording worker installed the way the
embedded server installs its own (``sessions_app.dispatch.use_embedded_worker``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfiles.loader import load_agent_files
from agents_app.registry import AgentRegistry, set_registry
from agents_app.runtime import reset_runtime_agents
from sessions_app import dispatch
from tests.factories import AGENT_SLUG, UNREACHABLE_MODEL_URL
from tests.harness import write_agent


class RecordingWorker:
    """A ``dispatch.LocalWorker`` that keeps what it is sent, runs nothing.

    Attributes:
        sent: ``(task name, args)`` in the order they were sent.
    """

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[str]]] = []

    def submit(self, name: str, args: list[str], *, background_call: bool = False) -> None:
        """Record one task."""
        self.sent.append((name, list(args)))

    def runs(self) -> list[list[str]]:
        """The ``[session_id, run_id]`` of every run task sent."""
        return [args for name, args in self.sent if name == dispatch.RUN_SESSION_TASK]


@pytest.fixture(autouse=True)
def agent(tmp_path: Path) -> Iterator[str]:
    """The agent :data:`tests.factories.AGENT_SLUG`, loaded from a file; its slug."""
    path = write_agent(tmp_path, AGENT_SLUG, UNREACHABLE_MODEL_URL)
    set_registry(AgentRegistry(load_agent_files([path]), {}))
    reset_runtime_agents()
    yield AGENT_SLUG
    set_registry(None)
    reset_runtime_agents()


@pytest.fixture
def worker() -> Iterator[RecordingWorker]:
    """The worker that receives this test's tasks."""
    recording = RecordingWorker()
    dispatch.use_embedded_worker(recording)
    yield recording
    dispatch.use_embedded_worker(None)
