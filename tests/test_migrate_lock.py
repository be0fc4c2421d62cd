"""A worker and a server started together on a fresh database both come up (issue 11, acceptance 8).

Both migrate before they start; the migration lock (``agentsite.migrate``) makes one wait for
the other instead of both creating the same tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, Worker, wait_until, write_agent


@pytest.mark.parametrize("round_", range(2))
def test_a_worker_and_a_server_started_together_on_a_fresh_database_both_come_up(
    round_: int,
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "up"}}]})
    agent = write_agent(tmp_path, "together", llm.url)
    env = {"REDIS_URL": redis_url}
    # the worker is not waited for: the server starts at the same moment
    worker = start_worker([agent], db=postgres_url, env=env)
    server = start_server([agent], db=postgres_url, env=env)
    wait_until(lambda: '"kind": "worker.started"' in worker.process.output(), timeout=60)
    answer = server.client.post(
        "/v1/sessions?wait=true&timeout=60", content=json.dumps({"agent": "together", "prompt": "hi"})
    )
    assert answer.status_code == 201 and answer.json()["status"] == "idle", answer.text
    assert worker.process.proc.poll() is None, worker.process.output()
    for process in (worker.process, server.process):
        assert "already exists" not in process.output()
        assert '"kind": "db.migrated"' in process.output()
