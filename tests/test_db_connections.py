"""Database connections kept across runs on PostgreSQL: none opened per run once warm (issue 26)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import psycopg

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent

WARM_UP_RUNS = 4
RUNS = 12


def _sessions_opened(admin: psycopg.Connection, database: str) -> int:
    """Connections ever opened to ``database`` (pg_stat_database.sessions), once the counts stop
    moving: a backend reports its own opening a moment after it starts."""
    last = -1
    while True:
        admin.execute("SELECT pg_stat_clear_snapshot()")
        row = admin.execute("SELECT sessions FROM pg_stat_database WHERE datname = %s", [database]).fetchone()
        assert row is not None
        if row[0] == last:
            return int(row[0])
        last = row[0]
        time.sleep(1.5)


def test_runs_on_a_warm_server_and_worker_open_no_database_connection(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "ok: {last_content}"}}]})
    agent = write_agent(tmp_path, "quick", llm.url)
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)

    def run(number: int) -> None:
        body = {"agent": "quick", "prompt": f"run {number}"}
        answer = server.client.post("/v1/sessions?wait=true", content=json.dumps(body))
        assert answer.status_code == 201, answer.text
        assert answer.json()["status"] == "idle"

    database = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        for number in range(WARM_UP_RUNS):
            run(number)
        before = _sessions_opened(admin, database)
        for number in range(RUNS):
            run(WARM_UP_RUNS + number)
        after = _sessions_opened(admin, database)
    assert after - before == 0, f"{after - before} connections opened in {RUNS} runs"
