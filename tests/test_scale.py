"""Crashes, shutdowns and many processes (issue: surviving crashes and scaling out, acceptance 2-4)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.harness import ROOT, Server, base_env, wait_until, write_agent, write_tool
from tests.streams import SseReader

SCRIPT = {
    "rules": [
        {"when": {"last_contains": "think long"}, "reply": {"delay": 8, "content": "thought"}},
        {
            "when": {"last_contains": "tool please", "last_role": "user"},
            "reply": {"tool_calls": [{"name": "bash_slow", "arguments": {}}]},
        },
        {"reply": {"content": "done: {last_content}"}},
    ]
}


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def _agent(tmp_path: Path, llm_url: str, seconds: float = 3) -> Path:
    write_tool(
        tmp_path / "tools", "slow", {"slug": "slow", "description": "slow", "args": []}, f"sleep {seconds}; echo slept"
    )
    return write_agent(tmp_path, "worky", llm_url, toolDirectory="tools")


def test_sigterm_on_a_server_answers_everyone_and_exits_in_the_grace_period(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    agent = _agent(tmp_path, llm.url)
    server = start_server([agent], extra_args=["--shutdown-grace", "5"])
    sid = _post(server, "/v1/sessions", {"agent": "worky", "prompt": "think long"}).json()["session_id"]
    session_stream = SseReader(f"{server.url}/v1/sessions/{sid}/events")
    all_stream = SseReader(f"{server.url}/v1/events")
    waited: dict = {}

    def wait() -> None:
        answer = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=60")
        waited.update(status=answer.status_code, body=answer.json())

    waiter = threading.Thread(target=wait)
    waiter.start()
    wait_until(lambda: len(llm.requests) == 1)
    started = time.monotonic()
    server.process.proc.send_signal(signal.SIGTERM)
    assert server.process.proc.wait(10) == 0
    assert time.monotonic() - started < 5 + 1
    waiter.join(5)
    assert waited["status"] == 202 and waited["body"]["status"] == "running"
    assert session_stream.closed.wait(5) and all_stream.closed.wait(5)
    assert '"kind": "server.stopped"' in server.process.output()
    # nothing is lost: the next server recovers the session and a resume finishes it
    again = start_server([agent], db=server.db)
    view = again.client.get(f"/v1/sessions/{sid}").json()
    assert view["status"] == "ready" and [t["tag"] for t in view["session"]["turns"]] == ["UserTurn"]
    assert _post(again, f"/v1/sessions/{sid}/resume?wait=true").json()["status"] == "idle"


def test_sigterm_on_a_worker_hands_the_run_to_another(
    tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url
) -> None:
    llm = llm_server(SCRIPT)
    agent = _agent(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    first = start_worker([agent], db=postgres_url, env=env)
    sid = _post(server, "/v1/sessions", {"agent": "worky", "prompt": "tool please", "run": "none"}).json()["session_id"]
    stream = SseReader(f"{server.url}/v1/sessions/{sid}/events")
    _post(server, f"/v1/sessions/{sid}/resume")
    wait_until(lambda: len(llm.requests) == 1, timeout=30)
    first.process.proc.send_signal(signal.SIGTERM)
    start_worker([agent], db=postgres_url, env=env)
    final = wait_until(
        lambda: (v := server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=5").json())["status"] == "idle" and v,
        timeout=60,
    )
    assert first.process.proc.wait(30) == 0
    assert [t["tag"] for t in final["session"]["turns"]] == ["LlmTurn", "UserTurn", "LlmTurn", "UserTurn"]
    assert final["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "done: slept\n"
    assert len(llm.requests) == 2
    # the first worker stopped after its step; the second claimed the run and finished it
    events = stream.wait_for(lambda e: any(x["event"] == "run.stopped" for x in e))
    assert [e["event"] for e in events].count("run.started") >= 2
    assert '"kind": "run.handed_back"' in first.process.output()
    stream.close()


def test_two_servers_two_workers_mail_cancel_and_wait(
    tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url
) -> None:
    llm = llm_server(SCRIPT)
    agent = _agent(tmp_path, llm.url, seconds=2)
    env = {"REDIS_URL": redis_url}
    a = start_server([agent], db=postgres_url, env=env)
    b = start_server([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    sid = _post(a, "/v1/sessions", {"agent": "worky", "prompt": "tool please"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1, timeout=30)
    # a message posted to server A reaches the run on a worker; wait=true on server B returns at its end
    assert _post(a, f"/v1/sessions/{sid}/messages", {"prompt": "a note via A"}).status_code == 202
    final = b.client.get(f"/v1/sessions/{sid}?wait=true&timeout=60")
    assert final.status_code == 200 and final.json()["status"] == "idle"
    assert "a note via A" in json.dumps(llm.requests[-1]["messages"][-1])
    # cancel posted to server B stops a run going on a worker
    _post(a, f"/v1/sessions/{sid}/messages", {"prompt": "tool please"})
    wait_until(lambda: len(llm.requests) == 3, timeout=30)
    cancelled = _post(b, f"/v1/sessions/{sid}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "ready"
    view = a.client.get(f"/v1/sessions/{sid}?wait=true").json()
    assert view["session"]["turns"][0]["contents"]["userToolResponses"][0][1] == "async tool call was cancelled"


def test_a_run_task_delivered_twice_to_real_workers_runs_once(
    tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url
) -> None:
    llm = llm_server({"rules": [{"reply": {"delay": 1, "content": "once"}}]})
    agent = write_agent(tmp_path, "single", llm.url)
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    created = _post(server, "/v1/sessions", {"agent": "single", "prompt": "hi", "run": "none"}).json()
    sid = created["session_id"]
    # request a run without a worker listening, then deliver its task twice more
    _post(server, f"/v1/sessions/{sid}/resume")
    script = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='agentsite.settings'; django.setup();"
        "from sessions_app.models import Session; from sessions_app.tasks import run_session_task;"
        f"s = Session.objects.get(pk='{sid}');"
        "[run_session_task.delay(str(s.pk), str(s.run_id)) for _ in range(2)]"
    )
    subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=base_env(DATABASE_URL=postgres_url, REDIS_URL=redis_url),
        check=True,
        timeout=60,
    )
    start_worker([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    view = wait_until(
        lambda: (v := server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=5").json())["status"] == "idle" and v,
        timeout=60,
    )
    time.sleep(2)
    assert len(llm.requests) == 1
    assert [t["tag"] for t in view["session"]["turns"]] == ["LlmTurn", "UserTurn"]
