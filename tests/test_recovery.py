"""A run whose process dies does not leave its session stuck in ``running``."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import Server, wait_until, write_agent

SLOW = {
    "rules": [
        {"when": {"last_contains": "slow"}, "reply": {"delay": 4, "content": "late"}},
        {"reply": {"content": "quick"}},
    ]
}


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def test_a_server_killed_mid_run_recovers_its_sessions_at_start(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SLOW)
    agent = write_agent(tmp_path, "sleepy", llm.url)
    server = start_server([agent])
    created = _post(server, "/v1/sessions", {"agent": "sleepy", "prompt": "slow please"}).json()
    wait_until(lambda: len(llm.requests) == 1)
    os.killpg(server.process.proc.pid, signal.SIGKILL)
    server.process.proc.wait()

    restarted = start_server([agent], db=server.db)
    view = restarted.client.get(f"/v1/sessions/{created['session_id']}").json()
    # the interrupted step is lost, the turns say what is left to do, nothing resumed by itself
    assert view["status"] == "ready"
    assert [t["tag"] for t in view["session"]["turns"]] == ["UserTurn"]
    assert '"kind": "sessions.recovered"' in restarted.process.output()
    assert restarted.client.get("/healthz").json()["active_runs"] == 0
    resumed = _post(restarted, f"/v1/sessions/{created['session_id']}/resume?wait=true")
    assert resumed.status_code == 200 and resumed.json()["status"] == "idle"


def test_a_worker_killed_mid_run_is_taken_over_once_its_lease_expires(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(SLOW)
    agent = write_agent(tmp_path, "sleepy", llm.url)
    env = {
        "REDIS_URL": redis_url,
        "AGENTS_LEASE_SECONDS": "3",
        "AGENTS_LEASE_RENEW_SECONDS": "1",
        "AGENTS_SWEEP_EVERY_SECONDS": "1",
    }
    server = start_server([agent], db=postgres_url, env=env)
    doomed = start_worker([agent], db=postgres_url, env=env)
    created = _post(server, "/v1/sessions", {"agent": "sleepy", "prompt": "slow please"}).json()
    wait_until(lambda: len(llm.requests) == 1, timeout=60)
    os.killpg(doomed.process.proc.pid, signal.SIGKILL)
    doomed.process.proc.wait()
    started = time.monotonic()
    survivor = start_worker([agent], db=postgres_url, env={**env, "AGENTS_WORKER_BEAT": "1"})
    assert survivor is not None

    def recovered() -> dict | None:
        view = server.client.get(f"/v1/sessions/{created['session_id']}").json()
        return view if view["status"] != "running" else None

    view = wait_until(recovered, timeout=60, interval=0.2)
    assert view["status"] == "ready"
    assert time.monotonic() - started < 30
    assert [t["tag"] for t in view["session"]["turns"]] == ["UserTurn"]
    resumed = _post(server, f"/v1/sessions/{created['session_id']}/resume?wait=true")
    assert resumed.status_code == 200 and resumed.json()["status"] == "idle"
    assert [t["tag"] for t in resumed.json()["session"]["turns"]] == ["LlmTurn", "UserTurn"]


def test_a_stop_left_unread_by_a_dead_run_does_not_stop_the_next_one(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    """Issue 11, acceptance 10: the recovery consumes the controls the dead run never read."""
    llm = llm_server(SLOW)
    agent = write_agent(tmp_path, "sleepy", llm.url)
    env = {
        "REDIS_URL": redis_url,
        "AGENTS_LEASE_SECONDS": "3",
        "AGENTS_LEASE_RENEW_SECONDS": "1",
        "AGENTS_SWEEP_EVERY_SECONDS": "1",
    }
    server = start_server([agent], db=postgres_url, env=env)
    doomed = start_worker([agent], db=postgres_url, env=env)
    sid = _post(server, "/v1/sessions", {"agent": "sleepy", "prompt": "slow please"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1, timeout=60)
    os.killpg(doomed.process.proc.pid, signal.SIGKILL)
    doomed.process.proc.wait()
    # a stop for the run that just died: nobody reads it
    stop = _post(server, f"/v1/sessions/{sid}/mail", {"body": {"tag": "control", "message": {"tag": "stopRun"}}})
    assert stop.status_code == 202
    start_worker([agent], db=postgres_url, env={**env, "AGENTS_WORKER_BEAT": "1"})
    wait_until(lambda: server.client.get(f"/v1/sessions/{sid}").json()["status"] != "running", timeout=60)
    assert server.client.get(f"/v1/sessions/{sid}/mail?unread=true").json()["mail"] == []
    answered = _post(server, f"/v1/sessions/{sid}/messages?wait=true&timeout=60", {"prompt": "still there?"})
    assert answered.status_code == 200 and answered.json()["status"] == "idle", answered.text
    head = answered.json()["session"]["turns"][0]
    assert head["contents"]["llmResponse"]["responseText"] == "quick"
