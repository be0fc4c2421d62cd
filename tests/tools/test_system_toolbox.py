"""The System toolbox in process: capabilities, files through the sandbox, commands and their
filter, and the session capabilities over a stand-in SessionsPort."""

from __future__ import annotations

import base64
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.tools.conftest import make_agent, make_ctx
from tools_app.ports import (
    SendRefused,
    SessionAccessDenied,
    SessionInfo,
    SessionNotFound,
    ToolCallInfo,
    ToolCallNotFound,
    WaitOutcome,
)
from tools_app.toolset import build_toolset

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def system_tool(tmp_path: Path, capabilities: list[str], **contents: Any):
    agent = make_agent(
        tmp_path,
        builtinToolboxes=[
            {"tag": "SystemToolbox", "contents": {"Name": "sys", "Capabilities": capabilities, **contents}}
        ],
    )
    toolset = build_toolset(agent)
    return toolset.tools[0]


def data(result) -> Any:
    assert not result.is_error, result.response
    assert result.response["type"] == "json"
    return result.response["content"]["data"]


def test_one_tool_whose_capability_enum_lists_what_is_enabled(tmp_path: Path) -> None:
    tool = system_tool(tmp_path, ["date", "attach-file", "restore-file"])
    assert tool.name == "system_sys_system_info"
    assert tool.parameters["properties"]["capability"]["enum"] == ["date", "attach-file"]
    assert set(tool.parameters["properties"]) == {"capability", "filepath"}


def test_information_capabilities(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    caps = [
        "date",
        "operating-system",
        "env-vars",
        "running-user",
        "hostname",
        "working-directory",
        "process-info",
        "uptime",
    ]
    monkeypatch.setenv("MY_TOKEN_X", "1")
    monkeypatch.setenv("AGENTS_TOKEN_X", "hidden")
    tool = system_tool(tmp_path, caps, EnvVarFilter="token_x")
    answers = {cap: tool.call({"capability": cap}, make_ctx()) for cap in caps}
    envelope = answers["date"].response["content"]
    assert envelope["capability"] == "date" and envelope["executionTime"] >= 0
    assert envelope["data"]["utc"].endswith("Z") and set(envelope["data"]) == {
        "utc",
        "local",
        "timezone",
        "timezoneOffset",
    }
    assert data(answers["env-vars"])["variables"] == {"MY_TOKEN_X": "1"}
    assert data(answers["running-user"])["uid"] == os.getuid()
    assert data(answers["working-directory"]) == {"path": os.getcwd()}
    assert data(answers["process-info"])["pid"] == os.getpid()
    assert data(answers["uptime"])["uptimeSeconds"] > 0
    assert data(answers["operating-system"])["name"] == "Linux"
    assert data(answers["hostname"])["hostname"]


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, 'the argument "capability" is required (one of: date, wait)'),
        ({"capability": "hostname"}, "capability 'hostname' is not enabled in this toolbox (enabled: date, wait)"),
        ({"capability": "wait"}, "wait needs a session store, and this call has none"),
    ],
)
def test_capabilities_not_offered_are_errors(tmp_path: Path, arguments: dict, message: str) -> None:
    result = system_tool(tmp_path, ["date", "wait"]).call(arguments, make_ctx())
    assert result.is_error and result.response == f"Error: system_sys_system_info: {message}"


def test_attach_file_gives_media_and_refuses_what_the_sandbox_does_not_allow(tmp_path: Path) -> None:
    box = tmp_path / "box"
    box.mkdir()
    (box / "pic.png").write_bytes(PNG)
    (tmp_path / "secret.txt").write_text("s")
    (box / "out").symlink_to(tmp_path / "secret.txt")
    sandbox = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(box)}, "fsbName": "pics"}
    tool = system_tool(tmp_path, ["attach-file"], FileSandbox=sandbox)
    result = tool.call({"capability": "attach-file", "filepath": str(box / "pic.png")}, make_ctx())
    assert result.response == {
        "type": "media",
        "mimeType": "image/png",
        "base64Data": base64.b64encode(PNG).decode(),
        "filename": "pic.png",
    }
    for path in (str(box / ".." / "secret.txt"), str(box / "out"), "/etc/passwd"):
        refused = tool.call({"capability": "attach-file", "filepath": path}, make_ctx())
        assert refused.is_error and "is not allowed by the file sandbox 'pics'" in refused.response


