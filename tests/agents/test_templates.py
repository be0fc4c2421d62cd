"""``.tramaj`` agent templates (docs/agents.md §11): the reference's example, the ``agents``
library, the ``$ctx`` rules and every load-time refusal, the config's ``tramajLibraries``.

In-process: the loader is plain Python (run with ``-p no:django`` if wanted).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfiles.builtins import parse_builtin_toolboxes, parse_predicate
from agentfiles.loader import AgentLoadError, load_agent_files, load_agent_tree
from agentfiles.parameters import ProcessValue, install_process_values

#: agents-exe's first template (its "Agent Templates" page), as written there.
CODER = """@a=import("agents", {}).vals

@code=$a.sandbox({
  name: "code",
  allow: $a.under($ctx.workspace, ["src", "test"]),
  deny: [$a.pattern("*.key")]
})

$a.agent({
  slug: "coder",
  apiKeyId: "main-key",
  flavor: "OpenAIv1",
  modelUrl: "https://api.openai.com/v1",
  modelName: "gpt-4o",
  announce: "edits code under the workspace",
  systemPrompt: ["You edit code under `$ctx.workspace`."],
  parameters: [{name: "workspace", description: "root of the checkout"}],
  builtinToolboxes: [
    $a.developer-toolbox({
      name: "dev",
      capabilities: ["read-file-range", "write-file-range", "patch-file"],
      sandbox: $code
    }),
    $a.lua-toolbox({name: "lua", sandbox: $code})
  ]
})
"""


@pytest.fixture(autouse=True)
def working_directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory of its own: no agents-exe.cfg.json of the checkout is found."""
    directory = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(directory)
    return directory


@pytest.fixture(autouse=True)
def no_process_values() -> Iterator[None]:
    install_process_values({})
    yield
    install_process_values({})


def given(**values: Any) -> None:
    install_process_values({name: ProcessValue(value) for name, value in values.items()})


def template(path: Path, body: str, **fields: str) -> Path:
    """A template of the agent ``slug`` whose extra fields are tramaj expressions (``fields``)."""
    slug = path.stem
    extra = "".join(f",\n  {key}: {value}" for key, value in fields.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'@a=import("agents", {{}}).vals\n{body}\n$a.agent({{\n  slug: "{slug}", apiKeyId: "k", flavor: "OpenAIv1",'
        f' modelUrl: "http://localhost:1/v1", modelName: "m", announce: "the {slug} agent",'
        f' systemPrompt: ["help"]{extra}\n}})\n'
    )
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(AgentLoadError) as caught:
        load_agent_tree(path)
    return caught.value.problems


# --- the reference's example -----------------------------------------------------------------------


def test_the_coder_example_loads_with_its_workspace(tmp_path: Path) -> None:
    path = tmp_path / "agents" / "coder.tramaj"
    path.parent.mkdir()
    path.write_text(CODER)
    given(workspace="/srv/app")
    tree = load_agent_tree(path)
    root = tree.root
    assert root.spec.slug == "coder"
    assert root.spec.systemPrompt == ["You edit code under /srv/app."]
    assert root.template_output["tag"] == "OpenAIAgentDescription"
    assert root.template_output["contents"] == root.contents
    boxes, problems, _ = parse_builtin_toolboxes(root.contents["builtinToolboxes"], None)
    assert problems == []
    assert [(box.tag, box.config.Name, box.sandbox.name) for box in boxes] == [
        ("DeveloperToolbox", "dev", "code"),
        ("LuaToolbox", "lua", "code"),
    ]
    # allowed: some allow entry matches and no deny entry does
    predicate = root.contents["builtinToolboxes"][0]["contents"]["FileSandbox"]["fsbPredicate"]
    assert predicate == {
        "tag": "All",
        "contents": [
            {"tag": "Any", "contents": [
                {"tag": "DirectoryRecursive", "contents": "/srv/app/src"},
                {"tag": "DirectoryRecursive", "contents": "/srv/app/test"},
            ]},
            {"tag": "Not", "contents": {"tag": "Any", "contents": [{"tag": "FilePattern", "contents": "*.key"}]}},
        ],
    }
    assert boxes[0].config.Capabilities == ["read-file-range", "write-file-range", "patch-file"]


