"""Built-in toolboxes in agent files: shapes, sandbox references, the older SQLite shape, warnings.

Plain pytest over ``agentfiles.builtins`` and the loader; no Django needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentfiles.builtins import DEFAULT_MAX_FILE_SIZE, PathPredicate, builtin_paths, parse_builtin_toolboxes
from agentfiles.loader import AgentLoadError, load_agent_tree

DEV = {"tag": "DeveloperToolbox", "contents": {"Name": "dev", "Capabilities": ["read-file-range"]}}


def _agent(tmp_path: Path, **fields: Any) -> Path:
    contents = {
        "slug": "box",
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": "http://127.0.0.1:1/v1",
        "modelName": "m",
        "announce": "a",
        "systemPrompt": ["p"],
        **fields,
    }
    path = tmp_path / "box.json"
    path.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": contents}))
    return path


def _problems(tmp_path: Path, **fields: Any) -> list[str]:
    with pytest.raises(AgentLoadError) as caught:
        load_agent_tree(_agent(tmp_path, **fields))
    return [line.split(": ", 1)[1] for line in caught.value.problems]


def test_a_ref_takes_the_named_sandbox_and_its_key_as_name() -> None:
    sandboxes = {"project": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./src"}}}
    box = {**DEV, "contents": {**DEV["contents"], "FileSandbox": {"ref": "project"}}}
    [parsed], problems, warnings = parse_builtin_toolboxes([box], sandboxes)
    assert problems == [] and warnings == []
    assert parsed.sandbox.name == "project"
    assert parsed.sandbox.predicate == PathPredicate("DirectoryRecursive", "./src")
    assert parsed.sandbox.max_file_size == DEFAULT_MAX_FILE_SIZE


def test_an_undeclared_ref_is_a_load_error_naming_toolbox_and_sandbox(tmp_path: Path) -> None:
    box = {**DEV, "contents": {**DEV["contents"], "FileSandbox": {"ref": "nowhere"}}}
    assert _problems(
        tmp_path, builtinToolboxes=[box], fileSandboxes={"scratch": {"fsbPredicate": {"tag": "AlwaysAllow"}}}
    ) == [
        "builtinToolboxes[0] (DeveloperToolbox dev): FileSandbox refers to sandbox 'nowhere', which fileSandboxes"
        " does not declare (declared: scratch)"
    ]


def test_a_ref_mixed_with_inline_keys_is_refused(tmp_path: Path) -> None:
    sandbox = {"ref": "s", "fsbPredicate": {"tag": "AlwaysAllow"}}
    box = {**DEV, "contents": {**DEV["contents"], "FileSandbox": sandbox}}
    problems = _problems(tmp_path, builtinToolboxes=[box], fileSandboxes={"s": {"fsbPredicate": {"tag": "AlwaysDeny"}}})
    assert problems == [
        "builtinToolboxes[0] (DeveloperToolbox dev): FileSandbox: ref stands alone; it cannot be mixed with inline keys"
    ]


@pytest.mark.parametrize(
    "predicate, message",
    [
        ({"tag": "Nope"}, "unknown predicate 'Nope'"),
        ({"tag": "And", "contents": [{"tag": "AlwaysAllow"}]}, "And takes a list of predicates (two or more)"),
        ({"tag": "FileExtension", "contents": "hs"}, "FileExtension takes a list of extensions without the dot"),
        ({"tag": "Not", "contents": {"tag": "ChildOf", "contents": 3}}, ".contents: ChildOf takes a non-empty string"),
        ({"tag": "FileSizeLessThan", "contents": -1}, "FileSizeLessThan takes a number of bytes"),
    ],
)
def test_bad_predicates_are_load_errors(tmp_path: Path, predicate: dict, message: str) -> None:
    box = {**DEV, "contents": {**DEV["contents"], "FileSandbox": {"fsbPredicate": predicate}}}
    [problem] = _problems(tmp_path, builtinToolboxes=[box])
    assert (
        problem.startswith("builtinToolboxes[0] (DeveloperToolbox dev): FileSandbox.fsbPredicate")
        and message in problem
    )


def test_every_predicate_tag_parses() -> None:
    predicate = {
        "tag": "Any",
        "contents": [
            {"tag": "And", "contents": [{"tag": "DirectoryRecursive", "contents": "./src"}, {"tag": "AlwaysAllow"}]},
            {
                "tag": "Or",
                "contents": [{"tag": "FileExactly", "contents": "a"}, {"tag": "DirectoryExactly", "contents": "b"}],
            },
            {
                "tag": "All",
                "contents": [{"tag": "DirectoryShallow", "contents": "c"}, {"tag": "ChildOf", "contents": "d"}],
            },
            {"tag": "Not", "contents": {"tag": "FilePattern", "contents": "*.tmp"}},
            {"tag": "FileExtension", "contents": ["hs", ".lhs"]},
            {"tag": "FileSizeLessThan", "contents": 10},
            {"tag": "AlwaysDeny"},
        ],
    }
    box = {**DEV, "contents": {**DEV["contents"], "FileSandbox": {"fsbPredicate": predicate, "fsbMaxFileSize": None}}}
    [parsed], problems, _ = parse_builtin_toolboxes([box], None)
    assert problems == []
    assert parsed.sandbox.max_file_size is None
    assert parsed.sandbox.predicate.children[4] == PathPredicate("FileExtension", ("hs", "lhs"))


def test_the_older_sqlite_shape_is_read_as_versioning_with_a_warning() -> None:
    box = {"tag": "SqliteToolbox", "contents": {"Name": "k", "Path": ".knowledge.db", "Access": "read-write"}}
    [parsed], problems, warnings = parse_builtin_toolboxes([box], None)
    assert problems == []
    assert parsed.config.Versioning.tag == "SqliteReadWrite" and parsed.config.Versioning.path == ".knowledge.db"
    assert warnings == [
        "builtinToolboxes[0] (SqliteToolbox k): Path/Access is the older shape; read as Versioning"
        ' {"tag": "SqliteReadWrite", "path": ".knowledge.db"}'
    ]


@pytest.mark.parametrize(
    "contents",
    [
        {"Name": "k"},
        {"Name": "k", "Path": "x.db"},
        {"Name": "k", "Path": "x.db", "Access": "rw"},
    ],
)
def test_a_sqlite_toolbox_without_versioning_is_refused_naming_it(tmp_path: Path, contents: dict) -> None:
    [problem] = _problems(tmp_path, builtinToolboxes=[{"tag": "SqliteToolbox", "contents": contents}])
    assert problem.startswith("builtinToolboxes[0] (SqliteToolbox k): Versioning is required")


def test_unknown_kinds_and_bad_fields_are_load_errors(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        builtinToolboxes=[
            {"tag": "ShellToolbox", "contents": {}},
            {"tag": "LuaToolbox", "contents": {"Name": "lua", "MaxMemoryMB": -1}},
            {"tag": "SystemToolbox", "contents": {"Name": "s", "SessionIntrospectionScope": "everything"}},
        ],
    )
    assert problems[0].startswith("builtinToolboxes[0]: unknown built-in toolbox 'ShellToolbox'")
    assert problems[1].startswith("builtinToolboxes[1] (LuaToolbox lua): MaxMemoryMB: input should be greater")
    assert problems[2].startswith("builtinToolboxes[2] (SystemToolbox s): SessionIntrospectionScope:")


def test_undocumented_capabilities_are_warnings_never_errors() -> None:
    boxes = [
        {"tag": "DeveloperToolbox", "contents": {"Name": "dev", "Capabilities": ["patch-file", "restore-file"]}},
        {"tag": "SystemToolbox", "contents": {"Name": "s", "Capabilities": ["date", "teleport"], "allowedPaths": []}},
    ]
    parsed, problems, warnings = parse_builtin_toolboxes(boxes, None)
    assert problems == []
    assert [box.capabilities for box in parsed] == [["patch-file"], ["date"]]
    assert warnings == [
        "builtinToolboxes[0] (DeveloperToolbox dev): unknown capability 'restore-file' ignored (known: show-spec,"
        " validate-agent, create-agent, create-tool, read-file-range, write-file-range, patch-file, build-command)",
        "builtinToolboxes[0] (DeveloperToolbox dev): no FileSandbox allows anything;"
        " every path is refused to patch-file",
        "builtinToolboxes[1] (SystemToolbox s): unknown keys ignored: allowedPaths",
        "builtinToolboxes[1] (SystemToolbox s): unknown capability 'teleport' ignored (known: date, operating-system,"
        " env-vars, running-user, hostname, working-directory, process-info, uptime, attach-file, list-directory,"
        " execute-command, get-tool-call-status, list-running-tool-calls, cancel-tool-call, list-sessions,"
        " search-sessions, read-session, get-session-stats, send-message, spawn-session, watch-session,"
        " unwatch-session, wait)",
    ]


def test_builtin_paths_lists_every_path_for_the_stored_agents_rules() -> None:
    contents = {
        "fileSandboxes": {"p": {"fsbPredicate": {"tag": "Not", "contents": {"tag": "ChildOf", "contents": "/etc"}}}},
        "builtinToolboxes": [
            {
                "tag": "SqliteToolbox",
                "contents": {"Name": "m", "Versioning": {"tag": "SqliteReadWrite", "path": "m.db"}},
            },
            {
                "tag": "SystemToolbox",
                "contents": {
                    "Name": "s",
                    "CommandFilter": "../f",
                    "FileSandbox": {
                        "fsbPredicate": {"tag": "Any", "contents": [{"tag": "FileExactly", "contents": "a"}]}
                    },
                },
            },
        ],
    }
    assert builtin_paths(contents) == [
        ("fileSandboxes.p.fsbPredicate", "/etc"),
        ("builtinToolboxes[0].contents.Versioning.path", "m.db"),
        ("builtinToolboxes[1].contents.CommandFilter", "../f"),
        ("builtinToolboxes[1].contents.FileSandbox", "a"),
    ]
