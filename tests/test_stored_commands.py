"""Storing an agent runs nothing, and stored agents run no command the operator did not allow
(docs/agents.md §9, docs/api.md §12.2): an MCP ``executable``, a ``Command`` or ``EnvVar`` default,
an OpenAPI secret from either, a ``${VAR}``; out-of-range numbers are refused (docs/agents.md §2).

Over HTTP with real servers; the run-time rules in one process.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from agents_app.models import StoredAgent, StoredAgentsGeneration
from agents_app.registry import AgentRegistry, get_registry, set_registry
from agents_app.runtime import reset_runtime_agents, runtime_agent
from console_app.agent_form import StoredAgentForm
from foundation.errors import AgentRunsCommands, UnknownAgent
from tests.harness import Server, write_agent
from tests.owners import owner, refused, snapshot, write_tokens
from tests.test_console_forms import _post


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m",
        "announce": "a stored agent",
        "systemPrompt": ["hi"],
        **extra,
    }


def _touch(marker: Path) -> list[str]:
    return ["/bin/sh", "-c", f"touch {marker}"]


def _mcp(marker: Path) -> dict[str, Any]:
    """An MCP server that leaves ``marker`` behind if it is ever started."""
    return {"tag": "McpSimpleBinary", "contents": {"name": "x", "executable": "/bin/sh", "args": _touch(marker)[1:]}}


def _command_default(marker: Path) -> dict[str, Any]:
    return {"name": "token", "default": {"tag": "Command", "contents": _touch(marker)}}


def _put(server: Server, slug: str, body: Any) -> Any:
    return server.client.put(f"/v1/agents/{slug}", headers=owner("root"), content=json.dumps(body))


@pytest.fixture
def agent_file(tmp_path: Path) -> Path:
    return write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")


def _args(tmp_path: Path, *more: str) -> list[str]:
    return ["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root", *more]


def test_commands_are_refused_by_default_with_the_field_and_nothing_runs(
    tmp_path: Path, agent_file: Path, start_server: Callable[..., Server]
) -> None:
    server = start_server([agent_file], extra_args=_args(tmp_path))
    marker = tmp_path / "ran"
    root = owner("root")
    assert _put(server, "kept", _body()).status_code == 201
    secret_default = {"name": "key", "secret": True, "default": {"tag": "EnvVar", "contents": "DJANGO_SECRET_KEY"}}
    openapi = {"SpecUrl": "http://127.0.0.1:9/spec.json", "BaseUrl": "http://127.0.0.1:9"}
    for slug, change, field in (
        ("kept", {"mcpServers": [_mcp(marker)]}, "mcpServers[0].contents.executable"),
        ("new", {"parameters": [_command_default(marker)]}, "parameters[0].default"),
        ("new", {"parameters": [secret_default]}, "parameters[0].default: a EnvVar default"),
        (
            "new",
            {"openApiToolboxes": [{"tag": "OpenAPIServer", "contents": {**openapi, "Token": "${DJANGO_SECRET_KEY}"}}]},
            "openApiToolboxes[0].contents.Token",
        ),
        (
            "new",
            {
                "openApiToolboxes": [
                    {
                        "tag": "OpenAPIServer",
                        "contents": {
                            **openapi,
                            "Secrets": [
                                {
                                    "source": {"tag": "Command", "contents": _touch(marker)},
                                    "serializer": {"tag": "Header", "contents": ["X", "{secret}"]},
                                }
                            ],
                        },
                    }
                ]
            },
            "openApiToolboxes[0].contents.Secrets[0].source",
        ),
    ):
        error = refused(server, "PUT", f"/v1/agents/{slug}", 400, "agent_runs_commands", headers=root,
                        body=_body(**change))
        assert field in error["message"] and "--allow-stored-commands" in error["message"], error
    assert not marker.exists()
    # the stored agent is as it was
    assert server.client.get("/v1/agents/kept", headers=root).json()["version"] == 1


def test_out_of_range_numbers_are_refused_and_nothing_is_stored(
    tmp_path: Path, agent_file: Path, start_server: Callable[..., Server]
) -> None:
    server = start_server([agent_file], extra_args=_args(tmp_path))
    runasync = {"tag": "runAsync", "attachSeconds": 1e308}
    for change, field in (
        ({"maxConcurrency": 1e22}, "maxConcurrency"),
        ({"maxConcurrency": 257}, "maxConcurrency"),
        ({"toolCallPolicyConfig": {"default": runasync, "rules": []}}, "toolCallPolicyConfig.default.attachSeconds"),
        ({"asyncCallTimeoutSeconds": 1e300}, "asyncCallTimeoutSeconds"),
        ({"mailboxMaxUnread": 10**12}, "mailboxMaxUnread"),
        ({"maxMailHops": 10**6}, "maxMailHops"),
        ({"maxWaitSeconds": 1e9}, "maxWaitSeconds"),
    ):
        error = refused(server, "PUT", "/v1/agents/big", 400, "agent_failed_to_load", headers=owner("root"),
                        body=_body(**change))
        assert f"'big': {field}: " in error["message"], error
        assert change == {"maxConcurrency": 1e22} or "less than or equal to" in error["message"], error
    assert snapshot(server.db)["agents_app_storedagent"] == []


def test_the_operator_flag_allows_them_and_storing_still_runs_nothing(
    tmp_path: Path, agent_file: Path, start_server: Callable[..., Server]
) -> None:
    db = str(tmp_path / "shared.db")
    allowed = start_server([agent_file], db=db, extra_args=_args(tmp_path, "--allow-stored-commands"))
    server_marker, default_marker = tmp_path / "server-ran", tmp_path / "default-ran"
    body = _body(mcpServers=[_mcp(server_marker)], parameters=[_command_default(default_marker)])
    stored = _put(allowed, "runner", body)
    assert stored.status_code == 201, stored.text
    assert stored.json()["tools"] == [] and stored.json()["config"]["mcpServers"] == body["mcpServers"]
    assert not server_marker.exists() and not default_marker.exists()
    # a bash tool's describe runs when the agent is loaded, not when it is stored
    described = tmp_path / "described"
    tool = f"#!/bin/sh\ntouch {described}\necho '{{\"slug\": \"x\", \"description\": \"x\", \"args\": []}}'\n"
    assert _put(allowed, "describer", _body(toolDirectory="tools", files={"tools/x": tool})).status_code == 201
    assert not described.exists()
    assert allowed.client.get("/v1/agents/describer", headers=owner("alice")).json()["tools"] == ["bash_x"]
    assert described.exists()
    allowed.stop()

    # the same row, in a server without the flag: refused when it is loaded, with the same error
    server = start_server([agent_file], db=db, extra_args=_args(tmp_path))
    for method, path, payload in (
        ("GET", "/v1/agents/runner", None),
        ("POST", "/v1/sessions", {"agent": "runner", "prompt": "hi"}),
    ):
        error = refused(server, method, path, 400, "agent_runs_commands", headers=owner("alice"), body=payload)
        assert "mcpServers[0].contents.executable" in error["message"] and "parameters[0].default" in error["message"]
    listed = server.client.get("/v1/agents", headers=owner("alice")).json()
    assert [agent["slug"] for agent in listed] == ["describer", "plain"]
    assert not server_marker.exists() and not default_marker.exists()


@pytest.fixture
def registry() -> Iterator[AgentRegistry]:
    set_registry(AgentRegistry({}, {"k": "secret-k"}))
    reset_runtime_agents()
    yield get_registry()
    set_registry(None)
    reset_runtime_agents()


def _store_row(slug: str, contents: dict[str, Any]) -> None:
    """A row as a server before the rule stored it: no check at all."""
    now = timezone.now()
    StoredAgent.objects.create(
        slug=slug, contents={**contents, "slug": slug}, files={}, helpers=[], version=1, created_at=now, updated_at=now
    )
    generation, _ = StoredAgentsGeneration.objects.get_or_create(pk=1)
    generation.generation += 1
    generation.save()


@pytest.mark.django_db
def test_a_row_stored_before_the_rule_runs_nothing_unless_allowed(registry: AgentRegistry, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    _store_row("old", _body(parameters=[_command_default(marker)]))
    with pytest.raises(AgentRunsCommands) as refusal:
        runtime_agent("old")
    assert refusal.value.code == "agent_runs_commands" and "parameters[0].default" in refusal.value.message
    # what handles a gone agent handles it too
    assert isinstance(refusal.value, UnknownAgent)
    assert registry.roots() == [] and not marker.exists()
    with override_settings(AGENTS={**_settings_agents(), "ALLOW_STORED_COMMANDS": True}):
        _store_row("other", _body())  # moves the generation: the cache looks again
        assert runtime_agent("old").parameters.process_value("token") is not None
    assert marker.exists()


def _settings_agents() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.AGENTS)


@pytest.mark.django_db
def test_the_console_editor_refuses_them_at_their_field_and_its_check_runs_nothing(
    registry: AgentRegistry, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    form = StoredAgentForm(_post({"mcpServers": json.dumps([_mcp(marker)])}))
    assert not form.is_valid()
    assert form.errors["mcpServers"][0].startswith("agent_runs_commands: mcpServers[0].contents.executable")
    env = json.dumps([{"name": "key", "default": {"tag": "EnvVar", "contents": "DJANGO_SECRET_KEY"}}])
    form = StoredAgentForm(_post({"parameters": env}))
    assert not form.is_valid()
    assert form.errors["parameters"][0].startswith("agent_runs_commands: parameters[0].default")
    assert StoredAgent.objects.count() == 0
    with override_settings(AGENTS={**_settings_agents(), "ALLOW_STORED_COMMANDS": True}):
        form = StoredAgentForm(
            _post({"mcpServers": json.dumps([_mcp(marker)]), "parameters": json.dumps([_command_default(marker)])})
        )
        assert form.is_valid(), form.errors
        assert form.check_report() == [
            "today: knows the date (0 tools known before loading)",
            "today: mcpServers[0]: built when the agent is loaded",
            "today: parameter token (process, required): unbound (Command /bin/sh runs when the agent is loaded)",
        ]
    assert not marker.exists() and StoredAgent.objects.count() == 0
