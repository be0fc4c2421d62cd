"""tools_app/bash/live.py: the rules of a live ``toolDirectory`` (docs/tools.md §3.9), in process.

A clock the test moves stands in for time, so the minimum interval between two looks is a rule
checked exactly, not a measured figure.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests.harness import write_tool
from tools_app.bash import live
from tools_app.bash.live import LiveBashDirectory
from tools_app.toolset import ToolBuildError, build_toolset

from .conftest import make_agent
from .test_toolset import EchoTool


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _tool(directory: Path, name: str, description: str, counter: Path) -> Path:
    """A tool whose every ``describe`` appends a line to ``counter``, put in place in one step."""
    staging = directory.parent / "staging"
    path = write_tool(staging, name, {"slug": name, "description": description, "args": []}, "echo hi")
    first, rest = path.read_text().split("\n", 1)
    path.write_text(f'{first}\n[ "${{1:-}}" = describe ] && echo x >> {counter}\n{rest}')
    directory.mkdir(exist_ok=True)
    os.replace(path, directory / name)
    return directory / name


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.WARNING]


def _names(box: LiveBashDirectory) -> list[str]:
    return [tool.name for tool in box.snapshot()[1]]


def test_added_changed_and_removed_scripts_are_seen_after_the_interval_only(tmp_path) -> None:
    tools, counter, clock = tmp_path / "tools", tmp_path / "describes", Clock()
    _tool(tools, "one", "first", counter)
    box = LiveBashDirectory(tools, "toolDirectory", "tester", interval=1.0, clock=clock)
    assert box.load() == [] and _names(box) == ["bash_one"]
    revision = box.snapshot()[0]

    _tool(tools, "two", "second", counter)
    clock.now = 0.9
    assert _names(box) == ["bash_one"]  # within the interval: the last look stands
    clock.now = 1.0
    assert _names(box) == ["bash_one", "bash_two"] and box.snapshot()[0] != revision
    assert counter.read_text().count("x") == 2  # one describe per file so far

    clock.now = 2.0
    assert _names(box) == ["bash_one", "bash_two"]
    assert counter.read_text().count("x") == 2  # nothing changed: nothing described again

    _tool(tools, "two", "second, changed", counter)
    clock.now = 3.0
    [_, two] = box.snapshot()[1]
    assert two.description == "second, changed" and counter.read_text().count("x") == 3

    (tools / "one").unlink()
    clock.now = 4.0
    assert _names(box) == ["bash_two"]


def test_a_broken_describe_is_warned_once_per_version(tmp_path, caplog) -> None:
    tools, clock = tmp_path / "tools", Clock()
    tools.mkdir()
    broken = tools / "broken"
    broken.write_text("#!/bin/sh\nexit 2\n")
    broken.chmod(0o755)
    box = LiveBashDirectory(tools, "toolDirectory", "tester", interval=1.0, clock=clock)
    [line] = box.load()  # the first build returns it, for check and serve to print
    assert line.startswith(f"{broken}: describe exited with code 2")
    with caplog.at_level(logging.WARNING, logger="tools.bash.live"):
        for step in range(1, 5):
            clock.now = float(step)
            assert _names(box) == []
        assert _warnings(caplog) == []  # already reported, unchanged
        broken.write_text("#!/bin/sh\necho not json\n")
        clock.now = 10.0
        assert _names(box) == []
        clock.now = 11.0
        box.snapshot()
    [record] = _warnings(caplog)
    assert record.kind == "tools.skipped" and "describe did not print valid JSON" in record.reason  # type: ignore[attr-defined]


def test_a_missing_directory_has_no_tools_until_it_appears(tmp_path) -> None:
    tools, counter, clock = tmp_path / "tools", tmp_path / "describes", Clock()
    box = LiveBashDirectory(tools, "toolDirectory", "tester", interval=1.0, clock=clock)
    assert box.load() == [] and _names(box) == []
    _tool(tools, "one", "first", counter)
    clock.now = 1.0
    assert _names(box) == ["bash_one"]


def test_the_toolset_offers_directory_scripts_first_and_keeps_names_apart(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(live, "CHECK_INTERVAL", 0.0)  # every read looks
    tools, counter = tmp_path / "tools", tmp_path / "describes"
    _tool(tools, "one", "first", counter)
    toolset = build_toolset(make_agent(tmp_path, toolDirectory="tools", externalTools=[
        {"name": "ask_human", "description": "asks", "parameters": {"type": "object", "properties": {}}}]))
    extended = toolset.with_extra_tools([EchoTool("io_prompt_agent_helper")])
    assert extended.names() == ["io_prompt_agent_helper", "bash_one", "ask_human"]
    # dropped in after the build: offered in the place of bash tools, after the helpers
    _tool(tools, "two", "second", counter)
    assert extended.names() == ["io_prompt_agent_helper", "bash_one", "bash_two", "ask_human"]
    (tools / "one").unlink()
    assert extended.names() == ["io_prompt_agent_helper", "bash_two", "ask_human"]
    # a helper may not take a directory script's name
    with pytest.raises(ToolBuildError, match="duplicate tool name bash_two"):
        toolset.with_extra_tools([EchoTool("bash_two")])
    # two slugs that normalize alike get distinct wire names, and the rename is a warning
    for name, slug in (("a", "read.file"), ("b", "read_file")):
        write_tool(tools, name, {"slug": slug, "description": slug, "args": []}, "echo hi")
    renamed = build_toolset(make_agent(tmp_path, toolDirectory="tools"))
    assert renamed.names() == ["bash_read_file_2", "bash_read_file", "bash_two"]
    assert [w for w in renamed.warnings if "exposed as bash_read_file_2" in w]
