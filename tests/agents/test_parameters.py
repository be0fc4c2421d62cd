"""agentfiles/parameters.py: process values, defaults, resolution and the checks of client values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agentfiles.loader import AgentLoadError, load_agent_tree
from agentfiles.parameters import (
    AgentParameters,
    ParamsConfigError,
    ParamValue,
    ProcessValue,
    parse_process_flags,
    resolve_default,
    undeclared_process_names,
)
from agentfiles.schema import AgentSpec, ParameterDecl, SecretSource
from foundation.errors import ForbiddenParams, InvalidParams, UnknownParams


def decl(name: str, **fields) -> ParameterDecl:
    return ParameterDecl.model_validate({"name": name, **fields})


def source(tag: str, contents) -> SecretSource:
    return SecretSource.model_validate({"tag": tag, "contents": contents})


def write_agent(directory: Path, slug: str, **fields) -> Path:
    contents = {
        "slug": slug,
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": "http://localhost:1",
        "modelName": "m",
        "announce": f"the {slug} agent",
        "systemPrompt": ["hi"],
        **fields,
    }
    path = directory / f"{slug}.json"
    path.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": contents}))
    return path


# --- process values --------------------------------------------------------------------------------


def test_flags_give_strings_json_and_pins_and_win_over_the_file(tmp_path):
    params_file = tmp_path / "params.json"
    params_file.write_text(json.dumps({"region": "eu", "tenant": {"value": "file", "pinned": True}, "n": 1}))
    values = parse_process_flags(
        sets=["tenant=acme=corp"], set_jsons=["limit=10"], pins=["region=us"], pin_jsons=['flags={"a": [1]}'],
        params_file=params_file,
    )
    assert values == {
        "region": ProcessValue("us", pinned=True),
        "tenant": ProcessValue("acme=corp"),
        "n": ProcessValue(1),
        "limit": ProcessValue(10),
        "flags": ProcessValue({"a": [1]}, pinned=True),
    }
    assert "acme" not in repr(values["tenant"])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"sets": ["tenant"]}, "--set 'tenant': expected NAME=VALUE"),
        ({"set_jsons": ["n={"]}, "--set-json n: the value is not JSON"),
        ({"sets": ["a=1"], "pins": ["a=2"]}, "--pin a: the parameter is already given by --set"),
        ({"params_file": "/nonexistent/params.json"}, "--params-file /nonexistent/params.json: not found"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(flags, message):
    with pytest.raises(ParamsConfigError) as error:
        parse_process_flags(**flags)
    assert message in str(error.value)


def test_a_params_file_that_is_not_an_object_is_refused(tmp_path):
    (tmp_path / "p.json").write_text("[1]")
    with pytest.raises(ParamsConfigError, match="expected an object"):
        parse_process_flags(params_file=tmp_path / "p.json")


# --- defaults --------------------------------------------------------------------------------------


def test_each_default_source_resolves(tmp_path, monkeypatch):
    monkeypatch.setenv("BILLING_TOKEN", "tok-from-env")
    (tmp_path / "token.txt").write_text("tok-from-file\n")
    keys = {"openai": "sk-1"}
    assert resolve_default(source("Given", {"x": 1}), base_dir=tmp_path, api_keys=keys).value == {"x": 1}
    assert resolve_default(source("EnvVar", "BILLING_TOKEN"), base_dir=tmp_path, api_keys=keys).value == "tok-from-env"
    assert resolve_default(source("FileSystem", "token.txt"), base_dir=tmp_path, api_keys=keys).value == "tok-from-file"
    command = source("Command", [sys.executable, "-c", "print('tok-from-command')"])
    assert resolve_default(command, base_dir=tmp_path, api_keys=keys).value == "tok-from-command"
    assert resolve_default(source("ApiKey", "openai"), base_dir=tmp_path, api_keys=keys).value == "sk-1"
    assert resolve_default(source("ApiKeySource", "openai"), base_dir=tmp_path, api_keys=keys).source == "ApiKey"


def test_a_default_that_gives_nothing_says_why_without_a_value(tmp_path, monkeypatch):
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    cases = {
        "EnvVar NOT_SET_ANYWHERE is not set": source("EnvVar", "NOT_SET_ANYWHERE"),
        "FileSystem": source("FileSystem", "missing.txt"),
        "exited with code 3": source("Command", [sys.executable, "-c", "import sys; sys.exit(3)"]),
        "ApiKey nope: no such key": source("ApiKey", "nope"),
    }
    for expected, default in cases.items():
        resolved = resolve_default(default, base_dir=tmp_path, api_keys={})
        assert not resolved.resolved and expected in resolved.problem


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"name": "Tenant"}, "must match [a-z][a-z0-9_]*"),
        ({"name": "t", "default": {"tag": "Command", "contents": []}}, "a Command default is a non-empty list"),
        ({"name": "t", "default": {"tag": "EnvVar", "contents": 3}}, "a EnvVar default names its source"),
        ({"name": "t", "scope": "request"}, "expected 'process', 'session' or 'message'"),
    ],
)
def test_bad_declarations_are_load_problems(tmp_path, entry, message):
    with pytest.raises(AgentLoadError) as error:
        load_agent_tree(write_agent(tmp_path, "a", parameters=[entry]))
    assert any(message in line for line in error.value.problems), error.value.problems


# --- resolution ------------------------------------------------------------------------------------


def test_resolution_order_is_pin_message_session_process_default():
    decls = [
        decl("pinned_one", scope="session"),
        decl("msg", scope="message"),
        decl("sess", scope="session", default={"tag": "Given", "contents": "default"}),
        decl("proc", default={"tag": "Given", "contents": "default"}),
        decl("dflt", default={"tag": "Given", "contents": "default"}),
        decl("none", required=False),
    ]
    process = {"pinned_one": ProcessValue("pin", pinned=True), "sess": ProcessValue("set"), "proc": ProcessValue("set")}
    defaults = {d.name: resolve_default(d.default, base_dir=Path("/"), api_keys={}) for d in decls if d.default}
    parameters = AgentParameters(decls, defaults, process)
    resolved = parameters.resolve(
        given={"pinned_one": ParamValue("client"), "sess": ParamValue("client")},
        message={"msg": ParamValue("run"), "pinned_one": ParamValue("run")},
    )
    assert {name: value.value for name, value in resolved.items()} == {
        "pinned_one": "pin",
        "msg": "run",
        "sess": "client",
        "proc": "set",
        "dflt": "default",
    }
    # without the session's value, --set is the fallback a client may override
    assert parameters.resolve()["sess"].value == "set"
    assert parameters.unbound_required(parameters.resolve(), ["message"]) == ["msg"]


def test_secrecy_comes_from_the_declaration_or_the_value_and_is_never_shown():
    parameters = AgentParameters([decl("token", scope="session", secret=True), decl("plain", scope="session")], {}, {})
    resolved = parameters.resolve(given={"token": ParamValue("s3cr3t"), "plain": ParamValue("x", secret=True)})
    assert resolved["token"].secret and resolved["plain"].secret
    assert "s3cr3t" not in repr(resolved) and "s3cr3t" not in str(resolved["token"])


# --- client values ---------------------------------------------------------------------------------


def client_parameters() -> AgentParameters:
    return AgentParameters(
        [
            decl("tenant", scope="session"),
            decl("token", scope="session", secret=True),
            decl("otp", scope="message"),
            decl("region"),
            decl("locked", scope="session"),
        ],
        {},
        {"locked": ProcessValue("x", pinned=True)},
    )


def test_client_values_are_split_by_scope():
    checked = client_parameters().check_request({"tenant": "acme", "token": None, "otp": "123"})
    assert checked.session == {"tenant": "acme", "token": None} and checked.message == {"otp": "123"}
    with pytest.raises(InvalidParams, match="message-scope parameters go with a request that runs the session: otp"):
        checked.refuse_message_scope()


@pytest.mark.parametrize(
    ("params", "error", "message"),
    [
        ({"tenant": "a", "tennant": "b", "zz": 1}, UnknownParams, "the agent declares no parameter tennant, zz"),
        ({"region": "eu"}, ForbiddenParams, "the operator's to set, not a client's: region"),
        ({"locked": "y"}, ForbiddenParams, "not a client's: locked"),
        ({"token": 42}, InvalidParams, "secret parameters take a string value: token"),
    ],
)
def test_client_values_are_checked(params, error, message):
    with pytest.raises(error) as raised:
        client_parameters().check_request(params)
    assert message in raised.value.message


def test_descriptors_say_bound_and_pinned_never_values():
    parameters = AgentParameters(
        [decl("tenant", scope="session"), decl("region", description="where"), decl("key", secret=True)],
        {"key": resolve_default(source("Given", "k-123"), base_dir=Path("/"), api_keys={})},
        {"region": ProcessValue("eu", pinned=True)},
    )
    described = parameters.descriptors()
    assert [(d["name"], d["bound"], d["pinned"]) for d in described] == [
        ("tenant", False, False), ("region", True, True), ("key", True, False),
    ]
    assert "k-123" not in json.dumps(described) and "eu" not in json.dumps(described)
    assert [parameters.resolution(n) for n in ("tenant", "region", "key")] == ["unbound", "pinned", "default:Given"]


def test_process_problems_name_required_process_parameters_without_value():
    parameters = AgentParameters([decl("region"), decl("opt", required=False), decl("token", secret=True)], {},
                                 {"token": ProcessValue(5)})
    assert parameters.process_problems() == [
        "parameter region is required and has no value (unbound): give --set region=... or a default",
        "parameter token is secret: its value must be a string",
    ]
    spec = AgentSpec.model_validate(
        {"slug": "a", "apiKeyId": "k", "flavor": "f", "modelUrl": "http://x", "modelName": "m", "announce": "a",
         "systemPrompt": [], "parameters": [{"name": "region"}]}
    )
    assert undeclared_process_names([spec], {"region": ProcessValue(1), "regoin": ProcessValue(1)}) == ["regoin"]


# --- load-time rules of the agent file -------------------------------------------------------------


def test_agent_file_parameter_rules_are_load_problems(tmp_path):
    param = {"tag": "Param", "contents": "sess"}
    path = write_agent(
        tmp_path,
        "a",
        parameters=[
            {"name": "tenant", "scope": "session"},
            {"name": "tenant"},
            {"name": "sess", "scope": "message"},
            {"name": "token", "secret": True, "default": {"tag": "Given", "contents": 7}},
        ],
        bindings=[
            {"arg": "x", "value": {"tag": "Param", "contents": "nope"}},
            {"arg": "y", "value": {"tag": "Param", "contents": "token"}, "whenUnbound": "expose"},
        ],
        mcpServers=[{"tag": "McpSimpleBinary", "contents": {"name": "m", "executable": "x", "env": {"T": param}}}],
    )
    with pytest.raises(AgentLoadError) as error:
        load_agent_tree(path)
    problems = [line.split(": ", 1)[1] for line in error.value.problems]
    assert problems == [
        "parameters[1]: parameter tenant is declared twice",
        "parameters[3]: secret parameter token takes a string default",
        "bindings[0]: Param 'nope' names no declared parameter",
        'bindings[1]: ExposedSecretParameter: secret parameter token cannot use whenUnbound "expose"',
        "mcpServers[0].contents.env.T: parameter sess has message scope; an MCP server is started once per"
        " process, so only process-scope parameters can be given to it",
    ]


def test_with_names_the_helpers_parameters_and_covers_its_required_session_ones(tmp_path):
    write_agent(
        tmp_path,
        "child",
        parameters=[{"name": "tenant", "scope": "session"}, {"name": "mode", "scope": "session"},
                    {"name": "opt", "scope": "session", "required": False}],
    )
    path = write_agent(
        tmp_path,
        "parent",
        parameters=[{"name": "t", "scope": "session"}],
        extraAgents=[
            {"slug": "child", "path": "child.json",
             "with": {"tenant": {"tag": "Param", "contents": "t"}, "zone": {"tag": "Literal", "contents": 1},
                      "x": {"tag": "Param", "contents": "undeclared"}}}
        ],
    )
    with pytest.raises(AgentLoadError) as error:
        load_agent_tree(path)
    problems = [line.split(": ", 1)[1] for line in error.value.problems]
    assert problems == [
        "extraAgents[0].with.x: Param 'undeclared' names no declared parameter",
    ]
    path = write_agent(
        tmp_path,
        "parent",
        parameters=[{"name": "t", "scope": "session"}],
        extraAgents=[{"slug": "child", "path": "child.json", "with": {"tenant": {"tag": "Param", "contents": "t"},
                                                                      "zone": {"tag": "Literal", "contents": 1}}}],
    )
    with pytest.raises(AgentLoadError) as error:
        load_agent_tree(path)
    problems = [line.split(": ", 1)[1] for line in error.value.problems]
    assert problems == [
        "extraAgents[0].with.zone: helper child declares no parameter zone",
        "extraAgents[0]: helper child requires session parameters its caller does not give with 'with': mode",
    ]
