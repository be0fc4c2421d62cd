"""Bash tools loading: describe parsing, directory listing, error isolation (docs/tools.md §3.1, §3.2)."""

from __future__ import annotations

import json
import time

import pytest

from tools_app.bash.loading import (
    BashToolLoadError,
    describe_script,
    list_tool_files,
    load_bash_directory,
    load_single_tool,
)
from tools_app.bash.protocol import DescribeError, ScriptInfo

from .conftest import copy_scripts, script


def _arg(**overrides):
    arg = {
        "name": "path",
        "description": "file path",
        "type": "string",
        "backing_type": "string",
        "arity": "single",
        "mode": "dashdashspace",
    }
    arg.update(overrides)
    return arg


def test_parse_full_document():
    info = ScriptInfo.parse(
        {
            "slug": "read_file",
            "description": "Reads a file",
            "args": [_arg(), _arg(name="token", mode="env", arity="optional")],
            "empty-result": {"tag": "AddMessage", "contents": "File is empty"},
            "output-media-type": "text/plain",
        }
    )
    assert info.slug == "read_file"
    assert [a.name for a in info.args] == ["path", "token"]
    assert info.args[1].env_name == "TOKEN"
    assert info.empty_message == "File is empty"
    assert info.output_media_type == "text/plain"


def test_parse_defaults_to_do_nothing():
    document = {"slug": "x", "description": "d", "args": [], "empty-result": {"tag": "DoNothing"}}
    info = ScriptInfo.parse(document)
    assert info.empty_message is None and info.output_media_type is None
    assert ScriptInfo.parse({"slug": "x", "description": "d", "args": []}).empty_message is None


def test_safe_to_retry_is_ours_and_off_by_default():
    assert ScriptInfo.parse({"slug": "x", "description": "d", "args": []}).safe_to_retry is False
    assert ScriptInfo.parse({"slug": "x", "description": "d", "args": [], "safe-to-retry": True}).safe_to_retry


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "JSON object"),
        ({"description": "d", "args": []}, "'slug' is missing"),
        ({"slug": "", "description": "d", "args": []}, "'slug' must not be empty"),
        ({"slug": "x", "args": []}, "'description' is missing"),
        ({"slug": "x", "description": "d"}, "'args' must be a list"),
        ({"slug": "x", "description": "d", "args": [_arg(arity="many")]}, "unknown arity 'many'"),
        ({"slug": "x", "description": "d", "args": [_arg(mode="flag")]}, "unknown mode 'flag'"),
        ({"slug": "x", "description": "d", "args": [_arg(), _arg()]}, "duplicate argument name 'path'"),
        ({"slug": "x", "description": "d", "args": [{"name": "p"}]}, "args[0]: 'description' is missing"),
        ({"slug": "x", "description": "d", "args": [_arg(type=3)]}, "'type' is a int"),
        ({"slug": "x", "description": "d", "args": [], "empty-result": {"tag": "Nope"}}, "empty-result"),
        ({"slug": "x", "description": "d", "args": [], "output-media-type": ""}, "output-media-type"),
        ({"slug": "x", "description": "d", "args": [], "safe-to-retry": "yes"}, "'safe-to-retry' must be true"),
    ],
)
def test_parse_rejects_bad_documents(document, message):
    with pytest.raises(DescribeError) as err:
        ScriptInfo.parse(document)
    assert message in str(err.value)


def test_describe_real_script():
    info = describe_script(script("modes.py"))
    assert info.slug == "modes"
    assert len(info.args) == 8


def test_describe_failures_are_explained():
    with pytest.raises(DescribeError, match="exited with code 2: cannot describe myself"):
        describe_script(script("broken-describe.sh"))
    with pytest.raises(DescribeError, match="did not print valid JSON"):
        describe_script(script("bad-json.sh"))
    started = time.monotonic()
    with pytest.raises(DescribeError, match=r"timed out after 0.3s"):
        describe_script(script("slow-describe.sh"), timeout=0.3)
    assert time.monotonic() - started < 2


