"""File sandboxes: the predicate language on canonical paths, reads, writes, and a fuzz test.

Plain pytest over ``tools_app.builtin.sandbox``; no Django needed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfiles.builtins import SandboxConfig, parse_predicate
from tools_app.builtin.sandbox import FileSandbox, SandboxError


def sandbox(predicate: dict, base: Path, max_size: int | None = None, confine: Path | None = None) -> FileSandbox:
    return FileSandbox(SandboxConfig(parse_predicate(predicate), max_size, "test"), base=base, confine=confine)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``inside/`` (a.txt, sub/b.hs, sub/deep/c.txt, links out and in) and ``outside/secret.txt``."""
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    (inside / "sub" / "deep").mkdir(parents=True)
    outside.mkdir()
    (inside / "a.txt").write_text("a")
    (inside / "sub" / "b.hs").write_text("b" * 100)
    (inside / "sub" / "deep" / "c.txt").write_text("c")
    (outside / "secret.txt").write_text("SECRET")
    (inside / "link_out").symlink_to(outside)
    (inside / "file_link_out").symlink_to(outside / "secret.txt")
    (inside / "link_in").symlink_to(inside / "a.txt")
    return tmp_path


def allowed(box: FileSandbox, path: str) -> bool:
    try:
        box.check_access(path)
    except SandboxError:
        return False
    return True


def test_no_sandbox_allows_nothing(tree: Path) -> None:
    box = FileSandbox(base=tree)
    assert box.allows_nothing
    with pytest.raises(SandboxError, match="not allowed by the file sandbox 'unnamed'"):
        box.check_read("inside/a.txt")


@pytest.mark.parametrize(
    "predicate, yes, no",
    [
        (
            {"tag": "FileExactly", "contents": "inside/a.txt"},
            ["inside/a.txt", "inside/link_in"],
            ["inside", "inside/sub/b.hs"],
        ),
        ({"tag": "DirectoryExactly", "contents": "inside/sub"}, ["inside/sub"], ["inside/sub/b.hs"]),
        (
            {"tag": "DirectoryRecursive", "contents": "inside"},
            ["inside", "inside/sub/deep/c.txt", "inside/new.txt"],
            ["outside/secret.txt", "inside/link_out/secret.txt", "inside/file_link_out", "inside/../outside"],
        ),
        (
            {"tag": "DirectoryShallow", "contents": "inside/sub"},
            ["inside/sub", "inside/sub/b.hs"],
            ["inside/sub/deep/c.txt"],
        ),
        ({"tag": "ChildOf", "contents": "inside"}, ["inside/a.txt"], ["inside", "outside/secret.txt"]),
        ({"tag": "FilePattern", "contents": "*.hs"}, ["inside/sub/b.hs"], ["inside/a.txt"]),
        ({"tag": "FileExtension", "contents": ["txt"]}, ["inside/a.txt", "outside/secret.txt"], ["inside/sub/b.hs"]),
        ({"tag": "FileSizeLessThan", "contents": 50}, ["inside/a.txt"], ["inside/sub/b.hs"]),
        (
            {"tag": "Not", "contents": {"tag": "ChildOf", "contents": "outside"}},
            ["inside/a.txt"],
            ["inside/file_link_out"],
        ),
        (
            {
                "tag": "And",
                "contents": [{"tag": "ChildOf", "contents": "inside"}, {"tag": "FileExtension", "contents": ["hs"]}],
            },
            ["inside/sub/b.hs"],
            ["inside/a.txt"],
        ),
        (
            {
                "tag": "Or",
                "contents": [
                    {"tag": "FileExactly", "contents": "inside/a.txt"},
                    {"tag": "FilePattern", "contents": "b*"},
                ],
            },
            ["inside/a.txt", "inside/sub/b.hs"],
            ["inside/sub/deep/c.txt"],
        ),
        (
            {
                "tag": "All",
                "contents": [{"tag": "AlwaysAllow"}, {"tag": "DirectoryRecursive", "contents": "inside/sub"}],
            },
            ["inside/sub/deep"],
            ["inside/a.txt"],
        ),
        ({"tag": "Any", "contents": [{"tag": "AlwaysDeny"}]}, [], ["inside/a.txt"]),
        ({"tag": "AlwaysAllow"}, ["/", "outside/secret.txt"], []),
    ],
)
def test_each_predicate_on_canonical_paths(tree: Path, predicate: dict, yes: list[str], no: list[str]) -> None:
    box = sandbox(predicate, tree)
    assert [p for p in yes if not allowed(box, p)] == []
    assert [p for p in no if allowed(box, p)] == []


