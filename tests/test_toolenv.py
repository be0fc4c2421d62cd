"""Tool environments (docs/tools.md, "Tool environments"), in process: the base environment in
both modes, the deny-list against every variable the code reads, and each kind of tool process
(bash ``describe`` and ``run``, MCP stdio, the isolation worker, skills' git, the System
toolbox's listing and commands, ``Command`` defaults) and each reader of variables by name
(OpenAPI ``${VAR}``, ``EnvVar``)."""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentfiles.parameters import resolve_default
from agentfiles.schema import SecretSource
from foundation.env import is_server_variable
from foundation.toolenv import base_environment, current_mode, parse_mode, tool_environment, unreadable
from tests.harness import ROOT, write_tool
from tests.tools.conftest import make_agent, make_ctx
from tools_app.bash.loading import load_single_tool
from tools_app.mcp.config import parse_server
from tools_app.openapi.config import HttpToolboxError, parse_http_toolbox
from tools_app.skills.sources import SkillSourceError, clone
from tools_app.toolset import build_toolset

#: The server's own configuration as a deployment sets it, each value unique so that a leak shows.
SERVER = {
    "DJANGO_SECRET_KEY": "django-key-7f3a",
    "DATABASE_URL": "postgres://agents:db-password-91c2@db/agents",
    "REDIS_URL": "redis://:redis-password-55e1@redis:6379/0",
    "AGENTS_FLEET_KEY": "fleet-key-c4d8",
    "OPENAI_API_KEY": "sk-openai-0b6e",
    "PGPASSWORD": "pg-password-2d7f",
    "CELERY_BROKER_URL": "redis://:celery-password-e9a0@redis/1",
    "SECRET_KEY": "plain-secret-key-3c1b",
}
#: Variables that are not the server's: clean mode passes them, strict mode only the allow-list.
OTHER = {"PLAIN_VARIABLE": "plain-value", "LC_TIME": "C", "TZ": "UTC", "TMPDIR": "/tmp"}


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's environment holds the server's configuration and a few other variables."""
    for name, value in {**SERVER, **OTHER}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def strict(settings: Any) -> None:
    """``--tool-env strict``."""
    settings.AGENTS = {**settings.AGENTS, "TOOL_ENV": "strict"}


def _leaks(text: str) -> list[str]:
    return [name for name, value in SERVER.items() if value in text]


# -- the function ---------------------------------------------------------------------------------


def test_clean_mode_drops_the_servers_configuration_and_keeps_the_rest() -> None:
    source = {**SERVER, **OTHER, "PATH": "/usr/bin", "HOME": "/home/a", "AGENTS_TOOL_ENV": "clean"}
    assert base_environment(source, mode="clean") == {**OTHER, "PATH": "/usr/bin", "HOME": "/home/a"}


def test_strict_mode_keeps_only_the_allow_list() -> None:
    source = {**SERVER, **OTHER, "PATH": "/usr/bin", "HOME": "/home/a", "LANG": "C.UTF-8", "USER": "a"}
    assert base_environment(source, mode="strict") == {
        "PATH": "/usr/bin",
        "HOME": "/home/a",
        "LANG": "C.UTF-8",
        "LC_TIME": "C",
        "TZ": "UTC",
        "TMPDIR": "/tmp",
    }


def test_declared_variables_are_added_and_win(planted: None, strict: None) -> None:
    declared = {"TOOL_TOKEN": "declared", "TZ": "Europe/Paris", "DATABASE_URL": "sqlite:///the-tools-own.db"}
    environment = tool_environment(declared)
    assert environment["TOOL_TOKEN"] == "declared" and environment["TZ"] == "Europe/Paris"
    # the agent's own value under a server name is the agent's, not the server's
    assert environment["DATABASE_URL"] == "sqlite:///the-tools-own.db"
    assert "PLAIN_VARIABLE" not in environment and _leaks(json.dumps(environment)) == []


def test_the_mode_comes_from_the_settings(settings: Any) -> None:
    assert current_mode() == "clean"
    settings.AGENTS = {**settings.AGENTS, "TOOL_ENV": "strict"}
    assert current_mode() == "strict"


@pytest.mark.parametrize("value", ["", "Strict", "none", "clean,strict"])
def test_other_modes_are_refused(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="takes clean or strict"):
        parse_mode(value)


def test_unreadable_names_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    assert unreadable("DJANGO_SECRET_KEY", mode="clean") == (
        "DJANGO_SECRET_KEY is the server's own configuration, which agents may not read"
    )
    assert unreadable("PLAIN_VARIABLE", mode="clean") is None
    assert "--tool-env strict" in (unreadable("PLAIN_VARIABLE", mode="strict") or "")
    assert unreadable("LC_ALL", mode="strict") is None


#: The methods of ``environ.Env`` that read a variable by name.
ENV_READERS = frozenset({"str", "bool", "int", "float", "list", "tuple", "dict", "json", "url", "db_url", "path"})


def _environment_reads() -> set[str]:
    """Every variable name the project's code reads or sets by a literal name: ``env(...)``,
    ``env.str(...)`` and its siblings, ``os.environ[...]``, ``os.environ.get/setdefault``,
    ``os.getenv`` and ``"X" in os.environ``."""

    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ" and getattr(node.value, "id", "") == "os"

    names: set[str] = set()
    for package in ("foundation", "agentfiles", "agentsite", "agents_app", "tools_app", "sessions_app", "console_app"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                first: ast.AST | None = None
                if isinstance(node, ast.Call) and node.args:
                    func = node.func
                    if (
                        (isinstance(func, ast.Name) and func.id == "env")
                        or (isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "env"
                            and func.attr in ENV_READERS)
                        or (isinstance(func, ast.Attribute) and is_environ(func.value))
                        or (isinstance(func, ast.Attribute) and func.attr == "getenv")
                    ):
                        first = node.args[0]
                elif isinstance(node, ast.Subscript) and is_environ(node.value):
                    first = node.slice
                elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
                    first = node.left
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    names.add(first.value)
    return names


def test_every_variable_the_server_reads_is_denied_to_tools() -> None:
    reads = _environment_reads()
    # the scan finds the settings' reads, the command line's and the libraries' wrappers'
    assert {"DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "AGENTS_TOOL_ENV", "AGENTS_API_KEY"} <= reads
    # what the code reads that is not configuration: where the caches and the user's shell are
    not_configuration = {"XDG_CACHE_HOME", "SHELL"}
    assert sorted(name for name in reads - not_configuration if not is_server_variable(name)) == []


# -- every kind of tool process ---------------------------------------------------------------------

DUMP_RUN = f"{sys.executable} -c 'import json, os; print(json.dumps(dict(os.environ)))'"


def _env_tool(directory: Path) -> Path:
    describe = {
        "slug": "dump",
        "description": "prints its environment",
        "args": [
            {"name": "tool-token", "description": "d", "type": "string", "backing_type": "string",
             "arity": "single", "mode": "env"}
        ],
    }
    # describe leaves its own environment beside the script
    path = write_tool(directory, "dump", describe, DUMP_RUN)
    text = path.read_text().replace("cat <<'JSON'", f'env > "{directory}/describe-env"\ncat <<\'JSON\'', 1)
    path.write_text(text)
    return path


def test_bash_describe_and_run_get_the_clean_environment(tmp_path: Path, planted: None) -> None:
    tool = load_single_tool(_env_tool(tmp_path))
    assert _leaks((tmp_path / "describe-env").read_text()) == []
    assert "PLAIN_VARIABLE=plain-value" in (tmp_path / "describe-env").read_text()
    result = tool.call({"tool-token": "declared-value"}, make_ctx())
    assert not result.is_error, result.response
    environment = json.loads(result.response)
    assert _leaks(result.response) == []
    assert environment["TOOL_TOKEN"] == "declared-value" and environment["PLAIN_VARIABLE"] == "plain-value"
    assert environment["AGENT_SESSION_ID"] == "sess-1"


def test_bash_run_in_strict_mode_gets_the_allow_list_and_what_is_declared(
    tmp_path: Path, planted: None, strict: None
) -> None:
    tool = load_single_tool(_env_tool(tmp_path))
    result = tool.call({"tool-token": "declared-value"}, make_ctx())
    environment = json.loads(result.response)
    allowed = {"PATH", "HOME", "LANG", "TZ", "TMPDIR", "PWD", "SHLVL", "_", "TOOL_TOKEN"}
    extra = {name for name in environment if not name.startswith(("LC_", "AGENT_"))} - allowed
    # bash itself sets PWD, SHLVL and _; nothing else of the server's environment is there
    assert extra == set() and environment["TOOL_TOKEN"] == "declared-value" and environment["TZ"] == "UTC"


def test_mcp_stdio_servers_get_the_tool_environment_and_their_declared_env(tmp_path: Path, planted: None) -> None:
    entry = {
        "tag": "McpSimpleBinary",
        "contents": {"name": "dump", "executable": sys.executable,
                     "env": {"MCP_TOKEN": {"tag": "Literal", "contents": "mcp-declared"}}},
    }
    environment = parse_server(entry, "mcpServers[0]", lambda p: tmp_path / p).environment()
    assert environment["MCP_TOKEN"] == "mcp-declared" and environment["PLAIN_VARIABLE"] == "plain-value"
    assert _leaks(json.dumps(environment)) == []


def test_the_isolation_worker_gets_the_tool_environment(tmp_path: Path, planted: None, settings: Any) -> None:
    from sessions_app import isolation

    worker = tmp_path / "worker"
    worker.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nenvelope = json.load(sys.stdin)\n"
        'print(json.dumps({"token": envelope["token"], "status": "success", "result": json.dumps(dict(os.environ))}))\n'
    )
    worker.chmod(0o755)
    settings.AGENTS = {**settings.AGENTS, "ISOLATE_TOOLS": f"process:{worker}"}
    call = {"id": "call_1", "type": "function", "function": {"name": "bash_x", "arguments": "{}"}}
    result = isolation.run(call, make_ctx())
    assert not result.is_error, result.response
    assert _leaks(json.dumps(result.response)) == [] and "plain-value" in json.dumps(result.response)


def test_skills_git_gets_the_tool_environment(tmp_path: Path, planted: None, monkeypatch: pytest.MonkeyPatch,
                                              settings: Any) -> None:
    # a stand-in git first on PATH records its environment and fails
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\nenv > "{tmp_path}/git-env"\nexit 1\n')
    (bin_dir / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    settings.AGENTS = {**settings.AGENTS, "SKILLS_CACHE": str(tmp_path / "cache")}
    with pytest.raises(SkillSourceError, match="git clone"):
        clone("https://example.invalid/skills.git", None, "skillSources[0]", [])
    recorded = (tmp_path / "git-env").read_text()
    assert _leaks(recorded) == [] and "GIT_TERMINAL_PROMPT=0" in recorded and "plain-value" in recorded


def test_the_system_toolbox_lists_and_runs_with_the_tool_environment(tmp_path: Path, planted: None) -> None:
    agent = make_agent(tmp_path, builtinToolboxes=[
        {"tag": "SystemToolbox", "contents": {"Name": "sys", "Capabilities": ["env-vars", "execute-command"]}}
    ])
    [tool] = build_toolset(agent).tools
    listed = tool.call({"capability": "env-vars"}, make_ctx())
    variables = listed.response["content"]["data"]["variables"]
    assert variables["PLAIN_VARIABLE"] == "plain-value" and _leaks(json.dumps(variables)) == []
    ran = tool.call({"capability": "execute-command", "command": "env"}, make_ctx())
    output = ran.response["content"]["data"]["stdout"]
    assert "PLAIN_VARIABLE=plain-value" in output and _leaks(output) == []


def test_the_system_toolbox_lists_the_strict_environment(tmp_path: Path, planted: None, strict: None) -> None:
    agent = make_agent(tmp_path, builtinToolboxes=[
        {"tag": "SystemToolbox", "contents": {"Name": "sys", "Capabilities": ["env-vars"]}}
    ])
    [tool] = build_toolset(agent).tools
    variables = tool.call({"capability": "env-vars"}, make_ctx()).response["content"]["data"]["variables"]
    assert set(variables) <= {"PATH", "HOME", "LANG", "TZ", "TMPDIR"} | {n for n in variables if n.startswith("LC_")}
    assert variables["TZ"] == "UTC"


def test_the_command_filter_and_the_developer_build_command_get_the_tool_environment(
    tmp_path: Path, planted: None
) -> None:
    # the filter leaves its environment beside itself, then allows the command
    command_filter = tmp_path / "filter"
    command_filter.write_text(
        f'#!/bin/sh\nenv > "{tmp_path}/filter-env"\necho \'{{"acceptance": "allowed", "note": "ok"}}\'\n'
    )
    command_filter.chmod(0o755)
    agent = make_agent(tmp_path, builtinToolboxes=[
        {"tag": "SystemToolbox", "contents": {"Name": "sys", "Capabilities": ["execute-command"],
                                              "CommandFilter": str(command_filter)}},
        {"tag": "DeveloperToolbox", "contents": {"Name": "dev", "Capabilities": ["build-command"],
                                                 "BuildCommand": "env", "FileSandbox": {
                                                     "fsbPredicate": {"tag": "DirectoryRecursive",
                                                                      "contents": str(tmp_path)},
                                                     "fsbName": "work"}}},
    ])
    system, developer = sorted(build_toolset(agent).tools, key=lambda tool: tool.name, reverse=True)
    ran = system.call({"capability": "execute-command", "command": "true"}, make_ctx())
    assert not ran.is_error, ran.response
    recorded = (tmp_path / "filter-env").read_text()
    assert "PLAIN_VARIABLE=plain-value" in recorded and _leaks(recorded) == []
    built = developer.call({"capability": "build-command"}, make_ctx())
    output = built.response["content"]["stdout"]
    assert "PLAIN_VARIABLE=plain-value" in output and _leaks(output) == []


def test_command_defaults_run_in_the_tool_environment(tmp_path: Path, planted: None) -> None:
    source = SecretSource.model_validate({"tag": "Command", "contents": ["/bin/sh", "-c", "env"]})
    resolved = resolve_default(source, base_dir=tmp_path, api_keys={})
    assert resolved.resolved and "PLAIN_VARIABLE=plain-value" in resolved.value and _leaks(resolved.value) == []


# -- reading variables by name ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "AGENTS_FLEET_KEY", "PGPASSWORD"])
def test_envvar_defaults_cannot_read_the_servers_configuration(tmp_path: Path, planted: None, name: str) -> None:
    resolved = resolve_default(SecretSource.model_validate({"tag": "EnvVar", "contents": name}),
                               base_dir=tmp_path, api_keys={})
    assert not resolved.resolved and resolved.value is None
    assert resolved.problem == f"EnvVar {name} is the server's own configuration, which agents may not read"


def test_envvar_defaults_read_other_variables_unless_strict(tmp_path: Path, planted: None, settings: Any) -> None:
    source = SecretSource.model_validate({"tag": "EnvVar", "contents": "PLAIN_VARIABLE"})
    assert resolve_default(source, base_dir=tmp_path, api_keys={}).value == "plain-value"
    settings.AGENTS = {**settings.AGENTS, "TOOL_ENV": "strict"}
    refused = resolve_default(source, base_dir=tmp_path, api_keys={})
    assert not refused.resolved and "--tool-env strict" in (refused.problem or "")


def _openapi(**contents: Any) -> dict[str, Any]:
    return {"tag": "OpenAPIServer", "contents": {"SpecUrl": "https://api.example/doc.json",
                                                 "BaseUrl": "https://api.example", **contents}}


@pytest.mark.parametrize("key", ["Headers", "Token"])
def test_openapi_expansion_refuses_the_servers_variables(tmp_path: Path, planted: None, key: str) -> None:
    value = "Bearer ${DJANGO_SECRET_KEY}"
    entry = _openapi(Headers={"X-Key": value}) if key == "Headers" else _openapi(Token=value)
    with pytest.raises(HttpToolboxError) as refused:
        parse_http_toolbox(entry, "openApiToolboxes[0]", tag="OpenAPIServer", base_dir=tmp_path)
    where = "Headers.X-Key" if key == "Headers" else "Token"
    assert str(refused.value) == (
        f"openApiToolboxes[0].contents.{where}: ${{DJANGO_SECRET_KEY}} refused: DJANGO_SECRET_KEY is the"
        " server's own configuration, which agents may not read"
    )
    assert SERVER["DJANGO_SECRET_KEY"] not in str(refused.value)


def test_openapi_expansion_reads_other_variables_unless_strict(tmp_path: Path, planted: None, settings: Any) -> None:
    entry = _openapi(Token="${PLAIN_VARIABLE}")
    config = parse_http_toolbox(entry, "openApiToolboxes[0]", tag="OpenAPIServer", base_dir=tmp_path)
    assert config.token == "plain-value"
    settings.AGENTS = {**settings.AGENTS, "TOOL_ENV": "strict"}
    with pytest.raises(HttpToolboxError, match=r"\$\{PLAIN_VARIABLE\} refused: .*--tool-env strict"):
        parse_http_toolbox(entry, "openApiToolboxes[0]", tag="OpenAPIServer", base_dir=tmp_path)