def test_the_agents_library_builds_each_kind_of_entry(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "h.json").write_text(json.dumps({"slug": "h", "apiKeyId": "k", "flavor": "OpenAIv1",
                                                 "modelUrl": "http://x/v1", "modelName": "m", "announce": "h",
                                                 "systemPrompt": ["h"]}))
    path = template(
        tmp_path / "all.tramaj", "",
        fileSandboxes='{code: $a.sandbox({allow: [$a.dir("./src"), $a.dir-shallow("a"), $a.dir-exactly("b"),'
        ' $a.file("c"), $a.extensions(["py"]), $a.all-of([$a.allow-all]), $a.any-of([$a.deny-all])],'
        ' maxFileSize: 10})}',
        builtinToolboxes='[$a.system-toolbox({name: "sys", capabilities: ["date"], sandbox: $a.sandbox-ref("code"),'
        ' activation: {tag: "on-demand", toolgroup: "g"}}), $a.lua-toolbox({name: "lua", maxMemoryMB: 16,'
        ' allowedHosts: ["example.org"]}), $a.developer-toolbox({name: "dev", capabilities: ["build-command"],'
        ' buildCommand: "make"})]',
        bashToolboxes='[$a.tools-dir({path: "tools", filter: ".sh"})]',
        mcpServers='[$a.mcp({name: "m", executable: "true", args: ["x"]})]',
        extraAgents='[$a.helper({slug: "h", path: "./h.json", narrowable: false})]',
    )
    tree = load_agent_tree(path)
    contents = tree.root.contents
    sandbox = contents["fileSandboxes"]["code"]
    assert sandbox["fsbMaxFileSize"] == 10
    assert [p["tag"] for p in sandbox["fsbPredicate"]["contents"]] == [
        "DirectoryRecursive", "DirectoryShallow", "DirectoryExactly", "FileExactly", "FileExtension", "All", "Any",
    ]
    parse_predicate(sandbox["fsbPredicate"])
    assert contents["builtinToolboxes"][0] == {
        "tag": "SystemToolbox",
        "contents": {"Name": "sys", "FileSandbox": {"ref": "code"},
                     "Activation": {"tag": "on-demand", "toolgroup": "g"}, "Capabilities": ["date"]},
    }
    assert contents["builtinToolboxes"][1]["contents"] == {"Name": "lua", "MaxMemoryMB": 16,
                                                           "AllowedHosts": ["example.org"]}
    assert contents["builtinToolboxes"][2]["contents"]["BuildCommand"] == "make"
    assert contents["bashToolboxes"] == [{"tag": "FileSystemDirectory",
                                          "contents": {"Path": "tools", "BasenameFilter": ".sh"}}]
    assert contents["mcpServers"] == [{"tag": "McpSimpleBinary",
                                       "contents": {"name": "m", "executable": "true", "args": ["x"]}}]
    assert contents["extraAgents"] == [{"slug": "h", "path": "./h.json", "narrowable": False}]
    assert tree.root.helper_slugs == ["h"]


def test_a_template_is_a_helper_in_a_tool_directory_and_by_path(tmp_path: Path) -> None:
    template(tmp_path / "tools" / "t.tramaj", "")
    template(tmp_path / "named.tramaj", "")
    root = template(tmp_path / "root.tramaj", "", toolDirectory='"tools"',
                    extraAgents='[$a.helper({slug: "named", path: "./named.tramaj"})]')
    tree = load_agent_tree(root)
    assert tree.root.helper_slugs == ["named", "t"]


def test_a_declared_default_is_not_seen(tmp_path: Path) -> None:
    path = template(tmp_path / "d.tramaj", "", announce="$ctx.who",
                    parameters='[{name: "who", default: {tag: "Given", contents: "x"}}]')
    assert problems_of(path) == [
        f"{path}: the template reads parameter 'who', which has no value: give it with --set who=VALUE"
    ]
    given(who="operator")
    assert load_agent_tree(path).root.spec.announce == "operator"


# --- the load-time refusals --------------------------------------------------------------------------


def test_a_parameter_without_a_value_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "coder.tramaj"
    path.write_text(CODER)
    assert problems_of(path) == [
        f"{path}: the template reads parameter 'workspace', which has no value: give it with --set workspace=VALUE"
    ]


def test_an_undeclared_parameter_is_refused(tmp_path: Path) -> None:
    path = template(tmp_path / "u.tramaj", "", announce="$ctx.region")
    given(region="eu")
    assert problems_of(path) == [
        f"{path}: the template reads undeclared parameter 'region': declare it in the agent's parameters"
    ]


@pytest.mark.parametrize("scope", ["session", "message"])
def test_a_session_or_message_parameter_is_refused(tmp_path: Path, scope: str) -> None:
    path = template(tmp_path / "s.tramaj", "", announce="$ctx.topic",
                    parameters=f'[{{name: "topic", scope: "{scope}"}}]')
    given(topic="x")
    assert problems_of(path) == [
        f"{path}: the template reads parameter 'topic' of scope '{scope}': a template is evaluated once, at load,"
        " and such a parameter has no value then"
    ]


def test_a_secret_parameter_is_refused_and_its_value_not_shown(tmp_path: Path) -> None:
    path = template(tmp_path / "k.tramaj", "", announce="$ctx.token", parameters='[{name: "token", secret: true}]')
    given(token="s3cr3t-value")
    problems = problems_of(path)
    assert problems == [
        f"{path}: the template reads secret parameter 'token': its value would be written into the agent's"
        " configuration; bind it to a tool argument instead"
    ]
    assert "s3cr3t-value" not in "\n".join(problems)


