"""The Developer toolbox in process: patches, numbered reads, ranged and staged writes, scaffolding,
the build command, all through the sandbox."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.tools.conftest import make_agent, make_ctx
from tools_app.builtin.patching import PatchError, apply_patch, parse_patch
from tools_app.toolset import build_toolset

ALL = [
    "show-spec",
    "validate-agent",
    "create-agent",
    "create-tool",
    "read-file-range",
    "write-file-range",
    "patch-file",
    "build-command",
]
TEN = "".join(f"line {n}\n" for n in range(1, 11))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "f.txt").write_text(TEN)
    return tmp_path / "work"


def developer(work: Path, **contents: Any):
    sandbox = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(work)}, "fsbName": "work"}
    agent = make_agent(
        work.parent,
        builtinToolboxes=[
            {
                "tag": "DeveloperToolbox",
                "contents": {"Name": "dev", "Capabilities": ALL, "FileSandbox": sandbox, **contents},
            }
        ],
    )
    [tool] = build_toolset(agent).tools
    return tool


def call(tool, ctx=None, **arguments: Any) -> Any:
    result = tool.call(arguments, ctx or make_ctx())
    assert not result.is_error, result.response
    return result.response["content"]


def fails(tool, ctx=None, **arguments: Any) -> str:
    result = tool.call(arguments, ctx or make_ctx())
    assert result.is_error
    return result.response


# --- patches -------------------------------------------------------------------------------------


def test_a_patch_without_headers_and_with_bare_context_lines_applies() -> None:
    hunks = parse_patch("@@ -2,2 +2,3 @@\nb\n-c\n+C\n+C2\n")
    assert apply_patch(["a", "b", "c", "d"], hunks) == (["a", "b", "C", "C2", "d"], 3, False)


@pytest.mark.parametrize(
    "patch, message",
    [
        ("no hunks here", "Patch parse error: no hunk"),
        ("@@ bad @@\n x", "is not a hunk header"),
        (
            "@@ -9,2 +9,2 @@\n y\n-z",
            "Invalid line number: hunk 1 starts at line 9 and needs 2 lines, but the file has 4",
        ),
        ("@@ -1,2 +1,1 @@\n a\n-b\n@@ -2,1 +1,1 @@\n-b\n+B", "Hunks 1 and 2 overlap"),
    ],
)
def test_patch_errors(patch: str, message: str) -> None:
    with pytest.raises(PatchError, match=message):
        apply_patch(["a", "b", "c", "d"], parse_patch(patch))


def test_a_two_hunk_patch_is_applied_bottom_up(work: Path) -> None:
    tool = developer(work)
    patch = (
        "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,3 @@\n line 1\n+inserted\n line 2\n"
        "@@ -9,2 +10,2 @@\n line 9\n-line 10\n+LINE TEN\n"
    )
    answer = call(tool, capability="patch-file", path=str(work / "f.txt"), patch=patch)
    assert (answer["hunksApplied"], answer["hunksRejected"], answer["linesChanged"]) == (2, 0, 3)
    assert (work / "f.txt").read_text() == TEN.replace("line 1\n", "line 1\ninserted\n").replace("line 10", "LINE TEN")


def test_a_mismatching_patch_reports_and_leaves_the_file_untouched(work: Path) -> None:
    tool = developer(work)
    patch = "@@ -1,1 +1,1 @@\n-line 1\n+one\n@@ -5,2 +5,2 @@\n line 5\n-line six\n+six\n"
    report = json.loads(fails(tool, capability="patch-file", path=str(work / "f.txt"), patch=patch))
    assert report == {
        "error": "Context mismatch at line 6: hunk 2 does not match the file",
        "expected": ["line 5", "line six"],
        "actual": ["line 5", "line 6"],
    }
    assert (work / "f.txt").read_text() == TEN


# --- reads and writes ----------------------------------------------------------------------------


def test_read_file_range_numbers_lines_and_gives_a_snapshot(work: Path) -> None:
    tool = developer(work)
    answer = call(tool, capability="read-file-range", path=str(work / "f.txt"), ranges="2-3,9-20")
    assert answer["content"] == "2\tline 2\n3\tline 3\n9\tline 9\n10\tline 10\n"
    assert (answer["linesRead"], answer["totalLineCount"], answer["rangesParsed"]) == (4, 10, ["2-3", "9-10"])
    meta = call(tool, capability="read-file-range", path=str(work / "f.txt"), metadata_only=True)
    assert meta["snapshotRef"] == answer["snapshotRef"] and meta["metadataOnly"] and meta["content"] == ""
    assert "out of bounds" in fails(tool, capability="read-file-range", path=str(work / "f.txt"), ranges="11")
    assert "invalid range" in fails(tool, capability="read-file-range", path=str(work / "f.txt"), ranges="x")


def test_single_writes_with_every_range_kind(work: Path) -> None:
    tool = developer(work)
    path = str(work / "f.txt")
    call(
        tool,
        capability="write-file-range",
        path=path,
        ranges="1,3-4,5+,tail",
        contentBlocks=["ONE", "", "after 5", "end"],
    )
    assert (work / "f.txt").read_text().splitlines() == [
        "ONE",
        "line 2",
        "line 5",
        "after 5",
        "line 6",
        "line 7",
        "line 8",
        "line 9",
        "line 10",
        "end",
    ]
    created = call(tool, capability="write-file-range", path=str(work / "new.txt"), ranges="head", contentBlocks=["hi"])
    assert (work / "new.txt").read_text() == "hi\n" and created["sessionStatus"] == "committed"
    call(tool, capability="write-file-range", path=str(work / "new.txt"), ranges="whole", contentBlocks=["a\nb"])
    assert (work / "new.txt").read_text() == "a\nb\n"


def test_the_snapshot_check_refuses_a_stale_write(work: Path) -> None:
    tool = developer(work)
    path = str(work / "f.txt")
    snapshot = call(tool, capability="read-file-range", path=path, metadata_only=True)["snapshotRef"]
    (work / "f.txt").write_text(TEN + "more\n")
    message = fails(
        tool, capability="write-file-range", path=path, ranges="1", contentBlocks=["x"], expected_snapshot_ref=snapshot
    )
    assert "changed: its snapshot is" in message and (work / "f.txt").read_text() == TEN + "more\n"


@pytest.mark.django_db
def test_a_staged_write_is_committed_once(work: Path) -> None:
    tool = developer(work)
    path = str(work / "f.txt")
    ctx = make_ctx()
    first = call(tool, ctx, capability="write-file-range", path=path, ranges="2", contentBlocks=["TWO"], commit=False)
    session = first["sessionId"]
    assert first["sessionStatus"] == "staged" and (work / "f.txt").read_text() == TEN
    call(tool, ctx, capability="write-file-range", path=path, ranges="8-9", contentBlocks=["EIGHT"], session_id=session)
    staged = call(tool, ctx, capability="read-file-range", path=path, ranges="1-3", session_id=session)
    assert staged["content"] == "1\tline 1\n2\tTWO\n3\tline 3\n"
    assert "overlap" in fails(
        tool, ctx, capability="write-file-range", path=path, ranges="9-10", contentBlocks=["x"], session_id=session
    )
    assert "whole cannot be used" in fails(
        tool, ctx, capability="write-file-range", path=path, ranges="whole", contentBlocks=["x"], session_id=session
    )
    done = call(tool, ctx, capability="write-file-range", path=path, session_id=session, commit=True)
    assert (done["sessionStatus"], done["sessionNetDelta"]) == ("committed", -1)
    assert (work / "f.txt").read_text().splitlines()[:3] == ["line 1", "TWO", "line 3"]
    assert len((work / "f.txt").read_text().splitlines()) == 9
    again = fails(tool, ctx, capability="write-file-range", path=path, session_id=session, commit=True)
    assert "already committed" in again
    other = fails(
        tool, make_ctx(session_id="someone-else"), capability="read-file-range", path=path, session_id=session
    )
    assert "no write session" in other


@pytest.mark.django_db
def test_a_session_refuses_to_commit_over_a_changed_file(work: Path) -> None:
    tool = developer(work)
    path = str(work / "f.txt")
    session = call(tool, capability="write-file-range", path=path, ranges="1", contentBlocks=["x"], commit=False)[
        "sessionId"
    ]
    (work / "f.txt").write_text("changed\n")
    assert "changed on disk since write session" in fails(
        tool, capability="write-file-range", path=path, session_id=session, commit=True
    )
    assert (work / "f.txt").read_text() == "changed\n"


def test_files_outside_the_sandbox_are_refused(work: Path) -> None:
    tool = developer(work)
    (work.parent / "outside.txt").write_text("x")
    for capability, extra in [
        ("read-file-range", {}),
        ("write-file-range", {"ranges": "1", "contentBlocks": ["y"]}),
        ("patch-file", {"patch": "@@ -1 +1 @@\n-x\n+y"}),
    ]:
        message = fails(tool, capability=capability, path=str(work / ".." / "outside.txt"), **extra)
        assert "is not allowed by the file sandbox 'work'" in message
    assert (work.parent / "outside.txt").read_text() == "x"


# --- scaffolding and the build ---------------------------------------------------------------------


def test_show_spec_validate_and_create(work: Path) -> None:
    tool = developer(work)
    assert "describe" in call(tool, capability="show-spec", spec_name="bash-tools")["content"]
    created = call(tool, capability="create-agent", path=str(work / "a.json"), slug="helper", announce="helps")
    assert created["created"] and json.loads((work / "a.json").read_text())["contents"]["slug"] == "helper"
    (work / "tools").mkdir()
    valid = call(tool, capability="validate-agent", path=str(work / "a.json"))
    assert (valid["valid"], valid["slug"]) == (True, "helper")
    (work / "bad.json").write_text('{"tag": "OpenAIAgentDescription", "contents": {"slug": "b"}}')
    invalid = call(tool, capability="validate-agent", path=str(work / "bad.json"))
    assert invalid["valid"] is False and any("apiKeyId: field required" in p for p in invalid["problems"])
    call(tool, capability="create-tool", path=str(work / "tools" / "hello"), slug="hello", language="python")
    assert (work / "tools" / "hello").stat().st_mode & 0o111
    assert "already exists" in fails(tool, capability="create-tool", path=str(work / "tools" / "hello"), slug="hello")
    check = build_toolset(make_agent(work, toolDirectory="tools"))
    assert check.names() == ["bash_hello"]


def test_the_build_command_runs_in_the_working_directory(work: Path) -> None:
    tool = developer(work, BuildCommand="echo built; exit 2")
    answer = call(tool, capability="build-command")
    assert (answer["exitCode"], answer["stdout"]) == (2, "built\n")
    assert "no BuildCommand" in fails(developer(work), capability="build-command")


def test_only_regular_files_are_read(work: Path) -> None:
    os.mkfifo(work / "pipe")
    assert "is not a regular file" in fails(developer(work), capability="read-file-range", path=str(work / "pipe"))
