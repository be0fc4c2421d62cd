"""``--isolate-tools`` (issue 16, acceptance 5): bash calls go to the worker with the documented
envelope (no secret in it); a success, a token mismatch, a non-zero exit, output that is not JSON
and a reported error each give their result; the tool never runs in the server; ``docker:IMAGE``
runs ``docker run --rm -i IMAGE`` (a stand-in ``docker`` on PATH records it)."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devtools.mockllm import MockLlmServer
from foundation.isolation import IsolationSpec
from tests.harness import ROOT, Processes, Server, base_env, wait_until, write_agent, write_tool

#: The worker: records the envelope, then answers as the call's "mode" argument says.
WORKER = """#!{python}
import json, sys
envelope = json.load(sys.stdin)
with open({log!r}, "a") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "envelope": envelope}}) + "\\n")
mode = json.loads(envelope["toolCall"]["function"]["arguments"]).get("mode", "ok")
token = envelope["token"]
if mode == "exit":
    sys.stderr.write("boom")
    sys.exit(3)
if mode == "garbage":
    print("sunny, probably")
elif mode == "mismatch":
    print(json.dumps({{"token": "not-the-token", "status": "success", "result": "x"}}))
elif mode == "error":
    print(json.dumps({{"token": token, "status": "error", "error": "no forecast today"}}))
else:
    result = {{"type": "text", "content": "sunny from the worker"}}
    print(json.dumps({{"token": token, "status": "success", "result": result}}))
