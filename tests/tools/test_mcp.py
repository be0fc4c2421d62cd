"""MCP servers as toolboxes, in process: entries, result conversion, names, and the manager with
the test suite's MCP server (tests/mcp_demo_server.py) as a real child process."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest

from tests.harness import ROOT, free_port, wait_until
from tests.tools.conftest import make_agent, make_ctx, wait_gone
from tools_app.mcp.client import CANCEL_GRACE_SECONDS, MAX_LIST_PAGES
from tools_app.mcp.config import HttpServer, McpConfigError, StdioServer, parse_server
from tools_app.mcp.manager import get_manager
from tools_app.mcp.results import convert_result
from tools_app.mcp.toolbox import McpToolbox, adapt_schema
from tools_app.names import is_valid_tool_name
from tools_app.toolset import ToolBuildError, build_toolset

DEMO = ROOT / "tests" / "mcp_demo_server.py"
SCRIPTS = Path(__file__).parent / "scripts"
LITERAL_S = {"tag": "Literal", "contents": "s"}
PARAM_TOK = {"tag": "Param", "contents": "tok"}


def demo_entry(name: str = "demo", **env: str) -> dict:
    contents = {"name": name, "executable": sys.executable, "args": [str(DEMO)]}
    if env:
        contents["env"] = {key: {"tag": "Literal", "contents": value} for key, value in env.items()}
    return {"tag": "McpSimpleBinary", "contents": contents}


def pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


# --- entries ------------------------------------------------------------------------------------


def test_entries_are_read_with_literal_values_and_relative_executables():
    resolve = Path("/agents").joinpath
    stdio = parse_server(
        {
            "tag": "McpSimpleBinary",
            "contents": {
                "name": "git",
                "executable": "bin/server",
                "args": ["--x"],
                "env": {"A": {"tag": "Literal", "contents": "1"}, "B": {"tag": "Literal", "contents": {"k": 2}}},
            },
        },
        "mcpServers[0]",
        resolve,
    )
    assert stdio == StdioServer("git", "/agents/bin/server", ("--x",), (("A", "1"), ("B", '{"k": 2}')))
    assert stdio.environment()["A"] == "1" and "PATH" in stdio.environment()
    assert stdio.describe()["env"] == ["A", "B"] and "1" not in str(stdio.describe())
    assert parse_server(demo_entry(), "x", resolve).executable == sys.executable
    http = parse_server(
        {
            "tag": "McpStreamableHttp",
            "contents": {"name": "h", "url": "https://h/mcp", "headers": {"X-Key": LITERAL_S}},
        },
        "mcpServers[1]",
        resolve,
    )
    assert http == HttpServer("h", "https://h/mcp", (("X-Key", "s"),))
    assert http.describe()["headers"] == ["X-Key"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"tag": "McpSse", "contents": {}}, "mcpServers[0]: 'McpSse' MCP servers are not supported"),
        ({"tag": "McpSimpleBinary", "contents": {"name": "x"}}, "mcpServers[0].contents.executable must be"),
        ({"tag": "McpSimpleBinary", "contents": {"name": "x", "executable": "x", "args": "a"}}, "args must be a list"),
        (
            {"tag": "McpSimpleBinary", "contents": {"name": "x", "executable": "x", "env": {"T": {"tag": "Env"}}}},
            'mcpServers[0].contents.env.T must be {"tag": "Literal"',
        ),
        ({"tag": "McpStreamableHttp", "contents": {"name": "x", "url": "ftp://x"}}, "url must be an http://"),
    ],
)
def test_bad_entries_name_the_entry_and_the_problem(entry, message):
    with pytest.raises(McpConfigError) as error:
        parse_server(entry, "mcpServers[0]", Path("/").joinpath)
    assert message in str(error.value)


# --- results and schemas ----------------------------------------------------------------------


def test_results_become_text_media_mixed_json_or_errors():
    text = types.TextContent(type="text", text="hello")
    image = types.ImageContent(type="image", data="aGk=", mime_type="image/png")
    audio = types.AudioContent(type="audio", data="aGk=", mime_type="audio/wav")
    assert convert_result(types.CallToolResult(content=[text, text])).response == "hello\nhello"
    assert convert_result(types.CallToolResult(content=[image])).response == {
        "type": "media",
        "mimeType": "image/png",
        "base64Data": "aGk=",
    }
    mixed = convert_result(types.CallToolResult(content=[text, audio])).response
    assert mixed["type"] == "mixed" and mixed["parts"][1]["mimeType"] == "audio/wav"
    assert convert_result(types.CallToolResult(content=[], structured_content={"a": 1})).response == {
        "type": "json",
        "content": {"a": 1},
    }
    failed = convert_result(types.CallToolResult(content=[text], is_error=True))
    assert failed.is_error and failed.response == "Error: hello"


def test_input_schemas_pass_through_with_descriptions_defaulted():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "title": "t"}
    assert adapt_schema(schema) == {
        "type": "object",
        "properties": {"a": {"type": "string", "description": ""}},
        "required": ["a"],
        "title": "t",
    }
    assert adapt_schema(None) == {"type": "object", "properties": {}}


# --- a real server ------------------------------------------------------------------------------


def test_the_demo_server_as_a_toolbox(tmp_path):
    pid_file = tmp_path / "pids"
    agent = make_agent(tmp_path, slug="mcp-unit", mcpServers=[demo_entry(DEMO_MCP_PID_FILE=str(pid_file))])
    toolset = build_toolset(agent)
    again = build_toolset(agent)  # the same agent in the same process: the same server
    assert len(pids(pid_file)) == 1
    names = toolset.names()
    assert names[:2] == ["mcp_demo_files_read", "mcp_demo_echo"] and all(is_valid_tool_name(n) for n in names)
    assert toolset.original_name("mcp_demo_files_read") == "mcp_demo_files.read"
    read = toolset.get("mcp_demo_files_read")
    assert read.call({"path": "a.txt"}, make_ctx()).response == "contents of a.txt"
    assert read.parameters["required"] == ["path"]

    progress: list[tuple] = []
    callers: set[int] = set()

    def report(*values):
        progress.append(values)
        callers.add(threading.get_ident())

    done = toolset.get("mcp_demo_slow").call({"steps": 3}, make_ctx(progress=report))
    assert done.response == "3 steps done"
    assert progress == [(1.0, 3.0, "step 1 of 3"), (2.0, 3.0, "step 2 of 3"), (3.0, 3.0, "step 3 of 3")]
    assert callers == {threading.get_ident()}  # told in the calling thread

    assert toolset.get("mcp_demo_fail").call({}, make_ctx()).is_error
    assert toolset.get("mcp_demo_add_tool").call({}, make_ctx()).response == "late_tool added"
    deadline = time.monotonic() + 5
    while "mcp_demo_late_tool" not in toolset.names() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "mcp_demo_late_tool" in [t["function"]["name"] for t in toolset.openai_tools()]
    assert "mcp_demo_late_tool" in again.names()

    first = pids(pid_file)[0]
    # -32000 is also the SDK's "connection closed": a server answering it is alive and kept
    refused = toolset.get("mcp_demo_refuse").call({}, make_ctx())
    assert refused.is_error and "upstream unavailable" in refused.response
    assert "stopped during the call" not in refused.response
    assert toolset.get("mcp_demo_echo").call({"text": "same"}, make_ctx()).response == f"same (pid {first})"
    crashed = toolset.get("mcp_demo_crash").call({}, make_ctx())
    assert crashed.is_error and "stopped during the call" in crashed.response
    assert wait_gone(first)
    echoed = toolset.get("mcp_demo_echo").call({"text": "hi"}, make_ctx())
    assert len(pids(pid_file)) == 2 and echoed.response == f"hi (pid {pids(pid_file)[1]})"


def test_timeouts_and_cancellation_give_tool_errors(tmp_path):
    toolset = build_toolset(make_agent(tmp_path, slug="mcp-slow", mcpServers=[demo_entry()]))
    slow = toolset.get("mcp_demo_slow")
    started = time.monotonic()
    timed_out = slow.call({"steps": 100}, make_ctx(timeout=0.3))
    assert timed_out.is_error and "timed out after 0.3s" in timed_out.response
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    cancelled = slow.call({"steps": 100}, make_ctx(cancel=cancel))
    assert cancelled.response == "Error: tool mcp_demo_slow was cancelled"
    assert time.monotonic() - started < 3
    assert toolset.get("mcp_demo_echo").call({"text": "still"}, make_ctx()).response.startswith("still")


def test_spawn_failures_and_discovery_timeouts_are_load_errors(tmp_path):
    missing = {"tag": "McpSimpleBinary", "contents": {"name": "nothing", "executable": str(tmp_path / "absent")}}
    with pytest.raises(ToolBuildError) as error:
        build_toolset(make_agent(tmp_path, slug="mcp-missing", mcpServers=[missing, missing]))
    assert error.value.problems[0].startswith("mcpServers[0]: nothing: Failed to initialize MCP server: ")
    assert "absent" in error.value.problems[0]
    assert error.value.problems[1] == "mcpServers[1]: duplicate MCP server name 'nothing'"
    silent = {"tag": "McpSimpleBinary", "contents": {"name": "mute", "executable": "sleep", "args": ["30"]}}
    box = McpToolbox(("mcp-mute", None), parse_server(silent, "mcpServers[0]", tmp_path.joinpath))
    started = time.monotonic()
    with pytest.raises(Exception, match=r"^mute: Timeout waiting for MCP server tool discovery \(0.5s\)$"):
        box.start(timeout=0.5)
    assert time.monotonic() - started < 5


def test_shutdown_stops_every_server(tmp_path):
    pid_file = tmp_path / "pids"
    build_toolset(make_agent(tmp_path, slug="mcp-stop", mcpServers=[demo_entry(DEMO_MCP_PID_FILE=str(pid_file))]))
    [pid] = pids(pid_file)
    started = time.monotonic()
    get_manager().shutdown()
    assert wait_gone(pid) and time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("mode", "message", "pages"),
    [
        ("same", "tools/list answered the cursor 'again' again after 2 pages (a cursor loop)", 2),
        ("new", f"tools/list had more than {MAX_LIST_PAGES} pages", MAX_LIST_PAGES),
    ],
)
def test_a_listing_that_never_ends_stops_discovery_naming_the_server(tmp_path, mode, message, pages):
    asked = tmp_path / "pages"
    entry = {
        "tag": "McpSimpleBinary",
        "contents": {
            "name": "pager",
            "executable": sys.executable,
            "args": [str(SCRIPTS / "mcp_pages.py"), mode],
            "env": {"MCP_PAGES_FILE": {"tag": "Literal", "contents": str(asked)}},
        },
    }
    with pytest.raises(ToolBuildError) as error:
        build_toolset(make_agent(tmp_path, slug=f"mcp-pages-{mode}", mcpServers=[entry]))
    assert error.value.problems == [f"mcpServers[0]: pager: tool discovery stopped: {message}"]
    assert len(asked.read_text().split()) == pages


def test_an_abandoned_call_keeps_a_server_that_answers_and_replaces_one_that_hangs(tmp_path):
    pid_file = tmp_path / "pids"
    started = time.monotonic()
    toolset = build_toolset(
        make_agent(tmp_path, slug="mcp-hang", mcpServers=[demo_entry(DEMO_MCP_PID_FILE=str(pid_file))])
    )
    [first] = pids(pid_file)
    assert toolset.get("mcp_demo_echo").call({"text": "one"}, make_ctx()).response == f"one (pid {first})"
    own_time = time.monotonic() - started  # a start, a listing and a call, on this machine now

    # a call the server gives up on when told it was cancelled: the server answers the ping, stays
    waited = toolset.get("mcp_demo_wait").call({}, make_ctx(timeout=1))
    assert waited.is_error and "timed out after 1s" in waited.response
    began = time.monotonic()
    assert toolset.get("mcp_demo_echo").call({"text": "kept"}, make_ctx()).response == f"kept (pid {first})"
    assert time.monotonic() - began < CANCEL_GRACE_SECONDS

    held: dict[str, Any] = {}

    def other_session() -> None:
        began = time.monotonic()
        held["result"] = toolset.get("mcp_demo_echo").call({"text": "queued"}, make_ctx(timeout=60))
        held["seconds"] = time.monotonic() - began

    # a call that blocks the whole server: no ping answered, the process goes
    other = threading.Timer(0.5, other_session)  # in flight behind the hang when it times out
    other.start()
    hung = toolset.get("mcp_demo_hang").call({}, make_ctx(timeout=2))
    assert hung.is_error and "timed out after 2s" in hung.response
    began = time.monotonic()
    after = toolset.get("mcp_demo_echo").call({"text": "next"}, make_ctx(timeout=60))
    seconds = time.monotonic() - began
    other.join(60)
    second = pids(pid_file)[-1]
    assert second != first and after.response == f"next (pid {second})"
    assert seconds < CANCEL_GRACE_SECONDS + 2 * own_time + 1, (seconds, own_time)
    assert wait_gone(first, 10)
    # the other session's call is not held to its own 60 s: it fails when the hung server goes
    assert "stopped during the call" in held["result"].response
    assert held["seconds"] < 1.5 + CANCEL_GRACE_SECONDS + 2 * own_time, (held["seconds"], own_time)


@pytest.mark.integration
def test_an_http_session_that_hangs_is_dropped_and_a_new_one_opened(tmp_path):
    port = free_port()
    sessions = tmp_path / "sessions"
    env = {"DEMO_MCP_SESSIONS_FILE": str(sessions), "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen([sys.executable, str(DEMO), "--http", str(port)], env=env)
    try:

        def listening() -> bool:
            try:
                httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
            except httpx.TransportError:
                return False
            return True

        wait_until(listening)
        entry = {"tag": "McpStreamableHttp", "contents": {"name": "demo", "url": f"http://127.0.0.1:{port}/mcp"}}
        started = time.monotonic()
        toolset = build_toolset(make_agent(tmp_path, slug="mcp-http-hang", mcpServers=[entry]))
        assert toolset.get("mcp_demo_echo").call({"text": "one"}, make_ctx()).response.startswith("one (pid ")
        own_time = time.monotonic() - started
        [first] = sessions.read_text().split()
        hung = toolset.get("mcp_demo_hang").call({}, make_ctx(timeout=2))
        assert hung.is_error and "timed out after 2s" in hung.response
        began = time.monotonic()
        after = toolset.get("mcp_demo_echo").call({"text": "next"}, make_ctx(timeout=30))
        seconds = time.monotonic() - began
        assert after.response == f"next (pid {process.pid})"
        assert seconds < CANCEL_GRACE_SECONDS + 2 * own_time + 1, (seconds, own_time)
        assert sessions.read_text().split()[0] == first and len(sessions.read_text().split()) == 2
    finally:
        process.kill()
        process.wait()