@pytest.mark.parametrize("read", ['lookup($ctx, "workspace", "/")', 'branch("/", has($ctx, "workspace"), "/x")'])
def test_ctx_read_as_a_whole_is_refused(tmp_path: Path, read: str) -> None:
    path = template(tmp_path / "w.tramaj", "", announce=read, parameters='[{name: "workspace"}]')
    given(workspace="/srv")
    assert problems_of(path) == [
        f"{path}: the template reads $ctx as a whole (lookup($ctx, ...), has($ctx, ...), $ctx passed on):"
        " read each parameter by name, as $ctx.NAME, so that the reads can be checked"
    ]


def test_a_template_that_does_not_parse_or_evaluate_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "p.tramaj"
    broken.write_text("@a = {\n")
    [problem] = problems_of(broken)
    assert problem.startswith(f"{broken}: tramaj parse error at char ")
    unknown = tmp_path / "e.tramaj"
    unknown.write_text('import("nope", {}).vals')
    assert problems_of(unknown) == [f"{unknown}: tramaj evaluation error: UnknownLibrary nope"]
    scalar = tmp_path / "n.tramaj"
    scalar.write_text("null")
    assert problems_of(scalar) == [f"{scalar}: the template evaluates to null, not an agent object"]
    invalid = tmp_path / "i.tramaj"
    invalid.write_text('{tag: "OpenAIAgentDescription", contents: {slug: "i"}}')
    assert f"{invalid}: apiKeyId: field required" in problems_of(invalid)


# --- tramajLibraries ----------------------------------------------------------------------------------

TEAM = """@a=import("agents", {}).vals
@code=$a.sandbox({name: "code", allow: $a.under($ctx.workspace, ["src", "test"])})
@dev=$a.developer-toolbox({name: "dev", capabilities: ["read-file-range"], sandbox: $code})
null
"""


def test_a_library_of_the_config_is_imported(tmp_path: Path, working_directory: Path) -> None:
    (working_directory / "libs").mkdir()
    (working_directory / "libs" / "team.tramaj").write_text(TEAM)
    (working_directory / "agents-exe.cfg.json").write_text(json.dumps({"tramajLibraries": ["./libs"]}))
    path = template(tmp_path / "reviewer.tramaj", '@team=import("team", {workspace: ctx(workspace)}).vals',
                    parameters='[{name: "workspace"}]', builtinToolboxes="[$team.dev]")
    given(workspace="/srv/app")
    [box] = load_agent_tree(path).root.contents["builtinToolboxes"]
    assert box["contents"]["FileSandbox"]["fsbPredicate"]["contents"][0] == {
        "tag": "DirectoryRecursive", "contents": "/srv/app/src"
    }
    # ctx(workspace) is a read of workspace: without its value the template is refused
    install_process_values({})
    assert problems_of(path) == [
        f"{path}: the template reads parameter 'workspace', which has no value: give it with --set workspace=VALUE"
    ]


def test_the_earlier_directory_wins_and_a_directory_wins_over_the_builtin(
    tmp_path: Path, working_directory: Path
) -> None:
    for directory, value in (("first", "first"), ("second", "second")):
        (working_directory / directory).mkdir()
        (working_directory / directory / "pick.tramaj").write_text(f'@v="{value}"\nnull')
    (working_directory / "first" / "agents.tramaj").write_text(
        '@agent=(f) => {tag: "OpenAIAgentDescription", contents: $f <> {announce: "from the directory"}}\nnull'
    )
    (working_directory / "agents-exe.cfg.json").write_text(json.dumps({"tramajLibraries": ["first", "second"]}))
    path = template(tmp_path / "w.tramaj", '@pick=import("pick", {}).vals', modelName="$pick.v")
    spec = load_agent_tree(path).root.spec
    assert (spec.modelName, spec.announce) == ("first", "from the directory")


def test_a_library_that_does_not_parse_stops_loading_naming_it(tmp_path: Path, working_directory: Path) -> None:
    (working_directory / "libs").mkdir()
    broken = working_directory / "libs" / "broken.tramaj"
    broken.write_text("@x = (\n")
    (working_directory / "agents-exe.cfg.json").write_text(json.dumps({"tramajLibraries": ["libs"]}))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"slug": "plain", "apiKeyId": "k", "flavor": "OpenAIv1", "modelUrl": "http://x/v1",
                                 "modelName": "m", "announce": "p", "systemPrompt": ["p"]}))
    # the servers' loading refuses the whole set, even of JSON agents only
    with pytest.raises(AgentLoadError) as caught:
        load_agent_files([plain])
    [problem] = caught.value.problems
    assert problem.startswith(f"{broken.resolve()}: tramaj parse error at char ")
    path = template(tmp_path / "t.tramaj", "")
    assert [p.split(": tramaj")[0] for p in problems_of(path)] == [str(broken.resolve())]
