"""Skills end to end (issue 15, acceptance 3): skills from a directory and from a local git
repository; the scripted model lists, describes, enables (the script's tool is in the next LLM
request and not before), runs and disables a skill in a session over HTTP; the enabled set, read
from the turns, survives a server restart and a fork."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.skillfiles import git_repo_with_skill, write_skill

SCRIPT_TOOL = "skill_pdf-tools_extract-text"
NOTES_TOOL = "skill_notes_extract-text"


def _on(word: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "when": {"last_role": "user", "last_contains": word},
        "reply": {"tool_calls": [{"name": name, "arguments": arguments}]},
    }


SCRIPT = {
    "rules": [
        _on("LIST", "skill_list"),
        _on("DESCRIBE", "skill_describe_pdf-tools"),
        _on("ENABLE", "skill_enable_pdf-tools"),
        _on("RUN", SCRIPT_TOOL, file="report.pdf"),
        _on("DISABLE", "skill_disable_pdf-tools"),
        {"when": {"last_role": "tool"}, "reply": {"content": "done: {last_content}"}},
        {"reply": {"content": "ok"}},
    ]
}


def _offered(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def _say(server: Server, session_id: str | None, text: str) -> str:
    if session_id is None:
        answer = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "skilled", "prompt": text}))
    else:
        answer = server.client.post(
            f"/v1/sessions/{session_id}/messages?wait=true", content=json.dumps({"prompt": text})
        )
    assert answer.status_code in (200, 201), answer.text
    assert answer.json()["status"] == "idle", answer.json()["status_detail"]
    return answer.json()["session_id"]


def _last_result(server: Server, session_id: str) -> Any:
    turns = server.client.get(f"/v1/sessions/{session_id}").json()["session"]["turns"]
    user = next(turn for turn in turns if turn["tag"] == "UserTurn" and turn["contents"].get("userToolResponses"))
    return user["contents"]["userToolResponses"][-1][1]


def test_list_describe_enable_run_disable_across_a_restart_and_a_fork(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    write_skill(tmp_path / "skills", "pdf-tools")
    repo = git_repo_with_skill(tmp_path / "repo", "notes")
    llm = llm_server(SCRIPT)
    agent = write_agent(
        tmp_path,
        "skilled",
        llm.url,
        skillSources=[
            {"tag": "SkillDirectory", "contents": "skills"},
            {"tag": "SkillGitRepo", "contents": {"url": str(repo), "subdir": "skills"}},
        ],
        autoEnableSkills=["notes"],
    )
    env = {"AGENTS_SKILLS_CACHE": str(tmp_path / "cache")}
    server = start_server([agent], env=env)
    assert SCRIPT_TOOL in server.client.get("/v1/agents/skilled").json()["tools"]

    sid = _say(server, None, "LIST")
    listed = _last_result(server, sid)["content"]["skills"]
    assert [(s["name"], s["tools"]) for s in listed] == [("pdf-tools", [SCRIPT_TOOL]), ("notes", [NOTES_TOOL])]
    first = _offered(llm.requests[0])
    assert SCRIPT_TOOL not in first and NOTES_TOOL in first and "skill_enable_pdf-tools" in first

    _say(server, sid, "DESCRIBE")
    assert "Enable the skill" in _last_result(server, sid)["content"]["instructions"]

    llm.reset()
    _say(server, sid, "ENABLE")
    asked_to_enable, after_enable = llm.requests
    assert SCRIPT_TOOL not in _offered(asked_to_enable)
    assert SCRIPT_TOOL in _offered(after_enable)

    _say(server, sid, "RUN")
    assert _last_result(server, sid) == "v1 text of report.pdf\n"

    server.stop()
    server = start_server([agent], db=server.db, env=env)
    llm.reset()
    _say(server, sid, "RUN")
    assert SCRIPT_TOOL in _offered(llm.requests[0])
    fork = server.client.post(f"/v1/sessions/{sid}/fork", content="{}").json()["session_id"]
    llm.reset()
    _say(server, fork, "RUN")
    assert SCRIPT_TOOL in _offered(llm.requests[0]) and _last_result(server, fork) == "v1 text of report.pdf\n"

    _say(server, sid, "DISABLE")
    llm.reset()
    _say(server, sid, "RUN")
    assert SCRIPT_TOOL not in _offered(llm.requests[0])
    assert _last_result(server, sid) == (f"Error: tool {SCRIPT_TOOL} is not active: call skill_enable_pdf-tools first")
    # the fork keeps its own state
    llm.reset()
    _say(server, fork, "hello")
    assert SCRIPT_TOOL in _offered(llm.requests[0])