"""


def _worker(path: Path, log: Path) -> Path:
    path.write_text(WORKER.format(python=sys.executable, log=str(log)))
    path.chmod(0o755)
    return path


def _agent(tmp: Path, llm: MockLlmServer) -> Path:
    marker = tmp / "ran-in-server"
    describe = {
        "slug": "weather",
        "description": "the weather",
        "args": [
            {
                "name": "mode",
                "description": "how the worker answers",
                "type": "string",
                "backing_type": "string",
                "arity": "single",
                "mode": "dashdashspace",
            }
        ],
    }
    write_tool(tmp / "tools", "weather", describe, f"touch {marker}; echo cloudy")
    params = [{"name": "api_token", "secret": True, "scope": "session"}, {"name": "region", "scope": "session"}]
    return write_agent(tmp, "forecaster", llm.url, toolDirectory="tools", parameters=params)


def _script() -> dict[str, Any]:
    modes = ["ok", "mismatch", "exit", "garbage", "error"]
    rules = [
        {
            "when": {"last_role": "user", "last_contains": f"ISO-{mode}"},
            "reply": {"tool_calls": [{"name": "bash_weather", "arguments": {"mode": mode}}]},
        }
        for mode in modes
    ]
    return {"rules": [*rules, {"when": {"last_role": "tool"}, "reply": {"content": "got: {last_content}"}}]}


def _ask(server: Server, prompt: str) -> str:
    body = {"agent": "forecaster", "prompt": prompt, "params": {"api_token": "s3cret-value", "region": "eu"}}
    created = server.client.post("/v1/sessions", json=body)
    assert created.status_code in (200, 201, 202), created.text
    sid = created.json()["session_id"]
    wait_until(lambda: server.client.get(f"/v1/sessions/{sid}").json()["status"] == "idle", 60)
    return sid


def _tool_results(llm: MockLlmServer) -> list[str]:
    return [m["content"] for body in llm.requests for m in body["messages"][-1:] if m["role"] == "tool"]


def test_process_worker_gets_the_envelope_and_every_outcome_is_reported(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(_script())
    log = tmp_path / "worker.log"
    worker = _worker(tmp_path / "worker", log)
    server = start_server([_agent(tmp_path, llm)], extra_args=["--isolate-tools", f"process:{worker}"])
    ok = _ask(server, "ISO-ok")
    for mode in ("mismatch", "exit", "garbage", "error"):
        _ask(server, f"ISO-{mode}")
    assert _tool_results(llm) == [
        "sunny from the worker",
        "isolation error: the worker answered for token 'not-the-token', not this call's",
        "isolation error: the worker exited with 3: boom",
        "isolation error: the worker's output is not JSON: sunny, probably",
        "isolation error: no forecast today",
    ]
    assert not (tmp_path / "ran-in-server").exists()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 5
    first = records[0]
    envelope = first["envelope"]
    assert set(envelope) == {"token", "toolCall", "contextSnapshot", "policy"}
    uuid.UUID(envelope["token"])
    assert envelope["toolCall"]["type"] == "function"
    assert envelope["toolCall"]["function"] == {"name": "bash_weather", "arguments": json.dumps({"mode": "ok"})}
    assert envelope["contextSnapshot"] == {"tecsSessionId": ok, "tecsParams": {"region": "eu"}}
    assert envelope["policy"] == {"tag": "runIsolated", "spec": {"tag": "localProcess", "path": str(worker)}}
    assert "s3cret-value" not in log.read_text()
    assert len({r["envelope"]["token"] for r in records}) == 5


def test_docker_isolation_runs_docker_run_rm_i_image(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(_script())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "docker.log"
    _worker(bin_dir / "docker", log)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    server = start_server([_agent(tmp_path, llm)], extra_args=["--isolate-tools", "docker:weather-worker:1.2"], env=env)
    _ask(server, "ISO-ok")
    assert _tool_results(llm) == ["sunny from the worker"]
    record = json.loads(log.read_text())
    assert record["argv"] == ["run", "--rm", "-i", "weather-worker:1.2"]
    assert record["envelope"]["policy"] == {
        "tag": "runIsolated",
        "spec": {"tag": "docker", "image": "weather-worker:1.2"},
    }
    assert not (tmp_path / "ran-in-server").exists()


def test_a_worker_that_cannot_start_fails_the_call_without_fall_back(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(_script())
    missing = tmp_path / "no-such-worker"
    server = start_server([_agent(tmp_path, llm)], extra_args=["--isolate-tools", f"process:{missing}"])
    _ask(server, "ISO-ok")
    [result] = _tool_results(llm)
    assert result.startswith("isolation error: the worker could not start: ")
    assert not (tmp_path / "ran-in-server").exists()


@pytest.mark.parametrize("value", ["docker:", "process:", "podman:image", "image"])
def test_bad_isolation_values_are_refused(value: str, processes: Processes) -> None:
    with pytest.raises(ValueError, match="docker:IMAGE or process:PATH"):
        IsolationSpec.parse(value)
    command = [sys.executable, "-m", "agentsite.cli", "serve", "--isolate-tools", value, "--agent-file", "x.json"]
    done = processes.run(command, env=base_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == f"agents serve: --isolate-tools takes docker:IMAGE or process:PATH, not {value!r}"


def test_mcp_calls_go_to_the_worker_and_the_lua_portal_refuses_isolated_tools(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    portal = "return tools.call('bash_weather', {mode = 'ok'})"
    llm = llm_server(
        {
            "rules": [
                {
                    "when": {"last_role": "user", "last_contains": "ISO-mcp"},
                    "reply": {"tool_calls": [{"name": "mcp_demo_echo", "arguments": {"text": "back"}}]},
                },
                {
                    "when": {"last_role": "user", "last_contains": "ISO-lua"},
                    "reply": {"tool_calls": [{"name": "lua_lua_execute", "arguments": {"script": portal}}]},
                },
                {"when": {"last_role": "tool"}, "reply": {"content": "got: {last_content}"}},
            ]
        }
    )
    log = tmp_path / "worker.log"
    worker = _worker(tmp_path / "worker", log)
    demo = {"name": "demo", "executable": sys.executable, "args": [str(ROOT / "tests" / "mcp_demo_server.py")]}
    agent = _agent(tmp_path, llm)
    document = json.loads(agent.read_text())
    document["contents"]["mcpServers"] = [{"tag": "McpSimpleBinary", "contents": demo}]
    lua = {"Name": "lua", "MaxExecutionTimeSeconds": 10, "AllowedTools": ["bash_weather"]}
    document["contents"]["builtinToolboxes"] = [{"tag": "LuaToolbox", "contents": lua}]
    agent.write_text(json.dumps(document))
    server = start_server([agent], extra_args=["--isolate-tools", f"process:{worker}"])
    _ask(server, "ISO-mcp")
    _ask(server, "ISO-lua")
    mcp_result, lua_result = _tool_results(llm)
    assert mcp_result == "sunny from the worker"
    assert [json.loads(line)["envelope"]["toolCall"]["function"]["name"] for line in log.read_text().splitlines()] == [
        "mcp_demo_echo"
    ]
    assert "bash_weather runs only in the isolation worker, never from another tool" in lua_result
    assert not (tmp_path / "ran-in-server").exists()
