"""MCP servers as toolboxes, end to end: real MCP servers (mcp-server-time, mcp-server-git and the
test suite's own, tests/mcp_demo_server.py) behind real servers and workers, a scripted model."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from tests.harness import PROCESS_TIMEOUT, ROOT, Server, base_env, free_port, wait_until, write_agent
from tests.owners import owner, write_tokens
from tests.streams import SseReader
from tests.tools.conftest import process_alive, wait_gone

VENV_BIN = Path(sys.executable).parent
DEMO = ROOT / "tests" / "mcp_demo_server.py"


def _calls(rules: dict[str, tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Script rules: a user message holding the key calls the tool; a tool result is answered."""
    return [
        {"when": {"last_role": "user", "last_contains": key}, "reply": {"tool_calls": [{"name": n, "arguments": a}]}}
        for key, (n, a) in rules.items()
    ]


SCRIPT = {
    "rules": [
        *_calls(
            {
                "in UTC": ("mcp_time_get_current_time", {"timezone": "UTC"}),
                "git log": ("mcp_git_git_log", {"repo_path": "REPO", "max_count": 5}),
                "read file": ("mcp_demo_files_read", {"path": "notes.txt"}),
                "add a tool": ("mcp_demo_add_tool", {}),
                "slowly": ("mcp_demo_slow", {"steps": 3}),
                "draw": ("mcp_demo_picture", {}),
                "crash": ("mcp_demo_crash", {}),
                "echo": ("mcp_demo_echo", {"text": "back"}),
                "late": ("mcp_demo_late_tool", {}),
            }
        ),
        {"reply": {"content": "answer: {last_content}"}},
    ]
}


def _ask(server: Server, agent: str, prompt: str) -> dict[str, Any]:
    reply = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": agent, "prompt": prompt}))
    assert reply.status_code == 201, reply.text
    return reply.json()


def _answer(view: dict[str, Any]) -> str:
    assert view["status"] == "idle", view
    return view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]


def _tool_result(view: dict[str, Any]) -> Any:
    """The result of the (only) tool call of the session's first round."""
    turn = view["session"]["turns"][1]
    [(_, response)] = turn["contents"]["userToolResponses"]
    return response


def _git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("a\n")
    subprocess.run(["git", "-C", str(repo), "add", "a.txt"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "the first commit of the test repo"], check=True, env=env)
    return repo


def _real_agents(tmp_path: Path, llm_url: str) -> list[Path]:
    time_server = {"name": "time", "executable": str(VENV_BIN / "mcp-server-time"), "args": []}
    git_server = {"name": "git", "executable": str(VENV_BIN / "mcp-server-git"), "args": []}
    return [
        write_agent(tmp_path, "clock", llm_url, mcpServers=[{"tag": "McpSimpleBinary", "contents": time_server}]),
        write_agent(
            tmp_path,
            "historian",
            llm_url,
            mcpServers=[{"tag": "McpSimpleBinary", "contents": git_server}],
            # the policy applies to MCP tools too: this call runs in a Celery task of its own
            executionMode="asynchronous",
            toolCallPolicyConfig={"rules": [{"tool": "mcp_git_git_log", "disposition": {"tag": "runAsync"}}]},
        ),
    ]


def _check_real_servers(server: Server, repo: Path) -> None:
    clock = _ask(server, "clock", "what time is it in UTC")
    assert '"timezone": "UTC"' in _tool_result(clock) and _answer(clock).startswith("answer: {")
    log = _ask(server, "historian", f"git log of {repo}")
    assert "the first commit of the test repo" in _tool_result(log)
    tools = server.client.get("/v1/agents/clock").json()["tools"]
    assert tools == ["mcp_time_get_current_time", "mcp_time_convert_time"]


def _script_for(repo: Path) -> dict[str, Any]:
    return json.loads(json.dumps(SCRIPT).replace("REPO", str(repo)))


def test_real_mcp_servers_on_the_embedded_default(tmp_path, llm_server, start_server) -> None:
    repo = _git_repo(tmp_path)
    llm = llm_server(_script_for(repo))
    server = start_server(_real_agents(tmp_path, llm.url))
    _check_real_servers(server, repo)


def test_real_mcp_servers_scaled_out(tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url) -> None:
    repo = _git_repo(tmp_path)
    llm = llm_server(_script_for(repo))
    agents = _real_agents(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url}
    server = start_server(agents, db=postgres_url, env=env)
    worker = start_worker(agents, db=postgres_url, env=env)
    _check_real_servers(server, repo)
    assert "mcp.server_started" in worker.process.output()


def _demo_agent(tmp_path: Path, llm_url: str, entry: dict[str, Any], **extra: Any) -> Path:
    return write_agent(tmp_path, "demo", llm_url, mcpServers=[entry], **extra)


