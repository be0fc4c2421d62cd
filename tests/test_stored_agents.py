"""Stored agents over the API (issue: owners and operators, acceptance 4; docs/api.md §12).

An admin owner stores an agent whose bash tool comes in ``files``; sessions run it with the real
tool; every refusal is provoked and leaves the stored rows as they were; edits reach every
server and worker at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.owners import owner, refused, write_tokens

SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "has_tool": "bash_shout"},
            "reply": {"tool_calls": [{"name": "bash_shout", "arguments": {"text": "hello there"}}]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "the tool said {last_content}"}},
        {"reply": {"content": "plain answer"}},
    ]
}


def shout_tool(marker: str) -> str:
    """A protocol-v1 bash tool that upper-cases its stdin, prefixed with ``marker``."""
    return (
        "#!/usr/bin/env bash\nset -eu\n"
        'if [ "${1:-}" = describe ]; then\n'
        '  echo \'{"slug": "shout", "description": "Shouts a text.", "args": [{"name": "text",'
        ' "description": "what to shout", "type": "string", "backing_type": "string", "arity": "single",'
        ' "mode": "stdin"}]}\'\n'
        "  exit 0\nfi\n"
        f"printf '{marker}:'; tr a-z A-Z\n"
    )


def agent_body(model_url: str, **extra: Any) -> dict[str, Any]:
    """Stored-agent contents (no slug: it comes from the path)."""
    return {
        "apiKeyId": "test",
        "flavor": "OpenAIv1",
        "modelUrl": model_url,
        "modelName": "scripted",
        "announce": "shouts what it is given",
        "systemPrompt": ["You shout."],
        **extra,
    }


def shouter(model_url: str, marker: str = "v1") -> dict[str, Any]:
    return agent_body(model_url, toolDirectory="tools", files={"tools/shout": shout_tool(marker)})


@pytest.fixture
def setup(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> Iterator[tuple[Server, MockLlmServer]]:
    llm = llm_server(SCRIPT)
    write_agent(tmp_path, "filehelper", llm.url)
    plain = write_agent(tmp_path, "plain", llm.url, extraAgents=[{"slug": "filehelper", "path": "./filehelper.json"}])
    server = start_server([plain], extra_args=["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root"])
    yield server, llm


def _put(server: Server, slug: str, body: Any, who: str = "root") -> Any:
    return server.client.put(f"/v1/agents/{slug}", headers=owner(who), content=json.dumps(body))


def _run(server: Server, agent: str, who: str = "alice") -> dict[str, Any]:
    answer = server.client.post(
        "/v1/sessions?wait=true", headers=owner(who), content=json.dumps({"agent": agent, "prompt": "shout hello"})
    )
    assert answer.status_code == 201, answer.text
    view = answer.json()
    assert view["status"] == "idle", view
    return view


def _tool_output(view: dict[str, Any]) -> str:
    head = view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]
    assert head.startswith("the tool said "), head
    return head.removeprefix("the tool said ")


def test_a_stored_agent_runs_its_own_bash_tool_and_edits_apply_at_once(setup: tuple[Server, MockLlmServer]) -> None:
    server, llm = setup
    body = shouter(llm.url)
    created = _put(server, "shouter", body)
    assert created.status_code == 201, created.text
    descriptor = created.json()
    assert descriptor["slug"] == "shouter" and descriptor["source"] == "database"
    # storing runs nothing, so the answer lists no tools; loading the agent lists them
    assert descriptor["tools"] == [] and descriptor["description"] == "shouts what it is given"
    assert descriptor["config"] == {**body, "slug": "shouter"}
    assert descriptor["updated_by"] == "root" and descriptor["updated_at"].endswith("Z")
    # every owner sees both kinds
    listed = server.client.get("/v1/agents", headers=owner("alice")).json()
    assert [(a["slug"], a["source"]) for a in listed] == [("plain", "file"), ("shouter", "database")]
    assert "config" not in listed[0]
    loaded = server.client.get("/v1/agents/shouter", headers=owner("bob")).json()
    assert loaded == {**descriptor, "tools": ["bash_shout"]}

    first = _run(server, "shouter")
    assert _tool_output(first) == "v1:HELLO THERE"
    tool_messages = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["v1:HELLO THERE"]

    # a PUT replaces the agent and all its files; new sessions use the new version at once
    replaced = _put(server, "shouter", shouter(llm.url, "v2"))
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["config"]["files"]["tools/shout"] == shout_tool("v2")
    assert _tool_output(_run(server, "shouter", "bob")) == "v2:HELLO THERE"
    # the same body again is a replace too
    assert _put(server, "shouter", shouter(llm.url, "v2")).status_code == 200

    # a stored agent can be put back from its config as it is
    assert _put(server, "copy", {**descriptor["config"], "slug": "copy"}).status_code == 201
    assert _tool_output(_run(server, "copy")) == "v1:HELLO THERE"

    deleted = server.client.delete("/v1/agents/copy", headers=owner("root"))
    assert deleted.status_code == 200 and deleted.json()["slug"] == "copy"
    assert deleted.json()["source"] == "database"
    refused(server, "GET", "/v1/agents/copy", 404, "unknown_agent", headers=owner("alice"))
    # sessions of a deleted agent stay readable; they cannot go on until the slug exists again
    sid = first["session_id"]
    assert server.client.delete("/v1/agents/shouter", headers=owner("root")).status_code == 200
    assert server.client.get(f"/v1/sessions/{sid}", headers=owner("alice")).status_code == 200
    refused(
        server,
        "POST",
        f"/v1/sessions/{sid}/messages",
        404,
        "unknown_agent",
        headers=owner("alice"),
        body={"prompt": "x"},
    )
    assert _put(server, "shouter", shouter(llm.url, "v3")).status_code == 201
    more = server.client.post(
        f"/v1/sessions/{sid}/messages?wait=true", headers=owner("alice"), content='{"prompt": "again"}'
    )
    assert more.status_code == 200 and _tool_output(more.json()) == "v3:HELLO THERE"


def test_helpers_are_stored_agents_without_cycles_and_in_use_ones_stay(setup: tuple[Server, MockLlmServer]) -> None:
    server, llm = setup
    assert _put(server, "helper", agent_body(llm.url)).status_code == 201
    parent = _put(server, "parent", agent_body(llm.url, extraAgents=[{"slug": "helper"}]))
    assert parent.status_code == 201 and parent.json()["helpers"] == ["helper"]
    assert _put(server, "grand", agent_body(llm.url, extraAgents=[{"slug": "parent"}])).status_code == 201
    root = owner("root")
    refused(server, "DELETE", "/v1/agents/helper", 409, "agent_in_use", headers=root)
    refused(server, "DELETE", "/v1/agents/parent", 409, "agent_in_use", headers=root)
    # cycles, self-reference included, through any length
    for slug, helpers in (("helper", ["helper"]), ("helper", ["parent"]), ("helper", ["grand"]), ("lone", ["lone"])):
        body = agent_body(llm.url, extraAgents=[{"slug": h} for h in helpers])
        refused(server, "PUT", f"/v1/agents/{slug}", 400, "helper_cycle", headers=root, body=body)
    # replacing a helper keeps its dependents (they reload with it)
    assert _put(server, "helper", agent_body(llm.url, announce="a new helper")).status_code == 200
    assert server.client.get("/v1/agents/parent", headers=root).json()["helpers"] == ["helper"]
    # deleting from the top down works
    for slug in ("grand", "parent", "helper"):
        assert server.client.delete(f"/v1/agents/{slug}", headers=root).status_code == 200
    assert [a["slug"] for a in server.client.get("/v1/agents", headers=root).json()] == ["plain"]


def test_every_refusal_leaves_the_stored_agents_alone(setup: tuple[Server, MockLlmServer]) -> None:
    server, llm = setup
    good = shouter(llm.url)
    assert _put(server, "kept", good).status_code == 201
    root = owner("root")

    def put_refused(status: int, code: str, body: Any, slug: str = "kept") -> None:
        refused(server, "PUT", f"/v1/agents/{slug}", status, code, headers=root, body=body)

    # who may edit
    refused(server, "PUT", "/v1/agents/kept", 403, "forbidden", headers=owner("alice"), body=good)
    refused(server, "DELETE", "/v1/agents/kept", 403, "forbidden", headers=owner("alice"))
    refused(server, "PUT", "/v1/agents/kept", 401, "unauthorized", body=good)
    # the body's shape
    put_refused(400, "bad_request", [good])
    put_refused(400, "bad_request", {**good, "files": ["tools/shout"]})
    put_refused(400, "bad_request", {**good, "files": {"tools/shout": 42}})
    put_refused(400, "bad_request", {**good, "slug": "other"})
    put_refused(400, "bad_request", {"tag": "SomethingElse", "contents": good})
    # file agents own their slugs
    put_refused(409, "agent_defined_by_file", good, slug="plain")
    put_refused(409, "agent_defined_by_file", good, slug="filehelper")
    refused(server, "DELETE", "/v1/agents/plain", 409, "agent_defined_by_file", headers=root)
    refused(server, "DELETE", "/v1/agents/ghost", 404, "unknown_agent", headers=root)
    # toolboxes that read the server's files, and helpers by path
    for key, value in (
        ("openApiToolboxes", [{"tag": "OpenAPIServer", "contents": {"SpecUrl": "spec.json", "BaseUrl": "http://x"}}]),
        (
            "openApiToolboxes",
            [{"tag": "OpenAPIServer", "contents": {"SpecUrl": "file:///etc/x", "BaseUrl": "http://x"}}],
        ),
        ("postgrestToolboxes", [{"tag": "PostgRESTToolbox", "contents": {}}]),
        ("skillSources", [{"tag": "SkillDirectory", "contents": "skills"}]),
        ("autoEnableSkills", ["writing"]),
        ("extraAgents", [{"slug": "helper", "path": "./helper.json"}]),
    ):
        put_refused(400, "agent_uses_files", {**good, key: value})
    # paths outside the files
    for change in (
        {"files": {"/etc/cron.d/x": "x"}},
        {"files": {"../escape": "x"}},
        {"files": {"tools/../../escape": "x"}},
        {"files": {"tools": "x", "tools/shout": shout_tool("v1")}},
        {"toolDirectory": "/usr/bin"},
        {"toolDirectory": "../tools"},
        {"bashToolboxes": [{"tag": "SingleTool", "contents": {"Path": "/bin/sh"}}]},
        {"bashToolboxes": [{"tag": "FileSystemDirectory", "contents": {"Path": "tools/../.."}}]},
        {"bashToolboxes": [{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "root": "/"}}]},
    ):
        put_refused(400, "agent_invalid_paths", {**good, **change})
    # agents that do not load: nothing stored, the old version stays
    for change in (
        {"modelUrl": "ftp://nowhere"},
        {"systemPrompt": "not a list"},
        {"toolDirectory": "missing"},
        {"bashToolboxes": [{"tag": "SingleTool", "contents": {"Path": "tools/nothing"}}]},
    ):
        put_refused(400, "agent_failed_to_load", {**good, **change})
    # a process the server would start (docs/agents.md §9)
    mcp = {"tag": "McpSimpleBinary", "contents": {"name": "x", "executable": "x", "args": []}}
    put_refused(400, "agent_runs_commands", {**good, "mcpServers": [mcp]})
    put_refused(400, "agent_failed_to_load", {"slug": "new"} | {"files": {}}, slug="new")
    # helpers must be stored agents (not file agents)
    put_refused(400, "unknown_helper", {**good, "extraAgents": [{"slug": "ghost"}]})
    put_refused(400, "unknown_helper", {**good, "extraAgents": [{"slug": "plain"}]})
    put_refused(400, "unknown_helper", {**good, "extraAgents": [{"slug": "filehelper"}]})
    put_refused(400, "helper_cycle", {**good, "extraAgents": [{"slug": "kept"}]})
    # the agent still works as it was stored
    assert _tool_output(_run(server, "kept")) == "v1:HELLO THERE"


def test_edits_reach_every_server_and_worker_at_once(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(SCRIPT)
    plain = write_agent(tmp_path, "plain", llm.url)
    env = {"REDIS_URL": redis_url}
    args = ["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root"]
    first = start_server([plain], db=postgres_url, env=env, extra_args=args)
    second = start_server([plain], db=postgres_url, env=env, extra_args=args)
    start_worker([plain], db=postgres_url, env=env)
    # both servers have looked at the (empty) stored agents before the edit
    for server in (first, second):
        assert [a["slug"] for a in server.client.get("/v1/agents", headers=owner("alice")).json()] == ["plain"]

    assert _put(first, "shouter", shouter(llm.url, "one")).status_code == 201
    # the other server answers for it at once, and the worker runs it with its tool
    assert second.client.get("/v1/agents/shouter", headers=owner("alice")).json()["source"] == "database"
    assert _tool_output(_run(second, "shouter")) == "one:HELLO THERE"
    assert _put(second, "shouter", shouter(llm.url, "two")).status_code == 200
    assert _tool_output(_run(first, "shouter")) == "two:HELLO THERE"
    assert second.client.delete("/v1/agents/shouter", headers=owner("root")).status_code == 200
    refused_on_first = first.client.get("/v1/agents/shouter", headers=owner("alice"))
    assert refused_on_first.status_code == 404 and refused_on_first.json()["error"] == "unknown_agent"


def test_a_stored_agent_whose_tools_cannot_be_built_does_not_keep_the_server_from_starting(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    plain = write_agent(tmp_path, "plain", llm.url)
    args = ["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root"]
    first = start_server([plain], extra_args=args)
    # the document's host goes away after the agent was stored: nothing listens on port 9 here
    toolbox = {
        "tag": "OpenAPIServer",
        "contents": {"SpecUrl": "http://127.0.0.1:9/spec", "BaseUrl": "http://127.0.0.1:9", "Name": "t"},
    }
    assert _put(first, "gone", agent_body(llm.url, openApiToolboxes=[toolbox])).status_code == 201
    first.stop()
    second = start_server([plain], db=first.db, extra_args=args)
    assert second.client.get("/healthz").status_code == 200
    refused(second, "GET", "/v1/agents/gone", 400, "agent_failed_to_load", headers=owner("alice"))
    assert "agents.stored_load_failed" in second.process.output()
    assert _run(second, "plain")["status"] == "idle"
