"""Operator input that once broke things: refused cleanly, nothing stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import PROCESS_TIMEOUT, ROOT, Server, base_env, free_port, write_agent
from tests.owners import owner, write_tokens


def test_results_and_stored_agents_with_lone_surrogates_or_long_names_are_refused(
    tmp_path: Path, llm_server, start_server
) -> None:
    llm = llm_server(
        {"rules": [{"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "x", "arguments": {}}]}}]}
    )
    agent = write_agent(tmp_path, "deferring", llm.url, toolCallPolicyConfig={"default": {"tag": "defer"}})
    tokens = write_tokens(tmp_path)
    server: Server = start_server([agent], extra_args=["--auth-tokens", str(tokens), "--admin-owners", "root"])
    view = server.client.post(
        "/v1/sessions?wait=true", headers=owner("alice"), content=json.dumps({"agent": "deferring", "prompt": "go"})
    ).json()
    token = view["pending"][0]["continuation_token"]
    surrogate = b'{"result": {"type": "json", "content": {"a": "\\ud800"}}}'
    answer = server.client.post(f"/v1/continuations/{token}", headers=owner("alice"), content=surrogate)
    assert answer.status_code == 400 and answer.json()["error"] == "bad_request"
    assert server.client.get(f"/v1/sessions/{view['session_id']}", headers=owner("alice")).json() == view

    base = {
        "apiKeyId": "k",
        "flavor": "OpenAIv1",
        "modelUrl": llm.url,
        "modelName": "m",
        "announce": "a",
        "systemPrompt": ["s"],
    }
    refusals = [
        ("odd", {**base, "files": {"a": "\ud800"}}, 400, "bad_request"),
        ("x" * 300, base, 400, "bad_request"),
        ("deep", {**base, "files": {"/".join(["d"] * 2000): "x"}}, 400, "agent_invalid_paths"),
        ("wide", {**base, "files": {"n" * 300: "x"}}, 400, "agent_invalid_paths"),
    ]
    for slug, body, status, code in refusals:
        answer = server.client.put(f"/v1/agents/{slug}", headers=owner("root"), content=json.dumps(body))
        assert (answer.status_code, answer.json()["error"]) == (status, code), (slug[:20], answer.text)
    listed = server.client.get("/v1/agents", headers=owner("root"))
    assert listed.status_code == 200 and [a["slug"] for a in listed.json()] == ["deferring"]


@pytest.mark.integration
def test_a_token_listed_for_two_owners_is_refused_at_startup(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"owner": "a", "token": "same"}, {"owner": "b", "token": "same"}]}))
    agent = write_agent(tmp_path, "x", "http://127.0.0.1:9/v1")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentsite.cli",
            "serve",
            "--agent-file",
            str(agent),
            "--auth-tokens",
            str(tokens),
            "--db",
            str(tmp_path / "db.sqlite3"),
            "--port",
            str(free_port()),
        ],
        cwd=ROOT,
        env=base_env(),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 2
    assert "the same token is listed for another owner" in result.stderr
    assert "same" not in result.stderr.replace("the same token", "")
