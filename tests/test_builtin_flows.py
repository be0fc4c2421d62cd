"""Built-in toolboxes end to end (issue 13, acceptance 2 and 4): the scripted model drives every
kind of built-in tool through real sessions over HTTP, on the embedded default and scaled out
(PostgreSQL, Redis, two ``agents worker`` processes), and the stored tool results are checked."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.harness import Server, wait_until, write_agent, write_tool
from tests.tools.conftest import wait_gone

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
SYS, DEV, LUA = "system_sys_system_info", "developer_dev_developer_tools", "lua_lua_execute"
TWO_HUNKS = "--- a/code.txt\n+++ b/code.txt\n@@ -1,2 +1,3 @@\n one\n+one and a half\n two\n@@ -4 +5 @@\n-four\n+FOUR\n"
MISMATCH = "@@ -3,2 +3,2 @@\n two\n-three point five\n+3.5\n"
STAGED = """local dev = 'developer_dev_developer_tools'
local args = {capability = 'write-file-range', path = PATH, ranges = '1', contentBlocks = {'STAGED'}, commit = false}
local first = tools.call(dev, args)
local commit = {capability = 'write-file-range', path = PATH, session_id = first.data.sessionId, commit = true}
local done = tools.call(dev, commit)
local again = tools.call(dev, commit)
return {first = first.data.sessionStatus, done = done.data.sessionStatus, again = again.status, why = again.error}"""


def _call(name: str, call_id: str | None = None, **arguments: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id:
        call["id"] = call_id
    return call


def _script(work: Path, tmp: Path) -> dict[str, Any]:
    def on(word: str, *calls: dict[str, Any]) -> dict[str, Any]:
        return {"when": {"last_role": "user", "last_contains": word}, "reply": {"tool_calls": list(calls)}}

    def then(word: str, last: str, *calls: dict[str, Any]) -> dict[str, Any]:
        return {"when": {"any_contains": word, "last_contains": last}, "reply": {"tool_calls": list(calls)}}

    running = "has not finished yet"
    staged = STAGED.replace("PATH", json.dumps(str(work / "staged.txt")))
    return {
        "rules": [
            {"when": {"any_contains": "You are kid."}, "reply": {"content": "kid done"}},
            on(
                "FLOW-SQLITE-WRITE",
                _call("sqlite_facts_query", sql="SELECT count(*) AS n FROM facts"),
                _call("sqlite_facts_query", sql="INSERT INTO facts (text) VALUES ('sneaky')"),
                _call("sqlite_notes_query", sql="CREATE TABLE IF NOT EXISTS notes (body TEXT)"),
                _call("sqlite_notes_query", sql="INSERT INTO notes VALUES ('written by session one')"),
            ),
            on("FLOW-SQLITE-READ", _call("sqlite_notes_query", sql="SELECT body FROM notes")),
            on(
                "FLOW-ATTACH",
                _call(SYS, capability="attach-file", filepath=str(work / "pic.png")),
                _call(SYS, capability="attach-file", filepath=f"{work}/../secret.txt"),
                _call(SYS, capability="attach-file", filepath=str(work / "link")),
            ),
            on("FLOW-EXECUTE", _call(SYS, capability="execute-command", command=f"touch {tmp / 'marker'}")),
            on("FLOW-ASYNC-WAIT", _call("bash_slow", "call_wait_1", seconds="2")),
            then(
                "FLOW-ASYNC-WAIT",
                running,
                _call(SYS, capability="get-tool-call-status", tool_call_id="call_wait_1"),
                _call(
                    SYS,
                    capability="get-tool-call-status",
                    tool_call_id="call_wait_1",
                    wait_for_completion=True,
                    timeout_seconds=30,
                ),
            ),
            on("FLOW-ASYNC-CANCEL", _call("bash_slow", "call_cancel_1", seconds="60")),
            then(
                "FLOW-ASYNC-CANCEL",
                running,
                _call(SYS, capability="list-running-tool-calls"),
                _call(SYS, capability="cancel-tool-call", tool_call_id="call_cancel_1", reason="too slow"),
                _call(
                    SYS,
                    capability="get-tool-call-status",
                    tool_call_id="call_cancel_1",
                    wait_for_completion=True,
                    timeout_seconds=30,
                ),
            ),
            on("FLOW-INTROSPECT", _call("io_prompt_agent_kid", what="hello kid")),
            then(
                "FLOW-INTROSPECT",
                "kid done",
                _call(SYS, capability="list-sessions"),
                _call(SYS, capability="get-session-stats"),
            ),
            on(
                "FLOW-PATCH",
                _call(DEV, capability="patch-file", path=str(work / "code.txt"), patch=TWO_HUNKS),
                _call(DEV, capability="patch-file", path=str(work / "code.txt"), patch=MISMATCH),
            ),
            on(
                "FLOW-LUA",
                _call(LUA, script="while true do end"),
                _call(LUA, script="local t = {} for i = 1, 1e6 do t[i] = ('x'):rep(1000000) .. i end"),
                _call(LUA, script="return tools.call('sqlite_facts_query', {sql = 'SELECT 1'})"),
                _call(LUA, script=staged),
            ),
            {"when": {"last_role": "tool"}, "reply": {"content": "done: {last_content}"}},
            {"reply": {"content": "ok"}},
        ]
    }


def _agents(tmp: Path, llm_url: str) -> list[Path]:
    work = tmp / "work"
    work.mkdir()
    (work / "pic.png").write_bytes(PNG)
    (tmp / "secret.txt").write_text("secret")
    (work / "link").symlink_to(tmp / "secret.txt")
    (work / "code.txt").write_text("one\ntwo\nthree\nfour\n")
    (work / "staged.txt").write_text("a\nb\n")
    with sqlite3.connect(tmp / "facts.db") as connection:
        connection.execute("CREATE TABLE facts (text TEXT)")
        connection.executemany("INSERT INTO facts VALUES (?)", [("a",), ("b",), ("c",)])
    command_filter = tmp / "filter.sh"
    command_filter.write_text(
        f'#!/bin/sh\ncat > {tmp / "filter-saw"}\necho \'{{"acceptance": "refused", "note": "no commands today"}}\'\n'
    )
    command_filter.chmod(0o755)
    write_tool(
        tmp / "tools",
        "slow",
        {
            "slug": "slow",
            "description": "sleeps",
            "args": [
                {
                    "name": "seconds",
                    "description": "how long",
                    "type": "string",
                    "backing_type": "string",
                    "arity": "single",
                    "mode": "positional",
                }
            ],
        },
        f'echo $$ > {tmp}/slow-"$1".pid; sleep "$1"; touch {tmp}/slow-finished-"$1"; echo "slept $1"',
    )
    kid = write_agent(tmp, "kid", llm_url)
    sandbox = {"ref": "work"}
    builtin = write_agent(
        tmp,
        "builtin",
        llm_url,
        toolDirectory="tools",
        extraAgents=[{"slug": "kid", "path": kid.name}],
        executionMode="asynchronous",
        asyncYieldStrategy={"tag": "yieldOnTimeout", "milliseconds": 300},
        toolCallPolicyConfig={
            "default": {"tag": "runSync"},
            "rules": [{"tool": "bash_slow", "disposition": {"tag": "runAsync"}}],
        },
        fileSandboxes={"work": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(work)}}},
        builtinToolboxes=[
            {
                "tag": "SqliteToolbox",
                "contents": {
                    "Name": "facts",
                    "Description": "facts",
                    "Versioning": {"tag": "SqliteReadOnly", "path": "facts.db"},
                },
            },
            {
                "tag": "SqliteToolbox",
                "contents": {
                    "Name": "notes",
                    "Description": "notes",
                    "Versioning": {"tag": "SqliteReadWrite", "path": "notes.db"},
                },
            },
            {
                "tag": "SystemToolbox",
                "contents": {
                    "Name": "sys",
                    "Capabilities": [
                        "attach-file",
                        "execute-command",
                        "get-tool-call-status",
                        "list-running-tool-calls",
                        "cancel-tool-call",
                        "list-sessions",
                        "get-session-stats",
                    ],
                    "SessionIntrospectionScope": "children-only",
                    "FileSandbox": sandbox,
                    "CommandFilter": command_filter.name,
                },
            },
            {
                "tag": "DeveloperToolbox",
                "contents": {
                    "Name": "dev",
                    "Capabilities": ["read-file-range", "write-file-range", "patch-file"],
                    "FileSandbox": sandbox,
                },
            },
            {
                "tag": "LuaToolbox",
                "contents": {
                    "Name": "lua",
                    "MaxMemoryMB": 16,
                    "MaxExecutionTimeSeconds": 1,
                    "AllowedTools": [DEV, "sqlite_notes_query"],
                    "FileSandbox": sandbox,
                },
            },
        ],
    )
    return [builtin]


def _run(server: Server, prompt: str) -> dict[str, Any]:
    answer = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "builtin", "prompt": prompt}))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _results(server: Server, session_id: str, tool: str) -> list[Any]:
    """The stored results of ``tool``'s calls in a session, oldest first."""
    turns = server.client.get(f"/v1/sessions/{session_id}").json()["session"]["turns"]
    found = []
    for turn in reversed(turns):
        contents = turn["contents"]
        pairs = (
            [(c, r) for c, r in contents.get("userToolResponses") or []]
            if turn["tag"] == "UserTurn"
            else [(t["tcCall"], t.get("tcResult")) for t in contents.get("trackedCalls") or []]
        )
        found += [response for call, response in pairs if call["function"]["name"] == tool]
    return found


