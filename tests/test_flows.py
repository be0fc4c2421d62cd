"""The main job end to end, over real HTTP, on both topologies (issue: foundation, acceptance 1-3).

Embedded default: ``agents serve`` with SQLite and its in-process Celery worker.
Scaled out: PostgreSQL, Redis, ``agents worker`` as a separate process, the server under daphne.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.demo import demo_agents, demo_script
from tests.harness import Server


def _post(server: Server, path: str, body: dict | None = None):
    # no Content-Type, like the documented curl examples (docs/decisions.md §10)
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def _head(view: dict) -> dict:
    return view["session"]["turns"][0]


def _tool_messages(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def check_first_conversation(server: Server, llm: MockLlmServer) -> None:
    """The reference's "A first conversation", with the weather agent."""
    created = _post(server, "/v1/sessions?wait=true", {"agent": "weather", "prompt": "Weather in Paris?"})
    assert created.status_code == 201, created.text
    view = created.json()
    assert created.headers["Location"] == f"/v1/sessions/{view['session_id']}"
    assert view["status"] == "waiting_external"
    assert view["agent"] == "weather" and view["parent_session_id"] is None and view["owner"] is None
    [pending] = view["pending"]
    assert pending["tool"] == "get_weather"
    assert pending["disposition"] == {"tag": "defer", "reason": "weather service"}
    assert pending["call"]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    token = pending["continuation_token"]
    uuid.UUID(token)
    assert server.client.get(f"/v1/sessions/{view['session_id']}/pending").json() == {"calls": [pending]}

    done = _post(server, f"/v1/continuations/{token}?wait=true", {"result": "sunny, 24°C"})
    assert done.status_code == 200, done.text
    view = done.json()
    assert view["status"] == "idle" and view["pending"] == []
    assert _head(view)["tag"] == "LlmTurn"
    assert "sunny, 24°C" in _head(view)["contents"]["llmResponse"]["responseText"]
    # the LLM saw the result as the one tool message answering its call
    last_request = llm.requests[-1]
    assert [m["content"] for m in _tool_messages(last_request)] == ["sunny, 24°C"]
    assert _tool_messages(last_request)[0]["tool_call_id"] == pending["call"]["id"]

    more = _post(server, f"/v1/sessions/{view['session_id']}/messages?wait=true", {"prompt": "And tomorrow?"})
    assert more.status_code == 200, more.text
    view = more.json()
    assert view["status"] == "idle"
    assert _head(view)["contents"]["llmResponse"]["responseText"].startswith("Tomorrow")
    tags = [turn["tag"] for turn in view["session"]["turns"]]
    assert tags == ["LlmTurn", "UserTurn", "LlmTurn", "UserTurn", "LlmTurn", "UserTurn"]
    assert view["session"]["turns"][1]["contents"]["userQuery"] == "And tomorrow?"


def check_bash_and_deferred(server: Server, llm: MockLlmServer) -> None:
    """Two real bash calls and one deferred call in one LLM turn; the continuation finishes it."""
    created = _post(server, "/v1/sessions?wait=true", {"agent": "shell-helper", "prompt": "Count these for me"})
    assert created.status_code == 201, created.text
    view = created.json()
    assert view["status"] == "waiting_external", view["status_detail"]
    head = _head(view)
    assert head["tag"] == "PartialUserTurn"
    tracked = head["contents"]["trackedCalls"]
    assert [(t["tcCall"]["function"]["name"], t["tcState"]) for t in tracked] == [
        ("bash_word-count", "Completed"),
        ("bash_word-count", "Completed"),
        ("bash_ask_human", "Deferred"),
    ]
    # real subprocesses counted the words of each text
    assert [t["tcResult"] for t in tracked[:2]] == ["4\n", "6\n"]
    [pending] = view["pending"]
    assert pending["tool"] == "bash_ask_human"
    assert pending["disposition"] == {"tag": "defer", "reason": "a human answers"}

    done = _post(
        server,
        f"/v1/continuations/{pending['continuation_token']}?wait=true",
        {"result": {"type": "text", "content": "yes, go ahead"}},
    )
    assert done.status_code == 200, done.text
    view = done.json()
    assert view["status"] == "idle"
    assert _head(view)["contents"]["llmResponse"]["responseText"] == "All done. The human said: yes, go ahead"
    user_turn = view["session"]["turns"][1]
    assert user_turn["tag"] == "UserTurn"
    assert [response for _, response in user_turn["contents"]["userToolResponses"]] == ["4\n", "6\n", "yes, go ahead"]
    assert [m["content"] for m in _tool_messages(llm.requests[-1])] == ["4\n", "6\n", "yes, go ahead"]


def test_flows_on_the_embedded_default(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    check_first_conversation(server, llm)
    check_bash_and_deferred(server, llm)


def test_flows_scaled_out_with_postgres_redis_and_a_separate_worker(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(demo_script())
    agents = demo_agents(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url}
    server = start_server(agents, db=postgres_url, env=env)
    start_worker(agents, db=postgres_url, env=env)
    assert 'embedded_worker": false' in server.process.output()
    check_first_conversation(server, llm)
    check_bash_and_deferred(server, llm)
