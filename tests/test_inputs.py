"""Odd input that once broke the server: each is refused cleanly or stored intact."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent

SCRIPT = {
    "rules": [
        {"when": {"last_contains": "slow"}, "reply": {"delay": 3, "content": "finally"}},
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}},
        {"reply": {"content": "answered {last_content}"}},
    ]
}


@pytest.fixture(params=["sqlite", "postgres"])
def server(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
) -> Server:
    llm = llm_server(SCRIPT)
    agent = write_agent(tmp_path, "deferring", llm.url, toolCallPolicyConfig={"default": {"tag": "defer"}})
    db = request.getfixturevalue("postgres_url") if request.param == "postgres" else None
    return start_server([agent], db=db)


def _create(server: Server, prompt: str = "hello") -> dict:
    answer = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "deferring", "prompt": prompt}))
    assert answer.status_code == 201, answer.text
    return answer.json()


def _error(answer, status: int, code: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == code


def test_nul_characters_are_stored_intact(server: Server) -> None:
    view = _create(server)
    token = view["pending"][0]["continuation_token"]
    result = {"type": "mixed", "parts": [{"type": "text", "text": "nul\u0000inside"}]}
    done = server.client.post(f"/v1/continuations/{token}?wait=true", content=json.dumps({"result": result}))
    assert done.status_code == 200, done.text
    user_turn = done.json()["session"]["turns"][1]
    assert user_turn["contents"]["userToolResponses"][0][1] == result
    again = server.client.get(f"/v1/sessions/{view['session_id']}").json()
    assert again["session"] == done.json()["session"]
    _error(server.client.get("/v1/sessions?agent=%00"), 400, "bad_request")


def test_bodies_that_are_not_acceptable_json(server: Server) -> None:
    view = _create(server)
    token = view["pending"][0]["continuation_token"]
    before = server.client.get(f"/v1/sessions/{view['session_id']}").json()
    _error(
        server.client.post(f"/v1/continuations/{token}", content=b'{"result": "lone \\ud800 here"}'), 400, "bad_request"
    )
    _error(server.client.post("/v1/sessions", content=b"[" * 100000 + b"]" * 100000), 400, "bad_request")
    _error(
        server.client.post("/v1/sessions", content=b'{"agent": "deferring", "run": "none", "x": ' + b"7" * 5000 + b"}"),
        400,
        "bad_request",
    )
    media = {"agent": "deferring", "prompt": "x", "media": [{"mime": "image/png", "base64": "!!!notb64"}]}
    _error(server.client.post("/v1/sessions", content=json.dumps(media)), 400, "bad_request")
    bad_media = {"result": {"type": "media", "mimeType": "image/png", "base64Data": "!!!"}}
    _error(server.client.post(f"/v1/continuations/{token}", content=json.dumps(bad_media)), 400, "bad_request")
    assert server.client.get(f"/v1/sessions/{view['session_id']}").json() == before


def test_any_content_type_and_chunked_bodies_are_read_as_json(server: Server) -> None:
    body = json.dumps({"agent": "deferring", "prompt": "typed", "run": "none"})
    # multipart/form-data is left out: the HTTP server (Twisted, under daphne) parses such bodies
    # itself and refuses a malformed one with 400 bad_request before the application sees it
    for content_type in ("application/x-www-form-urlencoded", "text/plain", "application/octet-stream"):
        answer = server.client.post("/v1/sessions", content=body, headers={"Content-Type": content_type})
        assert answer.status_code == 201, (content_type, answer.text)
        assert answer.json()["session"]["turns"][0]["contents"]["userQuery"] == "typed"

    def chunks():
        yield body[:10].encode()
        yield body[10:].encode()

    chunked = server.client.post("/v1/sessions", content=chunks())
    assert chunked.request.headers.get("transfer-encoding") == "chunked"
    assert chunked.status_code == 201, chunked.text


def test_a_chunked_body_over_the_limit_is_refused(tmp_path: Path, llm_server, start_server) -> None:
    llm = llm_server(SCRIPT)
    server = start_server([write_agent(tmp_path, "deferring", llm.url)], env={"AGENTS_MAX_BODY_BYTES": "1000"})

    def chunks():
        for _ in range(20):
            yield b"x" * 100

    _error(server.client.post("/v1/sessions", content=chunks()), 413, "payload_too_large")


def test_methods_and_plain_reads(server: Server) -> None:
    assert server.client.post("/healthz").status_code == 405
    slow = server.client.post("/v1/sessions", content=json.dumps({"agent": "deferring", "prompt": "slow"}))
    assert slow.status_code == 201 and slow.json()["status"] == "running"
    # a plain read answers 200 even while the run goes on; with wait it is 202 at the timeout
    plain = server.client.get(f"/v1/sessions/{slow.json()['session_id']}")
    assert plain.status_code == 200 and plain.json()["status"] == "running"
    waited = server.client.get(f"/v1/sessions/{slow.json()['session_id']}?wait=true&timeout=0.2")
    assert waited.status_code == 202


def test_a_raw_request_without_a_body_reads_as_defaults(server: Server) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as conn:
        request = f"POST /v1/sessions HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        conn.sendall(request.encode())
        answer = conn.recv(65536).decode()
    assert answer.startswith("HTTP/1.1 400")
    assert '{"error":"bad_request","message":"agent: This field is required."}' in answer
