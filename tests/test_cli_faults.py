"""Faults found running real agent files and commands (issue 30), each run as a real process:
``check`` on agents with helpers, a tool whose ``describe`` fails, ``mcp-server`` with piped input,
``--socket`` and its Host, ``--db`` in a missing directory, log levels and closed pipes, and
``session import`` of an unknown agent."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.harness import FIXTURES, PROCESS_TIMEOUT, ROOT, Server, base_env, write_agent, write_tool
from tests.test_real_agent_files import _checkout

# every test here runs the agents command line as a process
pytestmark = pytest.mark.integration


def agents(cwd: Path, *argv: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``agents ARGV`` run in ``cwd`` (the working tree on PYTHONPATH), with a user's log level."""
    return subprocess.run(
        [sys.executable, "-m", "agentsite.cli", *argv],
        cwd=cwd,
        env=base_env(PYTHONPATH=str(ROOT), **{"AGENTS_LOG_LEVEL": "WARNING", **env}),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )


@pytest.mark.parametrize("agent", ["architect", "oneshot", "retro"])
def test_check_shows_the_tools_of_real_agents_with_helpers_and_opens_no_database(tmp_path: Path, agent: str) -> None:
    _checkout(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    db = tmp_path / "elsewhere" / "x.db"
    for mode in ("list", "openai"):
        result = agents(tmp_path, "check", "--agent-file", f"agents/{agent}.json", "--tools", mode, "--db", str(db))
        assert result.returncode == 0, result.stderr
        assert "io_prompt_agent_faq" in result.stdout
    # check builds the agents from their files: no database is read, none is made, here or at --db
    assert not (tmp_path / "agents-server.db").exists()
    assert list((tmp_path / "elsewhere").iterdir()) == []


def _broken_tree(root: Path) -> list[Path]:
    """Two root agents sharing a helper whose tool directory holds a tool whose describe fails."""
    tools = root / "tools"
    write_tool(tools, "good", {"slug": "good", "description": "works", "args": []}, "echo ok")
    broken = tools / "broken"
    broken.write_text("#!/bin/sh\necho 'describe is broken' >&2\nexit 3\n")
    broken.chmod(0o755)
    write_agent(root, "helper", "http://127.0.0.1:9/v1", toolDirectory="tools")
    helpers = [{"slug": "helper", "path": "helper.json"}]
    return [
        write_agent(root, name, "http://127.0.0.1:9/v1", toolDirectory="tools", extraAgents=helpers)
        for name in ("first", "second")
    ]


def test_check_skips_a_tool_whose_describe_fails_warns_once_and_counts_what_the_server_offers(
    tmp_path: Path, start_server: Callable[..., Server]
) -> None:
    files = _broken_tree(tmp_path)
    result = agents(tmp_path, "check", *(arg for path in files for arg in ("--agent-file", str(path))))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "broken" in line]
    # one warning per agent that has the tool, printed once although two files reach the helper
    assert len(warnings) == 3 and len(set(warnings)) == 3, result.stderr
    assert all(line.startswith("warning: ") for line in warnings), result.stderr
    counts = {line.split(":", 1)[0]: line for line in result.stdout.splitlines() if line.endswith(" tools)")}
    server = start_server(files, cwd=tmp_path)
    offered = {agent["slug"]: agent["tools"] for agent in server.client.get("/v1/agents").json()}
    # bash_good, the helper's tool and describe_agent, derive_agent: what the model is offered
    assert offered["first"] == ["io_prompt_agent_helper", "describe_agent", "derive_agent", "bash_good"]
    for slug in ("first", "second"):
        assert counts[slug].endswith(f"({len(offered[slug])} tools)"), result.stdout


def test_session_import_refuses_an_unknown_agent_and_stores_nothing(tmp_path: Path) -> None:
    session_file = sorted((FIXTURES / "sessions").glob("*.json"))[0]
    agent = write_agent(tmp_path, "known", "http://127.0.0.1:9/v1")
    db = str(tmp_path / "s.db")
    refused = agents(tmp_path, "--db", db, "--agent-file", str(agent), "session", "import", str(session_file),
                     "--agent", "nope")
    assert (refused.returncode, refused.stdout) == (4, ""), refused.stderr
    assert refused.stderr == "agents session: unknown_agent: no agent 'nope'\n"
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(*) FROM sessions_app_session").fetchone() == (0,)
    # the root of an agent file is known; --agent does not narrow the files to look in
    imported = agents(tmp_path, "--db", db, "--agent-file", str(agent), "session", "import", str(session_file),
                      "--agent", "known")
    assert imported.returncode == 0, imported.stderr
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT agent_slug FROM sessions_app_session").fetchall() == [("known",)]