def _stdio_entry(pid_file: Path) -> dict[str, Any]:
    env = {"DEMO_MCP_PID_FILE": {"tag": "Literal", "contents": str(pid_file)}}
    contents = {"name": "demo", "executable": sys.executable, "args": [str(DEMO)], "env": env}
    return {"tag": "McpSimpleBinary", "contents": contents}


def _pids(pid_file: Path) -> list[int]:
    return [int(line) for line in pid_file.read_text().split()] if pid_file.exists() else []


def _offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def _check_demo(server: Server, llm: Any, restart: Any = None) -> None:
    """The demo server's tools through a server: names, list changes, progress, media, a crash."""
    read = _ask(server, "demo", "read file please")
    assert _tool_result(read) == "contents of notes.txt"
    assert "mcp_demo_files_read" in _offered(llm.requests[0]) and "mcp_demo_late_tool" not in _offered(llm.requests[0])
    assert read["session"]["turns"][2]["contents"]["llmToolCalls"][0]["function"]["name"] == "mcp_demo_files_read"

    before = len(llm.requests)
    added = _ask(server, "demo", "add a tool")
    assert _tool_result(added) == "late_tool added"
    if restart is None:
        # over stdio the change is announced before the result: the model's next request (the one
        # after the result) already offers the new tool
        assert "mcp_demo_late_tool" in _offered(llm.requests[before + 1])
    else:
        # over HTTP it travels on another stream: the request after it arrived offers the tool
        wait_until(lambda: "mcp_demo_late_tool" in server.client.get("/v1/agents/demo").json()["tools"])
    before = len(llm.requests)
    assert _tool_result(_ask(server, "demo", "call the late tool")) == "late tool answered"
    assert "mcp_demo_late_tool" in _offered(llm.requests[before])

    slow = _ask(server, "demo", "go slowly")
    stream = SseReader(f"{server.url}/v1/sessions/{slow['session_id']}/events?after=0")
    events = stream.wait_for(lambda e: any(x["event"] == "run.stopped" for x in e))
    stream.close()
    kinds = [e["event"] for e in events]
    progressed = [e["data"] for e in events if e["event"] == "tool.progressed"]
    assert [(p["progress"], p["total"], p["message"]) for p in progressed] == [
        (1, 3, "step 1 of 3"),
        (2, 3, "step 2 of 3"),
        (3, 3, "step 3 of 3"),
    ]
    assert progressed[0]["tool"] == "mcp_demo_slow" and progressed[0]["tool_call_id"]
    assert kinds.index("tool.started") < kinds.index("tool.progressed") < kinds.index("tool.completed")

    drawn = _ask(server, "demo", "draw something")
    assert _tool_result(drawn)["type"] == "mixed"
    media = llm.requests[-1]["messages"][-1]
    assert media["role"] == "user" and media["content"][1]["type"] == "image_url"
    assert media["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")

    crashed = _ask(server, "demo", "crash now")
    assert "stopped during the call" in _tool_result(crashed) and crashed["status"] == "idle"
    if restart is not None:
        restart()
    echoed = _tool_result(_ask(server, "demo", "echo"))
    assert echoed.startswith("back (pid ")


def test_the_demo_server_over_stdio(tmp_path, llm_server, start_server) -> None:
    pid_file = tmp_path / "pids"
    llm = llm_server(SCRIPT)
    server = start_server([_demo_agent(tmp_path, llm.url, _stdio_entry(pid_file))])
    _check_demo(server, llm)
    first, second = _pids(pid_file)
    assert not process_alive(first) and process_alive(second)
    assert _tool_result(_ask(server, "demo", "echo")) == f"back (pid {second})"


def test_the_demo_server_over_streamable_http(tmp_path, llm_server, start_server) -> None:
    port = free_port()
    pid_file = tmp_path / "pids"
    argv = [sys.executable, str(DEMO), "--http", str(port)]
    env = {"DEMO_MCP_PID_FILE": str(pid_file), "PATH": "/usr/bin:/bin"}
    processes = [subprocess.Popen(argv, env=env)]

    def listening() -> bool:
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
        except httpx.TransportError:
            return False
        return True

    def start() -> None:
        processes.append(subprocess.Popen(argv, env=env))
        wait_until(listening)

    wait_until(listening)
    try:
        llm = llm_server(SCRIPT)
        entry = {"tag": "McpStreamableHttp", "contents": {"name": "demo", "url": f"http://127.0.0.1:{port}/mcp"}}
        server = start_server([_demo_agent(tmp_path, llm.url, entry)])
        _check_demo(server, llm, restart=start)
        assert _tool_result(_ask(server, "demo", "echo")) == f"back (pid {processes[1].pid})"
    finally:
        for process in processes:
            process.kill()
            process.wait()


