"""On-demand tool groups (issue 15, acceptance 4): the fixture session ``activation-session.json``
replays as agents-exe recorded it (the three meta tools declared word for word, the same calls and
the same answers), the group's tool is hidden until ``meta_activate_tool``, offered from the next
request on and used; it hides again on ``meta_deactivate_tool``; the state, a fold over the turns,
survives a restart and a fork; a hidden tool's call never runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devtools.mockllm import MockLlmServer
from tests.harness import FIXTURES, Server, write_agent, write_tool

FIXTURE = json.loads((FIXTURES / "sessions" / "activation-session.json").read_text())
ASK = "bash_ask_user"


def _call(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "id": call_id}


SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user", "last_contains": "call the activation tool"},
            "reply": {"tool_calls": [_call("meta_activate_tool", '{"toolgroup":"ask-user"}', "meta_activate_tool:0")]},
        },
        {
            "when": {"last_role": "user", "last_contains": "do you have a ask_user tool now?"},
            "reply": {"tool_calls": [_call("meta_discover_tools", "{}", "meta_discover_tools:1")]},
        },
        {
            "when": {"last_role": "user", "last_contains": "ask them"},
            "reply": {"tool_calls": [_call(ASK, '{"question":"tea?"}', "ask:2")]},
        },
        {
            "when": {"last_role": "user", "last_contains": "put it away"},
            "reply": {"tool_calls": [_call("meta_deactivate_tool", '{"toolgroup":"ask-user"}', "off:3")]},
        },
        {
            "when": {"last_role": "user", "last_contains": "sneak"},
            "reply": {"tool_calls": [_call(ASK, '{"question":"sneaky?"}', "sneak:4")]},
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "noted: {last_content}"}},
        {"reply": {"content": "ok"}},
    ]
}


def _agent(tmp_path: Path, llm_url: str) -> Path:
    write_tool(
        tmp_path / "asking",
        "ask_user",
        {
            "slug": "ask_user",
            "description": "Asks the user a question",
            "args": [
                {
                    "name": "question",
                    "description": "what to ask",
                    "type": "string",
                    "backing_type": "string",
                    "arity": "single",
                    "mode": "positional",
                }
            ],
        },
        f'echo "$1" >> {tmp_path}/asked; echo "the user says yes"',
    )
    return write_agent(
        tmp_path,
        "asker",
        llm_url,
        systemPrompt=["You are a helpful software agent trying to solve user requests"],
        bashToolboxes=[
            {
                "tag": "FileSystemDirectory",
                "contents": {"Path": "asking", "Activation": {"tag": "on-demand", "toolgroup": "ask-user"}},
            }
        ],
    )


def _exchanges(turns: list[dict[str, Any]]) -> list[tuple[str, str, str, Any]]:
    """Each answered call, oldest first: (name, arguments, id, response)."""
    return [
        (call["function"]["name"], call["function"]["arguments"], call["id"], response)
        for turn in reversed(turns)
        if turn["tag"] == "UserTurn"
        for call, response in turn["contents"].get("userToolResponses") or []
    ]


def _offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def _say(server: Server, session_id: str | None, text: str) -> dict[str, Any]:
    if session_id is None:
        answer = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "asker", "prompt": text}))
    else:
        answer = server.client.post(
            f"/v1/sessions/{session_id}/messages?wait=true", content=json.dumps({"prompt": text})
        )
    assert answer.status_code in (200, 201), answer.text
    assert answer.json()["status"] == "idle", answer.json()["status_detail"]
    return answer.json()


def _turns(server: Server, session_id: str) -> list[dict[str, Any]]:
    return server.client.get(f"/v1/sessions/{session_id}").json()["session"]["turns"]


def test_the_fixture_session_replays_then_the_group_is_used_hidden_again_and_survives_restart_and_fork(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    agent = _agent(tmp_path, llm.url)
    server = start_server([agent])
    assert server.client.get("/v1/agents/asker").json()["tools"] == [
        ASK,
        "meta_activate_tool",
        "meta_deactivate_tool",
        "meta_discover_tools",
    ]

    # the fixture's two exchanges, as agents-exe recorded them
    sid = _say(server, None, "call the activation tool with argument ask-user")["session_id"]
    _say(server, sid, "do you have a ask_user tool now?")
    turns = _turns(server, sid)
    assert _exchanges(turns) == _exchanges(FIXTURE["turns"])
    recorded_tools = FIXTURE["turns"][-1]["contents"]["userTools"]
    assert turns[-1]["contents"]["userTools"] == recorded_tools
    # hidden before the activation, offered from the request after it on
    first, after_activation = llm.requests[0], llm.requests[1]
    assert first["tools"] == [tool["contents"]["raw"] for tool in recorded_tools]
    assert _offered(after_activation) == [ASK, "meta_activate_tool", "meta_deactivate_tool", "meta_discover_tools"]

    # used
    _say(server, sid, "ask them")
    assert _exchanges(_turns(server, sid))[-1] == (ASK, '{"question":"tea?"}', "ask:2", "the user says yes\n")
    assert (tmp_path / "asked").read_text() == "tea?\n"

    # the state is read from the turns: a new server process and a fork see the group active
    server.stop()
    server = start_server([agent], db=server.db)
    fork = server.client.post(f"/v1/sessions/{sid}/fork", content="{}").json()["session_id"]
    llm.reset()
    _say(server, fork, "ask them")
    assert ASK in _offered(llm.requests[0])

    # deactivated: hidden again, and a call the model makes anyway never runs
    _say(server, sid, "put it away")
    llm.reset()
    _say(server, sid, "sneak")
    assert ASK not in _offered(llm.requests[0])
    assert _exchanges(_turns(server, sid))[-1][3] == (
        'Error: tool bash_ask_user is not active: call meta_activate_tool with {"toolgroup": "ask-user"} first'
    )
    assert (tmp_path / "asked").read_text() == "tea?\ntea?\n"


def test_a_hidden_tool_is_never_run_and_unknown_groups_are_refused(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    script = {
        "rules": [
            {
                "when": {"last_role": "user", "last_contains": "wrong group"},
                "reply": {"tool_calls": [_call("meta_activate_tool", '{"toolgroup":"nope"}', "x:1")]},
            },
            *SCRIPT["rules"],
        ]
    }
    llm = llm_server(script)
    server = start_server([_agent(tmp_path, llm.url)])
    sid = _say(server, None, "sneak")["session_id"]
    assert _exchanges(_turns(server, sid))[0][3].startswith("Error: tool bash_ask_user is not active")
    assert not (tmp_path / "asked").exists()
    _say(server, sid, "wrong group")
    assert _exchanges(_turns(server, sid))[-1][3] == (
        "Error: meta_activate_tool: unknown toolgroup 'nope'; toolgroups: ask-user"
    )
    llm.reset()
    _say(server, sid, "hello")
    assert _offered(llm.requests[0]) == ["meta_activate_tool", "meta_deactivate_tool", "meta_discover_tools"]
