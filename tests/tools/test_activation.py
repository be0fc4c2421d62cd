"""Activation in process: both key spellings and every value shape, gates on every toolbox kind,
the fold over a session's answered calls, and the meta tools' answers."""

from __future__ import annotations

import json

import pytest

from agentfiles.schema import Activation, ActivationError, parse_activation
from tools_app.activation import meta_tools, open_gates
from tools_app.toolset import ToolBuildError, build_toolset

from .conftest import copy_scripts, make_agent, make_ctx

ON_DEMAND = {"tag": "on-demand", "toolgroup": "db"}


def _call(name: str, **arguments: object) -> dict:
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


@pytest.mark.parametrize(
    ("contents", "group"),
    [
        ({}, None),
        ({"Activation": None}, None),
        ({"Activation": "always"}, None),
        ({"activation": "always"}, None),
        ({"Activation": ON_DEMAND}, "db"),
        ({"activation": ON_DEMAND}, "db"),
    ],
)
def test_both_spellings_and_every_shape(contents, group):
    assert parse_activation(contents) == Activation(group)


@pytest.mark.parametrize("value", ["sometimes", {"tag": "on-demand"}, {"tag": "on-demand", "toolgroup": " "}, 3])
def test_other_shapes_are_refused(value):
    with pytest.raises(ActivationError, match='must be "always" or'):
        parse_activation({"activation": value})


def test_bash_and_builtin_toolboxes_are_gated_and_the_meta_tools_added(tmp_path):
    copy_scripts(tmp_path / "tools", "streams.sh")
    agent = make_agent(
        tmp_path,
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Activation": ON_DEMAND}}],
        builtinToolboxes=[
            {
                "tag": "SqliteToolbox",
                "contents": {
                    "Name": "facts",
                    "Versioning": {"tag": "SqliteReadWrite", "path": "f.db"},
                    "activation": {"tag": "on-demand", "toolgroup": "sql"},
                },
            }
        ],
    )
    toolset = build_toolset(agent)
    gated = {tool.name: tool.gate for tool in toolset.tools}
    assert gated == {
        "bash_streams": "group:db",
        "sqlite_facts_query": "group:sql",
        "meta_activate_tool": None,
        "meta_deactivate_tool": None,
        "meta_discover_tools": None,
    }
    assert [t["function"]["name"] for t in toolset.openai_tools()] == list(gated)[2:]
    history = [(_call("meta_activate_tool", toolgroup="sql"), "Toolgroup 'sql' activated")]
    assert toolset.hidden(history) == {"bash_streams"}
    history.append((_call("meta_deactivate_tool", toolgroup="sql"), "Toolgroup 'sql' deactivated"))
    assert toolset.hidden(history) == {"bash_streams", "sqlite_facts_query"}


def test_a_bad_activation_is_a_load_error_naming_the_toolbox(tmp_path):
    copy_scripts(tmp_path / "tools", "streams.sh")
    agent = make_agent(
        tmp_path, bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "tools", "Activation": "later"}}]
    )
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(agent)
    assert raised.value.problems == [
        'bashToolboxes[0].contents.Activation must be "always" or {"tag": "on-demand", "toolgroup": <name>}'
    ]


def test_the_fold_ignores_failed_calls_and_unknown_groups():
    tools = {tool.name: tool for tool in meta_tools(["a", "b"])}
    history = [
        (_call("meta_activate_tool", toolgroup="a"), "Toolgroup 'a' activated"),
        (_call("meta_activate_tool", toolgroup="b"), "Error: refused by someone"),
        (_call("meta_activate_tool", toolgroup="zzz"), "Toolgroup 'zzz' activated"),
        (_call("meta_discover_tools"), '{"toolgroups":["a","b"]}'),
        (_call("unknown_tool", toolgroup="b"), "fine"),
    ]
    assert open_gates(history, tools) == {"group:a"}
    assert open_gates(None, tools, ["skill:x"]) == {"skill:x"}


def test_the_meta_tools_answer_as_agents_exe_did():
    activate, deactivate, discover = meta_tools(["ask-user", "db", "ask-user"])
    ctx = make_ctx()
    assert activate.call({"toolgroup": "db"}, ctx).response == "Toolgroup 'db' activated"
    assert deactivate.call({"toolgroup": "db"}, ctx).response == "Toolgroup 'db' deactivated"
    assert discover.call({}, ctx).response == '{"toolgroups":["ask-user","db"]}'
    refused = activate.call({}, ctx)
    assert refused.is_error and refused.response.startswith("Error: meta_activate_tool: unknown toolgroup None")
    assert meta_tools([]) == []


def test_an_mcp_servers_tools_are_gated_too(tmp_path):
    from tests.tools.test_mcp import demo_entry

    entry = demo_entry("gated")
    entry["contents"]["Activation"] = {"tag": "on-demand", "toolgroup": "demo"}
    toolset = build_toolset(make_agent(tmp_path, mcpServers=[entry]))
    listed = [name for name in toolset.names() if name.startswith("mcp_gated_")]
    assert listed and all(toolset.get(name).gate == "group:demo" for name in listed)
    assert [t["function"]["name"] for t in toolset.openai_tools()] == [
        "meta_activate_tool",
        "meta_deactivate_tool",
        "meta_discover_tools",
    ]
    opened = [(_call("meta_activate_tool", toolgroup="demo"), "Toolgroup 'demo' activated")]
    assert toolset.hidden(opened) == set()
    entry["contents"]["Activation"] = {"tag": "on-demand"}
    with pytest.raises(ToolBuildError) as raised:
        build_toolset(make_agent(tmp_path, mcpServers=[demo_entry("other") | {"contents": entry["contents"]}]))
    assert raised.value.problems == [
        'mcpServers[0].contents.Activation must be "always" or {"tag": "on-demand", "toolgroup": <name>}'
    ]