def _data(result: Any) -> Any:
    assert isinstance(result, dict) and result["type"] == "json", result
    return result["content"]["data"] if "data" in result["content"] else result["content"]


def check_sqlite(server: Server) -> None:
    first = _run(server, "FLOW-SQLITE-WRITE")
    assert first["status"] == "idle", first["status_detail"]
    sid = first["session_id"]
    count, refused = _results(server, sid, "sqlite_facts_query")
    assert _data(count) == {"columns": ["n"], "rows": [[3]], "rowCount": 1}
    assert refused.startswith("Error: sqlite_facts_query: the database is read-only (SqliteReadOnly)")
    assert _data(_results(server, sid, "sqlite_notes_query")[1]) == {"changes": 1, "lastRowId": 1}
    second = _run(server, "FLOW-SQLITE-READ")
    [read] = _results(server, second["session_id"], "sqlite_notes_query")
    assert _data(read)["rows"] == [["written by session one"]]


def check_attach_file(server: Server) -> None:
    sid = _run(server, "FLOW-ATTACH")["session_id"]
    picture, up, link = _results(server, sid, SYS)
    assert picture == {
        "type": "media",
        "mimeType": "image/png",
        "base64Data": base64.b64encode(PNG).decode(),
        "filename": "pic.png",
    }
    for refused in (up, link):
        assert "is not allowed by the file sandbox 'work'" in refused