def test_list_directory_lists_only_what_the_sandbox_allows(tmp_path: Path) -> None:
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("aa")
    (tmp_path / "d" / ".hidden").write_text("")
    (tmp_path / "d" / "sub" / "b.txt").write_text("b")
    (tmp_path / "d" / "link").symlink_to("/etc")
    sandbox = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(tmp_path / "d")}}
    tool = system_tool(tmp_path, ["list-directory"], FileSandbox=sandbox)
    listed = data(
        tool.call({"capability": "list-directory", "path": str(tmp_path / "d"), "recursive": True}, make_ctx())
    )
    assert [(e["name"], e["type"], e["size"]) for e in listed["entries"]] == [
        ("a.txt", "file", 2),
        ("sub", "directory", 0),
        ("sub/b.txt", "file", 1),
    ]
    assert listed["total"] == 3


def test_execute_command_runs_without_a_filter(tmp_path: Path) -> None:
    tool = system_tool(tmp_path, ["execute-command"])
    answer = data(tool.call({"capability": "execute-command", "command": "echo hi; echo err >&2; exit 3"}, make_ctx()))
    assert (answer["exitCode"], answer["stdout"], answer["stderr"]) == (3, "hi\n", "err\n")


@pytest.mark.parametrize(
    "filter_body, message",
    [
        ('echo \'{"acceptance": "refused", "note": "no rm"}\'', "command refused by the command filter: no rm"),
        ("echo not json", "command refused: the command filter must print"),
        ('echo \'{"acceptance": "allowed"}\'', "command refused: the command filter must print"),
        (
            'echo \'{"acceptance": "allowed", "note": "ok"}\'; exit 1',
            "command refused: the command filter exited with 1",
        ),
    ],
)
def test_a_command_filter_decides_and_anything_but_allowed_refuses(
    tmp_path: Path, filter_body: str, message: str
) -> None:
    marker = tmp_path / "ran"
    seen = tmp_path / "seen"
    script = tmp_path / "filter.sh"
    script.write_text(f"#!/bin/sh\ncat > {seen}\n{filter_body}\n")
    script.chmod(0o755)
    tool = system_tool(tmp_path, ["execute-command"], CommandFilter="filter.sh")
    result = tool.call({"capability": "execute-command", "command": f"touch {marker}"}, make_ctx())
    assert result.is_error and message in result.response
    assert not marker.exists() and seen.read_text() == f"touch {marker}"


def test_an_allowing_filter_lets_the_command_run(tmp_path: Path) -> None:
    script = tmp_path / "filter.sh"
    script.write_text('#!/bin/sh\necho \'{"acceptance": "allowed", "note": "fine"}\'\n')
    script.chmod(0o755)
    tool = system_tool(tmp_path, ["execute-command"], CommandFilter=str(script))
    assert data(tool.call({"capability": "execute-command", "command": "echo yes"}, make_ctx()))["stdout"] == "yes\n"


class FakePort:
    """A stand-in SessionsPort holding three sessions: the caller, its parent and its child."""

    def __init__(self) -> None:
        now = datetime(2025, 1, 1, tzinfo=UTC)
        turn = {"tag": "UserTurn", "contents": {"userQuery": "find the needle", "userToolResponses": []}}
        answer = {"tag": "LlmTurn", "contents": {"llmResponse": {"responseText": "done", "responseThinking": "hmm"}}}
        self.all = [
            SessionInfo("c0000000-0000-0000-0000-000000000000", "kid", "idle", now, [answer, turn], "child", False),
            SessionInfo("a0000000-0000-0000-0000-000000000000", "me", "running", now, [turn], "self", True),
            SessionInfo("b0000000-0000-0000-0000-000000000000", "dad", "idle", now, [], "parent", False),
        ]
        self.cancelled: list[str] = []

    def sessions(self, scope: str, *, limit: int, contains: str | None = None):
        wanted = {"children-only": {"child"}, "parents-only": {"parent"}}.get(scope, {"child", "parent", "self"})
        found = [s for s in self.all if s.relation in wanted]
        return found[:limit], len(found)

    def session(self, session_id: str, scope: str) -> SessionInfo:
        for s in self.all:
            if s.session_id == session_id:
                if s.relation != "child" and scope == "children-only":
                    raise SessionAccessDenied(session_id)
                return s
        raise SessionNotFound(session_id)

    def tool_call(self, tool_call_id: str, *, wait_seconds: float = 0.0) -> ToolCallInfo:
        if tool_call_id != "call_1":
            raise ToolCallNotFound(tool_call_id)
        status = "completed" if wait_seconds else "running"
        return ToolCallInfo("call_1", "tc-1", "bash_slow", status, None, None, "ok" if wait_seconds else None)

    def running_tool_calls(self) -> list[ToolCallInfo]:
        return [self.tool_call("call_1")]

    def cancel_tool_call(self, tool_call_id: str) -> tuple[bool, str]:
        self.cancelled.append(tool_call_id)
        return True, "running"


