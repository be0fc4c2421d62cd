"""External tools (issue 16, acceptance 7): tools declared in the agent file with a JSON schema,
offered to the model and deferred to the outside world (docs/agents.md §10)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentfiles.loader import AgentLoadError, load_agent_tree
from tests.demo import demo_agents
from tests.harness import ROOT, Processes, Server, write_agent, write_tool

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "the city, e.g. Paris"}},
    "required": ["city"],
    "additionalProperties": False,
}


def _post(server: Server, path: str, body: dict):
    return server.client.post(path, content=json.dumps(body))


def _offered(request: dict) -> dict[str, dict]:
    return {tool["function"]["name"]: tool["function"] for tool in request.get("tools") or []}


def test_the_weather_example_offers_get_weather_with_its_schema(tmp_path, llm_server, start_server) -> None:
    # the model calls get_weather only when it is offered, as a real model would
    llm = llm_server({"rules": [
        {"when": {"last_role": "user", "has_tool": "get_weather"},
         "reply": {"content": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "The weather in Paris: {last_content}."}},
        {"reply": {"content": "I have no weather tool."}},
    ]})
    weather, _ = demo_agents(tmp_path, llm.url)
    server = start_server([weather])
    view = _post(server, "/v1/sessions?wait=true", {"agent": "weather", "prompt": "Weather in Paris?"}).json()
    assert view["status"] == "waiting_external"
    offered = _offered(llm.requests[0])
    assert offered["get_weather"] == {
        "name": "get_weather",
        "description": "The current weather of a city, from the weather service.",
        "parameters": WEATHER_SCHEMA,
    }
    [pending] = view["pending"]
    assert pending["tool"] == "get_weather"
    assert pending["disposition"] == {"tag": "defer", "reason": "weather service"}
    done = _post(server, f"/v1/continuations/{pending['continuation_token']}?wait=true", {"result": "sunny"}).json()
    assert done["status"] == "idle"
    assert done["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "The weather in Paris: sunny."
    # the tools stored on the session's user turns include it too, as agents-exe stores tools
    first_user_turn = done["session"]["turns"][-1]
    assert "get_weather" in [t["contents"]["llmName"] for t in first_user_turn["contents"]["userTools"]]


def test_an_external_tool_is_deferred_without_a_policy_and_a_rule_can_override(
    tmp_path, llm_server, start_server
) -> None:
    llm = llm_server({"rules": [
        {"when": {"last_role": "user", "last_contains": "lookup"},
         "reply": {"content": "", "tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]}},
        {"when": {"last_role": "user", "last_contains": "stamp"},
         "reply": {"content": "", "tool_calls": [{"name": "stamp", "arguments": {}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "got {last_content}"}},
    ]})
    lookup = {"name": "lookup", "description": "looks a key up",
              "parameters": {"type": "object", "properties": {"key": {"type": "string"}}}}
    stamp = {"name": "stamp", "parameters": {"type": "object", "properties": {}}}
    agent = write_agent(
        tmp_path, "ext", llm.url, externalTools=[lookup, stamp],
        toolCallPolicyConfig={"default": {"tag": "runSync"},
                              "rules": [{"tool": "stamp", "disposition": {"tag": "runSync"}}]},
    )
    server = start_server([agent])
    view = _post(server, "/v1/sessions?wait=true", {"agent": "ext", "prompt": "lookup please"}).json()
    assert view["status"] == "waiting_external"
    [pending] = view["pending"]
    assert pending["tool"] == "lookup" and pending["disposition"] == {"tag": "defer", "reason": "external tool"}
    # a rule that makes it run in the server gets an error the model sees: there is nothing to run
    view = _post(server, "/v1/sessions?wait=true", {"agent": "ext", "prompt": "stamp please"}).json()
    assert view["status"] == "idle"
    answer = view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]
    assert answer.startswith("got Error: tool stamp is run outside this server")


@pytest.mark.parametrize(
    ("declaration", "problem"),
    [
        ({"name": "get weather", "parameters": {"type": "object"}}, "externalTools[0].name"),
        ({"name": "x" * 65, "parameters": {"type": "object"}}, "externalTools[0].name"),
        ({"name": "get_weather", "parameters": {"type": "array"}}, '"type": "object"'),
        ({"name": "get_weather", "parameters": {"type": "object", "properties": 3}}, "not a valid JSON schema"),
        ({"description": "no name", "parameters": {"type": "object"}}, "externalTools[0].name"),
    ],
)
def test_a_bad_declaration_refuses_the_agent_file(
    tmp_path: Path, declaration: dict, problem: str, processes: Processes
) -> None:
    path = write_agent(tmp_path, "ext", "http://127.0.0.1:1/v1", externalTools=[declaration])
    with pytest.raises(AgentLoadError) as raised:
        load_agent_tree(path)
    assert problem in str(raised.value)
    check = processes.run(
        [sys.executable, "-m", "agentsite.cli", "check", "--agent-file", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert check.returncode == 1 and problem in check.stderr


def test_an_external_tool_named_like_another_tool_refuses_the_agent(tmp_path, llm_server) -> None:
    write_tool(tmp_path / "tools", "echo", {"slug": "echo", "description": "echo", "args": []}, "echo hi")
    path = write_agent(
        tmp_path, "ext", "http://127.0.0.1:1/v1", toolDirectory="tools",
        externalTools=[{"name": "bash_echo", "parameters": {"type": "object"}}],
    )
    check = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "check", "--agent-file", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert check.returncode == 1
    assert "bash_echo" in check.stderr
