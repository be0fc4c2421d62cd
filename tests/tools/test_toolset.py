"""toolset.py: building an agent's tools from toolDirectory and bashToolboxes."""

from __future__ import annotations

import shutil

import pytest

from tools_app.base import Tool, ToolContext, ToolResult
from tools_app.toolset import ToolBuildError, ToolSet, build_toolset

from .conftest import copy_scripts, make_agent, make_ctx, script


class EchoTool(Tool):
    """A minimal in-process tool, standing in for the sub-agent tools the engine adds."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.description = "echo"
        self.parameters = {
            "type": "object",
            "properties": {"what": {"type": "string", "description": "the prompt"}},
            "required": ["what"],
        }

    def run(self, arguments: dict, ctx: ToolContext) -> ToolResult:
        return ToolResult(arguments["what"])


def test_empty_agent_has_no_tools(tmp_path):
    toolset = build_toolset(make_agent(tmp_path, mcpServers=[], builtinToolboxes=None, openApiToolboxes=[]))
    assert toolset.tools == [] and toolset.warnings == []
    assert toolset.openai_tools() == [] and toolset.system_tools() == []


def test_tool_directory_and_toolboxes(tmp_path):
    copy_scripts(tmp_path / "tools", "streams.sh", "broken-describe.sh")
    (tmp_path / "tools" / "helper.json").write_text("{}")  # a sub-agent file, not a tool
    copy_scripts(tmp_path / "extra", "fail.sh", "modes.py")
    copy_scripts(tmp_path / "single", "image.sh")
    agent = make_agent(
        tmp_path,
        toolDirectory="tools",
        bashToolboxes=[
            {"tag": "FileSystemDirectory", "contents": {"Path": "./extra", "BasenameFilter": ".sh"}},
            {"tag": "SingleTool", "contents": {"Path": "single/image.sh"}},
            {
                "tag": "FileSystemDirectory",
                "contents": {"Path": str(tmp_path / "extra"), "BasenameFilter": ".py"},
            },
        ],
    )
    toolset = build_toolset(agent)
    assert toolset.names() == ["bash_streams", "bash_fail", "bash_image", "bash_modes"]
    assert len(toolset.warnings) == 1 and "broken-describe.sh" in toolset.warnings[0]
    assert toolset.warnings[0].startswith("toolDirectory: ")
    assert toolset.get("bash_fail") is toolset.tools[1]
    assert toolset.get("bash_nope") is None
    assert [t["function"]["name"] for t in toolset.openai_tools()] == toolset.names()
    assert [t["contents"]["llmName"] for t in toolset.system_tools()] == toolset.names()
    result = toolset.get("bash_streams").call({}, make_ctx())
    assert result.response == "the result\n"


def test_missing_tool_directory_is_a_warning(tmp_path):
    toolset = build_toolset(make_agent(tmp_path, toolDirectory="tools"))
    assert toolset.tools == []
    assert len(toolset.warnings) == 1 and "directory not found" in toolset.warnings[0]


def test_missing_toolbox_paths_are_errors(tmp_path):
    agent = make_agent(
        tmp_path,
        bashToolboxes=[
            {"tag": "FileSystemDirectory", "contents": {"Path": "nowhere"}},
            {"tag": "SingleTool", "contents": {"Path": "nothing.sh"}},
        ],
    )
    with pytest.raises(ToolBuildError) as err:
        build_toolset(agent)
    assert len(err.value.problems) == 2
    assert err.value.problems[0].startswith("bashToolboxes[0]: ") and "not found" in err.value.problems[0]
    assert err.value.problems[1].startswith("bashToolboxes[1]: ") and "no such file" in err.value.problems[1]


def test_single_tool_describe_failure_is_a_warning(tmp_path):
    agent = make_agent(
        tmp_path, bashToolboxes=[{"tag": "SingleTool", "contents": {"Path": str(script("bad-json.sh"))}}]
    )
    toolset = build_toolset(agent)
    assert toolset.tools == []
    assert toolset.warnings[0].startswith("bashToolboxes[0]: ") and "valid JSON" in toolset.warnings[0]


def test_a_missing_skill_source_is_a_load_error(tmp_path):
    agent = make_agent(
        tmp_path,
        skillSources=[{"tag": "SkillDirectory", "contents": "./skills"}],
        bashToolboxes=[{"tag": "SingleTool", "contents": {"Path": str(script("streams.sh"))}}],
        parameters=[{"name": "tenant"}],  # parameters alone are fine
    )
    with pytest.raises(ToolBuildError) as err:
        build_toolset(agent)
    assert err.value.problems == [f"skillSources[0]: skill directory {tmp_path / 'skills'} not found"]
    assert str(err.value) == "\n".join(err.value.problems)


def test_duplicate_names_are_errors(tmp_path):
    copy_scripts(tmp_path / "tools", "streams.sh")
    copy_scripts(tmp_path / "again", "streams.sh")
    agent = make_agent(
        tmp_path,
        toolDirectory="tools",
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "again"}}],
    )
    with pytest.raises(ToolBuildError) as err:
        build_toolset(agent)
    assert len(err.value.problems) == 1
    assert "duplicate tool name bash_streams" in err.value.problems[0]
    assert err.value.problems[0].startswith("bashToolboxes[0]: ")


def _slug_script(tmp_path, filename: str, slug: str):
    exe = tmp_path / "tools" / filename
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(
        "#!/usr/bin/env bash\n"
        'if [ "$1" = describe ]; then\n'
        f'  echo \'{{"slug": "{slug}", "description": "d", "args": []}}\'; exit\n'
        "fi\n"
        "echo ran\n"
    )
    exe.chmod(0o755)


def test_invalid_slugs_are_normalized_with_a_warning(tmp_path):
    _slug_script(tmp_path, "a.sh", "read.file")
    _slug_script(tmp_path, "b.sh", "read_file")
    _slug_script(tmp_path, "c.sh", "git-log")
    toolset = build_toolset(make_agent(tmp_path, toolDirectory="tools"))
    assert toolset.names() == ["bash_read_file_2", "bash_read_file", "bash_git-log"]
    assert toolset.original_name("bash_read_file_2") == "bash_read.file"
    assert toolset.original_name("bash_git-log") == "bash_git-log"
    assert toolset.get("bash_read_file_2").system_tool()["contents"]["name"] == "bash_read_file_2"
    assert len(toolset.warnings) == 1 and "exposed as bash_read_file_2" in toolset.warnings[0]


def test_no_global_cache(tmp_path):
    copy_scripts(tmp_path / "tools", "streams.sh")
    agent = make_agent(tmp_path, toolDirectory="tools")
    assert build_toolset(agent).names() == ["bash_streams"]
    shutil.copy2(script("fail.sh"), tmp_path / "tools" / "fail.sh")
    assert build_toolset(agent).names() == ["bash_fail", "bash_streams"]


def test_extension_point_for_engine_tools(tmp_path):
    copy_scripts(tmp_path / "tools", "streams.sh")
    toolset = build_toolset(make_agent(tmp_path, toolDirectory="tools"))
    helper = EchoTool("io_prompt_agent_helper")
    odd = EchoTool("io_prompt_agent_my.helper")
    extended = toolset.with_extra_tools([helper, odd])
    assert extended.names() == ["io_prompt_agent_helper", "io_prompt_agent_my_helper", "bash_streams"]
    assert extended.get("io_prompt_agent_helper") is helper
    assert odd.name == "io_prompt_agent_my.helper"  # the caller's object is not renamed
    assert extended.original_name("io_prompt_agent_my_helper") == "io_prompt_agent_my.helper"
    assert extended.get("io_prompt_agent_my_helper").call({"what": "hi"}, make_ctx()).response == "hi"
    assert toolset.names() == ["bash_streams"]  # the original set is unchanged
    appended = toolset.with_extra_tools([helper], prepend=False)
    assert appended.names() == ["bash_streams", "io_prompt_agent_helper"]
    with pytest.raises(ToolBuildError, match="duplicate tool name bash_streams"):
        toolset.with_extra_tools([EchoTool("bash_streams")])
    with pytest.raises(ToolBuildError, match="duplicate tool name io_prompt_agent_helper"):
        toolset.with_extra_tools([helper, EchoTool("io_prompt_agent_helper")])


def test_toolset_refuses_duplicate_wire_names():
    with pytest.raises(ToolBuildError):
        ToolSet(tools=[EchoTool("x"), EchoTool("x")])


def test_generic_system_tool_shape():
    entry = EchoTool("io_prompt_agent_helper").system_tool()
    assert entry == {
        "tag": "V1",
        "contents": {
            "description": "echo",
            "llmName": "io_prompt_agent_helper",
            "name": "io_prompt_agent_helper",
            "properties": [
                {
                    "propertyDescription": "the prompt",
                    "propertyKey": "what",
                    "propertyRequired": True,
                    "propertyType": {"tag": "StringParamType"},
                }
            ],
            "raw": EchoTool("io_prompt_agent_helper").openai_tool(),
        },
    }


def test_works_with_the_real_loaded_agent(tmp_path):
    loader = pytest.importorskip("agentfiles.loader")
    copy_scripts(tmp_path / "tools", "streams.sh")
    fake = make_agent(tmp_path, toolDirectory="./tools/../tools")
    agent = loader.LoadedAgent(spec=fake.spec, contents=fake.contents, path=fake.path, base_dir=tmp_path)
    assert build_toolset(agent).names() == ["bash_streams"]
