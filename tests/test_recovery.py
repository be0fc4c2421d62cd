"""A run whose process dies does not leave its session stuck in ``running``."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import PROCESS_TIMEOUT, Server, Worker, wait_until, write_agent, write_tool

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


#: Short leases and sweeps, through their documented settings: these tests are about the rule.
FAST_RECOVERY = {"AGENTS_LEASE_SECONDS": "3", "AGENTS_LEASE_RENEW_SECONDS": "1", "AGENTS_SWEEP_EVERY_SECONDS": "1"}
#: Seconds the sweep itself may take on top of the lease and a period, on a loaded machine.
SWEEP_WORK_ALLOWANCE = 6.0


def _ready_worker(start_worker: Callable[..., Worker], agent: Path, db: str, env: dict[str, str]) -> Worker:
    """A worker started and ready (``worker.ready`` in its log): its sweeps have begun."""
    worker = start_worker([agent], db=db, env=env)
    wait_until(lambda: '"kind": "worker.ready"' in worker.process.output(), timeout=PROCESS_TIMEOUT, interval=0.2)
    return worker


def _kill(worker: Worker) -> float:
    os.killpg(worker.process.proc.pid, signal.SIGKILL)
    worker.process.proc.wait()
    return time.monotonic()


def test_without_any_worker_started_with_beat_a_dead_workers_runs_are_taken_over_within_a_lease_and_a_period(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server({"rules": [{"reply": {"delay": 120, "content": "late"}}]})
    agent = write_agent(tmp_path, "sleepy", llm.url)
    env = {"REDIS_URL": redis_url, "AGENTS_WORKER_CONCURRENCY": "10", **FAST_RECOVERY}
    server = start_server([agent], db=postgres_url, env=env)
    doomed = start_worker([agent], db=postgres_url, env=env)
    ids = [
        _post(server, "/v1/sessions", {"agent": "sleepy", "prompt": f"run {n}"}).json()["session_id"] for n in range(10)
    ]
    wait_until(lambda: len(llm.requests) == 10, timeout=PROCESS_TIMEOUT)
    survivor = _ready_worker(start_worker, agent, postgres_url, env)
    killed = _kill(doomed)

    def all_taken_over() -> list[dict] | None:
        views = [server.client.get(f"/v1/sessions/{sid}").json() for sid in ids]
        return views if all(v["status"] != "running" for v in views) else None

    views = wait_until(all_taken_over, timeout=120, interval=0.2)
    elapsed = time.monotonic() - killed
    lease, period = float(FAST_RECOVERY["AGENTS_LEASE_SECONDS"]), float(FAST_RECOVERY["AGENTS_SWEEP_EVERY_SECONDS"])
    print(f"10 runs taken over {elapsed:.1f} s after the kill (lease {lease:g} s, sweep every {period:g} s)")
    assert elapsed < lease + period + SWEEP_WORK_ALLOWANCE
    assert [v["status"] for v in views] == ["ready"] * 10
    assert all([t["tag"] for t in v["session"]["turns"]] == ["UserTurn"] for v in views)
    assert '"kind": "sessions.taken_over"' in survivor.process.output()


#: A boss that asks its helper, an aide whose one tool holds; each answers once it has a result.
HELPERS = {
    "rules": [
        {"when": {"any_contains": "You are aide.", "last_role": "tool"}, "reply": {"content": "aide done"}},
        {
            "when": {"any_contains": "You are aide."},
            "reply": {"tool_calls": [{"name": "bash_hold", "arguments": {}}]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "boss done: {last_content}"}},
        {"reply": {"tool_calls": [{"name": "io_prompt_agent_aide", "arguments": {"what": "hold on"}}]}},
    ]
}


def _boss_and_aide(tmp_path: Path, llm_url: str) -> tuple[Path, Path]:
    """The boss agent file (its helper beside it) and the folder where each aide's tool notes that
    it started (a file named by the aide's session id)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    # the helper's tool says it started, then holds until the process that runs it dies (20 s at most)
    hold = (
        f'echo started >> {marks}/"$AGENT_SESSION_ID"\n'
        "for _ in $(seq 100); do kill -0 $PPID 2>/dev/null || exit 0; sleep 0.2; done"
    )
    write_tool(tmp_path / "tools", "hold", {"slug": "hold", "description": "holds", "args": []}, hold)
    write_agent(tmp_path, "aide", llm_url, toolDirectory="tools")
    return write_agent(tmp_path, "boss", llm_url, extraAgents=[{"slug": "aide", "path": "aide.json"}]), marks


def _check_all_answered(server: Server, parents: list[str], marks: Path) -> None:
    """Every parent ``idle`` with its helper's answer, and no helper's tool run twice."""
    for sid in parents:
        view = server.client.get(f"/v1/sessions/{sid}").json()
        assert view["status"] == "idle"
        assert view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "boss done: aide done"
        [child] = server.client.get(f"/v1/sessions?parent={sid}").json()["sessions"]
        assert child["status"] == "idle"
        # the helper's interrupted tool was not run again
        assert (marks / child["session_id"]).read_text() == "started\n"
    assert server.client.get("/healthz").json()["active_runs"] == 0


def _none_running(server: Server, ids: list[str]) -> bool:
    return all(server.client.get(f"/v1/sessions/{sid}").json()["status"] != "running" for sid in ids)


def test_parents_waiting_on_helpers_of_a_killed_worker_all_end_idle_without_any_client_call(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(HELPERS)
    boss, marks = _boss_and_aide(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url, "AGENTS_WORKER_CONCURRENCY": "20", **FAST_RECOVERY}
    servers = [start_server([boss], db=postgres_url, env=env) for _ in range(2)]
    doomed = start_worker([boss], db=postgres_url, env=env)
    parents = [
        _post(servers[n % 2], "/v1/sessions", {"agent": "boss", "prompt": f"task {n}"}).json()["session_id"]
        for n in range(10)
    ]
    wait_until(lambda: len(list(marks.iterdir())) == 10, timeout=PROCESS_TIMEOUT, interval=0.2)
    for sid in parents:
        # every parent waits on its helper, which holds in its tool
        assert servers[0].client.get(f"/v1/sessions/{sid}").json()["status"] == "running"
    _ready_worker(start_worker, boss, postgres_url, env)
    _kill(doomed)
    wait_until(lambda: _none_running(servers[1], parents), timeout=180, interval=0.5)
    _check_all_answered(servers[0], parents, marks)


def test_parents_waiting_on_helpers_of_a_killed_embedded_server_all_end_idle_after_its_restart(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(HELPERS)
    boss, marks = _boss_and_aide(tmp_path, llm.url)
    server = start_server([boss])
    parents = [
        _post(server, "/v1/sessions", {"agent": "boss", "prompt": f"task {n}"}).json()["session_id"] for n in range(3)
    ]
    wait_until(lambda: len(list(marks.iterdir())) == 3, timeout=PROCESS_TIMEOUT, interval=0.2)
    os.killpg(server.process.proc.pid, signal.SIGKILL)
    server.process.proc.wait()
    restarted = start_server([boss], db=server.db)
    wait_until(lambda: _none_running(restarted, parents), timeout=120, interval=0.5)
    _check_all_answered(restarted, parents, marks)


def test_a_scaled_out_server_without_any_worker_says_that_nothing_sweeps_runs_until_one_starts(
    tmp_path: Path, start_server: Callable[..., Server], start_worker: Callable[..., Worker], redis_url: str
) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    env = {"REDIS_URL": redis_url, "AGENTS_SWEEP_EVERY_SECONDS": "0.5"}
    server = start_server([agent], env=env)
    recovery = server.client.get("/healthz").json()["recovery"]
    assert recovery == {"last_sweep_at": None, "sweep_every_seconds": 0.5, "stale": True}
    wait_until(lambda: '"kind": "recovery.stale"' in server.process.output(), timeout=60, interval=0.2)
    start_worker([agent], db=server.db, env=env)
    wait_until(lambda: not server.client.get("/healthz").json()["recovery"]["stale"], timeout=PROCESS_TIMEOUT)
    assert server.client.get("/healthz").json()["recovery"]["last_sweep_at"] is not None
    wait_until(lambda: '"kind": "recovery.resumed"' in server.process.output(), timeout=60, interval=0.2)
