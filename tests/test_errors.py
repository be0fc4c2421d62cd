"""Every documented error of the foundation API, provoked over HTTP; nothing stored changes.

Each check takes a snapshot of the SQLite tables before the bad request and compares it after.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, sqlite_snapshot, write_agent

SCRIPT = {
    "rules": [
        {"when": {"last_contains": "slow"}, "reply": {"delay": 3, "content": "finally"}},
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}},
        {"reply": {"content": "answered"}},
    ]
}


@pytest.fixture
def server(tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]) -> Server:
    llm = llm_server(SCRIPT)
    agent = write_agent(
        tmp_path,
        "deferring",
        llm.url,
        toolCallPolicyConfig={"default": {"tag": "defer", "reason": "external"}, "rules": []},
    )
    return start_server([agent])


def _expect(server: Server, method: str, path: str, status: int, code: str, body: bytes | str | None = None) -> None:
    before = sqlite_snapshot(server.db)
    answer = server.client.request(method, path, content=body)
    assert answer.status_code == status, answer.text
    payload = answer.json()
    assert set(payload) == {"error", "message"} and payload["error"] == code and payload["message"], payload
    assert sqlite_snapshot(server.db) == before, f"{method} {path} changed the database"


def _create(server: Server, prompt: str = "hello") -> dict:
    answer = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "deferring", "prompt": prompt}))
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_bad_bodies_and_queries(server: Server) -> None:
    view = _create(server)
    sid = view["session_id"]
    _expect(server, "POST", "/v1/sessions", 400, "bad_request", b'{"agent": "deferring", "prompt": ')
    _expect(server, "POST", "/v1/sessions", 400, "bad_request", b"[1, 2]")
    _expect(server, "POST", "/v1/sessions", 400, "bad_request", json.dumps({"agent": "deferring", "prompt": 42}))
    _expect(server, "POST", "/v1/sessions", 400, "bad_request", json.dumps({"prompt": "no agent"}))
    _expect(server, "POST", "/v1/sessions", 400, "bad_request", json.dumps({"agent": "deferring", "run": "sometimes"}))
    _expect(
        server,
        "POST",
        "/v1/sessions",
        400,
        "bad_request",
        json.dumps({"agent": "deferring", "prompt": "x", "media": [{"mime": "image/png"}]}),
    )
    _expect(
        server, "POST", "/v1/sessions", 400, "bad_request", json.dumps({"agent": "deferring", "session_token": True})
    )
    _expect(
        server, "POST", "/v1/sessions?wait=true&timeout=soon", 400, "bad_request", json.dumps({"agent": "deferring"})
    )
    _expect(server, "POST", f"/v1/sessions/{sid}/resume", 400, "bad_request", json.dumps({"mode": "forever"}))
    _expect(server, "POST", f"/v1/sessions/{sid}/messages", 400, "bad_request", json.dumps({"prompt": ["a"]}))
    _expect(server, "GET", "/v1/sessions?limit=0", 400, "bad_request")
    _expect(server, "GET", "/v1/sessions?limit=501", 400, "bad_request")
    _expect(server, "GET", "/v1/sessions?status=sleeping", 400, "bad_request")
    _expect(server, "GET", "/v1/sessions?before=yesterday", 400, "bad_request")
    token = view["pending"][0]["continuation_token"]
    _expect(server, "POST", f"/v1/continuations/{token}", 400, "bad_request", json.dumps({"resume": True}))
    _expect(server, "POST", f"/v1/continuations/{token}", 400, "bad_request", json.dumps({"result": {"type": "bogus"}}))
    _expect(server, "POST", f"/v1/continuations/{token}", 400, "bad_request", json.dumps({"result": 12}))
    _expect(
        server,
        "POST",
        f"/v1/continuations/{token}",
        400,
        "bad_request",
        json.dumps({"result": "ok", "resume": "yes"}),
    )


def test_unknown_things(server: Server) -> None:
    view = _create(server)
    missing = uuid.uuid4()
    _expect(server, "POST", "/v1/sessions", 404, "unknown_agent", json.dumps({"agent": "nobody", "prompt": "hi"}))
    _expect(server, "GET", "/v1/agents/nobody", 404, "unknown_agent")
    _expect(server, "GET", "/v1/sessions/not-a-uuid", 404, "unknown_session")
    _expect(server, "GET", f"/v1/sessions/{missing}", 404, "unknown_session")
    _expect(server, "GET", f"/v1/sessions/{missing}/pending", 404, "unknown_session")
    _expect(server, "POST", f"/v1/sessions/{missing}/messages", 404, "unknown_session", json.dumps({"prompt": "x"}))
    _expect(server, "POST", f"/v1/sessions/{missing}/resume", 404, "unknown_session")
    _expect(server, "GET", f"/v1/sessions?parent={missing}", 404, "unknown_session")
    _expect(
        server,
        "POST",
        "/v1/sessions",
        404,
        "unknown_session",
        json.dumps({"agent": "deferring", "prompt": "x", "parent": str(missing)}),
    )
    _expect(server, "POST", "/v1/continuations/not-a-token", 404, "unknown_token", json.dumps({"result": "x"}))
    _expect(server, "POST", f"/v1/continuations/{missing}", 404, "unknown_token", json.dumps({"result": "x"}))
    _expect(server, "GET", "/v1/nothing-here", 404, "not_found")
    _expect(server, "DELETE", f"/v1/sessions/{view['session_id']}/pending", 405, "method_not_allowed")


def test_conflicts(server: Server) -> None:
    view = _create(server)
    token = view["pending"][0]["continuation_token"]
    first = server.client.post(f"/v1/continuations/{token}?wait=true", content=json.dumps({"result": "42"}))
    assert first.status_code == 200 and first.json()["status"] == "idle"
    _expect(server, "POST", f"/v1/continuations/{token}", 409, "token_already_completed", json.dumps({"result": "43"}))

    slow = server.client.post("/v1/sessions", content=json.dumps({"agent": "deferring", "prompt": "slow please"}))
    assert slow.status_code == 201 and slow.json()["status"] == "running"
    slow_id = slow.json()["session_id"]
    # wait with a short timeout answers 202 with the running state, and the run carries on
    waited = server.client.get(f"/v1/sessions/{slow_id}?wait=true&timeout=0.3")
    assert waited.status_code == 202 and waited.json()["status"] == "running"
    _expect(server, "POST", f"/v1/sessions/{slow_id}/resume", 409, "run_in_progress")
    _expect(server, "POST", f"/v1/sessions/{slow_id}/cancel-attached/more", 404, "not_found")
    no_run = server.client.post(f"/v1/sessions/{view['session_id']}/cancel")
    assert no_run.status_code == 409 and no_run.json()["error"] == "no_active_run"
    finished = server.client.get(f"/v1/sessions/{slow_id}?wait=true&timeout=30")
    assert finished.status_code == 200 and finished.json()["status"] == "idle"


def test_importing_a_session_whose_id_exists_is_a_conflict(server: Server) -> None:
    view = _create(server)
    exported = server.client.get(f"/v1/sessions/{view['session_id']}/export").json()
    body = json.dumps({"agent": "deferring", "session": exported})
    _expect(server, "POST", "/v1/sessions/import", 409, "conflict", body)
    assert server.client.post("/v1/sessions/import", content=body).json()["message"] == (
        f"session {view['session_id']} exists already"
    )
    # the stored session is untouched, its continuation still answers
    assert server.client.get(f"/v1/sessions/{view['session_id']}/export").json() == exported
    # several imports of one new file at once: the database keeps exactly one
    fresh = json.dumps({"agent": "deferring", "session": {**exported, "sessionId": str(uuid.uuid4()), "turns": []}})
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: server.client.post("/v1/sessions/import", content=fresh), range(4)))
    assert sorted(a.status_code for a in answers) == [201, 409, 409, 409], [a.text for a in answers]
    assert {a.json().get("error") for a in answers if a.status_code == 409} == {"conflict"}


def test_body_over_the_limit(server: Server) -> None:
    before = sqlite_snapshot(server.db)
    body = json.dumps({"agent": "deferring", "prompt": "x" * (40 * 1024 * 1024)})
    answer = server.client.post("/v1/sessions", content=body)
    assert answer.status_code == 413
    assert answer.json()["error"] == "payload_too_large"
    assert sqlite_snapshot(server.db) == before
    assert server.client.get("/healthz").status_code == 200


def test_provider_failures_fail_the_run_and_keep_the_turns(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    llm = llm_server(
        {
            "rules": [
                {"when": {"last_contains": "crash"}, "reply": {"status": 500, "error": "scripted failure"}},
                {"when": {"last_contains": "garbage"}, "reply": {"malformed": True}},
                {"when": {"last_contains": "sleepy"}, "reply": {"delay": 5, "content": "too late"}},
                {"reply": {"content": "fine"}},
            ]
        }
    )
    agent = write_agent(tmp_path, "fragile", llm.url)
    server = start_server([agent], env={"AGENTS_LLM_TIMEOUT": "1"})
    cases = {"crash": "HTTP 500", "garbage": "malformed", "sleepy": "timed out"}
    for prompt, expected in cases.items():
        answer = server.client.post(
            "/v1/sessions?wait=true", content=json.dumps({"agent": "fragile", "prompt": prompt})
        )
        view = answer.json()
        assert view["status"] == "failed", view
        assert expected in view["status_detail"], view["status_detail"]
        # the user's turn is still there, nothing was lost
        assert [t["tag"] for t in view["session"]["turns"]] == ["UserTurn"]
        assert view["session"]["turns"][0]["contents"]["userQuery"] == prompt
    # a failed session takes a new message and recovers
    failed = server.client.get("/v1/sessions?status=failed").json()["sessions"][0]
    again = server.client.post(
        f"/v1/sessions/{failed['session_id']}/messages?wait=true", content=json.dumps({"prompt": "try again"})
    )
    assert again.status_code == 200 and again.json()["status"] == "idle"


def test_the_error_catalogue_has_one_class_per_code() -> None:
    from foundation.errors import CATALOGUE, ErrorCode

    assert set(CATALOGUE) == set(ErrorCode)
    for code, cls in CATALOGUE.items():
        assert cls.code == code
        error = cls()
        assert error.body() == {"error": code.value, "message": error.message}
        assert error.message, code
        assert 400 <= error.status <= 500


def test_no_two_error_classes_share_a_code() -> None:
    """A second class with a code already taken would drop one of the two out of the catalogue
    (and out of the OpenAPI document); its wording belongs on the class of that code."""
    from foundation.errors import CATALOGUE, error_classes

    codes = [cls.code for cls in error_classes()]
    assert sorted(code for code in codes if codes.count(code) > 1) == []
    assert sorted(CATALOGUE.values(), key=str) == sorted(error_classes(), key=str)


def test_a_second_wording_keeps_its_code_status_and_message() -> None:
    from foundation.errors import CATALOGUE, ErrorCode, NotFound, PayloadTooLarge

    attachment = PayloadTooLarge.attachment("'a.png'", 9, 6)
    assert (attachment.status, attachment.body()) == (
        413,
        {"error": "payload_too_large", "message": "attachment 'a.png' is 9 bytes, over the limit of 6 bytes"},
    )
    assert str(attachment) == attachment.message
    version = NotFound.agent_version("helper", 3)
    assert version.status == 404
    assert version.body() == {"error": "not_found", "message": "agent 'helper' has no version 3"}
    assert CATALOGUE[ErrorCode.PAYLOAD_TOO_LARGE] is PayloadTooLarge and CATALOGUE[ErrorCode.NOT_FOUND] is NotFound


def test_every_code_is_in_the_documented_table_with_its_status() -> None:
    from foundation.errors import CATALOGUE

    table = (Path(__file__).resolve().parent.parent / "docs/api.md").read_text()
    for code, cls in CATALOGUE.items():
        assert f"| `{code.value}` | {cls.status} |" in table, code
