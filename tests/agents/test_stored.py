"""Stored agents in one process: the cache follows the generation counter, helpers reload dependents,
version directories go away with their versions, and the path and cycle rules."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents_app import services, stored
from agents_app.registry import AgentRegistry, get_registry, set_registry
from agents_app.runtime import reset_runtime_agents, runtime_agent
from foundation.errors import ApiError
from tests.harness import Processes
from tests.tools.conftest import make_ctx


def _body(**extra: object) -> dict:
    return {
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "m",
        "announce": "a stored agent",
        "systemPrompt": ["hi"],
        **extra,
    }


@pytest.fixture
def registry() -> Iterator[AgentRegistry]:
    set_registry(AgentRegistry({}, {}))
    reset_runtime_agents()
    yield get_registry()
    set_registry(None)
    reset_runtime_agents()


@pytest.mark.django_db
def test_the_cache_reloads_what_changed_and_keeps_the_rest(registry: AgentRegistry) -> None:
    services.stored_agent_put("helper", _body(), "root")
    services.stored_agent_put("parent", _body(extraAgents=[{"slug": "helper"}]), "root")
    services.stored_agent_put("other", _body(files={"notes/readme": "hello"}), "root")
    parent_tree = registry.tree("parent")
    other_tree = registry.tree("other")
    assert parent_tree is not None and set(parent_tree.agents) == {"parent", "helper"}
    assert registry.source("parent") == "database" and registry.source("nobody") is None
    built = runtime_agent("parent")
    assert runtime_agent("parent") is built
    # nothing changed: same trees, same runtime agent
    assert registry.tree("parent") is parent_tree
    # a new helper version: the dependent's tree is rebuilt (and its runtime agent), the rest kept
    services.stored_agent_put("helper", _body(announce="new helper"), "admin:operator")
    new_parent = registry.tree("parent")
    assert new_parent is not parent_tree and new_parent.agents["helper"].spec.announce == "new helper"
    assert new_parent.root is parent_tree.root
    assert registry.tree("other") is other_tree
    assert runtime_agent("parent") is not built
    info = registry.stored_info("helper")
    assert info is not None and info.version == 2 and info.updated_by == "admin:operator"
    # the files of a version live in their own directory, removed once the version is let go
    directory = other_tree.root.base_dir
    assert (directory / "notes" / "readme").read_text() == "hello"
    services.stored_agent_delete("parent")
    services.stored_agent_put("other", _body(), "root")
    registry.tree("other")
    del other_tree
    gc.collect()
    assert not directory.exists()


def test_path_and_cycle_rules() -> None:
    stored.check_paths({"toolDirectory": "tools", "bashToolboxes": []}, {"tools/a": "", "./lib/b": ""})
    for contents, files in (
        ({}, {"": "x"}),
        ({}, {"a\x00b": "x"}),
        ({}, {"a/b": "x", "a//b": "y"}),
        ({"toolDirectory": "~/../x"}, {}),
        ({"bashToolboxes": [{"tag": "SingleTool", "Root": "/", "contents": {"Path": "t"}}]}, {}),
    ):
        with pytest.raises(ApiError) as caught:
            stored.check_paths(contents, files)
        assert caught.value.code == "agent_invalid_paths"
    graph = {"a": ["b"], "b": ["c"], "c": [], "d": ["a"]}
    assert stored.find_cycle("c", ["d"], graph) == ["c", "d", "a", "b", "c"]
    assert stored.find_cycle("c", ["c"], graph) == ["c", "c"]
    assert stored.find_cycle("e", ["a", "d"], graph) is None


def test_directories_of_dead_processes_are_swept(tmp_path: Path, processes: Processes) -> None:
    gone = processes.popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"{stored.PROCESS_DIR_PREFIX}{gone.pid}-abc"
    (stale / "shouter-x" / "tools").mkdir(parents=True)
    alive = tmp_path / f"{stored.PROCESS_DIR_PREFIX}{os.getppid()}-def"
    alive.mkdir()
    assert stored.sweep_stale_directories(tmp_path) == [stale]
    assert not stale.exists() and alive.exists()
    # this process's own directory holds its versions
    assert stored.materialize("x", {"a": "b"}).parent == stored.process_directory()


def test_built_in_toolbox_paths_stay_relative_and_inside_the_files() -> None:
    sqlite = {
        "tag": "SqliteToolbox",
        "contents": {"Name": "m", "Versioning": {"tag": "SqliteReadWrite", "path": "m.db"}},
    }
    stored.check_paths({"builtinToolboxes": [sqlite]}, {})
    for contents in (
        {
            "builtinToolboxes": [
                {
                    **sqlite,
                    "contents": {**sqlite["contents"], "Versioning": {"tag": "SqliteReadOnly", "path": "/var/data.db"}},
                }
            ]
        },
        {"fileSandboxes": {"s": {"fsbPredicate": {"tag": "Not", "contents": {"tag": "ChildOf", "contents": "../up"}}}}},
        {"builtinToolboxes": [{"tag": "SystemToolbox", "contents": {"Name": "s", "CommandFilter": "/bin/true"}}]},
    ):
        with pytest.raises(ApiError) as caught:
            stored.check_paths(contents, {})
        assert caught.value.code == "agent_invalid_paths"


@pytest.mark.django_db
def test_a_stored_agents_sandbox_never_reaches_outside_its_files(registry: AgentRegistry) -> None:
    developer = {
        "tag": "DeveloperToolbox",
        "contents": {
            "Name": "dev",
            "Capabilities": ["read-file-range"],
            "FileSandbox": {"fsbPredicate": {"tag": "AlwaysAllow"}},
        },
    }
    services.stored_agent_put("coder", _body(builtinToolboxes=[developer], files={"notes/a.txt": "hello\n"}), "root")
    agent = runtime_agent("coder")
    [tool] = agent.toolset.tools
    inside = tool.call({"capability": "read-file-range", "path": "notes/a.txt"}, make_ctx())
    assert inside.response["content"]["content"] == "1\thello\n"
    outside = tool.call({"capability": "read-file-range", "path": "/etc/hostname"}, make_ctx())
    assert outside.is_error and "is not allowed by the file sandbox" in outside.response