def check_execute_command(server: Server, tmp: Path) -> None:
    sid = _run(server, "FLOW-EXECUTE")["session_id"]
    [refused] = _results(server, sid, SYS)
    assert refused == "Error: system_sys_system_info: command refused by the command filter: no commands today"
    assert not (tmp / "marker").exists()
    assert (tmp / "filter-saw").read_text() == f"touch {tmp / 'marker'}"


def check_async_calls(server: Server, tmp: Path) -> None:
    sid = _run(server, "FLOW-ASYNC-WAIT")["session_id"]
    seen, waited = wait_until(lambda: len(_results(server, sid, SYS)) == 2 and _results(server, sid, SYS))
    assert (_data(seen)["status"], _data(seen)["is_final"], _data(seen)["tool_name"]) == ("running", False, "bash_slow")
    assert (_data(waited)["status"], _data(waited)["result"]) == ("completed", "slept 2\n")
    sid = _run(server, "FLOW-ASYNC-CANCEL")["session_id"]
    listed, cancelled, status = wait_until(lambda: len(_results(server, sid, SYS)) == 3 and _results(server, sid, SYS))
    assert [c["tool_call_id"] for c in _data(listed)["calls"]] == ["call_cancel_1"]
    assert _data(cancelled) == {"tool_call_id": "call_cancel_1", "cancelled": True, "previous_status": "running"}
    assert (_data(status)["status"], _data(status)["result"]) == ("cancelled", "async tool call was cancelled")
    assert wait_gone(int((tmp / "slow-60.pid").read_text()), 10)
    assert not (tmp / "slow-finished-60").exists()


