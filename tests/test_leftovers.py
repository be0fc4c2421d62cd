"""Nothing a server or a worker writes outlives it, beside its database and its secret key.

The periodic tasks once kept their schedule in ``<tmp>/agents-beat-<pid>.*``, a new set of files
at every start. These tests let the beat run (it prunes every event) and stop the process with
SIGTERM, a run still in flight on the server so that it leaves through ``os._exit`` after its
grace period.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import Server, Worker, wait_until, write_agent

#: Prune every event as soon as the beat ticks: an empty event table shows the beat ran.
PRUNE_AT_ONCE = {"AGENTS_EVENT_RETENTION_SECONDS": "0", "AGENTS_PRUNE_EVERY_SECONDS": "0.2"}


def _temp_names() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).iterdir()}


def _new_temp_files_of(pid: int, before: set[str]) -> list[str]:
    """The temporary files written since ``before`` whose name carries ``pid`` (old runs' files
    may carry a pid that the system gave again, so only new ones count)."""
    return sorted(name for name in _temp_names() - before if str(pid) in name)


def _events_pruned(db: str) -> bool:
    with sqlite3.connect(db) as connection:
        return connection.execute("SELECT count(*) FROM sessions_app_event").fetchone()[0] == 0


def _create_session(server: Server, prompt: str, **extra: str) -> None:
    body = {"agent": "plain", "prompt": prompt, **extra}
    assert server.client.post("/v1/sessions", content=json.dumps(body)).status_code == 201


def test_a_server_stopped_with_sigterm_leaves_no_file_behind(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server({"rules": [{"reply": {"delay": 30, "content": "too late"}}]})
    agent = write_agent(tmp_path, "plain", llm.url)
    before = {p.name for p in tmp_path.iterdir()}
    temp_before = _temp_names()
    server = start_server([agent], env=PRUNE_AT_ONCE, extra_args=["--shutdown-grace", "1"])
    pid = server.process.proc.pid
    _create_session(server, "think long")
    wait_until(lambda: len(llm.requests) == 1)
    wait_until(lambda: _events_pruned(server.db), timeout=30)
    server.process.proc.send_signal(signal.SIGTERM)
    assert server.process.proc.wait(15) == 0
    assert _new_temp_files_of(pid, temp_before) == []
    written = {p.name for p in tmp_path.iterdir()} - before
    database = Path(server.db).name
    log = server.process.log_path.name
    assert written <= {database, f"{database}-wal", f"{database}-shm", "agents-secret-key", log}


def test_a_worker_running_the_beat_stopped_with_sigterm_leaves_no_file_behind(
    tmp_path: Path, start_server: Callable[..., Server], start_worker: Callable[..., Worker], redis_url: str
) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    env = {"REDIS_URL": redis_url, **PRUNE_AT_ONCE}
    server = start_server([agent], env=env)
    _create_session(server, "hello", run="none")
    temp_before = _temp_names()
    worker = start_worker([agent], db=server.db, env={**env, "AGENTS_WORKER_BEAT": "1"})
    pid = worker.process.proc.pid
    wait_until(lambda: _events_pruned(server.db), timeout=60)
    worker.process.proc.send_signal(signal.SIGTERM)
    worker.process.proc.wait(30)
    assert _new_temp_files_of(pid, temp_before) == []
