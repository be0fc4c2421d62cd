"""Our agents as MCP tools, driven by the MCP SDK's own clients: ``POST /mcp`` on ``agents serve``
(streamable HTTP) and ``agents mcp-server`` (stdio)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.demo import demo_agents, demo_script
from tests.harness import PROCESS_TIMEOUT, ROOT, Server, base_env, write_agent
from tests.owners import owner, write_tokens

FAILING = {"rules": [{"reply": {"status": 500, "error": "the model is down"}}]}


def _call_over_http(url: str, calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[Any]]:
    """List the tools and make ``calls`` with the SDK's streamable HTTP client."""

    async def run() -> tuple[list[str], list[Any]]:
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            initialized = await session.initialize()
            assert initialized.protocol_version == "2025-06-18"
            assert initialized.server_info.name == "agents-server"
            tools = await session.list_tools()
            results = [await session.call_tool(name, arguments) for name, arguments in calls]
            return [tool.name for tool in tools.tools], results

    return anyio.run(run)


def _text(result: types.CallToolResult) -> str:
    return "".join(part.text for part in result.content if isinstance(part, types.TextContent))


def test_the_sdk_client_calls_ask_weather_and_the_deferred_call_completes_over_rest(
    tmp_path, llm_server, start_server
) -> None:
    llm = llm_server(demo_script())
    failing = llm_server(FAILING)
    agents = [*demo_agents(tmp_path, llm.url), write_agent(tmp_path, "broken", failing.url)]
    server = start_server(agents)
    names, [waiting, failed] = _call_over_http(
        f"{server.url}/mcp",
        [("ask_weather", {"prompt": "Weather in Paris?"}), ("ask_broken", {"prompt": "hello"})],
    )
    assert names == ["ask_broken", "ask_shell-helper", "ask_weather"]
    assert not waiting.is_error
    session_id = waiting.meta["session_id"]
    text = _text(waiting)
    assert f"Session {session_id} is waiting for deferred tool calls (get_weather)" in text
    details = json.loads(text.splitlines()[-1])
    [deferred] = details["deferred_calls"]
    assert deferred["tool"] == "get_weather" and deferred["arguments"] == {"city": "Paris"}
    done = server.client.post(
        f"/v1/continuations/{deferred['continuation_token']}?wait=true", content=json.dumps({"result": "sunny"})
    )
    assert done.status_code == 200 and done.json()["session_id"] == session_id
    view = server.client.get(f"/v1/sessions/{session_id}").json()
    assert view["status"] == "idle"
    assert view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "The weather in Paris: sunny."
    assert failed.is_error and _text(failed).startswith("got an error: ") and failed.meta["session_id"]
    # an idle answer is the agent's text
    _, [answered] = _call_over_http(f"{server.url}/mcp", [("ask_shell-helper", {"prompt": "hello there"})])
    assert not answered.is_error and answered.meta["session_id"]


def _rpc(server: Server, body: Any, headers: dict[str, str] | None = None):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return server.client.post("/mcp", content=content, headers={"Content-Type": "application/json", **(headers or {})})


def _request(method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def _initialize(version: str) -> dict[str, Any]:
    client = {"name": "t", "version": "1"}
    return _request("initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": client})


