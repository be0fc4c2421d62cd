"""names.py: LLM-valid tool names and the reverse map (docs/tools.md §2, docs/decisions.md §4)."""

from __future__ import annotations

import pytest

from tools_app.names import ToolNameMap, is_valid_tool_name, normalize_tool_name


@pytest.mark.parametrize(
    "name",
    ["bash_read-file", "bash_get_git_commit", "io_prompt_agent_helper", "a", "x" * 64, "A-9_z"],
)
def test_valid_names_are_unchanged(name):
    assert normalize_tool_name(name) == name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("pet.findByStatus", "pet_findByStatus"),
        ("localhost:8001", "localhost_8001"),
        ("bash_my tool", "bash_my_tool"),
        ("bash_获取", "bash___"),
        ("a/b@c", "a_b_c"),
        ("", "tool"),
    ],
)
def test_invalid_characters_become_underscores(name, expected):
    assert normalize_tool_name(name) == expected
    assert is_valid_tool_name(normalize_tool_name(name))


def test_long_names_are_cut_with_a_hash_suffix():
    long_a = "bash_" + "a" * 80
    long_b = "bash_" + "a" * 79 + "b"
    norm_a, norm_b = normalize_tool_name(long_a), normalize_tool_name(long_b)
    assert len(norm_a) == 64 and len(norm_b) == 64
    assert is_valid_tool_name(norm_a) and is_valid_tool_name(norm_b)
    assert norm_a != norm_b
    assert norm_a.startswith("bash_aaaa")
    assert normalize_tool_name(long_a) == norm_a  # deterministic


def test_long_invalid_name():
    name = "tool." * 30
    norm = normalize_tool_name(name)
    assert is_valid_tool_name(norm) and len(norm) == 64


def test_name_map_round_trip_and_collisions():
    names = ToolNameMap()
    assert names.add("a.b") == "a_b"
    assert names.add("a:b") == "a_b_2"
    assert names.add("a/b") == "a_b_3"
    assert names.add("a.b") == "a_b"  # same original, same name
    assert names.original("a_b_2") == "a:b"
    assert names.normalized("a/b") == "a_b_3"
    assert names.original("nope") is None
    assert "a_b_3" in names and len(names) == 3
    assert names.renamed() == {"a.b": "a_b", "a:b": "a_b_2", "a/b": "a_b_3"}


def test_build_reserves_valid_names_first():
    names = ToolNameMap.build(["bash_a.b", "bash_a_b"])
    assert names.normalized("bash_a_b") == "bash_a_b"
    assert names.normalized("bash_a.b") == "bash_a_b_2"


def test_collision_suffix_keeps_64_characters():
    names = ToolNameMap()
    first = names.add("y" * 63 + "_")  # valid, 64 characters
    second = names.add("y" * 63 + ".")  # normalizes to the same 64 characters
    assert first == "y" * 63 + "_"
    assert second != first and len(second) == 64 and second.endswith("_2")
    assert is_valid_tool_name(second)
    assert names.original(second) == "y" * 63 + "."


def test_reserve_rejects_conflicts():
    names = ToolNameMap()
    names.reserve("bash_x", "bash_x")
    with pytest.raises(ValueError):
        names.reserve("bash_y", "bash_x")
    with pytest.raises(ValueError):
        names.reserve("bash_x", "bash_z")
    with pytest.raises(ValueError):
        names.reserve("bad", "not valid")