def test_session_capabilities_read_through_the_port_within_the_scope(tmp_path: Path) -> None:
    caps = ["list-sessions", "search-sessions", "read-session", "get-session-stats"]
    tool = system_tool(tmp_path, caps, SessionIntrospectionScope="children-only")
    ctx = make_ctx(sessions=FakePort())
    listed = data(tool.call({"capability": "list-sessions"}, ctx))
    assert [(s["agent"], s["isChild"], s["turnCount"]) for s in listed["sessions"]] == [("kid", True, 2)]
    found = data(tool.call({"capability": "search-sessions", "query": "NEEDLE"}, ctx))
    assert found["totalMatches"] == 1 and "find the needle" in found["results"][0]["preview"]
    read = data(
        tool.call(
            {
                "capability": "read-session",
                "session_id": "c0000000-0000-0000-0000-000000000000",
                "include_thinking": True,
            },
            ctx,
        )
    )
    assert read["content"] == "Turn 1: [User] find the needle\nTurn 2: [Thinking] hmm\nTurn 2: [LLM] done"
    denied = tool.call({"capability": "read-session", "session_id": "b0000000-0000-0000-0000-000000000000"}, ctx)
    assert denied.is_error and "is outside the scope 'children-only'" in denied.response
    missing = tool.call({"capability": "read-session", "session_id": "nope"}, ctx)
    assert missing.response == "Error: system_sys_system_info: session 'nope' not found"
    assert data(tool.call({"capability": "get-session-stats"}, ctx))["totalTurnsAcrossAllSessions"] == 2


def test_tool_call_capabilities_and_a_missing_store(tmp_path: Path) -> None:
    tool = system_tool(tmp_path, ["get-tool-call-status", "list-running-tool-calls", "cancel-tool-call"])
    port = FakePort()
    ctx = make_ctx(sessions=port)
    status = data(tool.call({"capability": "get-tool-call-status", "tool_call_id": "call_1"}, ctx))
    assert (status["status"], status["is_final"], status["progress"]) == ("running", False, [])
    waited = data(
        tool.call(
            {
                "capability": "get-tool-call-status",
                "tool_call_id": "call_1",
                "wait_for_completion": True,
                "timeout_seconds": 2,
            },
            ctx,
        )
    )
    assert (waited["status"], waited["result"]) == ("completed", "ok")
    assert data(tool.call({"capability": "list-running-tool-calls"}, ctx))["total"] == 1
    cancelled = data(tool.call({"capability": "cancel-tool-call", "tool_call_id": "call_1", "reason": "slow"}, ctx))
    assert cancelled == {"tool_call_id": "call_1", "cancelled": True, "previous_status": "running"}
    unknown = tool.call({"capability": "get-tool-call-status", "tool_call_id": "call_9"}, ctx)
    assert unknown.response == "Error: system_sys_system_info: this session has no tool call 'call_9'"
    alone = tool.call({"capability": "list-running-tool-calls"}, make_ctx())
    assert alone.response == (
        "Error: system_sys_system_info: list-running-tool-calls needs a session store, and this call has none"
    )
    assert json.dumps(status)


