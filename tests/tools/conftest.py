"""Shared helpers for the tool tests: the test scripts, a call context, a stand-in LoadedAgent."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentfiles.schema import AgentSpec
from tools_app.base import ToolContext

SCRIPTS = Path(__file__).parent / "scripts"


def script(name: str) -> Path:
    """Path of a test script under tests/tools/scripts."""
    return SCRIPTS / name


def copy_scripts(target: Path, *names: str) -> Path:
    """Copy some test scripts (mode kept) into ``target`` and return it."""
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy2(SCRIPTS / name, target / name)
    return target


def make_ctx(timeout: float | None = 10.0, **overrides) -> ToolContext:
    values = dict(
        session_id="sess-1",
        conversation_id="conv-1",
        turn_id="turn-1",
        agent_slug="tester",
        tool_call_id="call_1",
        timeout=timeout,
    )
    values.update(overrides)
    return ToolContext(**values)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pid: int, seconds: float = 3.0) -> bool:
    """Poll until ``pid`` is gone; init may take a moment to reap an orphan."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if not process_alive(pid):
            return True
        time.sleep(0.02)
    return not process_alive(pid)


def read_pid(pidfile: Path) -> int:
    """The pid a test script wrote to ``pidfile``, waiting a moment for it to appear."""
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text().strip():
            return int(pidfile.read_text())
        time.sleep(0.02)
    raise AssertionError("the script did not write its pid file")


@dataclass
class FakeLoadedAgent:
    """Duck-typed stand-in for ``agentfiles.loader.LoadedAgent`` (only what toolset uses)."""

    spec: AgentSpec
    contents: dict
    path: Path | None
    base_dir: Path
    helper_slugs: list[str] = field(default_factory=list)

    def resolve(self, relative: str) -> Path:
        candidate = Path(relative)
        return candidate if candidate.is_absolute() else self.base_dir / candidate


def make_agent(base_dir: Path, **fields) -> FakeLoadedAgent:
    contents = {
        "slug": "tester",
        "apiKeyId": "main",
        "flavor": "OpenAIv1",
        "modelUrl": "http://localhost:1",
        "modelName": "m",
        "announce": "a test agent",
        "systemPrompt": ["be brief"],
        **fields,
    }
    return FakeLoadedAgent(
        spec=AgentSpec.model_validate(contents),
        contents=contents,
        path=base_dir / "agent.json",
        base_dir=base_dir,
    )


@pytest.fixture
def ctx() -> ToolContext:
    return make_ctx()
