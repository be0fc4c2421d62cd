"""Run semantics over HTTP: step mode, resume, results posted during a run, partial answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent, write_tool

TWO_DEFERRED = {
    "rules": [
        {
            "when": {"last_contains": "slow"},
            "reply": {"delay": 2, "content": "", "tool_calls": [{"name": "fetch_a", "arguments": {}}]},
        },
        {
            "when": {"last_role": "user"},
            "reply": {
                "content": "",
                "tool_calls": [{"name": "fetch_a", "arguments": {"n": 1}}, {"name": "fetch_b", "arguments": {"n": 2}}],
            },
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "got {last_content}"}},
    ]
}


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def test_two_deferred_calls_resume_once_when_both_are_in(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(TWO_DEFERRED)
    agent = write_agent(tmp_path, "external", llm.url, toolCallPolicyConfig={"default": {"tag": "defer"}})
    server = start_server([agent])
    view = _post(server, "/v1/sessions?wait=true", {"agent": "external", "prompt": "go"}).json()
    assert view["status"] == "waiting_external"
    first, second = view["pending"]
    assert [first["tool"], second["tool"]] == ["fetch_a", "fetch_b"]
    requests_before = len(llm.requests)

    # the second answered first: still waiting on the other one, no run, 200
    partial = _post(server, f"/v1/continuations/{second['continuation_token']}?wait=true", {"result": "B"})
    assert partial.status_code == 200
    assert partial.json()["status"] == "waiting_external"
    assert [p["tool"] for p in partial.json()["pending"]] == ["fetch_a"]
    assert len(llm.requests) == requests_before
    twice = _post(server, f"/v1/continuations/{second['continuation_token']}?wait=true", {"result": "B again"})
    assert twice.status_code == 409 and twice.json()["error"] == "token_already_completed"

    done = _post(
        server,
        f"/v1/continuations/{first['continuation_token']}?wait=true",
        {"result": {"type": "json", "content": {"a": 1}}},
    )
    assert done.status_code == 200 and done.json()["status"] == "idle"
    assert len(llm.requests) == requests_before + 1
    tool_messages = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ['{"a": 1}', "B"]
    assert [m["tool_call_id"] for m in tool_messages] == [first["call"]["id"], second["call"]["id"]]


def test_resume_false_stores_only_and_resume_starts_the_run(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(TWO_DEFERRED)
    agent = write_agent(tmp_path, "external", llm.url, toolCallPolicyConfig={"default": {"tag": "defer"}})
    server = start_server([agent])
    view = _post(server, "/v1/sessions?wait=true", {"agent": "external", "prompt": "go"}).json()
    sid = view["session_id"]
    for call in view["pending"]:
        answer = _post(server, f"/v1/continuations/{call['continuation_token']}", {"result": "r", "resume": False})
        assert answer.status_code == 200
    stored = server.client.get(f"/v1/sessions/{sid}").json()
    assert stored["status"] == "ready" and stored["pending"] == []
    assert stored["session"]["turns"][0]["tag"] == "UserTurn"
    resumed = _post(server, f"/v1/sessions/{sid}/resume?wait=true")
    assert resumed.status_code == 200 and resumed.json()["status"] == "idle"


def test_step_mode_runs_one_step_at_a_time(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(
        {
            "rules": [
                {
                    "when": {"last_role": "user"},
                    "reply": {"tool_calls": [{"name": "bash_shout", "arguments": {"word": "hi"}}]},
                },
                {"reply": {"content": "the tool said {last_content}"}},
            ]
        }
    )
    write_tool(
        tmp_path / "tools",
        "shout",
        {
            "slug": "shout",
            "description": "shouts",
            "args": [
                {
                    "name": "word",
                    "description": "w",
                    "type": "string",
                    "backing_type": "string",
                    "arity": "single",
                    "mode": "positional",
                }
            ],
        },
        'echo "$1" | tr a-z A-Z',
    )
    agent = write_agent(tmp_path, "stepper", llm.url, toolDirectory="tools")
    server = start_server([agent])
    view = _post(server, "/v1/sessions?wait=true", {"agent": "stepper", "prompt": "shout", "run": "step"}).json()
    assert view["status"] == "ready"
    assert view["session"]["turns"][0]["tag"] == "LlmTurn"
    sid = view["session_id"]
    view = _post(server, f"/v1/sessions/{sid}/resume?wait=true", {"mode": "step"}).json()
    assert view["status"] == "ready"
    head = view["session"]["turns"][0]
    assert head["tag"] == "UserTurn" and head["contents"]["userToolResponses"][0][1] == "HI\n"
    view = _post(server, f"/v1/sessions/{sid}/resume?wait=true", {"mode": "step"}).json()
    assert view["status"] == "idle"
    assert view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "the tool said HI\n"
    # run "none" stores the turn and runs nothing
    stored = _post(server, "/v1/sessions", {"agent": "stepper", "prompt": "later", "run": "none"})
    assert stored.status_code == 201 and stored.json()["status"] == "ready"
    empty = _post(server, "/v1/sessions", {"agent": "stepper"})
    assert empty.status_code == 201 and empty.json()["status"] == "ready" and empty.json()["session"]["turns"] == []


def test_a_result_posted_during_a_run_is_applied_by_that_run(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(
        {
            "rules": [
                {"when": {"last_contains": "start"}, "reply": {"tool_calls": [{"name": "outside", "arguments": {}}]}},
                {"when": {"last_role": "tool"}, "reply": {"content": "thanks for {last_content}"}},
                {"when": {"last_contains": "slow"}, "reply": {"delay": 2, "content": "slow answer"}},
            ]
        }
    )
    agent = write_agent(tmp_path, "mixed", llm.url, toolCallPolicyConfig={"default": {"tag": "defer"}})
    server = start_server([agent])
    view = _post(server, "/v1/sessions?wait=true", {"agent": "mixed", "prompt": "start"}).json()
    token = view["pending"][0]["continuation_token"]
    # hold the session in a run: resume it, then post the result while the run is active
    held = _post(server, f"/v1/sessions/{view['session_id']}/resume")
    assert held.status_code == 202 and held.json()["status"] == "running"
    queued = _post(server, f"/v1/continuations/{token}", {"result": "the parcel"})
    assert queued.status_code in (200, 202)
    final = server.client.get(f"/v1/sessions/{view['session_id']}?wait=true&timeout=30").json()
    assert final["status"] == "idle", final
    assert final["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "thanks for the parcel"