def test_schema_and_system_tool_shapes():
    tool = load_single_tool(script("modes.py"))
    assert tool.name == "bash_modes"
    params = tool.parameters
    assert params["type"] == "object" and params["additionalProperties"] is False
    assert params["required"] == ["pos"]
    assert params["properties"]["pos"] == {"description": "a positional", "type": "string"}
    assert params["properties"]["equal"] == {"description": "--equal=value", "type": "number"}
    assert params["properties"]["tag"] == {
        "description": "repeated flag",
        "type": "array",
        "items": {"type": "string"},
    }
    assert tool.openai_tool() == {
        "type": "function",
        "function": {"name": "bash_modes", "description": tool.description, "parameters": params},
    }
    entry = tool.system_tool()
    assert entry["tag"] == "V1"
    contents = entry["contents"]
    assert contents["name"] == contents["llmName"] == "bash_modes"
    assert contents["raw"] == tool.openai_tool()
    assert contents["properties"][0] == {
        "propertyDescription": "a positional",
        "propertyKey": "pos",
        "propertyRequired": True,
        "propertyType": {"contents": "string", "tag": "OpaqueParamType"},
    }
    assert contents["properties"][1]["propertyRequired"] is False
    assert contents["properties"][6]["propertyType"] == {"tag": "MultipleParamType", "contents": "string"}
    json.dumps(entry)  # plain JSON all the way down


def test_load_single_tool_path_problems(tmp_path):
    with pytest.raises(BashToolLoadError, match="no such file"):
        load_single_tool(tmp_path / "missing.sh")
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    with pytest.raises(BashToolLoadError, match="not an executable"):
        load_single_tool(plain)
    with pytest.raises(BashToolLoadError, match="not an executable"):
        load_single_tool(tmp_path)


def test_directory_skips_non_executables_and_agent_files(tmp_path):
    copy_scripts(tmp_path, "streams.sh", "modes.py")
    (tmp_path / "notes.txt").write_text("not a tool")
    (tmp_path / "readme.sh").write_text("#!/bin/sh\n")
    (tmp_path / "readme.sh").chmod(0o644)
    agent = tmp_path / "child.json"
    agent.write_text("{}")
    agent.chmod(0o755)  # even an executable agent file is not a tool
    (tmp_path / "sub").mkdir()
    copy_scripts(tmp_path / "sub", "fail.sh")  # not recursive
    assert [p.name for p in list_tool_files(tmp_path)] == ["modes.py", "streams.sh"]
    tools, warnings = load_bash_directory(tmp_path)
    assert [t.name for t in tools] == ["bash_modes", "bash_streams"]
    assert warnings == []


def test_basename_filter_matches_anywhere_in_the_name(tmp_path):
    copy_scripts(tmp_path, "streams.sh", "modes.py", "fail.sh")
    tools, _ = load_bash_directory(tmp_path, ".sh")
    assert [t.name for t in tools] == ["bash_fail", "bash_streams"]
    tools, _ = load_bash_directory(tmp_path, ".py")
    assert [t.name for t in tools] == ["bash_modes"]
    # a substring, as agents-exe filters: at the start, in the middle
    assert [p.name for p in list_tool_files(tmp_path, "stream")] == ["streams.sh"]
    assert [p.name for p in list_tool_files(tmp_path, "ode")] == ["modes.py"]
    assert [p.name for p in list_tool_files(tmp_path, "s.")] == ["modes.py", "streams.sh"]
    assert list_tool_files(tmp_path, "nothing-like-it") == []


def test_basename_filter_with_glob_characters_is_a_whole_name_glob(tmp_path):
    copy_scripts(tmp_path, "streams.sh", "modes.py", "fail.sh")
    tools, _ = load_bash_directory(tmp_path, "s*.sh")
    assert [t.name for t in tools] == ["bash_streams"]
    # anchored: "*.s" would match as a substring of every ".sh" name, not as a glob
    assert list_tool_files(tmp_path, "*.s") == []
    assert [p.name for p in list_tool_files(tmp_path, "?ail.sh")] == ["fail.sh"]


def test_describe_failure_drops_only_that_tool(tmp_path):
    copy_scripts(tmp_path, "streams.sh", "broken-describe.sh", "bad-json.sh", "fail.sh")
    tools, warnings = load_bash_directory(tmp_path)
    assert [t.name for t in tools] == ["bash_fail", "bash_streams"]
    assert len(warnings) == 2
    assert any("bad-json.sh" in w and "did not print valid JSON" in w for w in warnings)
    assert any("broken-describe.sh" in w and "exited with code 2" in w for w in warnings)


def test_missing_directory(tmp_path):
    with pytest.raises(BashToolLoadError, match="tool directory not found"):
        load_bash_directory(tmp_path / "nope")


def test_slow_describe_in_a_directory_is_isolated(tmp_path):
    copy_scripts(tmp_path, "streams.sh", "slow-describe.sh")
    started = time.monotonic()
    tools, warnings = load_bash_directory(tmp_path, timeout=0.3)
    assert time.monotonic() - started < 2
    assert [t.name for t in tools] == ["bash_streams"]
    assert len(warnings) == 1 and "timed out" in warnings[0]
