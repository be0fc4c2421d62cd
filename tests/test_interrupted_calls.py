"""A crash never runs a side-effecting tool call twice (issue 11, acceptance 9; docs/sessions.md §3.2).

Each call is recorded before it runs; a later step of the same head that finds the record tells
the model the call was interrupted (it may or may not have run) instead of running it again,
unless its tool is safe to retry.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import Server, wait_until, write_agent, write_tool

SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "last_contains": "do it"},
            "reply": {
                "tool_calls": [
                    {"name": "bash_count", "arguments": {}, "id": "call_count"},
                    {"name": "bash_append", "arguments": {}, "id": "call_append"},
                ]
            },
        },
        {"when": {"last_contains": "and now?"}, "reply": {"content": "told"}},
        {"reply": {"content": "ok"}},
    ]
}


def _agent(tmp_path: Path, llm_url: str) -> tuple[Path, Path, Path]:
    """An agent with a side-effecting tool (appends a line, then takes long) and one that is safe
    to retry (its ``describe`` says so); returns the agent file and the two files they write."""
    appended, counted = tmp_path / "appended.txt", tmp_path / "counted.txt"
    tools = tmp_path / "tools"
    slow_effect = f"echo line >> {appended}\nsleep 30"
    write_tool(tools, "append", {"slug": "append", "description": "appends", "args": []}, slow_effect)
    write_tool(
        tools,
        "count",
        {"slug": "count", "description": "counts", "args": [], "safe-to-retry": True},
        f"echo one >> {counted}\necho counted",
    )
    return write_agent(tmp_path, "effects", llm_url, toolDirectory="tools"), appended, counted


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _check_told(server: Server, sid: str, llm: MockLlmServer, appended: Path, counted: Path) -> None:
    answered = server.client.post(
        f"/v1/sessions/{sid}/messages?wait=true&timeout=60", content=json.dumps({"prompt": "and now?"})
    )
    assert answered.status_code == 200 and answered.json()["status"] == "idle", answered.text
    # the side effect happened once; the tool safe to retry ran again
    assert _lines(appended) == 1
    assert _lines(counted) == 2
    tools = {m["tool_call_id"]: m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"}
    assert tools["call_count"] == "counted\n"
    assert tools["call_append"].startswith("Error: the tool call was interrupted")
    assert "may or may not have run" in tools["call_append"]
    turns = answered.json()["session"]["turns"]
    assert turns[0]["contents"]["llmResponse"]["responseText"] == "told"


def test_a_server_killed_while_a_tool_runs_does_not_run_it_again(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    agent, appended, counted = _agent(tmp_path, llm.url)
    server = start_server([agent])
    sid = server.client.post("/v1/sessions", content=json.dumps({"agent": "effects", "prompt": "do it"})).json()[
        "session_id"
    ]
    wait_until(lambda: _lines(appended) == 1, timeout=60)
    os.killpg(server.process.proc.pid, signal.SIGKILL)
    server.process.proc.wait()
    restarted = start_server([agent], db=server.db)
    assert restarted.client.get(f"/v1/sessions/{sid}").json()["status"] == "ready"
    _check_told(restarted, sid, llm, appended, counted)


def test_a_worker_killed_while_a_tool_runs_is_taken_over_without_running_it_again(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(SCRIPT)
    agent, appended, counted = _agent(tmp_path, llm.url)
    env = {
        "REDIS_URL": redis_url,
        "AGENTS_LEASE_SECONDS": "3",
        "AGENTS_LEASE_RENEW_SECONDS": "1",
        "AGENTS_SWEEP_EVERY_SECONDS": "1",
    }
    server = start_server([agent], db=postgres_url, env=env)
    doomed = start_worker([agent], db=postgres_url, env=env)
    sid = server.client.post("/v1/sessions", content=json.dumps({"agent": "effects", "prompt": "do it"})).json()[
        "session_id"
    ]
    wait_until(lambda: _lines(appended) == 1, timeout=60)
    os.killpg(doomed.process.proc.pid, signal.SIGKILL)
    doomed.process.proc.wait()
    start_worker([agent], db=postgres_url, env={**env, "AGENTS_WORKER_BEAT": "1"})
    wait_until(lambda: server.client.get(f"/v1/sessions/{sid}").json()["status"] != "running", timeout=60)
    _check_told(server, sid, llm, appended, counted)