def test_through_the_socket_any_host_is_answered_and_over_tcp_only_the_allowed_ones(
    tmp_path: Path, start_server: Callable[..., Server]
) -> None:
    path = tmp_path / "agents.sock"
    server = start_server([write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")], extra_args=["--socket", str(path)])
    for url in ("http://x/healthz", "http://evil.example:8080/v1/agents"):
        done = subprocess.run(
            ["curl", "-s", "-w", "\n%{http_code}", "--unix-socket", str(path), url],
            capture_output=True, text=True, timeout=60, check=True,
        )
        body, _, status = done.stdout.rpartition("\n")
        assert status == "200", (url, body)
    assert json.loads(body)[0]["slug"] == "plain"
    refused = server.client.get("/v1/agents", headers={"Host": "x"})
    assert (refused.status_code, refused.json()["error"]) == (400, "bad_request")


@pytest.mark.parametrize(
    "argv",
    [
        ["session", "pending", "8b95994d-0fd8-41e3-b5b4-fa2dce5366d2"],
        ["session", "export", "8b95994d-0fd8-41e3-b5b4-fa2dce5366d2"],
        ["serve", "--port", "0"],
    ],
    ids=["pending", "export", "serve"],
)
def test_a_database_in_a_missing_directory_creates_nothing_and_is_named(tmp_path: Path, argv: list[str]) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    result = agents(tmp_path, "--db", "missing/dir/x.db", "--agent-file", str(agent), *argv)
    database = tmp_path / "missing" / "dir" / "x.db"
    assert result.returncode == 2, result.stderr
    assert result.stderr.endswith(f"cannot open the database {database}: its directory does not exist\n")
    assert "secret" not in result.stderr
    assert not (tmp_path / "missing").exists()


def _user_env(**extra: str) -> dict[str, str]:
    """A user's environment: no AGENTS_LOG_LEVEL unless given."""
    env = base_env(PYTHONPATH=str(ROOT), **extra)
    if "AGENTS_LOG_LEVEL" not in extra:
        env.pop("AGENTS_LOG_LEVEL")
    return env


@pytest.mark.parametrize("level", [None, "", " "], ids=["unset", "empty", "blank"])
def test_one_shot_commands_log_nothing_below_warning_and_an_empty_level_is_the_default(
    tmp_path: Path, level: str | None
) -> None:
    # a write through a SQLite toolbox logs an info line (tools.sqlite_write) in a server
    sqlite = {"Name": "m", "Description": "m", "Versioning": {"tag": "SqliteReadWrite", "path": "m.db"}}
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1",
                        builtinToolboxes=[{"tag": "SqliteToolbox", "contents": sqlite}])
    env = _user_env() if level is None else _user_env(AGENTS_LOG_LEVEL=level)
    argv = [sys.executable, "-m", "agentsite.cli", "--agent-file", str(agent)]
    for sql in ("CREATE TABLE t(x)", "INSERT INTO t VALUES (1)"):
        called = subprocess.run([*argv, "tool-call", "sqlite_m_query"], cwd=tmp_path, env=env,
                                input=json.dumps({"sql": sql}), capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
        assert called.returncode == 0, called.stderr
        assert called.stderr == ""
    assert json.loads(called.stdout)["content"]["changes"] == 1
    pending = subprocess.run([*argv, "--db", "s.db", "session", "pending", "8b95994d-0fd8-41e3-b5b4-fa2dce5366d2"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert pending.returncode == 1
    assert pending.stderr == "agents session: no session 8b95994d-0fd8-41e3-b5b4-fa2dce5366d2\n"


@pytest.mark.parametrize("argv", [["describe"], ["spec", "bash-tools"]], ids=["describe", "spec"])
def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path, argv: list[str]) -> None:
    # the reader is gone before the command writes a byte, as `agents describe | true` leaves it
    reader, writer = os.pipe()
    os.close(reader)
    try:
        done = subprocess.run([sys.executable, "-m", "agentsite.cli", *argv], cwd=tmp_path, env=_user_env(),
                              stdout=writer, stderr=subprocess.PIPE, text=True, timeout=PROCESS_TIMEOUT)
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")
