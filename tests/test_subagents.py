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
    # the parent runs while its helper works for it, even while the helper waits on a human
    # (docs/decisions.md §21): wait=true answers at its timeout, still running
    waited = _post(server, f"/v1/sessions/{pid}/resume?wait=true&timeout=1")
    view = waited.json()
    assert waited.status_code == 202 and view["status"] == "running"
    assert view["pending"] == []  # the helper call is answered by the child, not by a worker
    [child] = wait_until(lambda: server.client.get(f"/v1/sessions?parent={pid}").json()["sessions"])
    assert child["agent"] == "helper" and child["parent_session_id"] == pid
    child_view = server.client.get(f"/v1/sessions/{child['session_id']}?wait=true").json()
    assert child_view["status"] == "waiting_external"
    [pending] = child_view["pending"]
    assert pending["tool"] == "approve"

    done = _post(server, f"/v1/continuations/{pending['continuation_token']}?wait=true", {"result": "approved"})
    assert done.json()["status"] == "idle"
    # the child's answer resumes the parent on its own
    final = server.client.get(f"/v1/sessions/{pid}?wait=true&timeout=30").json()
    assert final["status"] == "idle"
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


def test_cancelling_a_parent_whose_helper_works_cancels_the_child_and_stops_the_parent(
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
    assert server.client.get(f"/v1/sessions/{pid}").json()["status"] == "running"
    cancelled = _post(server, f"/v1/sessions/{pid}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    # the parent stops as a cancelled run stops: its helper call closed, the model not asked
    assert cancelled.json()["status"] == "ready"
    final = server.client.get(f"/v1/sessions/{pid}").json()
    assert final["session"]["turns"][0]["contents"]["userToolResponses"][0][1] == "async tool call was cancelled"
    assert len(llm.requests) == 2
    [child] = server.client.get(f"/v1/sessions?parent={pid}").json()["sessions"]
    child_final = server.client.get(f"/v1/sessions/{child['session_id']}?wait=true&timeout=30").json()
    assert child_final["status"] == "ready"
    assert server.client.get(f"/v1/sessions/{pid}").json()["status"] == "ready"


def test_wait_through_a_helper_answers_the_final_answer_and_the_parent_runs_until_then(
    tmp_path: Path, llm_server, start_server
) -> None:
    """Issue 11, acceptance 5 (docs/decisions.md §21)."""
    llm = llm_server(
        {
            "rules": [
                {
                    "when": {"any_contains": "You are parent.", "last_role": "user"},
                    "reply": {"tool_calls": [{"name": "io_prompt_agent_helper", "arguments": {"what": "think"}}]},
                },
                {
                    "when": {"any_contains": "You are parent.", "last_role": "tool"},
                    "reply": {"content": "parent got: {last_content}"},
                },
                {"when": {"any_contains": "You are helper."}, "reply": {"delay": 1.5, "content": "helper thought"}},
            ]
        }
    )
    write_agent(tmp_path, "helper", llm.url)
    parent = write_agent(tmp_path, "parent", llm.url, extraAgents=[{"slug": "helper", "path": "helper.json"}])
    server = start_server([parent])
    stream = SseReader(f"{server.url}/v1/events")
    created = _post(server, "/v1/sessions?wait=true&timeout=60", {"agent": "parent", "prompt": "start"})
    view = created.json()
    assert created.status_code == 201 and view["status"] == "idle", created.text
    assert view["pending"] == []
    assert view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "parent got: helper thought"
    pid = view["session_id"]
    events = stream.wait_for(
        lambda e: any(x["event"] == "run.stopped" and x["data"]["session_id"] == pid for x in e), timeout=30
    )
    stream.close()
    mine = [e for e in events if e["data"]["session_id"] == pid]
    statuses = [e["data"]["status"] for e in mine if e["event"] == "session.updated"]
    # running from its creation to its answer, never waiting_external in between
    assert statuses[-1] == "idle" and set(statuses[:-1]) == {"running"}, statuses
    assert [e["data"]["status"] for e in mine if e["event"] == "run.stopped"] == ["idle"]
    assert "subcall.completed" in kinds(mine)
