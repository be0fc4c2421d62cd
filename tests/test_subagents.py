"""Helper agents run as child sessions (issue: mailbox and control, acceptance 5)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import Server, wait_until, write_agent
from tests.streams import SseReader, kinds

SCRIPT = {
    "rules": [
        {
            "when": {"any_contains": "You are parent.", "last_role": "user"},
            "reply": {"tool_calls": [{"name": "io_prompt_agent_helper", "arguments": {"what": "please get approval"}}]},
        },
        {
            "when": {"any_contains": "You are parent.", "last_role": "tool"},
            "reply": {"content": "parent got: {last_content}"},
        },
        {
            "when": {"any_contains": "You are helper.", "last_role": "user"},
            "reply": {"tool_calls": [{"name": "approve", "arguments": {}}]},
        },
        {
            "when": {"any_contains": "You are helper.", "last_role": "tool"},
            "reply": {"content": "helper says {last_content}"},
        },
        {
            "when": {"any_contains": "You are looper.", "last_role": "user"},
            "reply": {"tool_calls": [{"name": "io_prompt_agent_looper", "arguments": {"what": "go deeper"}}]},
        },
        {
            "when": {"any_contains": "You are looper.", "last_role": "tool"},
            "reply": {"content": "stopped: {last_content}"},
        },
    ]
}


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def test_a_helper_that_defers_makes_its_parent_wait(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    write_agent(tmp_path, "helper", llm.url, toolCallPolicyConfig={"default": {"tag": "defer", "reason": "a human"}})
    parent = write_agent(tmp_path, "parent", llm.url, extraAgents=[{"slug": "helper", "path": "helper.json"}])
    server = start_server([parent])
    agent = server.client.get("/v1/agents/parent").json()
    assert "io_prompt_agent_helper" in agent["tools"] and agent["helpers"] == ["helper"]

    created = _post(server, "/v1/sessions", {"agent": "parent", "prompt": "start", "run": "none"}).json()
    pid = created["session_id"]
    stream = SseReader(f"{server.url}/v1/sessions/{pid}/events")
    view = _post(server, f"/v1/sessions/{pid}/resume?wait=true").json()
    assert view["status"] == "waiting_external"
    assert view["pending"] == []  # the helper call is answered by the child, not by a worker
    [child] = server.client.get(f"/v1/sessions?parent={pid}").json()["sessions"]
    assert child["agent"] == "helper" and child["parent_session_id"] == pid
    child_view = server.client.get(f"/v1/sessions/{child['session_id']}?wait=true").json()
    assert child_view["status"] == "waiting_external"
    [pending] = child_view["pending"]
    assert pending["tool"] == "approve"

    done = _post(server, f"/v1/continuations/{pending['continuation_token']}?wait=true", {"result": "approved"})
    assert done.json()["status"] == "idle"
    # the child's answer resumes the parent on its own
    final = wait_until(
        lambda: (v := server.client.get(f"/v1/sessions/{pid}?wait=true&timeout=5").json())["status"] == "idle" and v,
        timeout=30,
    )
    answer = final["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]
    assert answer == "parent got: helper says approved"
    events = stream.wait_for(lambda e: "subcall.completed" in kinds(e))
    started = [e for e in events if e["event"] == "subcall.started"][0]["data"]
    assert started["child_session_id"] == child["session_id"] and started["slug"] == "helper" and started["depth"] == 1
    completed = [e for e in events if e["event"] == "subcall.completed"][0]["data"]
    assert completed["result"] == "helper says approved"
    stream.close()
    # the child has its own stream
    child_stream = SseReader(f"{server.url}/v1/sessions/{child['session_id']}/events")
    assert child_stream.wait_for(lambda e: len(e) >= 1)[0]["data"]["status"] == "idle"
    child_stream.close()


def test_the_depth_limit_stops_runaway_recursion(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    looper = write_agent(tmp_path, "looper", llm.url, extraAgents=[{"slug": "looper", "path": "looper.json"}])
    server = start_server([looper], env={"AGENTS_MAX_SUBAGENT_DEPTH": "2"})
    root = _post(server, "/v1/sessions", {"agent": "looper", "prompt": "start"}).json()["session_id"]

    def settled() -> dict | None:
        view = server.client.get(f"/v1/sessions/{root}?wait=true&timeout=5").json()
        return view if view["status"] == "idle" else None

    view = wait_until(settled, timeout=60, interval=0.1)
    [child] = server.client.get(f"/v1/sessions?parent={root}").json()["sessions"]
    [grandchild] = server.client.get(f"/v1/sessions?parent={child['session_id']}").json()["sessions"]
    assert server.client.get(f"/v1/sessions?parent={grandchild['session_id']}").json()["sessions"] == []
    deepest = server.client.get(f"/v1/sessions/{grandchild['session_id']}").json()
    refusal = deepest["session"]["turns"][1]["contents"]["userToolResponses"][0][1]
    assert refusal.startswith("Error: max sub-agent depth 2 reached")
    assert view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"].startswith(
        "stopped: stopped: stopped:"
    )


def test_cancelling_a_waiting_parent_cancels_its_child_and_frees_the_parent(
    tmp_path: Path, llm_server, start_server
) -> None:
    llm = llm_server(
        {
            "rules": [
                {
                    "when": {"any_contains": "You are parent.", "last_role": "user"},
                    "reply": {
                        "tool_calls": [{"name": "io_prompt_agent_helper", "arguments": {"what": "take your time"}}]
                    },
                },
                {
                    "when": {"any_contains": "You are parent.", "last_role": "tool"},
                    "reply": {"content": "parent saw: {last_content}"},
                },
                {"when": {"any_contains": "You are helper."}, "reply": {"delay": 30, "content": "too late"}},
            ]
        }
    )
    write_agent(tmp_path, "helper", llm.url)
    parent = write_agent(tmp_path, "parent", llm.url, extraAgents=[{"slug": "helper", "path": "helper.json"}])
    server = start_server([parent])
    pid = _post(server, "/v1/sessions", {"agent": "parent", "prompt": "start"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 2, timeout=30)
    assert server.client.get(f"/v1/sessions/{pid}").json()["status"] == "waiting_external"
    cancelled = _post(server, f"/v1/sessions/{pid}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    final = wait_until(
        lambda: (v := server.client.get(f"/v1/sessions/{pid}?wait=true&timeout=5").json())["status"] == "idle" and v,
        timeout=30,
    )
    assert final["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == (
        "parent saw: Error: the helper agent helper was cancelled"
    )
    [child] = server.client.get(f"/v1/sessions?parent={pid}").json()["sessions"]
    assert child["status"] == "ready"
