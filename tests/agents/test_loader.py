"""Tests for agentfiles.loader: agent files, helper trees and their error messages.

Plain pytest; no Django needed (run with ``-p no:django``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from agentfiles.loader import (
    AgentLoadError,
    LoadedAgent,
    load_agent_files,
    load_agent_tree,
    parse_agent_document,
)
from agentfiles.schema import AgentSpec
from tests.harness import FIXTURES as ALL_FIXTURES  # noqa: E402

FIXTURES = ALL_FIXTURES / "agents"


@pytest.fixture(autouse=True)
def working_directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test runs from an empty directory of its own: the second place relative paths are
    looked for (docs/agents.md §3), so that nothing of the checkout is found by chance."""
    directory = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(directory)
    return directory


def contents(slug: str, /, **fields: Any) -> dict[str, Any]:
    """A minimal valid agent ``contents`` object, with ``fields`` added or replaced."""
    base: dict[str, Any] = {
        "slug": slug,
        "apiKeyId": "main-key",
        "flavor": "OpenAIv1",
        "modelUrl": "http://localhost:1234/v1",
        "modelName": "some-model",
        "announce": f"the {slug} agent",
        "systemPrompt": ["You help."],
    }
    base.update(fields)
    return base


def write_agent(path: Path, slug: str, /, **fields: Any) -> Path:
    """Write an enveloped agent file (creating parent directories) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"tag": "OpenAIAgentDescription", "contents": contents(slug, **fields)}
    path.write_text(json.dumps(document, indent=2))
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(AgentLoadError) as caught:
        load_agent_tree(path)
    return caught.value.problems


# --- the real agent files ----------------------------------------------------------------------

LOADING_FIXTURES = {
    "demo-agents_mistral-01.json": "demo-mistral",
    "demo-agents_ollama-01.json": "demo-ollama-qwen3-4bthinking",
    "demo-agents_openai-01.json": "demo-openai",
    "demo-agents_sub-agents_sub-agent.json": "sub-agent",
}

# "{dir}" stands for the fixtures directory; each place looked in beside the file is looked in
# from the working directory too (docs/agents.md §3), which expected_fixture_problems adds. The
# files were copied flat out of their repository, so the helpers and tool directories they name
# are not beside them.
FAILING_FIXTURES = {
    "agents_architect.json": [
        "bashToolboxes[0]: directory 'tools/dev/read' not found (looked in {dir}/tools/dev/read)",
        "bashToolboxes[1]: directory 'tools/github/write' not found (looked in {dir}/tools/github/write)",
        "bashToolboxes[2]: directory 'tools/git/read' not found (looked in {dir}/tools/git/read)",
        "bashToolboxes[3]: directory 'tools/web/read' not found (looked in {dir}/tools/web/read)",
        "extraAgents[0]: MissingAgentReference: helper 'architect' not found "
        "(looked in {dir}/architect.json); did you mean 'agents_architect.json'?",
        "extraAgents[1]: MissingAgentReference: helper 'faq' not found (looked in {dir}/faq.json)",
    ],
    "agents_oneshot.json": [
        "bashToolboxes[0]: directory 'tools/dev/read' not found (looked in {dir}/tools/dev/read)",
        "bashToolboxes[1]: directory 'tools/dev/write' not found (looked in {dir}/tools/dev/write)",
        "extraAgents[0]: MissingAgentReference: helper 'oneshot' not found "
        "(looked in {dir}/oneshot.json); did you mean 'agents_oneshot.json'?",
        "extraAgents[1]: MissingAgentReference: helper 'faq' not found (looked in {dir}/faq.json)",
    ],
    "agents_retro.json": [
        "extraAgents[0]: MissingAgentReference: helper 'faq' not found (looked in {dir}/faq.json)",
        "extraAgents[1]: MissingAgentReference: helper 'issuer' not found (looked in {dir}/issuer.json)",
    ],
    "demo-agents_kimi-01.json": [
        "extraAgents[0]: MissingAgentReference: helper 'sub-agent' not found "
        "(looked in {dir}/sub-agents/sub-agent.json); did you mean 'demo-agents_sub-agents_sub-agent.json'?",
    ],
    "dev-agents_agent.json": [
        "toolDirectory 'tools' not found (looked in {dir}/tools)",
    ],
}


def expected_fixture_problems(name: str) -> list[str]:
    both = r"(looked in {dir}/\1, {cwd}/\1)"
    lines = [re.sub(r"\(looked in \{dir\}/([\w/.-]+)\)", both, line) for line in FAILING_FIXTURES[name]]
    return [f"{FIXTURES / name}: {line.format(dir=FIXTURES, cwd=Path.cwd())}" for line in lines]


def test_every_fixture_is_in_a_table():
    on_disk = {path.name for path in FIXTURES.glob("*.json")}
    assert on_disk, f"no agent fixtures found in {FIXTURES}"
    assert on_disk == set(LOADING_FIXTURES) | set(FAILING_FIXTURES)


@pytest.mark.parametrize("name, slug", sorted(LOADING_FIXTURES.items()))
def test_fixture_loads(name: str, slug: str):
    tree = load_agent_tree(FIXTURES / name)
    assert tree.root.spec.slug == slug
    assert tree.root.path == FIXTURES / name
    assert tree.root.base_dir == FIXTURES
    assert list(tree.agents) == [slug]
    assert tree.warnings == []


@pytest.mark.parametrize("name", sorted(FAILING_FIXTURES))
def test_fixture_fails_precisely(name: str):
    assert problems_of(FIXTURES / name) == expected_fixture_problems(name)


def test_all_fixtures_together_report_every_problem():
    with pytest.raises(AgentLoadError) as caught:
        load_agent_files(sorted(FIXTURES.glob("*.json")))
    expected = [line for name in sorted(FAILING_FIXTURES) for line in expected_fixture_problems(name)]
    assert caught.value.problems == expected


def test_loadable_fixtures_together():
    trees = load_agent_files([FIXTURES / name for name in sorted(LOADING_FIXTURES)])
    assert set(trees) == set(LOADING_FIXTURES.values())
    assert trees["demo-mistral"].root.spec.flavor == "MistralV1"


# --- the file itself ---------------------------------------------------------------------------


def test_envelope_gives_spec_and_raw_contents(tmp_path: Path):
    path = write_agent(tmp_path / "a.json", "a", futureKey=1)
    tree = load_agent_tree(path)
    assert isinstance(tree.root.spec, AgentSpec)
    assert tree.root.contents == contents("a", futureKey=1)
    assert tree.root.helper_slugs == []


def test_bare_contents_load_with_a_warning(tmp_path: Path):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(contents("bare")))
    tree = load_agent_tree(path)
    assert tree.root.spec.slug == "bare"
    assert tree.warnings == [f'{path}: no {{"tag": "OpenAIAgentDescription"}} envelope; read as bare agent contents']


def test_unknown_keys_are_ignored_with_a_warning(tmp_path: Path):
    path = write_agent(tmp_path / "a.json", "a", zeta=1, allowedPaths=["/"])
    tree = load_agent_tree(path)
    assert tree.warnings == [f"{path}: unknown keys ignored: allowedPaths, zeta"]


def test_unknown_flavor_is_a_warning(tmp_path: Path):
    path = write_agent(tmp_path / "a.json", "a", flavor="GeminiV9")
    tree = load_agent_tree(path)
    assert len(tree.warnings) == 1
    assert tree.warnings[0].startswith(f"{path}: unknown flavor 'GeminiV9' (known: KimiV1, MistralV1,")


def test_invalid_json_names_line_and_column(tmp_path: Path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "tag": "OpenAIAgentDescription",\n    "contents" {}\n}')
    assert problems_of(path) == [f"{path}: invalid JSON at line 3 column 16: Expecting ':' delimiter"]


def test_empty_file_is_invalid_json(tmp_path: Path):
    path = tmp_path / "empty.json"
    path.write_text("")
    assert problems_of(path) == [f"{path}: invalid JSON at line 1 column 1: Expecting value"]


def test_not_utf8(tmp_path: Path):
    path = tmp_path / "latin.json"
    path.write_bytes(b'{"slug": "caf\xe9"}')
    assert problems_of(path) == [f"{path}: not UTF-8 text (bad byte at offset 13)"]


@pytest.mark.parametrize(
    "document, message",
    [
        ([1, 2], "an agent file must hold a JSON object"),
        ({"tag": "Other", "contents": {}}, "unknown agent description tag 'Other'"),
        ({"tag": "OpenAIAgentDescription", "contents": []}, "'contents' must be a JSON object"),
        ({"name": "x"}, "expected {"),
    ],
)
def test_document_shape_errors(tmp_path: Path, document: Any, message: str):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(document))
    [problem] = problems_of(path)
    assert problem.startswith(f"{path}: {message}")


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"modelName": 42}, ["modelName: expected a string, got number 42"]),
        ({"slug": ""}, ["slug: must not be empty"]),
        ({"apiKeyId": "  ", "modelUrl": ""}, ["apiKeyId: must not be empty", "modelUrl: must not be empty"]),
        ({"systemPrompt": "one line"}, ['systemPrompt: expected a list, got string "one line"']),
        ({"systemPrompt": ["ok", None]}, ["systemPrompt[1]: expected a string, got null"]),
        ({"maxConcurrency": "many"}, ['maxConcurrency: expected an integer, got string "many"']),
        ({"mailInToolResult": "maybe"}, ['mailInToolResult: expected true or false, got string "maybe"']),
        (
            {"executionMode": "eager"},
            ["executionMode: expected 'synchronous' or 'asynchronous', got string \"eager\""],
        ),
        ({"extraAgents": [{"path": "b.json"}]}, ["extraAgents[0].slug: field required"]),
        (
            {"extraAgents": [{"slug": "b", "with": 3}]},
            ["extraAgents[0].with: expected an object, got number 3"],
        ),
        (
            {"bashToolboxes": [{"tag": "Folder", "contents": {"Path": "t"}}]},
            ["bashToolboxes[0].tag: expected 'FileSystemDirectory' or 'SingleTool', got string \"Folder\""],
        ),
        (
            # Both union members of the contents fail the same way: reported once, without their names.
            {"bashToolboxes": [{"tag": "FileSystemDirectory", "contents": {"Path": 3}}]},
            ["bashToolboxes[0].contents.Path: expected a string, got number 3"],
        ),
        (
            {"bashToolboxes": [{"tag": "SingleTool", "contents": {}}]},
            ["bashToolboxes[0].contents: a bash toolbox needs contents with a 'Path'"],
        ),
        (
            {"toolCallPolicyConfig": {"rules": [{"tool": "bash_x", "disposition": {"tag": "later"}}]}},
            [
                "toolCallPolicyConfig.rules[0].disposition.tag: expected 'runSync', 'runAsync', "
                "'runIsolated', 'defer' or 'decorate', got string \"later\""
            ],
        ),
    ],
)
def test_validation_messages(tmp_path: Path, fields: dict[str, Any], expected: list[str]):
    path = write_agent(tmp_path / "a.json", "a", **fields)
    assert problems_of(path) == [f"{path}: {line}" for line in expected]


def test_missing_required_field(tmp_path: Path):
    path = tmp_path / "weather.json"
    document = contents("weather")
    del document["modelName"]
    del document["announce"]
    path.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": document}))
    assert problems_of(path) == [f"{path}: modelName: field required", f"{path}: announce: field required"]


def test_long_values_are_shortened_in_messages(tmp_path: Path):
    path = write_agent(tmp_path / "a.json", "a", maxConcurrency="x" * 100)
    [problem] = problems_of(path)
    assert problem == f'{path}: maxConcurrency: expected an integer, got string "{"x" * 36}...'


def test_missing_root_file(tmp_path: Path):
    path = tmp_path / "nowhere.json"
    assert problems_of(path) == [f"{path}: file not found"]


def test_root_directory_is_refused(tmp_path: Path):
    assert problems_of(tmp_path) == [f"{tmp_path}: is a directory, not an agent file"]


def test_relative_root_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    write_agent(tmp_path / "a.json", "a")
    monkeypatch.chdir(tmp_path)
    tree = load_agent_tree("a.json")
    assert tree.root.path == tmp_path / "a.json"
    assert tree.root.base_dir == tmp_path


def test_parse_agent_document_uses_the_label():
    with pytest.raises(AgentLoadError) as caught:
        parse_agent_document(contents("", modelName=1), "agent 'stored'")
    assert caught.value.problems == [
        "agent 'stored': slug: must not be empty",
        "agent 'stored': modelName: expected a string, got number 1",
    ]
    assert caught.value.warnings == [
        """agent 'stored': no {"tag": "OpenAIAgentDescription"} envelope; read as bare agent contents"""
    ]
    assert str(caught.value) == "\n".join(caught.value.problems)


# --- paths named by the file -------------------------------------------------------------------


def test_resolve_keeps_absolute_paths_and_normalises_relative_ones(tmp_path: Path):
    agent = LoadedAgent(spec=AgentSpec.model_validate(contents("a")), contents={}, path=None, base_dir=tmp_path)
    assert agent.resolve("/opt/tools") == Path("/opt/tools")
    assert agent.resolve("./tools/../bin/x") == tmp_path / "bin" / "x"


def test_relative_paths_are_looked_for_beside_the_file_then_in_the_working_directory(
    tmp_path: Path, working_directory: Path
):
    # laid out as agents-exe's repository: agents in agents/, tools named from the root
    (tmp_path / "agents").mkdir()
    (working_directory / "tools" / "dev").mkdir(parents=True)
    (tmp_path / "agents" / "local").mkdir()
    (working_directory / "local").mkdir()
    write_agent(working_directory / "helpers" / "faq.json", "faq")
    path = write_agent(
        tmp_path / "agents" / "a.json",
        "a",
        bashToolboxes=[
            {"tag": "FileSystemDirectory", "contents": {"Path": "tools/dev"}},
            {"tag": "FileSystemDirectory", "contents": {"Path": "local"}},
        ],
        extraAgents=[{"slug": "faq", "path": "helpers/faq.json"}],
    )
    root = load_agent_tree(path).root
    found = {where: (lookup.path, lookup.base) for where, lookup in root.paths}
    assert found == {
        "bashToolboxes[0]": (working_directory / "tools" / "dev", "the working directory"),
        # the file's directory comes first
        "bashToolboxes[1]": (tmp_path / "agents" / "local", "the agent file's directory"),
        "extraAgents[0]": (working_directory / "helpers" / "faq.json", "the working directory"),
    }
    assert root.resolve("tools/dev") == working_directory / "tools" / "dev"
    assert root.lookup("/opt/x").base == "absolute"


def test_a_stored_agent_looks_in_its_files_only(tmp_path: Path, working_directory: Path):
    (working_directory / "tools").mkdir()
    agent = LoadedAgent(spec=AgentSpec.model_validate(contents("a")), contents={}, path=None, base_dir=tmp_path)
    lookup = agent.lookup("tools")
    assert (lookup.path, lookup.base, lookup.tried) == (tmp_path / "tools", "the agent's files", (tmp_path / "tools",))


def test_tool_paths_that_exist_load(tmp_path: Path):
    (tmp_path / "tools").mkdir()
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "one.sh").write_text("#!/bin/sh\n")
    path = write_agent(
        tmp_path / "a.json",
        "a",
        toolDirectory="tools",
        bashToolboxes=[
            {"tag": "FileSystemDirectory", "contents": {"Path": "./extra"}},
            {"tag": "SingleTool", "contents": {"Path": "extra/one.sh"}},
            {"tag": "FileSystemDirectory", "contents": {"Path": str(tmp_path / "tools")}},
        ],
    )
    assert load_agent_tree(path).root.helper_slugs == []


def test_tool_paths_that_do_not_fit(tmp_path: Path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("")
    path = write_agent(
        tmp_path / "a.json",
        "a",
        toolDirectory="file",
        bashToolboxes=[
            {"tag": "FileSystemDirectory", "contents": {"Path": "file"}},
            {"tag": "SingleTool", "contents": {"Path": "dir"}},
            {"tag": "SingleTool", "contents": {"Path": "gone.sh"}},
        ],
    )
    assert problems_of(path) == [
        f"{path}: toolDirectory 'file' is not a directory ({tmp_path / 'file'})",
        f"{path}: bashToolboxes[0]: 'file' is not a directory ({tmp_path / 'file'})",
        f"{path}: bashToolboxes[1]: 'dir' is not a file ({tmp_path / 'dir'})",
        f"{path}: bashToolboxes[2]: tool file 'gone.sh' not found (looked in {tmp_path / 'gone.sh'}, "
        f"{Path.cwd() / 'gone.sh'})",
    ]


# --- trees -------------------------------------------------------------------------------------


def test_self_reference_is_allowed_with_a_warning(tmp_path: Path):
    path = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "a", "path": "a.json"}])
    tree = load_agent_tree(path)
    assert list(tree.agents) == ["a"]
    assert tree.root.helper_slugs == ["a"]
    assert tree.warnings == [f"{path}: cyclic helper references: a -> a"]


def test_mutual_recursion_is_allowed_with_a_warning(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "b", "path": "./b.json"}])
    write_agent(tmp_path / "b.json", "b", extraAgents=[{"slug": "a", "path": "a.json"}])
    tree = load_agent_tree(a)
    assert list(tree.agents) == ["a", "b"]
    assert tree.agents["a"].helper_slugs == ["b"]
    assert tree.agents["b"].helper_slugs == ["a"]
    assert tree.warnings == [f"{a}: cyclic helper references: a -> b -> a"]


def test_each_cycle_closing_reference_is_reported_once(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "b", "path": "b.json"}])
    write_agent(
        tmp_path / "b.json",
        "b",
        extraAgents=[{"slug": "c", "path": "c.json"}, {"slug": "d", "path": "d.json"}],
    )
    write_agent(tmp_path / "c.json", "c", extraAgents=[{"slug": "d", "path": "d.json"}])
    write_agent(tmp_path / "d.json", "d", extraAgents=[{"slug": "b", "path": "b.json"}])
    tree = load_agent_tree(a)
    # b -> d -> b is a cycle too, but its closing reference (d -> b) is already reported.
    assert tree.warnings == [f"{tmp_path / 'b.json'}: cyclic helper references: b -> c -> d -> b"]


def test_a_directory_of_agents_that_see_each_other_is_quick(tmp_path: Path):
    for index in range(12):
        write_agent(tmp_path / "team" / f"m{index:02}.json", f"m{index:02}", toolDirectory=".")
    a = write_agent(tmp_path / "a.json", "a", toolDirectory="team")
    tree = load_agent_tree(a)
    assert len(tree.agents) == 13
    # The walk goes m00 -> m01 -> ... -> m11; the k-th member (from 1) closes k cycles, one
    # through each agent above it and one on itself. Listing every cycle would mean millions.
    assert len(tree.warnings) == 12 * 13 // 2


def test_acyclic_diamond_has_no_warning_and_loads_shared_helper_once(tmp_path: Path):
    a = write_agent(
        tmp_path / "a.json",
        "a",
        extraAgents=[{"slug": "b", "path": "b.json"}, {"slug": "c", "path": "c.json"}],
    )
    write_agent(tmp_path / "b.json", "b", extraAgents=[{"slug": "d", "path": "d.json"}])
    write_agent(tmp_path / "c.json", "c", extraAgents=[{"slug": "d", "path": "./sub/../d.json"}])
    write_agent(tmp_path / "d.json", "d")
    tree = load_agent_tree(a)
    assert list(tree.agents) == ["a", "b", "c", "d"]
    assert tree.warnings == []


def test_reference_paths_resolve_from_the_referring_file(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "b", "path": "team/b.json"}])
    write_agent(tmp_path / "team" / "b.json", "b", extraAgents=[{"slug": "c", "path": "c.json"}])
    write_agent(tmp_path / "team" / "c.json", "c")
    write_agent(tmp_path / "c.json", "wrong-c")
    tree = load_agent_tree(a)
    assert tree.agents["c"].path == tmp_path / "team" / "c.json"
    assert tree.agents["c"].base_dir == tmp_path / "team"


def test_missing_helper_names_referrer_slug_and_path(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "faq", "path": "docs/faq.json"}])
    assert problems_of(a) == [
        f"{a}: extraAgents[0]: MissingAgentReference: helper 'faq' not found "
        f"(looked in {tmp_path}/docs/faq.json, {Path.cwd()}/docs/faq.json)"
    ]


def test_missing_helper_suggests_files_with_that_slug(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "faq", "path": "docs/faq.json"}])
    write_agent(tmp_path / "faq-agent.json", "faq")
    write_agent(tmp_path / "docs" / "faq-v2.json", "faq")
    write_agent(tmp_path / "docs" / "other.json", "other")
    (tmp_path / "docs" / "junk.json").write_text("{")
    assert problems_of(a) == [
        f"{a}: extraAgents[0]: MissingAgentReference: helper 'faq' not found "
        f"(looked in {tmp_path}/docs/faq.json, {Path.cwd()}/docs/faq.json); "
        "did you mean 'faq-agent.json' or 'docs/faq-v2.json'?"
    ]


def test_helper_path_that_is_a_directory(tmp_path: Path):
    (tmp_path / "b.json").mkdir()
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "b", "path": "b.json"}])
    assert problems_of(a) == [
        f"{a}: extraAgents[0]: helper 'b': {tmp_path / 'b.json'} is a directory, not an agent file"
    ]


def test_slug_mismatch_is_a_missing_reference(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "reviewer", "path": "b.json"}])
    b = write_agent(tmp_path / "b.json", "diff-reviewer")
    assert problems_of(a) == [
        f"{a}: extraAgents[0]: MissingAgentReference: helper 'reviewer' expected, but {b} has slug 'diff-reviewer'"
    ]


def test_reference_without_path(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "b"}])
    assert problems_of(a) == [f"{a}: extraAgents[0]: helper 'b' has no 'path' (file agents name helpers by path)"]


def test_duplicate_slug_in_a_tree_lists_both_files(tmp_path: Path):
    a = write_agent(
        tmp_path / "a.json",
        "a",
        extraAgents=[{"slug": "x", "path": "one/x.json"}, {"slug": "x", "path": "two/x.json"}],
    )
    first = write_agent(tmp_path / "one" / "x.json", "x")
    second = write_agent(tmp_path / "two" / "x.json", "x")
    assert problems_of(a) == [f"{second}: DuplicateAgentSlug: slug 'x' is defined by both {first} and {second}"]


def test_broken_helper_is_reported_under_its_own_path(tmp_path: Path):
    a = write_agent(tmp_path / "a.json", "a", extraAgents=[{"slug": "b", "path": "b.json"}])
    b = write_agent(tmp_path / "b.json", "b", modelName=None)
    assert problems_of(a) == [f"{b}: modelName: expected a string, got null"]


def test_problems_of_every_file_in_the_tree_are_reported(tmp_path: Path):
    a = write_agent(
        tmp_path / "a.json",
        "a",
        toolDirectory="missing-tools",
        extraAgents=[{"slug": "b", "path": "b.json"}, {"slug": "c", "path": "c.json"}],
    )
    b = write_agent(tmp_path / "b.json", "b", extraAgents=[{"slug": "z", "path": "z.json"}])
    c = tmp_path / "c.json"
    c.write_text("{")
    assert problems_of(a) == [
        f"{a}: toolDirectory 'missing-tools' not found "
        f"(looked in {tmp_path / 'missing-tools'}, {Path.cwd() / 'missing-tools'})",
        f"{c}: invalid JSON at line 1 column 2: Expecting property name enclosed in double quotes",
        f"{b}: extraAgents[0]: MissingAgentReference: helper 'z' not found "
        f"(looked in {tmp_path / 'z.json'}, {Path.cwd() / 'z.json'})",
    ]


def test_tool_directory_agent_files_are_helpers(tmp_path: Path):
    tools = tmp_path / "tools"
    write_agent(tools / "summariser.json", "summariser")
    write_agent(tools / "nested" / "deeper" / "translator.json", "translator", toolDirectory=".")
    script = tools / "greet"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    (tools / "notes.txt").write_text("not an agent")
    a = write_agent(
        tmp_path / "a.json",
        "a",
        toolDirectory="tools",
        extraAgents=[
            {"slug": "b", "path": "b.json"},
            {"slug": "summariser", "path": "tools/summariser.json"},
        ],
    )
    write_agent(tmp_path / "b.json", "b")
    tree = load_agent_tree(a)
    assert tree.root.helper_slugs == ["b", "summariser", "translator"]
    assert list(tree.agents) == ["a", "b", "summariser", "translator"]
    # translator's own toolDirectory is its directory, so it is its own helper.
    assert tree.agents["translator"].helper_slugs == ["translator"]
    assert tree.warnings == [f"{tree.agents['translator'].path}: cyclic helper references: translator -> translator"]


def test_a_broken_template_in_a_tool_directory_is_a_problem_of_that_file(tmp_path: Path):
    template = tmp_path / "tools" / "t.tramaj"
    template.parent.mkdir()
    template.write_text("$x")
    a = write_agent(tmp_path / "a.json", "a", toolDirectory="tools")
    assert problems_of(a) == [f"{template}: tramaj evaluation error: UnboundName x"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
def test_symlinked_directory_loops_do_not_hang(tmp_path: Path):
    tools = tmp_path / "tools"
    write_agent(tools / "h.json", "h")
    (tools / "loop").symlink_to(tools, target_is_directory=True)
    a = write_agent(tmp_path / "a.json", "a", toolDirectory="tools")
    assert load_agent_tree(a).root.helper_slugs == ["h"]


# --- several roots -----------------------------------------------------------------------------


def test_duplicate_root_slugs_are_refused(tmp_path: Path):
    first = write_agent(tmp_path / "one.json", "same")
    second = write_agent(tmp_path / "two.json", "same")
    with pytest.raises(AgentLoadError) as caught:
        load_agent_files([first, second])
    assert caught.value.problems == [f"{second}: duplicate root agent slug 'same' ({first}, {second})"]


def test_roots_may_share_helpers_each_with_its_own_copy(tmp_path: Path):
    one = write_agent(tmp_path / "one.json", "one", extraAgents=[{"slug": "h", "path": "h.json"}])
    two = write_agent(tmp_path / "two.json", "two", extraAgents=[{"slug": "h", "path": "h.json"}])
    write_agent(tmp_path / "h.json", "h")
    trees = load_agent_files([one, two])
    assert list(trees) == ["one", "two"]
    assert trees["one"].agents["h"] is not trees["two"].agents["h"]
    assert trees["one"].agents["h"].path == trees["two"].agents["h"].path


def test_a_root_listed_twice_is_loaded_once(tmp_path: Path):
    one = write_agent(tmp_path / "one.json", "one")
    assert list(load_agent_files([one, str(one), tmp_path / "." / "one.json"])) == ["one"]


def test_every_root_is_checked_and_shared_problems_reported_once(tmp_path: Path):
    one = write_agent(tmp_path / "one.json", "one", extraAgents=[{"slug": "h", "path": "h.json"}])
    two = write_agent(tmp_path / "two.json", "two", extraAgents=[{"slug": "h", "path": "h.json"}])
    bad = write_agent(tmp_path / "bad.json", "")
    h = write_agent(tmp_path / "h.json", "h", flavor=3)
    with pytest.raises(AgentLoadError) as caught:
        load_agent_files([one, two, bad])
    assert caught.value.problems == [
        f"{h}: flavor: expected a string, got number 3",
        f"{bad}: slug: must not be empty",
    ]


def test_warnings_of_trees_are_kept_on_success_and_on_error(tmp_path: Path):
    ok = write_agent(tmp_path / "ok.json", "ok", oddKey=True)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(contents("bad", modelName=1)))
    assert load_agent_files([ok])["ok"].warnings == [f"{ok}: unknown keys ignored: oddKey"]
    with pytest.raises(AgentLoadError) as caught:
        load_agent_files([ok, bad])
    assert caught.value.warnings == [
        f"{ok}: unknown keys ignored: oddKey",
        f'{bad}: no {{"tag": "OpenAIAgentDescription"}} envelope; read as bare agent contents',
    ]


def test_no_roots_no_trees():
    assert load_agent_files([]) == {}
