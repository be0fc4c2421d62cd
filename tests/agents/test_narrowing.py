"""agents_app/narrowing.py on a three-level chain (root -> middle -> leaf), in process: bindings
travel down re-rooted, only narrow, and describe_agent shows what is open from where one stands."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agentfiles.bindings import ScopedBinding
from agentfiles.parameters import AgentParameters, ParamValue
from agentfiles.schema import AgentSpec, BindingValue, ParameterDecl
from agents_app.narrowing import (
    DescribeAgentTool,
    NarrowingError,
    derived_table,
    helper_tools,
    narrowed_toolset,
    prepare_helper_call,
)
from tools_app.base import Tool, ToolContext, ToolResult
from tools_app.subagent import SubAgentTool
from tools_app.toolset import ToolSet


class Echo(Tool):
    """Answers with the arguments it got."""

    def __init__(self, name: str, *args: str) -> None:
        self.name = name
        self.description = name
        self.parameters = {"type": "object", "properties": {a: {"type": "string", "description": a} for a in args},
                           "required": []}

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(dict(sorted(arguments.items())))


def spec(slug: str, parameters: list[dict[str, Any]] | None = None) -> AgentSpec:
    return AgentSpec.model_validate({"slug": slug, "apiKeyId": "k", "flavor": "f", "modelUrl": "http://x",
                                     "modelName": "m", "announce": f"{slug} helps", "systemPrompt": [],
                                     "parameters": parameters or []})


@pytest.fixture
def tree() -> dict[str, Any]:
    agents: dict[str, Any] = {}

    def lookup(slug: str) -> Any:
        return agents[slug]

    def agent(slug: str, tools: list[Tool], helpers: list[SubAgentTool], parameters=None) -> Any:
        loaded_spec = spec(slug, parameters)
        toolset = ToolSet(tools).with_extra_tools(helper_tools(helpers, lookup))
        agents[slug] = SimpleNamespace(slug=slug, toolset=toolset, loaded=SimpleNamespace(spec=loaded_spec),
                                       parameters=AgentParameters(loaded_spec.parameters, {}, {}))
        return agents[slug]

    agent("leaf", [Echo("bash_git-diff", "repo", "rev"), Echo("bash_gh-pr", "repo", "token")], [],
          [{"name": "severity", "scope": "session", "required": False}])
    agent("locked", [Echo("bash_x", "a")], [])
    agent("middle", [Echo("bash_git-log", "repo", "since")],
          [SubAgentTool("leaf", "leaf helps"), SubAgentTool("locked", "no", narrowable=False)])
    with_tenant = {"team": BindingValue(tag="Param", contents="team")}
    root = agent("root", [], [SubAgentTool("middle", "middle helps", with_tenant)],
                 [{"name": "team", "scope": "session"}])
    agents["middle"].parameters = AgentParameters([ParameterDecl(name="team", scope="session")], {}, {})
    return {"agents": agents, "lookup": lookup, "root": root}


def call(tree, caller: str, helper: str, arguments: dict[str, Any], *, params=None, inherited=(), derived=None):
    tool = next(t for t in tree["agents"][caller].toolset.tools if isinstance(t, SubAgentTool) and t.slug == helper)
    return prepare_helper_call(tool, {"what": "go", **arguments}, caller=params or {}, inherited=list(inherited),
                               derived=derived or {}, lookup=tree["lookup"])


def literal(value: Any) -> dict[str, Any]:
    return {"tag": "Literal", "contents": value}


def test_the_root_binds_for_the_grandchild_and_the_middle_narrows_further(tree) -> None:
    prepared = call(tree, "root", "middle", {"bindings": [
        {"tool": "bash_git-*", "arg": "repo", "value": literal("org/repo")},
        {"agent": "leaf", "tool": "bash_git-diff", "arg": "rev", "value": {"tag": "Param", "contents": "team"}},
    ]}, params={"team": ParamValue("blue", secret=True)})
    # the entry's with gives the middle the root's team, secret as it was
    assert prepared.params == {"team": ParamValue("blue", secret=True)}
    here, below = prepared.narrowing.here, prepared.narrowing.below
    assert [(b.tool, b.arg) for b in here] == [("bash_git-*", "repo")]
    assert [(b.address, b.arg, b.secret) for b in below] == [(("leaf",), "rev", True)]
    middle_tools = narrowed_toolset(tree["agents"]["middle"].toolset, here)
    assert "repo" not in middle_tools.get("bash_git-log").schema_for()["properties"]
    # the middle prompts the leaf: the root's binding arrives there; the middle binds one more
    leaf_call = call(tree, "middle", "leaf", {"bindings": [{"tool": "bash_gh-pr", "arg": "repo",
                                                            "value": literal("org/other")}]}, inherited=below)
    bound = {(b.tool, b.arg): b.value for b in leaf_call.narrowing.here}
    assert bound == {("bash_git-diff", "rev"): "blue", ("bash_gh-pr", "repo"): "org/other"}
    leaf_tools = narrowed_toolset(tree["agents"]["leaf"].toolset, leaf_call.narrowing.here)
    assert set(leaf_tools.get("bash_git-diff").schema_for()["properties"]) == {"repo"}
    # the middle cannot rebind what the root bound: its binding is dropped, the root's value stays
    again = call(tree, "middle", "leaf", {"bindings": [{"tool": "bash_git-diff", "arg": "rev",
                                                        "value": literal("mine")}]}, inherited=below)
    assert [(b.arg, b.value) for b in again.narrowing.here] == [("rev", "blue")]


def test_describe_shows_what_is_open_from_where_one_stands(tree) -> None:
    describe = next(t for t in tree["agents"]["middle"].toolset.tools if isinstance(t, DescribeAgentTool))
    # what the root bound below the middle, as the middle's session holds it
    inherited = (ScopedBinding(("leaf",), "bash_git-diff", "rev", "blue", True),)
    ctx = ToolContext("s", "s", "t", "middle", "c", None, inherited_bindings=inherited)
    described = describe.call({"slug": "leaf"}, ctx).response["content"]
    open_args = {t["name"]: [a["arg"] for a in t["open"]] for t in described["tools"]}
    assert open_args == {"bash_git-diff": ["repo"], "bash_gh-pr": ["repo", "token"]}
    assert described["parameters"] == [{"name": "severity", "description": None, "bound": False}]
    assert "blue" not in str(described)
    assert describe.call({"slug": "locked"}, ctx).response["content"] == {"slug": "locked", "announce": "locked helps"}
    assert describe.call({"slug": "nobody"}, ctx).is_error


@pytest.mark.parametrize(
    ("caller", "helper", "arguments", "message"),
    [
        ("middle", "locked", {"with": {"a": literal(1)}}, "helper locked cannot be narrowed"),
        ("root", "middle", {"bindings": [{"agent": "nobody", "arg": "x", "value": literal(1)}]},
         "bindings[0]: middle has no helper nobody (its helpers: leaf, locked)"),
        ("root", "middle", {"bindings": [{"agent": "locked", "arg": "a", "value": literal(1)}]},
         "bindings[0]: helper locked cannot be narrowed"),
        ("root", "middle", {"bindings": [{"tool": "bash_nope", "arg": "repo", "value": literal(1)}]},
         "bindings[0]: no tool matches 'bash_nope' (tools: bash_git-log)"),
        ("root", "middle", {"bindings": [{"arg": "reop", "value": literal(1)}]},
         "bindings[0]: reop is not an open argument (open: bash_git-log.repo, bash_git-log.since)"),
        ("root", "middle", {"bindings": [{"arg": "repo", "value": {"tag": "Param", "contents": "missing"}}]},
         "bindings[0]: the caller's parameter missing has no value"),
        ("root", "middle", {"bindings": [{"arg": "repo", "value": "bare"}]}, "bindings[0]: a value is"),
        ("root", "middle", {"with": {"team": literal("x")}}, "with: parameter team of helper middle is already given"),
        ("middle", "leaf", {"with": {"nope": literal("x")}}, "with: helper leaf has no parameter nope"),
        ("middle", "leaf", {"as": "strict"}, "no derived agent 'strict' of helper leaf: call derive_agent first"),
    ],
)
def test_what_the_calling_model_can_fix_is_told_before_anything_runs(tree, caller, helper, arguments, message):
    with pytest.raises(NarrowingError) as error:
        call(tree, caller, helper, arguments)
    assert message in str(error.value)


def test_a_derived_narrowing_applies_before_the_calls_own(tree) -> None:
    answered = [
        ({"function": {"name": "derive_agent", "arguments": '{"from": "leaf", "slug": "strict", "bindings": '
                       '[{"arg": "rev", "value": {"tag": "Literal", "contents": "main"}}], '
                       '"with": {"severity": {"tag": "Literal", "contents": "high"}}}'}},
         {"type": "json", "content": {"stored": True, "from": "leaf", "slug": "strict"}}),
        ({"function": {"name": "derive_agent", "arguments": '{"from": "leaf", "slug": "failed"}'}}, "Error: no"),
    ]
    table = derived_table(answered)
    assert list(table) == [("leaf", "strict")]
    prepared = call(tree, "middle", "leaf", {"as": "strict", "bindings": [{"arg": "token", "value": literal("t")}]},
                    derived=table)
    assert [(b.arg, b.value) for b in prepared.narrowing.here] == [("rev", "main"), ("token", "t")]
    assert prepared.params == {"severity": ParamValue("high")}
