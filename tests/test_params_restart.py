"""Secrets lost with the process that held them (the embedded default), and parameters of stored agents.

After a restart, a session whose required secret is gone has its running calls failed and says
``params_required: <names>``; its next run fails fast the same way; requests without the value
are refused with 422 until the owner gives it again (issue 14).
"""

from __future__ import annotations

import json
import signal

from tests.harness import wait_until, write_agent, write_tool
from tests.owners import owner, refused, write_tokens

SCRIPT = {
    "rules": [
        {"when": {"last_role": "user", "last_contains": "slow"},
         "reply": {"tool_calls": [{"name": "bash_slow", "arguments": {}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "after: {last_content}"}},
        {"reply": {"content": "hello"}},
    ]
}


def _agent(tmp_path, llm_url):
    arg = {"name": "token", "description": "t", "type": "string", "backing_type": "string", "arity": "single",
           "mode": "env"}
    write_tool(tmp_path / "tools", "slow", {"slug": "slow", "description": "slow", "args": [arg]},
               'sleep 5; echo "done with $TOKEN"')
    return write_agent(
        tmp_path,
        "vault",
        llm_url,
        parameters=[{"name": "token", "scope": "session", "secret": True}],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            {"arg": "token", "value": {"tag": "Param", "contents": "token"}}]}}],
        toolCallPolicyConfig={"default": {"tag": "runAsync"}, "rules": []},
        executionMode="asynchronous",
    )


def test_a_restart_forgets_secrets_and_says_which(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    agent = _agent(tmp_path, llm.url)
    server = start_server([agent])
    sid = server.client.post("/v1/sessions", content=json.dumps(
        {"agent": "vault", "prompt": "slow please", "params": {"token": "s3cr3t"}})).json()["session_id"]
    # the background call runs; the process dies with it
    wait_until(lambda: "tool.started" in server.process.output() or len(llm.requests) >= 1, timeout=30)
    wait_until(lambda: server.client.get(f"/v1/sessions/{sid}").json()["session"]["turns"][0]["tag"]
               == "PartialUserTurn", timeout=30)
    server.process.proc.send_signal(signal.SIGKILL)
    server.process.proc.wait(10)

    again = start_server([agent], db=server.db)
    view = again.client.get(f"/v1/sessions/{sid}").json()
    assert view["status_detail"] == "params_required: token" and view["secret_params"] == []
    [[_, result]] = view["session"]["turns"][0]["contents"]["userToolResponses"]
    assert result == "Error: parameter token is not bound"
    assert '"kind": "sessions.params_required"' in again.process.output()
    refused(again, "POST", f"/v1/sessions/{sid}/resume", 422, "params_required", body={})
    refused(again, "POST", f"/v1/sessions/{sid}/messages", 422, "params_required", body={"prompt": "hi"})
    # a run started otherwise (mail wakes the session) fails fast, naming it
    mail = {"body": {"tag": "userMessage", "query": "are you there?"}}
    assert again.client.post(f"/v1/sessions/{sid}/mail", content=json.dumps(mail)).status_code == 202
    failed = wait_until(lambda: (v := again.client.get(f"/v1/sessions/{sid}").json())["status"] == "failed" and v)
    assert failed["status_detail"] == "params_required: token"
    # given again, it runs; the model saw why the call failed
    assert again.client.put(f"/v1/sessions/{sid}/params", content='{"token": "fresh"}').status_code == 200
    done = again.client.post(f"/v1/sessions/{sid}/resume?wait=true", content=b"")
    assert done.status_code == 200 and done.json()["status"] == "idle", done.text
    assert "parameter token is not bound" in json.dumps(llm.requests[-1]["messages"])
    assert "s3cr3t" not in again.process.output() + server.process.output() + json.dumps(llm.requests)


def test_stored_agents_are_checked_for_parameters_and_bindings(tmp_path, llm_server, start_server) -> None:
    server = start_server([], extra_args=["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root"])
    root = owner("root")
    tool = ("#!/bin/sh\nif [ \"$1\" = describe ]; then echo '{\"slug\": \"t\", \"description\": \"d\", \"args\": ["
            "{\"name\": \"a\", \"description\": \"a\", \"type\": \"string\", \"backing_type\": \"string\","
            " \"arity\": \"single\", \"mode\": \"positional\"}]}'; else echo \"$2\"; fi\n")
    base = {"apiKeyId": "k", "flavor": "OpenAIv1", "modelUrl": "http://127.0.0.1:9/v1", "modelName": "m",
            "announce": "a", "systemPrompt": [], "toolDirectory": "tools", "files": {"tools/t": tool}}
    secret = [{"name": "s", "scope": "session", "secret": True}]
    # bindings fit the tools' arguments, known once the agent is loaded: storing runs no describe
    for slug, extra, text in (
        ("secretarg", {"parameters": secret, "bashToolboxes": [{"tag": "SingleTool", "contents": {
            "Path": "tools/t", "Bindings": [{"arg": "a", "value": {"tag": "Param", "contents": "s"}}]}}]},
         "a secret must use"),
        ("nope", {"bindings": [{"arg": "nope", "value": {"tag": "Literal", "contents": 1}}]},
         "no tool matching '*' has an argument nope"),
    ):
        body = {**base, **extra}
        if "bashToolboxes" in extra:
            body.pop("toolDirectory")
        assert server.client.put(f"/v1/agents/{slug}", headers=root, content=json.dumps(body)).status_code == 201
        error = refused(server, "GET", f"/v1/agents/{slug}", 400, "agent_failed_to_load", headers=root)
        assert text in error["message"], error
    cases = [
        ({"parameters": [{"name": "p"}]}, 400, "agent_failed_to_load", "parameter p is required and has no value"),
        ({"parameters": [{"name": "p", "default": {"tag": "FileSystem", "contents": "/etc/passwd"}}]},
         400, "agent_invalid_paths", "is absolute"),
    ]
    for extra, status, code, text in cases:
        body = {**base, **{k: v for k, v in extra.items() if v is not None}}
        if extra.get("toolDirectory", "") is None:
            body.pop("toolDirectory")
        error = refused(server, "PUT", "/v1/agents/checked", status, code, headers=root, body=body)
        assert text in error["message"], error
    stored = server.client.put("/v1/agents/checked", headers=root, content=json.dumps(
        {**base, "parameters": [{"name": "p", "scope": "session"}],
         "bindings": [{"arg": "a", "value": {"tag": "Param", "contents": "p"}}]}))
    assert stored.status_code == 201, stored.text
    assert stored.json()["parameters"] == [{"name": "p", "description": None, "scope": "session", "secret": False,
                                            "required": True, "bound": False, "pinned": False}]
