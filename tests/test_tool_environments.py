"""Tool environments over HTTP (docs/tools.md, "Tool environments"): a bash tool and an MCP stdio
tool that print their environment, on a real ``agents serve`` configured with a secret key, a
PostgreSQL URL with a password, a Redis URL, a fleet key and an LLM key, print none of those
values; what the agent declares (MCP ``env``) and a bound secret parameter do reach them.
``--tool-env strict`` leaves only the allow-list and what is declared."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import PROCESS_TIMEOUT, ROOT, Server, base_env, free_port, wait_until, write_agent, write_tool

SCRIPT = {
    "rules": [
        {
            "when": {"last_role": "user"},
            "reply": {
                "tool_calls": [
                    {"name": "bash_dump", "arguments": {}},
                    {"name": "mcp_envdump_environment", "arguments": {}},
                ]
            },
        },
        {"when": {"last_role": "tool"}, "reply": {"content": "done"}},
    ]
}
BOUND_SECRET = "bound-secret-6a1f"
DECLARED = "mcp-declared-e27c"


def _agent(tmp: Path, llm: MockLlmServer) -> Path:
    describe = {
        "slug": "dump",
        "description": "prints its environment",
        "args": [
            {"name": "tool-token", "description": "a token", "type": "string", "backing_type": "string",
             "arity": "optional", "mode": "env"}
        ],
    }
    dump = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    write_tool(tmp / "tools", "dump", describe, dump)
    mcp = {
        "name": "envdump",
        "executable": sys.executable,
        "args": [str(ROOT / "tests" / "mcp_env_server.py")],
        "env": {"MCP_DECLARED": {"tag": "Literal", "contents": DECLARED}},
    }
    return write_agent(
        tmp,
        "dumper",
        llm.url,
        toolDirectory="tools",
        parameters=[{"name": "api_token", "secret": True, "scope": "session"}],
        bindings=[{"tool": "bash_dump", "arg": "tool-token", "value": {"tag": "Param", "contents": "api_token"}}],
        mcpServers=[{"tag": "McpSimpleBinary", "contents": mcp}],
    )


def _environments(server: Server, llm: MockLlmServer) -> tuple[dict[str, str], dict[str, str]]:
    """Run one session; the two tools' environments, as the model received them."""
    body = {"agent": "dumper", "prompt": "show me", "params": {"api_token": BOUND_SECRET}}
    created = server.client.post("/v1/sessions", json=body)
    assert created.status_code in (200, 201, 202), created.text
    sid = created.json()["session_id"]
    wait_until(lambda: server.client.get(f"/v1/sessions/{sid}").json()["status"] == "idle", 120)
    last = llm.requests[-1]["messages"]
    results = {m["tool_call_id"]: m["content"] for m in last if m["role"] == "tool"}
    calls = {
        call["id"]: call["function"]["name"]
        for m in last
        if m["role"] == "assistant"
        for call in m.get("tool_calls") or []
    }
    by_tool = {calls[call_id]: json.loads(text) for call_id, text in results.items()}
    return by_tool["bash_dump"], by_tool["mcp_envdump_environment"]


def test_tools_never_see_the_servers_configuration(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    postgres_url: str,
    redis_url: str,
) -> None:
    # trust authentication ignores the password, which is there to be looked for
    database = postgres_url.replace("postgres://postgres@", "postgres://postgres:db-password-41d9@", 1)
    assert "db-password-41d9" in database
    configuration = {
        "DJANGO_SECRET_KEY": "django-secret-key-8b2e",
        "REDIS_URL": redis_url,
        "AGENTS_FLEET_KEY": "fleet-key-93c0",
        "OPENAI_API_KEY": "sk-openai-key-d41a",
        "AGENTS_EMBEDDED_WORKER": "true",
    }
    llm = llm_server(SCRIPT)
    server = start_server([_agent(tmp_path, llm)], db=database, env={**configuration, "PLAIN_VARIABLE": "plain-5e"})
    bash, mcp = _environments(server, llm)
    for environment in (bash, mcp):
        text = json.dumps(environment)
        for secret in ("django-secret-key-8b2e", "db-password-41d9", redis_url, "fleet-key-93c0", "sk-openai-key-d41a"):
            assert secret not in text
        assert environment["PLAIN_VARIABLE"] == "plain-5e"
        assert not [name for name in environment if name.startswith(("AGENTS_", "DJANGO_"))]
    assert bash["TOOL_TOKEN"] == BOUND_SECRET and mcp["MCP_DECLARED"] == DECLARED


def test_strict_tool_environments_hold_the_allow_list_and_what_is_declared(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    server = start_server(
        [_agent(tmp_path, llm)],
        extra_args=["--tool-env", "strict"],
        env={"PLAIN_VARIABLE": "plain-5e", "TZ": "UTC", "DJANGO_SECRET_KEY": "django-secret-key-8b2e"},
    )
    bash, mcp = _environments(server, llm)
    assert "PLAIN_VARIABLE" not in bash and "PLAIN_VARIABLE" not in mcp
    assert bash["TZ"] == mcp["TZ"] == "UTC" and bash["PATH"] == mcp["PATH"]
    assert bash["TOOL_TOKEN"] == BOUND_SECRET and mcp["MCP_DECLARED"] == DECLARED
    # bash adds PWD, SHLVL and _ itself; the AGENT_* variables are the call's
    extra = {n for n in bash if not n.startswith(("LC_", "AGENT_"))} - {
        "PATH", "HOME", "LANG", "TZ", "TMPDIR", "PWD", "SHLVL", "_", "TOOL_TOKEN"
    }
    assert extra == set()
    # the MCP SDK adds LOGNAME, SHELL, TERM and USER to every stdio server (under ours)
    allowed = {"PATH", "HOME", "LANG", "TZ", "TMPDIR", "MCP_DECLARED", "LOGNAME", "SHELL", "TERM", "USER"}
    assert {n for n in mcp if not n.startswith("LC_")} - allowed == set()


def _serve(tmp: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    agent = write_agent(tmp, "plain", "http://127.0.0.1:9/v1")
    argv = [sys.executable, "-m", "agentsite.cli", "serve", "--agent-file", str(agent), f"--port={free_port()}"]
    return subprocess.run(
        [*argv, *flags], cwd=tmp, env=base_env(**env), capture_output=True, text=True, timeout=PROCESS_TIMEOUT
    )


@pytest.mark.integration
def test_another_mode_stops_serve_with_status_2_saying_so(tmp_path: Path) -> None:
    refused = _serve(tmp_path, AGENTS_TOOL_ENV="none")
    assert refused.returncode == 2
    assert refused.stderr == "agents serve: AGENTS_TOOL_ENV (--tool-env) takes clean or strict, not 'none'\n"
    flag = _serve(tmp_path, "--tool-env", "none")
    assert flag.returncode == 2 and "argument --tool-env: invalid choice: 'none'" in flag.stderr
    worker = subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "worker", "--tool-env", "none"],
        cwd=tmp_path, env=base_env(), capture_output=True, text=True, timeout=PROCESS_TIMEOUT,
    )
    assert worker.returncode == 2 and "argument --tool-env: invalid choice: 'none'" in worker.stderr
    assert "Traceback" not in refused.stderr + flag.stderr + worker.stderr
    # nothing was made: the settings were refused before the database was opened
    assert not (tmp_path / "agents-server.db").exists()
