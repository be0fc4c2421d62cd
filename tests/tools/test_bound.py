"""tools_app/bound.py and the bindings of toolset.py: bound arguments leave the schema, the bound
value wins, secrets go in env, and every load-time check of the bindings (docs/tools.md §8)."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from agentfiles.parameters import ParamValue
from tests.harness import ROOT, write_tool
from tools_app.bound import BoundTool
from tools_app.toolset import ToolBuildError, build_toolset

from .conftest import copy_scripts, make_agent, make_ctx, script

TENANT = {"tag": "Param", "contents": "tenant"}
TOKEN = {"tag": "Param", "contents": "token"}


def modes_agent(tmp_path, bindings=(), agent_bindings=(), parameters=None, **extra):
    copy_scripts(tmp_path / "tools", "modes.py", "streams.sh")
    return make_agent(
        tmp_path,
        parameters=parameters
        if parameters is not None
        else [{"name": "tenant", "scope": "session"}, {"name": "token", "scope": "session", "secret": True}],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": list(bindings)}}],
        bindings=list(agent_bindings),
        **extra,
    )


def run(tool, arguments, **params):
    values = {name: value if isinstance(value, ParamValue) else ParamValue(value) for name, value in params.items()}
    result = tool.call(arguments, make_ctx(params=values))
    return result.is_error, result.response


def test_a_bound_argument_leaves_the_schema_and_its_value_wins(tmp_path, caplog):
    agent = modes_agent(
        tmp_path,
        bindings=[
            {"tool": "mod*", "arg": "pos", "value": TENANT},
            {"arg": "space", "value": {"tag": "Literal", "contents": "fixed"}},
        ],
    )
    toolset = build_toolset(agent)
    tool = toolset.get("bash_modes")
    assert isinstance(tool, BoundTool) and str(tool.path).endswith("modes.py")
    schema = tool.openai_tool()["function"]["parameters"]
    assert "pos" not in schema["properties"] and "space" not in schema["properties"]
    assert "pos" not in schema["required"] and "equal" in schema["properties"]
    assert [p["propertyKey"] for p in tool.system_tool()["contents"]["properties"]] == [
        "equal", "body", "note", "api-token", "tag", "extra",
    ]
    # the streams tool has neither argument: it is left as it is
    assert not isinstance(toolset.get("bash_streams"), BoundTool)
    with caplog.at_level(logging.WARNING, logger="tools.bound"):
        failed, out = run(tool, {"pos": "model-chose", "space": "model", "equal": 2}, tenant="acme")
    assert not failed
    assert json.loads(out)["argv"] == ["acme", "--space", "fixed", "--equal=2"]
    dropped = [r for r in caplog.records if getattr(r, "kind", "") == "tools.bound_argument_dropped"]
    assert sorted(r.arg for r in dropped) == ["pos", "space"]


def test_a_secret_goes_in_env_and_is_never_logged(tmp_path, caplog):
    agent = modes_agent(tmp_path, bindings=[{"tool": "modes", "arg": "api-token", "value": TOKEN}])
    tool = build_toolset(agent).get("bash_modes")
    with caplog.at_level(logging.DEBUG):
        failed, out = run(tool, {"pos": "p", "api-token": "model"}, token=ParamValue("s3cr3t-value", secret=True))
    assert not failed and json.loads(out)["env"]["API_TOKEN"] == "s3cr3t-value"
    assert "s3cr3t-value" not in caplog.text


def test_unbound_parameters_fail_omit_or_expose(tmp_path, caplog):
    agent = modes_agent(
        tmp_path,
        parameters=[
            {"name": "tenant", "scope": "session"},
            {"name": "opt", "scope": "session", "required": False},
            {"name": "shown", "scope": "session", "required": False},
        ],
        bindings=[
            {"tool": "modes", "arg": "pos", "value": TENANT},
            {"tool": "modes", "arg": "space", "value": {"tag": "Param", "contents": "opt"}, "whenUnbound": "omit"},
            {"tool": "modes", "arg": "body", "value": {"tag": "Param", "contents": "shown"}, "whenUnbound": "expose"},
        ],
    )
    tool = build_toolset(agent).get("bash_modes")
    with caplog.at_level(logging.WARNING, logger="tools.bound"):
        failed, out = run(tool, {"space": "x"})
    assert failed and out == "Error: tool bash_modes is unavailable"
    [record] = [r for r in caplog.records if getattr(r, "kind", "") == "tools.param_unbound"]
    assert (record.arg, record.param) == ("pos", "tenant")
    # omit: the argument goes, whatever the model sent; expose: the model's value goes through
    failed, out = run(tool, {"space": "x", "body": "from the model"}, tenant="t")
    assert not failed and json.loads(out)["argv"] == ["t"] and json.loads(out)["stdin"] == "from the model"
    failed, out = run(tool, {"body": "from the model"}, tenant="t", shown="bound")
    assert json.loads(out)["stdin"] == "bound"
    # the exposed argument is in the schema while its parameter has no value for the session
    assert "body" in tool.schema_for({})["properties"]
    assert "body" not in tool.schema_for({"shown": ParamValue("v")})["properties"]
    visible = [p["propertyKey"] for p in tool.system_properties({"shown": ParamValue("v")})]
    assert "body" not in visible and "equal" in visible


def test_agent_bindings_match_wire_names_after_the_toolbox_ones(tmp_path):
    agent = modes_agent(
        tmp_path,
        bindings=[{"tool": "modes", "arg": "pos", "value": {"tag": "Literal", "contents": 5}}],
        agent_bindings=[{"tool": "bash_mo*", "arg": "equal", "value": TENANT}],
    )
    tool = build_toolset(agent).get("bash_modes")
    assert {"pos", "equal"} == {b.arg for b in tool.bindings}
    failed, out = run(tool, {}, tenant=3)
    assert json.loads(out)["argv"] == ["5", "--equal=3"]


@pytest.mark.parametrize(
    ("bindings", "agent_bindings", "problem"),
    [
        ([{"tool": "nothing-*", "arg": "pos", "value": TENANT}], [],
         "bashToolboxes[0].contents.Bindings[0]: the binding matches no tool (tool 'nothing-*')"),
        ([{"arg": "posx", "value": TENANT}], [],
         "bashToolboxes[0].contents.Bindings[0]: no tool matching '*' has an argument posx"),
        ([{"tool": "modes", "arg": "pos", "value": TENANT}], [{"tool": "bash_modes", "arg": "pos", "value": TENANT}],
         "bindings[0]: argument pos of bash_modes is bound twice"),
        ([{"tool": "modes", "arg": "pos", "value": TENANT, "whenUnbound": "omit"}], [],
         "bashToolboxes[0].contents.Bindings[0]: argument pos of bash_modes is required: it cannot be omitted"),
        ([{"tool": "modes", "arg": "pos", "value": TOKEN}], [],
         "bashToolboxes[0].contents.Bindings[0]: argument pos of bash_modes is passed on the command line"
         " (positional), where it would show in ps; a secret must use \"mode\": \"env\""),
        ([{"tool": "modes", "arg": "space", "value": {"tag": "Literal", "contents": {"an": "object"}}}], [],
         "bashToolboxes[0].contents.Bindings[0]: argument space of bash_modes takes a string, a number or a"
         " boolean, not an object or a list"),
    ],
)
def test_load_time_checks_of_bindings(tmp_path, bindings, agent_bindings, problem):
    with pytest.raises(ToolBuildError) as error:
        build_toolset(modes_agent(tmp_path, bindings=bindings, agent_bindings=agent_bindings))
    assert problem in error.value.problems


def test_a_bound_argument_named_in_the_description_is_a_warning(tmp_path):
    arg = {"name": "tenant_id", "description": "whose", "type": "string", "backing_type": "string",
           "arity": "single", "mode": "env"}
    write_tool(tmp_path / "tools", "invoices", {"slug": "invoices", "description": "lists tenant_id's invoices",
                                                "args": [arg]}, 'echo "$TENANT_ID"')
    agent = make_agent(
        tmp_path,
        parameters=[{"name": "tenant", "scope": "session"}],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Bindings": [
            {"arg": "tenant_id", "value": TENANT}]}}],
    )
    toolset = build_toolset(agent)
    assert toolset.notices == [
        "bashToolboxes[0].contents.Bindings[0]: the description of bash_invoices names its bound argument tenant_id"
    ]
    assert run(toolset.get("bash_invoices"), {}, tenant="acme") == (False, "acme\n")


def test_a_multiple_argument_takes_a_bound_list(tmp_path):
    described = make_agent(
        tmp_path,
        bashToolboxes=[{"tag": "SingleTool", "contents": {"Path": str(script("modes.py")), "Bindings": [
            {"arg": "tag", "value": {"tag": "Literal", "contents": ["a", "b"]}},
        ]}}],
    )
    tool = build_toolset(described).get("bash_modes")
    assert json.loads(run(tool, {"pos": "p"})[1])["argv"] == ["p", "--tag", "a", "--tag", "b"]


def test_a_bound_value_the_tool_cannot_take_fails_the_call_without_naming_it(tmp_path, caplog):
    agent = modes_agent(tmp_path, bindings=[{"tool": "modes", "arg": "pos", "value": TENANT}])
    tool = build_toolset(agent).get("bash_modes")
    with caplog.at_level(logging.WARNING, logger="tools.bound"):
        failed, out = run(tool, {}, tenant={"not": "a string"})
    assert failed and out == "Error: tool bash_modes is unavailable"
    assert any(getattr(r, "kind", "") == "tools.bound_value_refused" for r in caplog.records)


# --- MCP: server env from process values, agent bindings on live tools ---------------------------


def test_mcp_env_takes_process_values_and_agent_bindings_reach_mcp_tools(tmp_path):
    pid_file = tmp_path / "pids"
    agent = make_agent(
        tmp_path,
        slug="mcp-params",
        parameters=[{"name": "pid_file"}, {"name": "words", "scope": "session"}],
        mcpServers=[
            {
                "tag": "McpSimpleBinary",
                "contents": {
                    "name": "demo",
                    "executable": sys.executable,
                    "args": [str(ROOT / "tests" / "mcp_demo_server.py")],
                    "env": {"DEMO_MCP_PID_FILE": {"tag": "Param", "contents": "pid_file"}},
                },
            }
        ],
        bindings=[{"tool": "mcp_demo_echo", "arg": "text", "value": {"tag": "Param", "contents": "words"}}],
    )
    toolset = build_toolset(agent, {"pid_file": ParamValue(str(pid_file))})
    assert pid_file.read_text().strip()
    echo = toolset.get("mcp_demo_echo")
    assert isinstance(echo, BoundTool) and echo.schema_for()["properties"] == {}
    result = echo.call({"text": "model"}, make_ctx(params={"words": ParamValue("bound words")}))
    assert not result.is_error and "bound words" in str(result.response)


def test_agent_bindings_reach_built_in_tools(tmp_path):
    agent = make_agent(
        tmp_path,
        parameters=[{"name": "report", "scope": "session"}],
        builtinToolboxes=[{"tag": "SqliteToolbox", "contents": {
            "Name": "mem", "Description": "notes", "Versioning": {"tag": "SqliteReadWrite", "path": "data.db"}}}],
        bindings=[{"tool": "sqlite_mem_*", "arg": "sql", "value": {"tag": "Param", "contents": "report"}}],
    )
    [tool] = build_toolset(agent).tools
    assert isinstance(tool, BoundTool) and tool.openai_tool()["function"]["parameters"]["properties"] == {}
    failed, out = run(tool, {"sql": "DROP TABLE everything"}, report="SELECT 41 + 1 AS answer")
    assert not failed and "42" in json.dumps(out)
