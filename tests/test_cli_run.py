"""``agents-exe run`` as agents-exe's scripts call it, ``check --tools``, and config discovery
(issue 17, acceptance 1, 4, 5 and 6), through the installed console scripts as real processes
against the scripted model."""

from __future__ import annotations

import json
import os
import pty
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentfiles.document import status_of
from agentfiles.document_shape import document_problem
from devtools.mockllm import MockLlmServer
from tests.harness import FIXTURES, Server, base_env, write_agent, write_tool

BIN = Path(sys.executable).parent

SCRIPT = {
    "rules": [
        {"when": {"last_contains": "deploy"},
         "reply": {"content": "asking first", "tool_calls": [{"name": "bash_approve", "arguments": {"what": "prod"}}]}},
        {"when": {"last_role": "tool"}, "reply": {"content": "done: {last_content}"}},
        {"reply": {"content": "Fix the parser\n\nanswer to: {last_content}", "reasoning": "let me think"}},
    ]
}


def exe(cwd: Path, *argv: str, stdin: str | None = None, program: str = "agents-exe",
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script ``program`` run in ``cwd``, stdout and stderr captured, with the log level
    a user has (``base_env`` asks for the info logs the server tests read)."""
    return subprocess.run(
        [str(BIN / program), *argv], cwd=cwd, env=base_env(**{"AGENTS_LOG_LEVEL": "WARNING", **(env or {})}),
        input=stdin,
        capture_output=True, text=True, timeout=120,
    )


def deferring_agent(directory: Path, llm: MockLlmServer, slug: str = "deployer") -> Path:
    """An agent whose ``bash_approve`` calls are deferred to the outside world."""
    write_tool(directory / "tools", "approve",
               {"slug": "approve", "description": "approve a deployment",
                "args": [{"name": "what", "description": "what to deploy", "type": "string",
                          "backing_type": "string", "arity": "single", "mode": "dashdashspace"}]},
               "echo approved")
    return write_agent(directory, slug, llm.url, toolDirectory="tools",
                       toolCallPolicyConfig={"rules": [{"tool": "bash_approve", "disposition": {"tag": "defer"}}]})


def test_run_prints_exactly_the_answer_writes_the_session_file_and_continues_it(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "writer", llm.url)
    (tmp_path / "task.txt").write_text("Write the commit message\n")
    first = exe(tmp_path, "--agent-file", str(agent), "run", "--session-file", "s.json", "-f", "task.txt")
    assert first.returncode == 0, first.stderr
    # the prompt is the file and a newline; the answer is printed with one more
    assert first.stdout == "Fix the parser\n\nanswer to: Write the commit message\n\n\n"
    document = json.loads((tmp_path / "s.json").read_text())
    assert document_problem(document) is None
    assert [turn["tag"] for turn in document["turns"]] == ["LlmTurn", "UserTurn"]
    assert document["turns"][1]["contents"]["userQuery"] == "Write the commit message\n\n"
    assert status_of(document) == "idle"

    # a second run continues the same session, global options after the command this time
    second = exe(tmp_path, "run", "--agent-file", str(agent), "--session-file", "s.json", "-p", "and again")
    assert second.returncode == 0, second.stderr
    assert second.stdout == "Fix the parser\n\nanswer to: and again\n\n"
    again = json.loads((tmp_path / "s.json").read_text())
    assert again["sessionId"] == document["sessionId"]
    assert [turn["tag"] for turn in again["turns"]] == ["LlmTurn", "UserTurn", "LlmTurn", "UserTurn"]
    assert again["turns"][2:] == document["turns"]
    # the model saw the whole conversation
    assert [m["role"] for m in llm.requests[-1]["messages"]] == ["system", "user", "assistant", "user"]

    # --thinking stdout puts the reasoning first; nothing else joins the answer
    thinking = exe(tmp_path, "--agent-file", str(agent), "run", "--thinking", "stdout", "-p", "x")
    assert thinking.stdout == "let me think\nFix the parser\n\nanswer to: x\n\n"


def test_a_session_file_of_agents_exe_round_trips_through_run(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "writer", llm.url)
    fixture = FIXTURES / "sessions" / "turn-v0.001.json"
    original = json.loads(fixture.read_text())
    (tmp_path / "kept.json").write_text(fixture.read_text())
    done = exe(tmp_path, "--agent-file", str(agent), "run", "--session-file", "kept.json", "-p", "more")
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "kept.json").read_text())
    # the turns agents-exe wrote come back exactly, under the new ones
    assert written["turns"][2:] == original["turns"]
    assert written["sessionId"] == original["sessionId"]


def test_run_stops_on_deferred_calls_with_the_paused_report(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    agent = deferring_agent(tmp_path, llm)
    paused = exe(tmp_path, "--agent-file", str(agent), "run", "--session-file", "d.json", "-p", "deploy it")
    assert paused.returncode == 0, paused.stderr
    report = json.loads(paused.stdout)
    assert report["status"] == "paused"
    assert report["reason"] == "waiting for deferred tool calls"
    [call] = report["deferred_calls"]
    assert call["tool"] == "bash_approve"
    assert call["tool_call_id"].startswith("call_")
    document = json.loads((tmp_path / "d.json").read_text())
    assert document["sessionId"] == report["session_id"]
    assert document["turns"][0]["tag"] == "PartialUserTurn"

    # the token answers through the session group, on the same database; resume finishes it
    (tmp_path / "result.json").write_text('{"type": "text", "content": "yes, go"}')
    completed = exe(tmp_path, "session", "complete", call["continuation_token"], "result.json")
    assert completed.returncode == 0, completed.stderr
    assert "turn: complete" in completed.stdout
    resumed = exe(tmp_path, "--agent-file", str(agent), "session", "resume", report["session_id"])
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.endswith("\ndone: yes, go\n")


DETACHING = {"rules": [
    {"when": {"last_role": "user", "last_contains": "call_brew"}, "reply": {"content": "late: {last_content}"}},
    {"when": {"last_role": "user", "last_contains": "brew"},
     "reply": {"content": "", "tool_calls": [{"name": "bash_brew", "arguments": {}, "id": "call_brew"}]}},
    {"when": {"last_role": "tool", "last_contains": "detached"}, "reply": {"content": "brewing in the background"}},
]}


def test_run_waits_for_the_calls_it_detached_and_prints_the_answer_to_their_results(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(DETACHING)
    write_tool(tmp_path / "tools", "brew", {"slug": "brew", "description": "brews", "args": []},
               "sleep 1; echo brewed")
    agent = write_agent(
        tmp_path, "brewer", llm.url, toolDirectory="tools", executionMode="asynchronous",
        toolCallPolicyConfig={"default": {"tag": "runSync"}, "rules": [
            {"tool": "bash_brew", "disposition": {"tag": "runAsync", "attachSeconds": 0}}]},
    )
    done = exe(tmp_path, "--agent-file", str(agent), "run", "--session-file", "b.json", "-p", "brew")
    assert done.returncode == 0, done.stderr
    # the model read the placeholder first, then the result the detached call mailed
    assert done.stdout.startswith("late: [mail ") and done.stdout.endswith("(bash_brew) completed]\nbrewed\n\n")
    assert "Traceback" not in done.stderr and "cannot schedule" not in done.stderr
    assert [r["messages"][-1]["role"] for r in llm.requests] == ["user", "tool", "user"]
    document = json.loads((tmp_path / "b.json").read_text())
    assert status_of(document) == "idle" and document["turns"][0]["tag"] == "LlmTurn"
    # nothing is left running for a server to recover: the session and its call have ended
    with sqlite3.connect(tmp_path / "agents-server.db") as db:
        assert db.execute("SELECT status, run_owner FROM sessions_app_session").fetchall() == [("idle", None)]
        assert db.execute("SELECT state FROM sessions_app_backgroundcall").fetchall() == [("completed",)]


def test_the_sqq_flow_contracts_hold_as_written(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    config = write_agent(tmp_path, "sqq", llm.url)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (tmp_path / "instruction.txt").write_text("Make the change")
    check = exe(tmp_path, "--agent-file", str(config), "check")
    assert check.returncode == 0, check.stderr
    run = exe(tmp_path, "--agent-file", str(config), "run", "--session-file", str(sessions / "gh-1.session.json"),
              "-f", str(tmp_path / "instruction.txt"))
    assert run.returncode == 0, run.stderr
    assert run.stdout == "Fix the parser\n\nanswer to: Make the change\n\n"
    printed = exe(tmp_path, "session-print", str(sessions / "gh-1.session.json"))
    assert printed.returncode == 0, printed.stderr
    assert "Make the change" in printed.stdout and "answer to: Make the change" in printed.stdout

    broken = tmp_path / "broken.json"
    broken.write_text('{"tag": "OpenAIAgentDescription", "contents": {"slug": 3}}')
    refused = exe(tmp_path, "--agent-file", str(broken), "check")
    assert refused.returncode != 0
    assert refused.stdout == ""


def test_run_errors_are_one_line_with_the_documented_codes(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server({"rules": [{"reply": {"status": 500, "error": "the model is down"}}]})
    agent = write_agent(tmp_path, "failing", llm.url)
    failed = exe(tmp_path, "--agent-file", str(agent), "run", "-p", "hello")
    assert failed.returncode == 1
    assert failed.stdout == ""
    assert len(failed.stderr.strip().splitlines()) == 1 and "the run failed" in failed.stderr

    missing = exe(tmp_path, "--agent-file", str(agent), "run", "-f", "nope.txt")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("agents run: cannot read nope.txt")

    (tmp_path / "not-a-dir").write_text("")
    no_dir = exe(tmp_path, "--agent-file", str(agent), "--db", str(tmp_path / "not-a-dir" / "x.db"), "run", "-p", "hi")
    assert no_dir.returncode != 0
    assert len(no_dir.stderr.strip().splitlines()) == 1 and "Traceback" not in no_dir.stderr
    no_db = exe(tmp_path, "--agent-file", str(agent), "--db", "postgres://postgres@127.0.0.1:1/none", "run", "-p", "hi",
                env={"DJANGO_SECRET_KEY": "k"})
    assert no_db.returncode == 1
    assert no_db.stderr.startswith("agents run: cannot use the database: OperationalError")
    assert len(no_db.stderr.strip().splitlines()) == 1

    unknown = exe(tmp_path, "--agent-file", str(agent), "--agent", "nope", "run", "-p", "hi")
    assert unknown.returncode == 4
    assert unknown.stderr.splitlines() == [
        "Error: Agent 'nope' not found.", "", "Available agents:", f"  - failing ({agent})",
    ]
    usage = exe(tmp_path, "run", "--thinking", "loud")
    assert usage.returncode == 2


def test_a_project_config_is_found_from_a_subdirectory_by_run_and_serve(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    agents = tmp_path / "agents"
    agents.mkdir()
    write_agent(agents, "alpha", llm.url)
    nested = agents / "more"
    nested.mkdir()
    write_agent(nested, "beta", llm.url)
    (tmp_path / "agents-exe.cfg.json").write_text(json.dumps({"agentsDirectories": ["agents"]}))
    work = tmp_path / "src" / "deep"
    work.mkdir(parents=True)
    db = str(tmp_path / "shared.db")

    first = exe(work, "--db", db, "run", "-p", "hello")
    assert first.returncode == 0, first.stderr
    assert first.stdout.endswith("answer to: hello\n\n")
    chosen = exe(work, "--db", db, "--agent", "beta", "run", "-p", "hi")
    assert chosen.returncode == 0, chosen.stderr
    assert llm.requests[-1]["messages"][0]["content"] == "You are beta."
    unknown = exe(work, "--db", db, "--agent", "nope", "run", "-p", "hi")
    assert unknown.returncode == 4
    assert "  - alpha (" in unknown.stderr and "  - beta (" in unknown.stderr

    server = Server([], tmp_path, db=db, cwd=work)
    try:
        listed = {agent["slug"] for agent in server.client.get("/v1/agents").json()}
        assert listed == {"alpha", "beta"}
        # the sessions run from the command line are the server's
        sessions = server.client.get("/v1/sessions").json()["sessions"]
        assert {s["agent"] for s in sessions} == {"alpha", "beta"}
        log = server.process.output()
    finally:
        server.stop()
    # one access line per request: method, path without query, status, time to first byte
    lines = [json.loads(line) for line in log.splitlines() if '"http.request"' in line]
    assert {(line["method"], line["path"], line["status"]) for line in lines} >= {
        ("GET", "/v1/agents", 200), ("GET", "/v1/sessions", 200), ("GET", "/healthz", 200)
    }
    assert all(isinstance(line["ttfb_ms"], float) for line in lines)


def test_check_tools_openai_is_exactly_what_the_model_receives(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    agent = deferring_agent(tmp_path, llm)
    checked = exe(tmp_path, "--agent-file", str(agent), "check", "--tools", "openai")
    assert checked.returncode == 0, checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[:5] == ["deployer: the deployer test agent (1 tools)", "<details>",
                         "<summary>OpenAI LLM tool representation</summary>", "", "```json"]
    shown = json.loads("\n".join(lines[5:lines.index("```")]))
    exe(tmp_path, "--agent-file", str(agent), "run", "-p", "hello")
    assert shown == llm.requests[-1]["tools"]

    listed = exe(tmp_path, "check", "--agent-file", str(agent), "--tools", "list", "--show-config")
    assert listed.returncode == 0, listed.stderr
    assert "- **bash_approve**: approve a deployment" in listed.stdout
    assert json.loads(listed.stdout[: listed.stdout.index("deployer:")])["contents"]["slug"] == "deployer"
    native = exe(tmp_path, "check", "--agent-file", str(agent), "--tools", "agents-exe")
    assert "<summary>agents-exe tool representation</summary>" in native.stdout
    assert '"paramProperties"' in native.stdout


def test_progress_goes_to_stderr_only_when_it_is_a_terminal(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer]
) -> None:
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "writer", llm.url)
    controller, terminal = pty.openpty()
    try:
        done = subprocess.run(
            [str(BIN / "agents-exe"), "--agent-file", str(agent), "run", "-p", "hello"], cwd=tmp_path,
            env=base_env(AGENTS_LOG_LEVEL="WARNING"), stdout=subprocess.PIPE, stderr=terminal, timeout=120,
        )
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0
    assert done.stdout == b"Fix the parser\n\nanswer to: hello\n\n"
    assert b"turn 2: LlmTurn" in shown
