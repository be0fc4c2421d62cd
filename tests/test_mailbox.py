"""Mail, messages while busy, interrupts, pause, resume and cancel (issue: mailbox, acceptance 1-4)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path

from devtools.mockllm import MockLlmServer
from tests.harness import PROCESS_TIMEOUT, Server, wait_until, write_agent, write_tool

SCRIPT = {
    "rules": [
        {
            "when": {"last_contains": "start", "last_role": "user"},
            "reply": {"tool_calls": [{"name": "bash_slow", "arguments": {}}]},
        },
        {
            "when": {"last_contains": "background", "last_role": "user"},
            "reply": {"tool_calls": [{"name": "bash_sleeper", "arguments": {}}]},
        },
        {"when": {"last_contains": "interrupting"}, "reply": {"content": "ok, you interrupted me"}},
        {"reply": {"content": "answered: {last_content}"}},
    ]
}


def _release(tmp_path: Path) -> None:
    """Let the held slow tool go on (see :func:`_setup`)."""
    (tmp_path / "slow.released").touch()


def _slow_tool_started(tmp_path: Path) -> None:
    """Wait until the slow tool runs."""
    wait_until(lambda: (tmp_path / "slow.started").exists(), timeout=PROCESS_TIMEOUT)


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def _setup(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    *,
    held: bool = False,
    **extra,
) -> tuple[Server, MockLlmServer]:
    """The busy agent's server and model. With ``held``, the slow tool, once started, waits for
    :func:`_release` before it goes on: what a test posts in between reaches a run whose tool
    is surely running, however loaded the machine."""
    llm = llm_server(SCRIPT)
    tools = tmp_path / "tools"
    if not held:
        _release(tmp_path)
    write_tool(
        tools,
        "slow",
        {"slug": "slow", "description": "slow", "args": []},
        f"touch {tmp_path}/slow.started; while [ ! -e {tmp_path}/slow.released ]; do sleep 0.05; done;"
        " sleep 1.5; echo slow result",
    )
    write_tool(
        tools,
        "sleeper",
        {"slug": "sleeper", "description": "sleeps", "args": []},
        f"echo $$ > {tmp_path}/sleeper.pid; sleep 60; echo woke",
    )
    agent = write_agent(
        tmp_path,
        "busy",
        llm.url,
        toolDirectory="tools",
        executionMode="asynchronous",
        toolCallPolicyConfig={
            "default": {"tag": "runSync"},
            "rules": [{"tool": "bash_sleeper", "disposition": {"tag": "runAsync"}}],
        },
        **extra,
    )
    return start_server([agent]), llm


def _transcript_is_valid(messages: list[dict]) -> bool:
    """Every assistant tool call is answered by exactly one tool message before any user message."""
    expected: list[str] = []
    for message in messages:
        if message["role"] == "assistant":
            if expected:
                return False
            expected = [c["id"] for c in message.get("tool_calls", [])]
        elif message["role"] == "tool":
            if message["tool_call_id"] not in expected:
                return False
            expected.remove(message["tool_call_id"])
        elif message["role"] == "user" and expected:
            return False
    return not expected


def _text(message: dict) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "\n".join(p.get("text", "") for p in content)


def test_messages_posted_during_a_run_reach_the_model_once_in_order(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server, held=True)
    created = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "start"}).json()
    sid = created["session_id"]
    wait_until(lambda: len(llm.requests) == 1)
    _slow_tool_started(tmp_path)
    for text in ("first note", "second note", "third note"):
        answer = _post(server, f"/v1/sessions/{sid}/messages", {"prompt": text})
        assert answer.status_code == 202, answer.text
        assert answer.json()["status"] == "running"
    _release(tmp_path)
    final = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert final["status"] == "idle"
    every_text = [_text(m) for r in llm.requests for m in r["messages"] if m["role"] == "user"]
    last = llm.requests[-1]["messages"]
    assert _transcript_is_valid(last)
    folded = _text(last[-1])
    assert folded.index("first note") < folded.index("second note") < folded.index("third note")
    for text in ("first note", "second note", "third note"):
        # exactly once in the conversation the model was shown last
        assert sum(_text(m).count(text) for m in last if m["role"] == "user") == 1
    assert len(llm.requests) == 2, every_text
    # the tool result came before the folded mail, in the same turn
    assert last[-2]["role"] == "tool" and last[-2]["content"] == "slow result\n"
    mail = server.client.get(f"/v1/sessions/{sid}/mail").json()["mail"]
    assert [m["seq"] for m in mail] == [1, 2, 3]
    assert server.client.get(f"/v1/sessions/{sid}/mail?unread=true").json()["mail"] == []


def test_mail_is_idempotent_and_checked(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server)
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "hello", "run": "none"}).json()["session_id"]
    pause = _post(server, f"/v1/sessions/{sid}/mail", {"body": {"tag": "control", "message": {"tag": "pause"}}})
    assert pause.status_code == 202 and pause.json()["duplicate"] is False
    assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "paused"
    mail_id = str(uuid.uuid4())
    body = {"id": mail_id, "body": {"tag": "userMessage", "query": "are you there?"}}
    first = _post(server, f"/v1/sessions/{sid}/mail", body)
    again = _post(server, f"/v1/sessions/{sid}/mail", body)
    assert first.status_code == 202 and again.status_code == 202
    assert first.json() == {"id": mail_id, "seq": 2, "duplicate": False}
    assert again.json() == {"id": mail_id, "seq": 2, "duplicate": True}
    # paused and without resumeOnAnyMail: the message waits
    assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "paused"
    unread = server.client.get(f"/v1/sessions/{sid}/mail?unread=true").json()["mail"]
    assert [(m["seq"], m["body"]["tag"], m["from"]) for m in unread] == [
        (2, "userMessage", {"tag": "user", "owner": None})
    ]
    for bad in (
        {"body": {"tag": "shout"}},
        {"body": {"tag": "control", "message": {"tag": "explode"}}},
        {"body": {"tag": "userMessage"}},
        {"body": {"tag": "toolCallFinished"}},
        {"body": {"tag": "agentMessage", "text": "x"}, "priority": "urgent"},
    ):
        answer = _post(server, f"/v1/sessions/{sid}/mail", bad)
        assert answer.status_code == 400 and answer.json()["error"] == "bad_request", bad
    assert _post(server, f"/v1/sessions/{uuid.uuid4()}/mail", body).status_code == 404
    resumed = _post(server, f"/v1/sessions/{sid}/resume?wait=true")
    assert resumed.json()["status"] == "idle"
    user_texts = [_text(m) for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    # the head user turn had not been answered yet: the mail joined it
    assert user_texts == [user_texts[0]] and user_texts[0].startswith("hello\n\n[mail ")
    assert user_texts[0].endswith("are you there?")
    assert len(llm.requests) == 1


def test_pause_stops_the_run_and_resume_continues(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server, held=True)
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "start"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1)
    _slow_tool_started(tmp_path)
    paused = _post(server, f"/v1/sessions/{sid}/pause")
    assert paused.status_code in (200, 202)
    _release(tmp_path)
    view = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert view["status"] == "paused"
    # the step that was going on finished: the tool result is stored, the model not asked again
    assert view["session"]["turns"][0]["tag"] == "UserTurn"
    assert len(llm.requests) == 1
    resumed = _post(server, f"/v1/sessions/{sid}/resume?wait=true")
    assert resumed.status_code == 200 and resumed.json()["status"] == "idle"
    assert len(llm.requests) == 2


def test_cancel_stops_the_run_and_its_background_calls(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server)
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "background job"}).json()["session_id"]
    pid_file = tmp_path / "sleeper.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=30)
    pid = int(pid_file.read_text())
    view = server.client.get(f"/v1/sessions/{sid}").json()
    assert view["status"] == "running"
    assert view["session"]["turns"][0]["contents"]["trackedCalls"][0]["tcState"] == "Running"
    cancelled = _post(server, f"/v1/sessions/{sid}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "ready"

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, timeout=15)
    view = server.client.get(f"/v1/sessions/{sid}").json()
    head = view["session"]["turns"][0]
    assert head["tag"] == "UserTurn"
    assert head["contents"]["userToolResponses"][0][1] == "async tool call was cancelled"
    # the model hears about it on the next run
    resumed = _post(server, f"/v1/sessions/{sid}/resume?wait=true").json()
    assert resumed["status"] == "idle"
    tool_messages = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert tool_messages[-1]["content"] == "async tool call was cancelled"


def test_an_interrupt_detaches_a_slow_tool_and_its_late_result_comes_later(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server, held=True)
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "start"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1)
    _slow_tool_started(tmp_path)
    interrupted = _post(server, f"/v1/sessions/{sid}/messages", {"prompt": "interrupting you", "interrupt": True})
    assert interrupted.status_code == 202
    # the model is asked again at once, with a placeholder for the detached call
    wait_until(lambda: len(llm.requests) >= 2, timeout=10)
    second = llm.requests[1]["messages"]
    assert _transcript_is_valid(second)
    tool_message = [m for m in second if m["role"] == "tool"][-1]
    assert json.loads(tool_message["content"])["status"] == "running"
    assert "interrupting you" in _text(second[-1])
    _release(tmp_path)
    # then the late result arrives as mail, wakes the session and reaches the model
    wait_until(
        lambda: any("slow result" in _text(m) for r in llm.requests[2:] for m in r["messages"] if m["role"] == "user"),
        timeout=30,
    )
    final = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert final["status"] == "idle"
    assert _transcript_is_valid(llm.requests[-1]["messages"])
    mail = server.client.get(f"/v1/sessions/{sid}/mail").json()["mail"]
    assert [m["body"]["tag"] for m in mail] == ["userMessage", "toolCallFinished"]
    assert mail[1]["body"]["result"] == "slow result\n"


def test_mail_in_tool_result_and_resume_on_any_mail(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(
        tmp_path, llm_server, start_server, held=True, mailInToolResult=True, resumeOnAnyMail=True
    )
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "start"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1)
    _slow_tool_started(tmp_path)
    assert _post(server, f"/v1/sessions/{sid}/messages", {"prompt": "a note for the tool"}).status_code == 202
    _release(tmp_path)
    assert server.client.get(f"/v1/sessions/{sid}?wait=true").json()["status"] == "idle"
    last = llm.requests[-1]["messages"]
    # no user message after the tool results: the mail rides on the last tool result
    assert last[-1]["role"] == "tool"
    assert last[-1]["content"].startswith("slow result\n\n\n[mail ") and last[-1]["content"].endswith(
        "a note for the tool"
    )
    assert _transcript_is_valid(last)
    # paused, but resumeOnAnyMail: a user message wakes it
    _post(server, f"/v1/sessions/{sid}/pause")
    assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "paused"
    woke = _post(server, f"/v1/sessions/{sid}/messages", {"prompt": "wake up"})
    assert woke.status_code == 202
    assert server.client.get(f"/v1/sessions/{sid}?wait=true").json()["status"] == "idle"
    assert "wake up" in _text(llm.requests[-1]["messages"][-1])


def test_a_background_call_whose_worker_died_is_reported_orphaned(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server)
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "background job"}).json()["session_id"]
    wait_until(lambda: (tmp_path / "sleeper.pid").exists(), timeout=30)
    os.killpg(server.process.proc.pid, 9)
    server.process.proc.wait()
    os.kill(int((tmp_path / "sleeper.pid").read_text()), 9)
    restarted = start_server([tmp_path / "busy.json"], db=server.db, env={"AGENTS_LEASE_SECONDS": "1"})
    view = restarted.client.get(f"/v1/sessions/{sid}").json()
    assert view["status"] == "ready"
    resumed = _post(restarted, f"/v1/sessions/{sid}/resume?wait=true").json()
    assert resumed["status"] == "idle"
    tool_message = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert "orphaned" in tool_message["content"]


def test_cancel_attached_keeps_the_run_and_wake_on_decides_who_wakes(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server, wakeOn=["tool"])
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "background job"}).json()["session_id"]
    wait_until(lambda: (tmp_path / "sleeper.pid").exists(), timeout=30)
    attached = _post(server, f"/v1/sessions/{sid}/cancel-attached")
    assert attached.status_code in (200, 202)
    # the run goes on: the cancelled call's result is the cancellation, and the model answers
    final = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert final["status"] == "idle"
    tool_message = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]
    assert tool_message["content"] == "async tool call was cancelled"
    # user mail does not wake an agent whose wakeOn is only "tool": it waits for the next run
    before = len(llm.requests)
    assert (
        _post(server, f"/v1/sessions/{sid}/mail", {"body": {"tag": "userMessage", "query": "psst"}}).status_code == 202
    )
    assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "idle"
    assert len(llm.requests) == before
    woke = _post(server, f"/v1/sessions/{sid}/resume?wait=true").json()
    assert woke["status"] == "idle" and len(llm.requests) == before + 1
    assert "psst" in _text(llm.requests[-1]["messages"][-1])


def test_a_message_wakes_a_session_with_tool_calls_left_to_run_and_mail_ids_are_per_session(
    tmp_path, llm_server, start_server
) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server)
    sid = _post(server, "/v1/sessions?wait=true", {"agent": "busy", "prompt": "start", "run": "step"}).json()[
        "session_id"
    ]
    assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "ready"
    woke = _post(server, f"/v1/sessions/{sid}/messages", {"prompt": "carry on"})
    assert woke.status_code in (200, 202)
    final = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert final["status"] == "idle"
    last = llm.requests[-1]["messages"]
    assert _transcript_is_valid(last) and "carry on" in _text(last[-1])
    other = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "x", "run": "none"}).json()["session_id"]
    mail_id = str(uuid.uuid4())
    body = {"id": mail_id, "body": {"tag": "control", "message": {"tag": "pause"}}}
    assert _post(server, f"/v1/sessions/{sid}/mail", body).json()["duplicate"] is False
    assert _post(server, f"/v1/sessions/{other}/mail", body).json() == {"id": mail_id, "seq": 1, "duplicate": False}


def test_stop_run_mail_reports_a_cancelled_background_call_once(tmp_path, llm_server, start_server) -> None:
    server, llm = _setup(tmp_path, llm_server, start_server)
    sid = _post(server, "/v1/sessions", {"agent": "busy", "prompt": "background job"}).json()["session_id"]
    wait_until(lambda: (tmp_path / "sleeper.pid").exists(), timeout=30)
    stop = {"body": {"tag": "control", "message": {"tag": "stopRun"}}}
    assert _post(server, f"/v1/sessions/{sid}/mail", stop).status_code == 202
    view = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert view["status"] == "ready"
    import time as _time

    _time.sleep(2)
    assert len(llm.requests) == 1  # no new run was woken by a late result
    assert server.client.get(f"/v1/sessions/{sid}/mail?unread=true").json()["mail"] == []