def check_introspection(server: Server) -> None:
    sid = _run(server, "FLOW-INTROSPECT")["session_id"]
    # the parent waits for its child, then goes on by itself
    listed, stats = wait_until(lambda: len(_results(server, sid, SYS)) == 2 and _results(server, sid, SYS))
    children = server.client.get(f"/v1/sessions?parent={sid}").json()["sessions"]
    sessions = _data(listed)["sessions"]
    assert [(s["sessionId"], s["agent"], s["isChild"]) for s in sessions] == [(children[0]["session_id"], "kid", True)]
    assert _data(listed)["totalAccessible"] == 1 and _data(stats)["totalSessions"] == 1


def check_developer(server: Server, tmp: Path) -> None:
    sid = _run(server, "FLOW-PATCH")["session_id"]
    applied, mismatch = _results(server, sid, DEV)
    assert (_data(applied)["hunksApplied"], _data(applied)["linesChanged"]) == (2, 3)
    assert json.loads(mismatch) == {
        "error": "Context mismatch at line 4: hunk 1 does not match the file",
        "expected": ["two", "three point five"],
        "actual": ["two", "three"],
    }
    assert (tmp / "work" / "code.txt").read_text() == "one\none and a half\ntwo\nthree\nFOUR\n"


def check_lua(server: Server, tmp: Path) -> None:
    sid = _run(server, "FLOW-LUA")["session_id"]
    slow, hungry, portal, staged = _results(server, sid, LUA)
    assert slow == "Error: lua_lua_execute: the script ran longer than its time limit (its timeout) and was stopped"
    assert hungry == "Error: lua_lua_execute: the script used more than 16 MB of memory and was stopped"
    assert "tools.call: 'sqlite_facts_query' is not in AllowedTools" in portal
    answer = _data(staged)
    assert (answer["first"], answer["done"], answer["again"]) == ("staged", "committed", "error")
    assert "already committed" in answer["why"]
    assert (tmp / "work" / "staged.txt").read_text() == "STAGED\nb\n"


def _every_flow(server: Server, tmp: Path) -> None:
    check_sqlite(server)
    check_attach_file(server)
    check_execute_command(server, tmp)
    check_async_calls(server, tmp)
    check_introspection(server)
    check_developer(server, tmp)
    check_lua(server, tmp)


def test_built_in_toolboxes_on_the_embedded_default(
    tmp_path: Path, llm_server: Callable[..., Any], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(_script(tmp_path / "work", tmp_path))
    server = start_server(_agents(tmp_path, llm.url))
    listed = server.client.get("/v1/agents/builtin").json()["tools"]
    assert listed[-5:] == ["sqlite_facts_query", "sqlite_notes_query", SYS, DEV, LUA]
    _every_flow(server, tmp_path)


def test_built_in_toolboxes_scaled_out_with_two_workers(
    tmp_path: Path,
    llm_server: Callable[..., Any],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Any],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server(_script(tmp_path / "work", tmp_path))
    agents = _agents(tmp_path, llm.url)
    env = {"REDIS_URL": redis_url}
    server = start_server(agents, db=postgres_url, env=env)
    for _ in range(2):
        start_worker(agents, db=postgres_url, env=env)
    assert 'embedded_worker": false' in server.process.output()
    _every_flow(server, tmp_path)
    assert not os.path.exists(tmp_path / "marker")
