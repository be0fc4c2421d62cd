"""``runAsync`` with ``attachSeconds`` (issue 16, acceptance 2): 0 answers the model at once with
a placeholder, N detaches a call still running after N seconds; a detached call's result comes
back as ``toolCallFinished`` mail, once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.harness import Server, wait_until, write_agent, write_tool

SCRIPT = {"rules": [
    # the folded mail names the call ("[mail ...: tool call call_brew (bash_brew) completed]")
    {"when": {"last_role": "user", "last_contains": "call_brew"}, "reply": {"content": "late: {last_content}"}},
    {"when": {"last_role": "user", "last_contains": "brew"},
     "reply": {"content": "", "tool_calls": [{"name": "bash_brew", "arguments": {}, "id": "call_brew"}]}},
    {"when": {"last_role": "tool", "last_contains": "detached"}, "reply": {"content": "brewing in the background"}},
    {"when": {"last_role": "tool"}, "reply": {"content": "brewed at once: {last_content}"}},
    {"reply": {"content": "nothing to do"}},
]}


def _setup(tmp_path: Path, llm_server, start_server, attach: float) -> tuple[Server, object, Path]:
    llm = llm_server(SCRIPT)
    gate = tmp_path / "go"
    # the tool ends only once the test opens the gate: no race with the clock decides the outcome
    write_tool(tmp_path / "tools", "brew", {"slug": "brew", "description": "brews", "args": []},
               f"while [ ! -e {gate} ]; do sleep 0.05; done; echo brewed")
    agent = write_agent(
        tmp_path, "brewer", llm.url, toolDirectory="tools", executionMode="asynchronous",
        toolCallPolicyConfig={"default": {"tag": "runSync"}, "rules": [
            {"tool": "bash_brew", "disposition": {"tag": "runAsync", "attachSeconds": attach}}]},
    )
    return start_server([agent]), llm, gate


def _post(server: Server, path: str, body: dict):
    return server.client.post(path, content=json.dumps(body))


def _finished_mail(server: Server, sid: str) -> list[dict]:
    mail = server.client.get(f"/v1/sessions/{sid}/mail").json()["mail"]
    return [m for m in mail if m["body"]["tag"] == "toolCallFinished"]


def _placeholder(request: dict) -> dict:
    [tool_message] = [m for m in request["messages"] if m["role"] == "tool"]
    return json.loads(tool_message["content"])


def _check_late_result(server: Server, llm, sid: str, gate: Path) -> None:
    asked = len(llm.requests)
    gate.touch()
    wait_until(lambda: len(llm.requests) > asked, timeout=30)
    final = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert final["status"] == "idle"
    [finished] = _finished_mail(server, sid)
    assert finished["body"]["providerCallId"] == "call_brew"
    assert finished["body"]["state"] == "Completed" and finished["body"]["result"] == "brewed\n"
    last = llm.requests[-1]["messages"]
    # the model reads the result once, folded from the mail; the placeholder stays in history
    assert sum("brewed" in (m["content"] or "") for m in last if m["role"] == "user") == 1
    assert len(llm.requests) == asked + 1
    # nothing else arrives later: the result was delivered once
    time.sleep(1)
    assert len(_finished_mail(server, sid)) == 1 and len(llm.requests) == asked + 1


def test_attach_seconds_zero_answers_the_model_at_once(tmp_path, llm_server, start_server) -> None:
    server, llm, gate = _setup(tmp_path, llm_server, start_server, 0)
    view = _post(server, "/v1/sessions?wait=true&timeout=30", {"agent": "brewer", "prompt": "brew"}).json()
    # the run stopped while the tool still waits on its gate
    assert view["status"] == "idle" and not gate.exists()
    assert view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "brewing in the background"
    shown = _placeholder(llm.requests[1])
    assert shown["status"] == "running" and shown["tool_call_id"] == "call_brew"
    assert shown["detached"] == "detached at once (attachSeconds 0)"
    assert _finished_mail(server, view["session_id"]) == []
    _check_late_result(server, llm, view["session_id"], gate)


def test_attach_seconds_two_detaches_a_call_still_running(tmp_path, llm_server, start_server) -> None:
    server, llm, gate = _setup(tmp_path, llm_server, start_server, 2)
    sid = _post(server, "/v1/sessions", {"agent": "brewer", "prompt": "brew"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1, timeout=30)
    first = time.monotonic()
    wait_until(lambda: len(llm.requests) == 2, timeout=30)
    assert time.monotonic() - first >= 1.9  # attached for two seconds before the model is answered
    assert _placeholder(llm.requests[1])["detached"] == "still running after 2s"
    view = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert view["status"] == "idle" and not gate.exists()
    _check_late_result(server, llm, sid, gate)


def test_attach_seconds_two_keeps_a_quick_call_attached(tmp_path, llm_server, start_server) -> None:
    server, llm, gate = _setup(tmp_path, llm_server, start_server, 2)
    gate.touch()
    view = _post(server, "/v1/sessions?wait=true&timeout=30", {"agent": "brewer", "prompt": "brew"}).json()
    assert view["status"] == "idle"
    assert view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"] == "brewed at once: brewed\n"
    assert _finished_mail(server, view["session_id"]) == []


@pytest.mark.parametrize("attach", [-1, "soon"])
def test_a_bad_attach_seconds_refuses_the_agent(tmp_path, attach) -> None:
    from agentfiles.loader import AgentLoadError, load_agent_tree

    agent = write_agent(tmp_path, "brewer", "http://127.0.0.1:1/v1", toolCallPolicyConfig={
        "default": {"tag": "runAsync", "attachSeconds": attach}})
    with pytest.raises(AgentLoadError, match="attachSeconds"):
        load_agent_tree(agent)
