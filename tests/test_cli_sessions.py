"""The durable flow from the command line on the server's database, seen over HTTP, and session
files in and out of the server (issue 17, acceptance 2 and 3)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentfiles.session_text import AGENTS_EXE, parse_session_text
from devtools.mockllm import MockLlmServer
from tests.harness import FIXTURES, Server, write_agent
from tests.test_cli_run import SCRIPT, deferring_agent, exe

SESSION_FILES = sorted((FIXTURES / "sessions").glob("*.json"))


def test_the_durable_flow_from_the_command_line_is_the_sessions_the_api_shows(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    agent = deferring_agent(tmp_path, llm)
    server = start_server([agent])
    db = ["--db", server.db]

    started = exe(tmp_path, "--agent-file", str(agent), *db, "session", "start", "-p", "deploy the thing")
    assert started.returncode == 0, started.stderr
    lines = started.stdout.splitlines()
    assert lines[1:] == ["status: ready", "waiting for: the model"]
    sid = lines[0].removeprefix("session-id: ")
    assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "ready"
    assert llm.requests == []  # start does not call the model

    resumed = exe(tmp_path, *db, "--agent-file", str(agent), "session", "resume", sid)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines()[1] == "status: waiting_external"
    over_http = server.client.get(f"/v1/sessions/{sid}/pending").json()
    listed = exe(tmp_path, *db, "session", "pending", "--json", sid)
    assert json.loads(listed.stdout) == over_http
    [call] = over_http["calls"]
    token = call["continuation_token"]
    assert f"continuation-token: {token} bash_approve {call['call']['id']}" in resumed.stdout
    human = exe(tmp_path, *db, "session", "pending", sid)
    assert f"  continuation-token: {token}" in human.stdout and "  disposition: defer" in human.stdout

    (tmp_path / "answer.txt").write_text("approved by ops")
    completed = exe(tmp_path, *db, "session", "complete", token, "answer.txt")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [f"session-id: {sid}", "turn: complete"]
    # complete does not resume: the session waits for a run
    assert server.client.get(f"/v1/sessions/{sid}").json()["status"] == "ready"
    again = exe(tmp_path, *db, "session", "complete", token, "answer.txt")
    assert again.returncode == 1 and "already" in again.stderr

    stepped = exe(tmp_path, *db, "--agent-file", str(agent), "session", "step", sid)
    assert stepped.returncode == 0, stepped.stderr
    assert stepped.stdout.splitlines()[1:] == ["status: idle", "", "done: approved by ops"]
    view = server.client.get(f"/v1/sessions/{sid}").json()
    assert view["status"] == "idle"
    exported = exe(tmp_path, *db, "session", "export", sid)
    assert json.loads(exported.stdout) == view["session"] == server.client.get(f"/v1/sessions/{sid}/export").json()


@pytest.mark.usefixtures("processes")
def test_session_commands_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "s.db")]
    unknown = exe(tmp_path, *db, "session", "pending", "8b95994d-0fd8-41e3-b5b4-fa2dce5366d2")
    assert (unknown.returncode, unknown.stdout) == (1, "")
    assert unknown.stderr.startswith("agents session: ") and len(unknown.stderr.splitlines()) == 1
    not_a_uuid = exe(tmp_path, *db, "session", "export", "nope")
    assert not_a_uuid.returncode == 1 and "not a session id" in not_a_uuid.stderr
    (tmp_path / "r.txt").write_text("x")
    no_token = exe(tmp_path, *db, "session", "complete", "8b95994d-0fd8-41e3-b5b4-fa2dce5366d2", "r.txt")
    assert no_token.returncode == 1 and "Traceback" not in no_token.stderr
    (tmp_path / "broken.json").write_text('{"sessionId": "x", "turns": [{"tag": "Nope"}]}')
    # the agent is checked first, as POST /v1/sessions/import checks it
    any_agent = write_agent(tmp_path, "any", "http://127.0.0.1:9/v1")
    broken = exe(tmp_path, *db, "--agent-file", str(any_agent), "session", "import", "broken.json", "--agent", "any")
    assert broken.returncode == 1 and "cannot be read" in broken.stderr
    no_agent = exe(tmp_path, *db, "session", "import", str(SESSION_FILES[0]))
    assert no_agent.returncode == 4 and "--agent" in no_agent.stderr


def test_every_session_file_imports_and_exports_unchanged_over_http_and_the_command_line(
    tmp_path: Path, llm_server: Callable[[dict[str, Any]], MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(SCRIPT)
    agent = deferring_agent(tmp_path, llm)
    server = start_server([agent])
    for path in SESSION_FILES:
        original = json.loads(path.read_text())
        answer = server.client.post("/v1/sessions/import", json={"agent": "deployer", "session": original})
        assert answer.status_code == 201, (path.name, answer.text)
        assert answer.json()["session_id"] == original["sessionId"]
        exported = server.client.get(f"/v1/sessions/{original['sessionId']}/export")
        assert exported.status_code == 200
        assert exported.json() == original, path.name
        # a posted body has no layout of its own: agents-exe's compact files come back byte for byte
        if parse_session_text(path.read_text())[1] == AGENTS_EXE:
            assert exported.content == path.read_bytes(), path.name

    # the same files through the command line, into another database
    db = ["--db", str(tmp_path / "cli.db")]
    for path in SESSION_FILES[:2]:
        imported = exe(tmp_path, *db, "--agent", "deployer", "--agent-file", str(agent), "session", "import", str(path))
        assert imported.returncode == 0, imported.stderr
        sid = imported.stdout.strip()
        out = tmp_path / "out.json"
        exported = exe(tmp_path, *db, "session", "export", sid, "--output", str(out))
        assert exported.returncode == 0, exported.stderr
        assert out.read_bytes() == path.read_bytes(), path.name

    # refusals: unknown agent, a second import, a document this server cannot read, unknown sessions
    original = json.loads(SESSION_FILES[0].read_text())
    cases = [
        ({"agent": "nobody", "session": original}, 404, "unknown_agent"),
        ({"agent": "deployer", "session": original}, 409, "conflict"),
        ({"agent": "deployer", "session": {"sessionId": "x", "turns": [{"tag": "Nope"}]}}, 400, "bad_request"),
        ({"agent": "deployer"}, 400, "bad_request"),
        ({"session": original}, 400, "bad_request"),
    ]
    for body, status, code in cases:
        refused = server.client.post("/v1/sessions/import", json=body)
        assert (refused.status_code, refused.json()["error"]) == (status, code), body.keys()
    missing = server.client.get("/v1/sessions/8b95994d-0fd8-41e3-b5b4-fa2dce5366d2/export")
    assert (missing.status_code, missing.json()["error"]) == (404, "unknown_session")
    assert len(server.client.get("/v1/sessions").json()["sessions"]) == len(SESSION_FILES)


@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda p: p.name)
def test_every_session_file_prints_in_every_mode(path: Path) -> None:
    from sessions_app.markdown import LEVELS, MODES, PrintOptions, render_markdown

    document = json.loads(path.read_text())
    default = render_markdown(document)
    assert default.startswith("```") and f"# Session {document['sessionId']}" in default
    assert "## 📊 Statistics" in default
    for mode in MODES:
        for flags in ({}, {"repeat_system_prompt": True, "repeat_tools": True}, {"antichronological": True}):
            text = render_markdown(document, PrintOptions(tool_results=mode, tool_arguments=mode, **flags))
            assert text.endswith("\n")
    for options in LEVELS.values():
        render_markdown(document, options)
    first = render_markdown(document, PrintOptions(n_turns=1, funny_stamp=False))
    assert first.startswith("# Session") and "Step 2" not in first


def test_byte_usage_of_new_llm_turns_is_computed_as_agents_exe_does() -> None:
    from agentfiles.document import llm_byte_usage, llm_turn

    document = json.loads((FIXTURES / "sessions" / "activation-session.json").read_text())
    llm_turns = [turn for turn in document["turns"] if turn["tag"] == "LlmTurn"]
    assert llm_turns
    for turn in llm_turns:
        response = turn["contents"]["llmResponse"]
        computed = llm_byte_usage(
            response["responseText"], response["responseThinking"], turn["contents"]["llmToolCalls"],
            turn["byteUsage"].get("stepTokenUsage"),
        )
        assert computed == turn["byteUsage"]
    made = llm_turn({}, "hé", None, [], None)
    assert made["byteUsage"] == {"stepInputBytes": 0, "stepOutputBytes": 5, "stepReasoningBytes": 0,
                                 "stepToolBytes": 0, "stepTotalBytes": 5}
