"""Parameters and bindings at load time, as real processes: every check of ``agents check`` and the
startup refusals of ``agents serve`` (issue 14, acceptance 4 and 7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import PROCESS_TIMEOUT, ROOT, base_env, free_port, write_agent, write_tool

# every test here runs the agents command line as a process
pytestmark = pytest.mark.integration

TENANT = {"tag": "Param", "contents": "tenant"}
TOKEN = {"tag": "Param", "contents": "token"}


def agents(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentsite.cli", *argv],
        cwd=ROOT,
        env=base_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )


def arg(name: str, mode: str = "env", arity: str = "single") -> dict:
    return {"name": name, "description": name, "type": "string", "backing_type": "string", "arity": arity,
            "mode": mode}


def test_check_names_every_load_time_check_of_parameters_and_bindings(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    write_tool(tools, "query", {"slug": "query", "description": "queries for a tenant",
                                "args": [arg("tenant", "positional"), arg("token"), arg("since", arity="optional"),
                                         arg("limit", "dashdashspace", "optional")]}, "echo ok")
    # a helper with a required session parameter, and one file breaking every rule of its own
    write_agent(tmp_path, "helper", "http://127.0.0.1:9/v1",
                parameters=[{"name": "zone", "scope": "session"}, {"name": "mode", "scope": "session"}])
    own_rules = write_agent(
        tmp_path,
        "broken",
        "http://127.0.0.1:9/v1",
        parameters=[{"name": "tenant", "scope": "session"}, {"name": "token", "scope": "session", "secret": True}],
        bindings=[
            {"arg": "x", "value": {"tag": "Param", "contents": "undeclared"}},
            {"arg": "x", "value": TOKEN, "whenUnbound": "expose"},
        ],
        mcpServers=[{"tag": "McpSimpleBinary", "contents": {"name": "m", "executable": "m", "env": {"T": TENANT}}}],
    )
    caller = write_agent(
        tmp_path,
        "caller",
        "http://127.0.0.1:9/v1",
        parameters=[{"name": "tenant", "scope": "session"}],
        extraAgents=[{"slug": "helper", "path": "helper.json", "with": {"zone": TENANT, "zoen": TENANT}}],
    )
    on_tools = write_agent(
        tmp_path,
        "bound",
        "http://127.0.0.1:9/v1",
        parameters=[{"name": "tenant", "scope": "session"}, {"name": "token", "scope": "session", "secret": True}],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            {"tool": "nothing*", "arg": "tenant", "value": TENANT},
            {"arg": "tenantt", "value": TENANT},
            {"arg": "since", "value": TENANT},
            {"arg": "tenant", "value": TOKEN},
            {"arg": "token", "value": TENANT, "whenUnbound": "omit"},
            {"arg": "limit", "value": {"tag": "Literal", "contents": [1, 2]}},
        ]}}],
        bindings=[{"tool": "bash_query", "arg": "since", "value": TENANT}],
    )
    result = agents("check", "--agent-file", str(own_rules), "--agent-file", str(caller), "--agent-file",
                    str(on_tools), "--set", "tenat=x")
    assert result.returncode == 1
    problems = result.stderr.splitlines()
    expected = [
        f"{own_rules}: bindings[0]: Param 'undeclared' names no declared parameter",
        f'{own_rules}: bindings[1]: ExposedSecretParameter: secret parameter token cannot use whenUnbound "expose"',
        f"{own_rules}: mcpServers[0].contents.env.T: parameter tenant has session scope; an MCP server is started"
        " once per process, so only process-scope parameters can be given to it",
        f"{caller}: extraAgents[0].with.zoen: helper helper declares no parameter zoen",
        f"{caller}: extraAgents[0]: helper helper requires session parameters its caller does not give with"
        " 'with': mode",
        f"{on_tools}: bound: bashToolboxes[0].contents.Bindings[0]: the binding matches no tool (tool 'nothing*')",
        f"{on_tools}: bound: bashToolboxes[0].contents.Bindings[1]: no tool matching '*' has an argument tenantt",
        f"{on_tools}: bound: bashToolboxes[0].contents.Bindings[3]: argument tenant of bash_query is passed on the"
        ' command line (positional), where it would show in ps; a secret must use "mode": "env"',
        f"{on_tools}: bound: bashToolboxes[0].contents.Bindings[4]: argument token of bash_query is required: it"
        " cannot be omitted",
        f"{on_tools}: bound: bashToolboxes[0].contents.Bindings[5]: argument limit of bash_query takes a string, a"
        " number or a boolean, not an object or a list",
        f"{on_tools}: bound: bindings[0]: argument since of bash_query is bound twice",
        "--set/--pin tenat: no loaded agent declares this parameter",
    ]
    assert [line for line in expected if line not in problems] == []
    warning = f"warning: {on_tools}: bound: bashToolboxes[0].contents.Bindings[3]"
    assert not any(line.startswith(warning) for line in problems)


def test_check_says_how_each_parameter_resolves_never_a_value(tmp_path: Path) -> None:
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"billing": "sk-billing-123"}))
    path = write_agent(
        tmp_path,
        "params",
        "http://127.0.0.1:9/v1",
        parameters=[
            {"name": "tenant", "scope": "session"},
            {"name": "region", "default": {"tag": "Given", "contents": "eu"}},
            {"name": "token", "secret": True, "default": {"tag": "EnvVar", "contents": "PARAMS_TEST_TOKEN"}},
            {"name": "billing", "secret": True, "default": {"tag": "ApiKey", "contents": "billing"}},
            {"name": "missing", "required": False, "default": {"tag": "EnvVar", "contents": "PARAMS_TEST_NONE"}},
            {"name": "zone", "scope": "session", "required": False},
        ],
    )
    result = agents("check", "--agent-file", str(path), "--api-keys", str(keys), "--set", "tenant=acme",
                    "--pin", "zone=z1", env={"PARAMS_TEST_TOKEN": "tok-987"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "params: the params test agent (0 tools)",
        "params: parameter tenant (session, required): set",
        "params: parameter region (process, required): default:Given",
        "params: parameter token (process, secret, required): default:EnvVar",
        "params: parameter billing (process, secret, required): default:ApiKey",
        "params: parameter missing (process, optional): unbound (EnvVar PARAMS_TEST_NONE is not set)",
        "params: parameter zone (session, optional): pinned",
    ]
    assert "tok-987" not in result.stdout + result.stderr and "sk-billing" not in result.stdout + result.stderr


def test_serve_refuses_an_undeclared_name_and_an_unbound_required_process_parameter(tmp_path: Path) -> None:
    path = write_agent(tmp_path, "needs", "http://127.0.0.1:9/v1",
                       parameters=[{"name": "region"}, {"name": "tenant", "scope": "session"}])
    db = str(tmp_path / "db.sqlite3")
    typo = agents("serve", "--agent-file", str(path), "--db", db, "--port", str(free_port()), "--set", "regoin=eu")
    assert typo.returncode == 2
    assert "agents: --set/--pin regoin: no loaded agent declares this parameter" in typo.stderr
    unbound = agents("serve", "--agent-file", str(path), "--db", db, "--port", str(free_port()))
    assert unbound.returncode == 2
    assert (
        "agents: needs: parameter region is required and has no value (unbound): give --set region=... or a default"
        in unbound.stderr
    )
    bad_flag = agents("serve", "--agent-file", str(path), "--db", db, "--set-json", "region={")
    assert bad_flag.returncode == 2 and "agents serve: --set-json region: the value is not JSON" in bad_flag.stderr
