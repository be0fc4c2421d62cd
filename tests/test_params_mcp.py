"""Parameters over MCP: ``Agents-Param-*`` headers and ``_meta."agents-exe/params"`` on ``POST /mcp``,
checked like a create's (issue 14)."""

from __future__ import annotations

import json
from typing import Any

from tests.harness import Server, write_agent, write_tool

SCRIPT = {
    "rules": [
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "bash_who", "arguments": {}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "{last_content}"}},
    ]
}


def _agent(tmp_path, llm_url):
    def arg(name: str) -> dict[str, Any]:
        return {"name": name, "description": name, "type": "string", "backing_type": "string",
                "arity": "optional", "mode": "env"}

    write_tool(tmp_path / "tools", "who", {"slug": "who", "description": "says who",
                                           "args": [arg("tenant"), arg("api_token"), arg("otp")]},
               'echo "$TENANT/${API_TOKEN:+token}/${OTP:-}"')
    return write_agent(
        tmp_path,
        "tenanted",
        llm_url,
        parameters=[
            {"name": "tenant", "scope": "session"},
            {"name": "api_token", "scope": "session", "secret": True, "required": False},
            {"name": "otp", "scope": "message", "required": False},
            {"name": "region", "required": False},
        ],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            {"arg": name, "value": {"tag": "Param", "contents": name}, "whenUnbound": "omit"}
            for name in ("tenant", "api_token", "otp")
        ]}}],
    )


def _call(server: Server, params: dict[str, Any] | None = None, headers: dict[str, str] | None = None) -> dict:
    call: dict[str, Any] = {"name": "ask_tenanted", "arguments": {"prompt": "who am I?"}}
    if params is not None:
        call["_meta"] = {"agents-exe/params": params}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    reply = server.client.post("/mcp", content=json.dumps(body), headers={"Content-Type": "application/json",
                                                                          **(headers or {})})
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_headers_and_meta_give_parameters_checked_like_a_create(tmp_path, llm_server, start_server) -> None:
    server = start_server([_agent(tmp_path, llm_server(SCRIPT).url)])
    # headers: strings; a dash in the header's name stands for an underscore
    answer = _call(server, headers={"Agents-Param-Tenant": "acme", "Agents-Param-Api-Token": "tok-1"})
    [content] = answer["result"]["content"]
    assert content["text"] == "acme/token/\n"
    session = server.client.get(f"/v1/sessions/{answer['result']['_meta']['session_id']}").json()
    assert session["params"] == {"tenant": "acme"} and session["secret_params"] == ["api_token"]
    assert "tok-1" not in json.dumps(session)
    # _meta: any JSON, over a header of the same name; message scope goes to the call's run
    answer = _call(server, {"tenant": "from-meta", "otp": "42"}, headers={"Agents-Param-Tenant": "from-header"})
    assert answer["result"]["content"][0]["text"] == "from-meta//42\n"
    # refusals are -32602, naming the code; nothing is created
    before = len(server.client.get("/v1/sessions").json()["sessions"])
    for params, code in (
        ({}, "params_required"),
        ({"tenant": "a", "tenantt": "b"}, "unknown_params"),
        ({"tenant": "a", "region": "eu"}, "forbidden_params"),
        ({"tenant": "a", "api_token": 5}, "invalid_params"),
    ):
        error = _call(server, params)["error"]
        assert error["code"] == -32602 and error["message"].startswith(f"{code}: "), error
    assert _call(server, None, headers={"Agents-Param-Nope": "x", "Agents-Param-Tenant": "t"})["error"][
        "message"
    ].startswith("unknown_params: ")
    assert len(server.client.get("/v1/sessions").json()["sessions"]) == before