def test_every_answer_of_post_mcp(tmp_path, llm_server, start_server) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "plain answer"}}]})
    server = start_server([write_agent(tmp_path, "plain", llm.url)])
    for asked, answered in (("2024-11-05", "2024-11-05"), ("2025-03-26", "2025-03-26"), ("2099-01-01", "2025-06-18")):
        reply = _rpc(server, _initialize(asked))
        assert reply.status_code == 200 and reply.json()["result"]["protocolVersion"] == answered
        assert "Mcp-Session-Id" not in reply.headers and reply.headers["Content-Type"] == "application/json"
    assert _rpc(server, _request("ping")).json() == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert _rpc(server, _request("resources/list")).json()["result"] == {"resources": []}
    assert _rpc(server, _request("prompts/list")).json()["result"] == {"prompts": []}
    [tool] = _rpc(server, _request("tools/list")).json()["result"]["tools"]
    assert tool == {
        "name": "ask_plain",
        "description": "the plain test agent",
        "inputSchema": {
            "type": "object",
            "properties": {"prompt": {"type": "string", "description": "Prompt to send to the agent"}},
            "required": ["prompt"],
        },
    }
    called = _rpc(server, _request("tools/call", {"name": "ask_plain", "arguments": {"prompt": "hi"}})).json()
    assert called["result"]["content"] == [{"type": "text", "text": "plain answer"}]
    assert "annotations" not in json.dumps(called) and called["result"]["isError"] is False

    def error_of(reply: Any) -> tuple[int, int]:
        return reply.status_code, reply.json()["error"]["code"]

    assert error_of(_rpc(server, _request("resources/read", {"uri": "x"}))) == (200, -32601)
    assert error_of(_rpc(server, _request("server/discover"))) == (200, -32601)
    assert error_of(_rpc(server, _request("tools/call", {"name": "ask_nobody", "arguments": {"prompt": "x"}}))) == (
        200,
        -32602,
    )
    assert error_of(_rpc(server, _request("tools/call", {"name": "ask_plain", "arguments": {}}))) == (200, -32602)
    assert error_of(_rpc(server, b"{not json")) == (400, -32700)
    assert error_of(_rpc(server, {"hello": "world"})) == (400, -32700)
    assert error_of(_rpc(server, [])) == (400, -32600)
    batch = _rpc(server, [_request("ping", request_id=7), {"jsonrpc": "2.0", "method": "notifications/initialized"}, 3])
    assert batch.status_code == 200
    assert batch.json() == [
        {"jsonrpc": "2.0", "id": 7, "result": {}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}},
    ]
    notified = _rpc(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert notified.status_code == 202 and notified.content == b""
    assert server.client.get("/mcp").status_code == 405


def test_post_mcp_takes_the_rest_apis_tokens_owners_and_origins(tmp_path, llm_server, start_server) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "for you"}}]})
    agent = write_agent(tmp_path, "plain", llm.url)
    server = start_server([agent], extra_args=["--auth-tokens", str(write_tokens(tmp_path))])
    refused = _rpc(server, _request("tools/list"))
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == "Bearer"
    call = _request("tools/call", {"name": "ask_plain", "arguments": {"prompt": "mine"}})
    mine = _rpc(server, call, owner("alice")).json()["result"]
    session_id = mine["_meta"]["session_id"]
    assert server.client.get(f"/v1/sessions/{session_id}", headers=owner("alice")).json()["owner"] == "alice"
    assert server.client.get(f"/v1/sessions/{session_id}", headers=owner("bob")).status_code == 404
    listed = server.client.get("/v1/sessions", headers=owner("bob")).json()["sessions"]
    assert session_id not in [s["session_id"] for s in listed]
    # with authentication on, a token decides, whatever the origin
    foreign = {"Origin": "https://evil.example", **owner("bob")}
    assert _rpc(server, _request("ping"), foreign).status_code == 200

    open_server = start_server([agent], db=str(tmp_path / "open.db"))
    denied = _rpc(open_server, _request("ping"), {"Origin": "https://evil.example"})
    assert denied.status_code == 403 and denied.json()["error"] == "forbidden_origin"
    assert _rpc(open_server, _request("ping"), {"Origin": "http://localhost:3000"}).status_code == 200


# --- agents mcp-server ----------------------------------------------------------------------------


def _mcp_server_argv(db: Path, *agent_files: Path) -> list[str]:
    argv = ["-m", "agentsite.cli", "mcp-server", "--db", str(db)]
    for path in agent_files:
        argv += ["--agent-file", str(path)]
    return argv


def test_the_sdk_stdio_client_runs_agents_mcp_server(tmp_path, llm_server) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "the answer from a"}}]})
    failing = llm_server(FAILING)
    agent_a = write_agent(tmp_path, "a", llm.url)
    agent_b = write_agent(tmp_path, "b", failing.url)
    argv = _mcp_server_argv(tmp_path / "stdio.db", agent_a, agent_b)
    params = StdioServerParameters(command=sys.executable, args=argv, env=base_env(), cwd=str(ROOT))

    async def run() -> tuple[list[str], types.CallToolResult, types.CallToolResult, types.CallToolResult]:
        with open(tmp_path / "stderr.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                initialized = await session.initialize()
                assert initialized.server_info.name == "agents-exe-mcp-server"
                assert initialized.protocol_version == "2025-06-18"
                tools = await session.list_tools()
                answered = await session.call_tool("ask_a_000", {"prompt": "hello"})
                failed = await session.call_tool("ask_b_001", {"prompt": "hello"})
                unknown = await session.call_tool("ask_c_002", {"prompt": "hello"})
                return [t.name for t in tools.tools], answered, failed, unknown

    names, answered, failed, unknown = anyio.run(run)
    assert names == ["ask_a_000", "ask_b_001"]
    assert _text(answered) == "the answer from a" and not answered.is_error and answered.meta["session_id"]
    assert failed.is_error and _text(failed).startswith("got an error: ")
    assert unknown.is_error and _text(unknown) == "got an error: no matching tool for ask_c_002"


def test_agents_mcp_server_writes_nothing_but_json_rpc_on_stdout(tmp_path, llm_server) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "quiet answer"}}]})
    argv = [sys.executable, *_mcp_server_argv(tmp_path / "raw.db", write_agent(tmp_path, "a", llm.url))]
    messages = [
        _initialize("2025-06-18"),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        _request("tools/list", request_id=2),
        _request("tools/call", {"name": "ask_a_000", "arguments": {"prompt": "hi"}}, request_id=3),
    ]
    process = subprocess.Popen(
        argv, cwd=ROOT, env=base_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    process.stdin.flush()
    replies = [json.loads(process.stdout.readline()) for _ in range(3)]
    rest, _ = process.communicate(timeout=PROCESS_TIMEOUT)  # closes stdin: the server stops
    assert process.returncode == 0
    assert rest == b""
    assert [r["id"] for r in replies] == [1, 2, 3] and all(r["jsonrpc"] == "2.0" for r in replies)
    assert replies[2]["result"]["content"] == [{"type": "text", "text": "quiet answer"}]

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    failed = subprocess.run(
        [sys.executable, *_mcp_server_argv(tmp_path / "raw.db", broken)],
        cwd=ROOT,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert failed.returncode != 0 and failed.stdout == ""
    assert f"{broken}: invalid JSON" in failed.stderr