def test_one_start_per_process_and_none_left_after_sigterm(
    tmp_path, llm_server, start_server, start_worker, postgres_url, redis_url
) -> None:
    pid_file = tmp_path / "pids"
    llm = llm_server(SCRIPT)
    agent = _demo_agent(tmp_path, llm.url, _stdio_entry(pid_file))
    embedded = start_server([agent])
    for index in range(4):
        _ask(embedded, "demo", f"echo {index}")
    [embedded_pid] = _pids(pid_file)
    embedded.process.proc.send_signal(signal.SIGTERM)
    assert embedded.process.proc.wait(20) == 0
    assert wait_gone(embedded_pid, 5)

    pid_file.unlink()
    env = {"REDIS_URL": redis_url}
    server = start_server([agent], db=postgres_url, env=env)
    worker = start_worker([agent], db=postgres_url, env=env)
    views = [_ask(server, "demo", f"echo {index}") for index in range(4)]
    server_pid, worker_pid = _pids(pid_file)  # the server's, at startup; the worker's
    assert {_tool_result(v) for v in views} == {f"back (pid {worker_pid})"}
    for process in (server.process.proc, worker.process.proc):
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    assert wait_gone(server_pid, 5) and wait_gone(worker_pid, 5)


def test_mcp_load_errors_in_check_at_startup_and_for_stored_agents(tmp_path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    missing = {"tag": "McpSimpleBinary", "contents": {"name": "gone", "executable": str(tmp_path / "absent")}}
    mute = {"tag": "McpSimpleBinary", "contents": {"name": "mute", "executable": "sleep", "args": ["60"]}}
    broken = write_agent(tmp_path, "broken", llm.url, mcpServers=[missing, mute])
    env = {"AGENTS_MCP_DISCOVERY_TIMEOUT": "2"}
    checked = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "check", "--agent-file", str(broken)],
        cwd=ROOT,
        env={**base_env(), **env},
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert checked.returncode == 1
    assert f"{broken}: broken: mcpServers[0]: gone: Failed to initialize MCP server: " in checked.stderr
    timeout = "mcpServers[1]: mute: Timeout waiting for MCP server tool discovery (2s)"
    assert f"{broken}: broken: {timeout}" in checked.stderr
    good = write_agent(tmp_path, "clock", llm.url, mcpServers=[_stdio_entry(tmp_path / "pids")])
    listed = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "check", "--agent-file", str(good)],
        cwd=ROOT,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert listed.returncode == 0, listed.stderr
    assert "clock: MCP server demo: mcp_demo_files_read, mcp_demo_echo, mcp_demo_add_tool" in listed.stdout

    started = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "serve", "--port", str(free_port()), "--db", str(tmp_path / "s.db")]
        + ["--agent-file", str(broken)],
        cwd=ROOT,
        env={**base_env(), **env},
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert started.returncode == 2
    assert "agents: broken: mcpServers[0]: gone: Failed to initialize MCP server: " in started.stderr
    assert f"agents: broken: {timeout}" in started.stderr

    # time enough for a real server to start on a busy machine, and for a mute one to time out;
    # stored agents may name an MCP executable only when the operator allows it (docs/agents.md §9)
    server = start_server(
        [],
        extra_args=["--auth-tokens", str(write_tokens(tmp_path)), "--admin-owners", "root", "--allow-stored-commands"],
        env={"AGENTS_MCP_DISCOVERY_TIMEOUT": "8"},
    )
    stored = {
        "apiKeyId": "test",
        "flavor": "OpenAIv1",
        "modelUrl": llm.url,
        "modelName": "m",
        "announce": "a stored agent with an MCP server",
        "systemPrompt": ["x"],
    }
    # storing starts nothing: a server that cannot start is found when the agent is loaded
    for slug, entry in (("gone", missing), ("mute", mute)):
        put = server.client.put(
            f"/v1/agents/{slug}", content=json.dumps({**stored, "mcpServers": [entry]}), headers=owner("root")
        )
        assert put.status_code == 201, put.text
        refused = server.client.get(f"/v1/agents/{slug}", headers=owner("root"))
        assert refused.status_code == 400 and refused.json()["error"] == "agent_failed_to_load", refused.text
    time_server = {"name": "time", "executable": str(VENV_BIN / "mcp-server-time"), "args": []}
    put = server.client.put(
        "/v1/agents/stored",
        content=json.dumps({**stored, "mcpServers": [{"tag": "McpSimpleBinary", "contents": time_server}]}),
        headers=owner("root"),
    )
    assert put.status_code == 201, put.text
    loaded = server.client.get("/v1/agents/stored", headers=owner("root")).json()
    assert loaded["tools"] == ["mcp_time_get_current_time", "mcp_time_convert_time"]
    asked = server.client.post(
        "/v1/sessions?wait=true",
        content=json.dumps({"agent": "stored", "prompt": "what time is it in UTC"}),
        headers=owner("alice"),
    ).json()
    assert '"timezone": "UTC"' in _tool_result(asked)
