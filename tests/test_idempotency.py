"""Idempotency-Key on the routes that start or change a run (docs/api.md §1.7), over HTTP."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.demo import demo_agents, demo_script
from tests.harness import Server, wait_until
from tests.owners import bearer, owner, write_tokens


def _post(server: Server, path: str, body: Any, key: str | None, headers: dict[str, str] | None = None):
    sent = {**(headers or {}), **({"Idempotency-Key": key} if key is not None else {})}
    return server.client.post(path, content=json.dumps(body), headers=sent)


def _query(db: str, sql: str) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` on the server's database (a SQLite file or a PostgreSQL URL)."""
    if db.startswith("postgres"):
        with psycopg.connect(db) as connection:
            return connection.execute(sql).fetchall()
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


def _rows(db: str, table: str) -> int:
    return _query(db, f"SELECT COUNT(*) FROM {table}")[0][0]


def _sessions(db: str) -> int:
    return _rows(db, "sessions_app_session")


def _same(first: httpx.Response, again: httpx.Response) -> None:
    assert again.status_code == first.status_code, again.text
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers


def test_create_with_a_key_runs_once_and_answers_the_first_answer(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    body = {"agent": "weather", "prompt": "Weather in Paris?"}
    key = str(uuid.uuid4())

    first = _post(server, "/v1/sessions?wait=true", body, key)
    assert first.status_code == 201, first.text
    assert first.json()["status"] == "waiting_external"  # the answer after the wait
    again = _post(server, "/v1/sessions?wait=true", body, key)
    _same(first, again)
    assert again.headers["Location"] == first.headers["Location"]
    # the structured-field form of the same key, and a body whose keys come in another order
    quoted = _post(server, "/v1/sessions", {"prompt": "Weather in Paris?", "agent": "weather"}, f'"{key}"')
    _same(first, quoted)
    assert _sessions(server.db) == 1 and len(llm.requests) == 1

    reused = _post(server, "/v1/sessions", {**body, "prompt": "Weather in Rome?"}, key)
    assert (reused.status_code, reused.json()["error"]) == (422, "idempotency_key_reused")
    # another path with the same key is another request too
    path = f"/v1/sessions/{first.json()['session_id']}/resume"
    assert _post(server, path, body, key).json()["error"] == "idempotency_key_reused"
    assert _sessions(server.db) == 1

    for bad in ("", "x" * 256, "has space", 'quo"te', "back\\slash", "é"):
        answer = server.client.post("/v1/sessions", content=json.dumps(body), headers={"Idempotency-Key": bad.encode()})
        assert (answer.status_code, answer.json()["error"]) == (400, "invalid_idempotency_key"), bad
    assert _post(server, "/v1/sessions", body, "k" * 255).status_code == 201
    assert _sessions(server.db) == 2

    # without a key, nothing changes: every request is a new session
    assert _post(server, "/v1/sessions", body, None).status_code == 201
    assert _post(server, "/v1/sessions", body, None).status_code == 201
    assert _sessions(server.db) == 4


def _at_once(server: Server, path: str, body: Any, key: str, count: int = 4) -> list[httpx.Response]:
    """``count`` threads send the same request at the same moment, each on its own connection."""
    answers: list[httpx.Response] = []
    start = threading.Barrier(count)

    def send() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            start.wait()
            answers.append(client.post(path, content=json.dumps(body), headers={"Idempotency-Key": key}))

    threads = [threading.Thread(target=send) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({a.text for a in answers}) == 1, [a.text for a in answers]
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == count - 1
    return answers


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_concurrent_requests_with_one_key_run_once(
    request: pytest.FixtureRequest, database: str, tmp_path: Path, llm_server, start_server
) -> None:
    llm = llm_server(demo_script())
    db = request.getfixturevalue("postgres_url") if database == "postgres" else None
    server = start_server(demo_agents(tmp_path, llm.url), db=db)

    created = _at_once(server, "/v1/sessions", {"agent": "weather", "prompt": "Weather in Oslo?"}, str(uuid.uuid4()))
    assert [a.status_code for a in created] == [201] * 4
    assert _sessions(server.db) == 1
    sid = created[0].json()["session_id"]
    wait_until(lambda: server.client.get(f"/v1/sessions/{sid}").json()["status"] == "waiting_external")

    posted = _at_once(server, f"/v1/sessions/{sid}/messages", {"prompt": "And Lyon?"}, str(uuid.uuid4()))
    assert posted[0].status_code in (200, 202)
    # the session was waiting on a deferred call: the message is queued as mail, once
    assert len(server.client.get(f"/v1/sessions/{sid}/mail").json()["mail"]) == 1


def test_messages_resume_fork_continuations_and_import_run_once(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(demo_script())
    server = start_server(demo_agents(tmp_path, llm.url))
    view = _post(server, "/v1/sessions?wait=true", {"agent": "weather", "prompt": "Weather in Paris?"}, None).json()
    sid = view["session_id"]
    token = view["pending"][0]["continuation_token"]

    done = {"result": "sunny"}
    first = _post(server, f"/v1/continuations/{token}?wait=true", done, "c-1")
    assert first.status_code == 200 and first.json()["status"] == "idle", first.text
    _same(first, _post(server, f"/v1/continuations/{token}?wait=true", done, "c-1"))
    assert _post(server, f"/v1/continuations/{token}", {"result": "rain"}, "c-1").status_code == 422
    # without the key, the retry is refused: the key is what makes it safe
    assert _post(server, f"/v1/continuations/{token}", done, None).json()["error"] == "token_already_completed"
    calls = len(llm.requests)

    message = {"prompt": "And tomorrow?"}
    first = _post(server, f"/v1/sessions/{sid}/messages?wait=true", message, "m-1")
    assert first.status_code == 200, first.text
    turns = len(first.json()["session"]["turns"])
    _same(first, _post(server, f"/v1/sessions/{sid}/messages?wait=true", message, "m-1"))
    assert _post(server, f"/v1/sessions/{sid}/messages", {"prompt": "other"}, "m-1").status_code == 422
    stored = server.client.get(f"/v1/sessions/{sid}").json()
    assert len(stored["session"]["turns"]) == turns
    assert len(llm.requests) == calls + 1

    # a stored user turn, for the resume to answer
    assert _post(server, f"/v1/sessions/{sid}/messages", {"prompt": "And Sunday?", "run": "none"}, None).is_success
    first = _post(server, f"/v1/sessions/{sid}/resume?wait=true", {"mode": "step"}, "r-1")
    assert first.status_code == 200, first.text
    _same(first, _post(server, f"/v1/sessions/{sid}/resume?wait=true", {"mode": "step"}, "r-1"))
    assert _post(server, f"/v1/sessions/{sid}/resume", {}, "r-1").status_code == 422
    assert len(llm.requests) == calls + 2

    before = _sessions(server.db)
    first = _post(server, f"/v1/sessions/{sid}/fork", {"at_turn": 2}, "f-1")
    assert first.status_code == 201, first.text
    _same(first, _post(server, f"/v1/sessions/{sid}/fork", {"at_turn": 2}, "f-1"))
    assert _post(server, f"/v1/sessions/{sid}/fork", {"at_turn": 1}, "f-1").status_code == 422
    assert _sessions(server.db) == before + 1

    document = server.client.get(f"/v1/sessions/{sid}/export").json()
    document["sessionId"] = str(uuid.uuid4())
    imported = {"agent": "weather", "session": document}
    first = _post(server, "/v1/sessions/import", imported, "i-1")
    assert first.status_code == 201, first.text
    _same(first, _post(server, "/v1/sessions/import", imported, "i-1"))
    assert _sessions(server.db) == before + 2


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
def test_keys_are_per_owner_and_a_replayed_session_token_is_the_first(
    request: pytest.FixtureRequest, database: str, tmp_path: Path, llm_server, start_server
) -> None:
    llm = llm_server(demo_script())
    tokens = write_tokens(tmp_path)
    db = request.getfixturevalue("postgres_url") if database == "postgres" else None
    server = start_server(demo_agents(tmp_path, llm.url), db=db, extra_args=["--auth-tokens", str(tokens)])
    body = {"agent": "weather", "session_token": True}
    alice = _post(server, "/v1/sessions", body, "shared", owner("alice"))
    bob = _post(server, "/v1/sessions", body, "shared", owner("bob"))
    assert alice.status_code == bob.status_code == 201
    assert alice.json()["session_id"] != bob.json()["session_id"]
    assert bob.json()["owner"] == "bob" and "Idempotent-Replayed" not in bob.headers
    again = _post(server, "/v1/sessions", body, "shared", owner("alice"))
    _same(alice, again)
    session_token = again.json()["session_token"]
    assert session_token.startswith("st_")
    assert _sessions(server.db) == 2
    # the session token is not kept in clear beside the key, nor the key itself
    stored = _query(server.db, "SELECT response_body, sealed_secret, key_sha256 FROM sessions_app_idempotencykey")
    text = json.dumps(stored)
    assert session_token not in text and "shared" not in text

    # a session token's keys are its own: alice's "shared" is not its "shared"
    sid = alice.json()["session_id"]
    path = f"/v1/sessions/{sid}/messages"
    by_token = _post(server, path, {"prompt": "Weather in Nice?"}, "shared", bearer(session_token))
    assert by_token.status_code in (200, 202) and "Idempotent-Replayed" not in by_token.headers, by_token.text
    _same(by_token, _post(server, path, {"prompt": "Weather in Nice?"}, "shared", bearer(session_token)))


def test_a_refused_request_keeps_no_key_and_a_key_in_use_answers_409(tmp_path: Path, llm_server, start_server) -> None:
    script = demo_script()
    script["rules"].insert(0, {"when": {"last_contains": "slow"}, "reply": {"delay": 4, "content": "done"}})
    llm = llm_server(script)
    server = start_server(demo_agents(tmp_path, llm.url), env={"AGENTS_IDEMPOTENCY_WAIT_SECONDS": "0.5"})

    refused = _post(server, "/v1/sessions", {"agent": "nobody", "prompt": "hi"}, "k-1")
    assert (refused.status_code, refused.json()["error"]) == (404, "unknown_agent")
    assert _rows(server.db, "sessions_app_idempotencykey") == 0
    taken = _post(server, "/v1/sessions", {"agent": "weather", "prompt": "hi"}, "k-1")
    assert taken.status_code == 201 and "Idempotent-Replayed" not in taken.headers

    slow = {"agent": "weather", "prompt": "slow please"}
    waiting: list[httpx.Response] = []
    first = threading.Thread(target=lambda: waiting.append(_post(server, "/v1/sessions?wait=true", slow, "k-2")))
    first.start()
    wait_until(lambda: _rows(server.db, "sessions_app_idempotencykey") == 2)
    busy = _post(server, "/v1/sessions", slow, "k-2")
    assert (busy.status_code, busy.json()["error"]) == (409, "idempotency_key_in_progress")
    first.join()
    assert waiting[0].status_code == 201 and waiting[0].json()["status"] == "idle"
    _same(waiting[0], _post(server, "/v1/sessions", slow, "k-2"))
    assert _sessions(server.db) == 2


def test_keys_expire(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(demo_script())
    env = {"AGENTS_IDEMPOTENCY_TTL_SECONDS": "1", "AGENTS_IDEMPOTENCY_PRUNE_EVERY_SECONDS": "0.3"}
    server = start_server(demo_agents(tmp_path, llm.url), env=env)
    body = {"agent": "weather"}
    first = _post(server, "/v1/sessions", body, "old")
    assert first.status_code == 201
    _same(first, _post(server, "/v1/sessions", body, "old"))
    # the periodic task deletes the expired key; the key then starts a new request
    wait_until(lambda: _rows(server.db, "sessions_app_idempotencykey") == 0, timeout=30)
    later = _post(server, "/v1/sessions", {"agent": "weather", "prompt": "new"}, "old")
    assert later.status_code == 201 and "Idempotent-Replayed" not in later.headers
    assert _sessions(server.db) == 2
    # once more, after the key's time is over again
    time.sleep(1.2)
    again = _post(server, "/v1/sessions", body, "old")
    assert again.status_code == 201 and "Idempotent-Replayed" not in again.headers
    assert _sessions(server.db) == 3


def test_the_openapi_document_names_the_header_on_each_route_that_starts_or_changes_a_run() -> None:
    from foundation.openapi import openapi_document

    paths = json.loads(json.dumps(openapi_document()))["paths"]
    keyed = {
        (path, method)
        for path, operations in paths.items()
        for method, operation in operations.items()
        if any(p.get("in") == "header" and p["name"] == "Idempotency-Key" for p in operation.get("parameters", []))
    }
    assert keyed == {
        ("/v1/sessions", "post"),
        ("/v1/sessions/import", "post"),
        ("/v1/sessions/{session_id}/messages", "post"),
        ("/v1/sessions/{session_id}/resume", "post"),
        ("/v1/sessions/{session_id}/fork", "post"),
        ("/v1/continuations/{token}", "post"),
    }
    for path, method in keyed:
        responses = paths[path][method]["responses"]
        assert {"400", "409", "422"} <= set(responses), path
        successes = [answer for status, answer in responses.items() if status.startswith("2")]
        assert successes and all("Idempotent-Replayed" in answer["headers"] for answer in successes), path


def test_a_server_killed_during_the_wait_leaves_an_answer_the_retry_gets(
    tmp_path: Path, llm_server, start_server
) -> None:
    script = demo_script()
    script["rules"].insert(0, {"when": {"last_contains": "slow"}, "reply": {"delay": 30, "content": "late"}})
    llm = llm_server(script)
    agents = demo_agents(tmp_path, llm.url)
    server = start_server(agents)
    body = {"agent": "weather", "prompt": "slow please"}
    lost: list[BaseException] = []

    def send() -> None:
        try:
            _post(server, "/v1/sessions?wait=true&timeout=3", body, "crash")
        except httpx.TransportError as error:
            lost.append(error)

    first = threading.Thread(target=send)
    first.start()
    # the session is stored and the request waits for its run: the server dies there
    wait_until(lambda: _query(server.db, "SELECT state FROM sessions_app_idempotencykey") == [("applied",)])
    os.killpg(server.process.proc.pid, signal.SIGKILL)
    first.join()
    assert lost, "the first request got an answer"
    [(sid,)] = _query(server.db, "SELECT id FROM sessions_app_session")

    restarted = start_server(agents, db=server.db)

    def retried() -> httpx.Response | None:
        answer = _post(restarted, "/v1/sessions", body, "crash")
        if answer.status_code == 409:
            assert answer.json()["error"] == "idempotency_key_in_progress"
            return None
        return answer

    answer = wait_until(retried, timeout=60)
    assert answer.status_code == 201 and answer.headers["Idempotent-Replayed"] == "true"
    assert uuid.UUID(answer.json()["session_id"]) == uuid.UUID(sid)
    assert _sessions(restarted.db) == 1
