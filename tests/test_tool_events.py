"""Tool events of calls that run outside the step, and bash output as progress (issue 16,
acceptance 4): ``tool.started``, ``tool.progressed`` and ``tool.completed``/``tool.failed``."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.harness import ROOT, Server, write_agent, write_tool
from tests.streams import SseReader

SCRIPT = {"rules": [
    {"when": {"last_role": "user", "last_contains": "tick"},
     "reply": {"content": "", "tool_calls": [{"name": "bash_ticker", "arguments": {}, "id": "call_tick"}]}},
    {"when": {"last_role": "user", "last_contains": "flood"},
     "reply": {"content": "", "tool_calls": [{"name": "bash_flood", "arguments": {}, "id": "call_flood"}]}},
    {"when": {"last_role": "user", "last_contains": "broken"},
     "reply": {"content": "", "tool_calls": [{"name": "bash_broken", "arguments": {}, "id": "call_broken"}]}},
    {"reply": {"content": "done: {last_content}"}},
]}

#: The documented rate: one report per stream every half second at most (docs/tools.md §3.4).
INTERVAL = 0.5


def _server(tmp_path: Path, llm_server, start_server) -> Server:
    llm = llm_server(SCRIPT)
    tools = tmp_path / "tools"
    # five lines over three seconds, the last one followed by a pause too
    write_tool(tools, "ticker", {"slug": "ticker", "description": "ticks", "args": []},
               'for i in 1 2 3 4 5; do echo "line $i"; sleep 0.6; done')
    write_tool(tools, "flood", {"slug": "flood", "description": "floods", "args": []},
               'for i in $(seq 1 300); do echo "row $i"; echo "err $i" >&2; done; sleep 1.2')
    write_tool(tools, "broken", {"slug": "broken", "description": "fails", "args": []}, "echo bad >&2; exit 3")
    agent = write_agent(
        tmp_path, "bg", llm.url, toolDirectory="tools", executionMode="asynchronous",
        toolCallPolicyConfig={"default": {"tag": "runAsync"},
                              "rules": [{"tool": "bash_flood", "disposition": {"tag": "runSync"}}]},
    )
    return start_server([agent])


def _run(server: Server, prompt: str) -> tuple[str, list[dict]]:
    view = server.client.post("/v1/sessions?wait=true&timeout=60", content=json.dumps(
        {"agent": "bg", "prompt": prompt})).json()
    assert view["status"] == "idle", view
    stream = SseReader(f"{server.url}/v1/sessions/{view['session_id']}/events?after=0")
    events = stream.wait_for(lambda e: any(x["event"] == "run.stopped" and x["data"]["status"] == "idle" for x in e))
    stream.close()
    return view["session_id"], [e for e in events if e["event"].startswith("tool.")]


def _progress_times(server: Server, session_id: str) -> list[tuple[float, dict]]:
    """When each ``tool.progressed`` event of the session was stored (read from the database)."""
    with sqlite3.connect(server.db) as connection:
        rows = connection.execute(
            "SELECT created_at, payload_json FROM sessions_app_event WHERE kind = 'tool.progressed'"
            " AND session_id = ? ORDER BY seq", [session_id.replace("-", "")],
        ).fetchall()
    return [(datetime.fromisoformat(at).timestamp(), json.loads(payload)) for at, payload in rows]


def test_a_background_call_reports_start_progress_and_completion(tmp_path, llm_server, start_server) -> None:
    server = _server(tmp_path, llm_server, start_server)
    session_id, events = _run(server, "tick please")
    kinds = [e["event"] for e in events]
    assert kinds[0] == "tool.started" and kinds[-1] == "tool.completed"
    assert set(kinds[1:-1]) == {"tool.progressed"}
    assert all(e["data"]["tool_call_id"] == "call_tick" and e["data"]["tool"] == "bash_ticker" for e in events)
    assert events[-1]["data"]["status"] == "completed"
    assert events[-1]["data"]["result"] == "line 1\nline 2\nline 3\nline 4\nline 5\n"
    progressed = [e["data"] for e in events if e["event"] == "tool.progressed"]
    # a line every 0.6 s: most are reported, in order, each with the totals so far
    assert len(progressed) >= 3
    assert [p["stream"] for p in progressed] == ["stdout"] * len(progressed)
    assert [p["lines"] for p in progressed] == sorted(set(p["lines"] for p in progressed))
    assert progressed[-1] == {
        "kind": "tool.progressed", "seq": progressed[-1]["seq"], "session_id": session_id, "owner": None,
        "tool_call_id": "call_tick", "tool": "bash_ticker", "stream": "stdout", "line": "line 5", "lines": 5,
        "bytes": 35,
    }
    for p in progressed:
        assert p["line"] == f"line {p['lines']}"
    times = [at for at, _ in _progress_times(server, session_id)]
    assert all(later - earlier >= INTERVAL - 0.02 for earlier, later in zip(times, times[1:], strict=False))


def test_a_flood_of_lines_gives_a_few_reports_per_stream(tmp_path, llm_server, start_server) -> None:
    server = _server(tmp_path, llm_server, start_server)
    session_id, events = _run(server, "flood please")
    progressed = [e["data"] for e in events if e["event"] == "tool.progressed"]
    by_stream = {stream: [p for p in progressed if p["stream"] == stream] for stream in ("stdout", "stderr")}
    for stream, reports in by_stream.items():
        # 300 lines in a moment, then 1.2 s of quiet: the first line, and the newest once the half
        # second is over; never one report per line (the rate itself is checked below)
        assert 1 <= len(reports) <= 10, reports
        assert reports[-1]["lines"] == 300
        assert reports[-1]["line"] == ("row 300" if stream == "stdout" else "err 300")
    timed = _progress_times(server, session_id)
    for stream in ("stdout", "stderr"):
        times = [at for at, payload in timed if payload["stream"] == stream]
        assert all(later - earlier >= INTERVAL - 0.02 for earlier, later in zip(times, times[1:], strict=False))
    # the call ran in the step (runSync): its start and end events frame the reports
    kinds = [e["event"] for e in events]
    assert kinds[0] == "tool.started" and kinds[-1] == "tool.completed"


def test_a_failing_background_call_reports_tool_failed(tmp_path, llm_server, start_server) -> None:
    server = _server(tmp_path, llm_server, start_server)
    _, events = _run(server, "broken please")
    assert [e["event"] for e in events] == ["tool.started", "tool.progressed", "tool.failed"]
    assert events[1]["data"]["stream"] == "stderr" and events[1]["data"]["line"] == "bad"
    failed = events[-1]["data"]
    assert failed["status"] == "failed" and failed["tool_call_id"] == "call_broken"
    assert failed["result"] == "Error: tool bash_broken exited with code 3: bad"


def test_a_background_call_past_its_time_limit_fails_with_the_reference_text(
    tmp_path, llm_server, start_server
) -> None:
    llm = llm_server(SCRIPT)
    pid_file = tmp_path / "sleeper.pid"
    write_tool(tmp_path / "tools", "ticker", {"slug": "ticker", "description": "sleeps", "args": []},
               f"echo $$ > {pid_file}; sleep 30; echo woke")
    agent = write_agent(
        tmp_path, "bg", llm.url, toolDirectory="tools", executionMode="asynchronous", asyncCallTimeoutSeconds=1,
        toolCallPolicyConfig={"default": {"tag": "runAsync"}, "rules": []},
    )
    server = start_server([agent])
    started = time.monotonic()
    _, events = _run(server, "tick please")
    assert time.monotonic() - started < 20
    assert [e["event"] for e in events] == ["tool.started", "tool.failed"]
    assert events[-1]["data"]["result"] == "async tool call timed out after 1s"
    # the model read the same text, and the tool's process is gone
    assert llm.requests[-1]["messages"][-1]["content"] == "async tool call timed out after 1s"
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_an_mcp_tool_in_the_background_reports_its_progress(tmp_path, llm_server, start_server) -> None:
    llm = llm_server({"rules": [
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [
            {"name": "mcp_demo_slow", "arguments": {"steps": 3}, "id": "call_slow"}]}},
        {"reply": {"content": "done: {last_content}"}},
    ]})
    demo = ROOT / "tests" / "mcp_demo_server.py"
    entry = {"tag": "McpSimpleBinary", "contents": {"name": "demo", "executable": sys.executable, "args": [str(demo)]}}
    agent = write_agent(tmp_path, "bg", llm.url, mcpServers=[entry], executionMode="asynchronous",
                        toolCallPolicyConfig={"default": {"tag": "runAsync"}, "rules": []})
    server = start_server([agent])
    _, events = _run(server, "go slowly")
    kinds = [e["event"] for e in events]
    assert kinds == ["tool.started", "tool.progressed", "tool.progressed", "tool.progressed", "tool.completed"]
    progressed = [e["data"] for e in events if e["event"] == "tool.progressed"]
    assert [(p["progress"], p["total"], p["message"]) for p in progressed] == [
        (1, 3, "step 1 of 3"), (2, 3, "step 2 of 3"), (3, 3, "step 3 of 3"),
    ]
    assert all(e["data"]["tool_call_id"] == "call_slow" for e in events)