def test_a_symlink_is_judged_by_where_it_points(tree: Path) -> None:
    box = sandbox({"tag": "DirectoryRecursive", "contents": "inside"}, tree)
    assert box.check_read("inside/link_in") == tree / "inside" / "a.txt"
    with pytest.raises(SandboxError, match="reading 'inside/file_link_out' is not allowed"):
        box.check_read("inside/file_link_out")
    with pytest.raises(SandboxError):
        box.check_write("inside/link_out/new.txt")


def test_a_new_file_is_judged_through_its_canonical_parent(tree: Path) -> None:
    box = sandbox(
        {
            "tag": "And",
            "contents": [{"tag": "ChildOf", "contents": "inside"}, {"tag": "FileExtension", "contents": ["rst"]}],
        },
        tree,
    )
    assert box.check_write("inside/sub/notes.rst", 10) == tree / "inside" / "sub" / "notes.rst"
    with pytest.raises(SandboxError, match="not allowed"):
        box.check_write("inside/sub/notes.txt", 10)
    with pytest.raises(SandboxError, match="its directory does not exist"):
        box.check_write("inside/nowhere/notes.rst", 10)
    with pytest.raises(SandboxError, match="not allowed"):
        box.check_write("inside/sub/../../outside/x.rst", 10)


def test_sizes_are_limited(tree: Path) -> None:
    box = sandbox({"tag": "AlwaysAllow"}, tree, max_size=50)
    box.check_read("inside/a.txt")
    with pytest.raises(SandboxError, match="100 bytes, more than the sandbox's limit of 50"):
        box.check_read("inside/sub/b.hs")
    with pytest.raises(SandboxError, match="over the sandbox's limit"):
        box.check_write("inside/new.txt", 51)


def test_confine_keeps_everything_inside_whatever_the_predicate(tree: Path) -> None:
    box = sandbox({"tag": "AlwaysAllow"}, tree / "inside", confine=tree / "inside")
    assert allowed(box, "a.txt") and allowed(box, "/" + str(tree / "inside" / "sub"))
    assert (
        not allowed(box, "../outside/secret.txt") and not allowed(box, "/etc/passwd") and not allowed(box, "link_out")
    )


@pytest.mark.parametrize("path", ["", "a\x00b", "\udcff\ud800"])
def test_non_paths_are_refused(tree: Path, path: str) -> None:
    with pytest.raises(SandboxError):
        sandbox({"tag": "AlwaysAllow"}, tree).check_access(path)


# --- fuzz: a few hundred paths, no byte outside the sandbox read or written ---------------------

SEGMENTS = [
    "..",
    ".",
    "",
    "inside",
    "sub",
    "deep",
    "a.txt",
    "b.hs",
    "c.txt",
    "link_out",
    "file_link_out",
    "link_in",
    "outside",
    "secret.txt",
    "new.txt",
    "é",
    "\u202etxt.hs",
    "x" * 300,
    "*",
]
PATHS = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "/", "./", "../", "//"]),
    st.lists(st.one_of(st.sampled_from(SEGMENTS), st.text(min_size=1, max_size=12)), min_size=1, max_size=8),
)
PREDICATES = [
    {"tag": "DirectoryRecursive", "contents": "inside"},
    {
        "tag": "And",
        "contents": [
            {"tag": "DirectoryRecursive", "contents": "inside"},
            {"tag": "FileExtension", "contents": ["txt", "hs"]},
        ],
    },
    {
        "tag": "Any",
        "contents": [
            {"tag": "FileExactly", "contents": "inside/a.txt"},
            {"tag": "DirectoryShallow", "contents": "inside/sub"},
        ],
    },
    {
        "tag": "And",
        "contents": [
            {"tag": "ChildOf", "contents": "inside"},
            {"tag": "Not", "contents": {"tag": "FilePattern", "contents": "*.hs"}},
        ],
    },
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=PATHS, which=st.integers(0, len(PREDICATES) - 1), base_inside=st.booleans())
def test_fuzz_no_path_outside_the_sandbox_is_read_or_written(
    tree: Path, path: str, which: int, base_inside: bool
) -> None:
    inside = (tree / "inside").resolve()
    box = sandbox(PREDICATES[which], tree, confine=None)
    box.base = inside if base_inside else tree
    secret = tree / "outside" / "secret.txt"
    for check in (box.check_read, box.check_access, box.check_write):
        try:
            granted = check(path)
        except SandboxError:
            continue
        assert Path(granted).resolve().is_relative_to(inside), (check.__name__, path, granted)
        if check is box.check_read and Path(granted).is_file():
            assert Path(granted).read_bytes() != b"SECRET"
        if check is box.check_write and not Path(granted).exists():
            Path(granted).write_text("written")
    assert sorted(os.listdir(tree / "outside")) == ["secret.txt"] and secret.read_text() == "SECRET"
