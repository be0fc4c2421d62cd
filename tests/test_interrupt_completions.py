"""``interruptCompletions`` (issue 16, acceptance 3): an interrupt cancels the model request in
flight and the step is asked again with the amended user turn; without it the answer is kept."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.harness import Server, wait_until, write_agent

SCRIPT = {"rules": [
    {"when": {"last_role": "user", "last_contains": "actually, hurry"}, "reply": {"content": "quick answer"}},
    {"when": {"last_role": "user", "last_contains": "think slowly"}, "reply": {"delay": 10, "content": "slow answer"}},
    {"reply": {"content": "unexpected"}},
]}


def _post(server: Server, path: str, body: dict):
    return server.client.post(path, content=json.dumps(body))


def _user_text(message: dict) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "\n".join(p.get("text", "") for p in content)


def _interrupt_a_slow_answer(tmp_path: Path, llm_server, start_server, **extra) -> tuple[dict, object, float]:
    llm = llm_server(SCRIPT)
    server = start_server([write_agent(tmp_path, "thinker", llm.url, **extra)])
    sid = _post(server, "/v1/sessions", {"agent": "thinker", "prompt": "think slowly"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1, timeout=30)
    time.sleep(1)
    interrupted_at = time.monotonic()
    answer = _post(server, f"/v1/sessions/{sid}/messages", {"prompt": "actually, hurry", "interrupt": True})
    assert answer.status_code == 202, answer.text
    view = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=60").json()
    assert view["status"] == "idle", view
    return view, llm, interrupted_at


def test_an_interrupt_cancels_the_request_and_asks_again_with_the_amended_turn(
    tmp_path, llm_server, start_server
) -> None:
    view, llm, interrupted_at = _interrupt_a_slow_answer(
        tmp_path, llm_server, start_server, interruptCompletions=True
    )
    # the model server saw the first request hang up, long before its ten seconds were over
    assert llm.cancelled == [1]
    assert time.monotonic() - interrupted_at < 9
    assert len(llm.requests) == 2
    last_user = [m for m in llm.requests[1]["messages"] if m["role"] == "user"]
    # one user message: the first turn, amended with the interrupting mail (no turn lost)
    assert len(last_user) == 1
    text = _user_text(last_user[0])
    assert text.startswith("think slowly") and text.index("think slowly") < text.index("actually, hurry")
    turns = view["session"]["turns"]
    assert [t["tag"] for t in turns] == ["LlmTurn", "UserTurn"]
    assert turns[0]["contents"]["llmResponse"]["responseText"] == "quick answer"


def test_without_the_option_the_answer_in_flight_is_kept(tmp_path, llm_server, start_server) -> None:
    view, llm, _ = _interrupt_a_slow_answer(tmp_path, llm_server, start_server)
    assert llm.cancelled == []
    turns = view["session"]["turns"]
    assert [t["tag"] for t in turns] == ["LlmTurn", "UserTurn", "LlmTurn", "UserTurn"]
    assert turns[2]["contents"]["llmResponse"]["responseText"] == "slow answer"
    assert turns[0]["contents"]["llmResponse"]["responseText"] == "quick answer"
    assert "actually, hurry" in _user_text([m for m in llm.requests[1]["messages"] if m["role"] == "user"][-1])


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_cancels_a_cancellable_request_too(tmp_path, llm_server, start_server, stream: bool) -> None:
    llm = llm_server(SCRIPT)
    env = {"AGENTS_STREAM_TOKENS": "true"} if stream else {}
    server = start_server([write_agent(tmp_path, "thinker", llm.url, interruptCompletions=True)], env=env)
    sid = _post(server, "/v1/sessions", {"agent": "thinker", "prompt": "think slowly"}).json()["session_id"]
    wait_until(lambda: len(llm.requests) == 1, timeout=30)
    assert server.client.post(f"/v1/sessions/{sid}/cancel").status_code == 200
    wait_until(lambda: llm.cancelled == [1], timeout=5)
    view = server.client.get(f"/v1/sessions/{sid}?wait=true&timeout=30").json()
    assert view["status"] == "ready" and [t["tag"] for t in view["session"]["turns"]] == ["UserTurn"]