class FakeMailPort:
    """A stand-in MailPort that records what it is asked and refuses mail to ``stranger``."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []

    def send_message(self, to: str, text: str, **options: Any) -> dict[str, Any]:
        if to == "stranger":
            raise SendRefused("not_permitted", "session stranger is outside this agent's mailScope (subtree)")
        self.asked.append(("send", (to, text, options)))
        return {"id": "m-1", "seq": 1, "duplicate": False, "hops": 0, "recipient_status": "idle"}

    def spawn_session(self, agent: str, message: str) -> dict[str, Any]:
        self.asked.append(("spawn", (agent, message)))
        return {"session_id": "s-1", "agent": agent, "status": "running"}

    def watch_session(self, session: str, events: list[str], tool: str | None, ttl_seconds: float) -> dict[str, Any]:
        self.asked.append(("watch", (session, events, tool, ttl_seconds)))
        return {"watch_id": "w-1", "session": session, "events": events, "tool": tool, "expires_at": "x"}

    def unwatch_session(self, session: str) -> dict[str, Any]:
        return {"session": session, "removed": 1}

    def wait(self, calls: Any, timeout_seconds: float, cancel: Any = None) -> WaitOutcome:
        self.asked.append(("wait", (calls, timeout_seconds)))
        if calls == ["call_gone"]:
            raise ToolCallNotFound("call_gone")
        return WaitOutcome(woken_by="timeout", tool_call_id=None, unread=0)


MAIL = ["send-message", "spawn-session", "watch-session", "unwatch-session", "wait"]


def test_mail_capabilities_pass_their_arguments_to_the_port(tmp_path: Path) -> None:
    tool, port = system_tool(tmp_path, MAIL), FakeMailPort()
    ctx = make_ctx(timeout=20.0, sessions=port)
    sent = tool.call({"capability": "send-message", "to": "s-2", "text": "hi", "expects_reply": True}, ctx)
    assert data(sent)["recipient_status"] == "idle"
    tool.call({"capability": "spawn-session", "agent": "kid", "message": "go"}, ctx)
    tool.call({"capability": "watch-session", "session": "s-2"}, ctx)
    tool.call({"capability": "wait", "for": "any-call", "timeout_seconds": 60}, ctx)
    tool.call({"capability": "wait"}, ctx)
    assert port.asked == [
        ("send", ("s-2", "hi", {"in_reply_to": None, "expects_reply": True, "interrupt": False})),
        ("spawn", ("kid", "go")),
        ("watch", ("s-2", ["run.stopped"], None, 600.0)),
        ("wait", ("any-call", 20.0)),  # never longer than the call's own time limit
        ("wait", (None, 20.0)),
    ]
    properties = tool.parameters["properties"]
    assert {"to", "text", "in_reply_to", "agent", "message", "session", "events", "tool", "for"} <= set(properties)


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"capability": "send-message", "text": "hi"}, 'the argument "to" is required'),
        (
            {"capability": "send-message", "to": "s-2", "text": "hi", "interrupt": "yes"},
            '"interrupt" must be true or false',
        ),
        ({"capability": "send-message", "to": "stranger", "text": "hi"}, "not_permitted: session stranger is outside"),
        ({"capability": "spawn-session", "agent": "kid"}, 'the argument "message" is required'),
        ({"capability": "watch-session", "session": "s-2", "events": []}, '"events" must be a non-empty list'),
        ({"capability": "watch-session", "session": "s-2", "ttl_seconds": -1}, '"ttl_seconds" must be a number'),
        ({"capability": "unwatch-session"}, 'the argument "session" is required'),
        ({"capability": "wait", "for": "everything"}, '"for" must be "mail", "any-call" or a non-empty list'),
        ({"capability": "wait", "for": ["call_gone"]}, "no tool call call_gone in this session"),
    ],
)
def test_mail_capability_errors_name_what_is_wrong(tmp_path: Path, arguments: dict, message: str) -> None:
    result = system_tool(tmp_path, MAIL).call(arguments, make_ctx(sessions=FakeMailPort()))
    assert result.is_error and result.response.startswith(f"Error: system_sys_system_info: {message}")


def test_read_session_shows_a_tool_response_as_the_model_read_it(tmp_path: Path) -> None:
    """One stored response, one text: what read-session shows of a tool's answer is the tool
    message the model was sent (docs/sessions.md §1.5), media labels included."""
    from agentfiles.document import openai_messages

    picture = base64.b64encode(PNG).decode()
    responses = [
        {
            "type": "mixed",
            "parts": [
                {"type": "text", "text": "a dot"},
                {"type": "media", "mimeType": "image/png", "base64Data": picture, "filename": "dot.png"},
            ],
        },
        {"type": "media", "mimeType": "audio/wav", "base64Data": "AAAA"},
        {"type": "json", "content": {"n": 1, "é": [True, None]}},
        {"_userToolResponse": "42 files"},
    ]
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": f"tool_{n}", "arguments": "{}"}}
        for n in range(len(responses))
    ]
    turns = [
        {
            "tag": "UserTurn",
            "contents": {"userQuery": None, "userToolResponses": list(map(list, zip(calls, responses, strict=True)))},
        },
        {"tag": "LlmTurn", "contents": {"llmResponse": {"responseText": ""}, "llmToolCalls": calls}},
        {"tag": "UserTurn", "contents": {"userQuery": "look", "userToolResponses": []}},
    ]
    port = FakePort()
    port.all[0] = SessionInfo(
        port.all[0].session_id, "kid", "idle", datetime(2025, 1, 1, tzinfo=UTC), turns, "child", False
    )
    tool = system_tool(tmp_path, ["read-session"])
    read = data(
        tool.call(
            {"capability": "read-session", "session_id": port.all[0].session_id, "include_tool_responses": True},
            make_ctx(sessions=port),
        )
    )
    shown = [line.partition(": ")[2] for line in read["content"].split("\nTurn ") if "[Tool]" in line]
    sent = [m for m in openai_messages({"turns": turns}, "") if m["role"] == "tool"]
    assert shown == [f"[Tool] tool_{n}: {m['content']}" for n, m in enumerate(sent)]
    assert sent[0]["content"] == f"a dot\n[Media: image/png, dot.png, {len(picture) * 3 // 4} bytes]"
    assert sent[1]["content"] == "[Media: audio/wav, unnamed, 3 bytes]"
