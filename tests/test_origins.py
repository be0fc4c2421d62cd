"""The origin check and CORS, with and without authentication (issue: owners and operators, acceptance 3).

Browsers are played by requests carrying an ``Origin`` header (and ``OPTIONS`` preflights), over
real HTTP and websockets to ``agents serve``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent
from tests.owners import TOKENS, owner, refused, write_tokens, ws_open
from tests.streams import SseReader

APP = "https://app.example.com"
LOCAL_APP = "http://localhost:5173"
PREFLIGHT = {
    "access-control-allow-methods": "GET, POST, PUT, DELETE, OPTIONS",
    "access-control-allow-headers": "Authorization, Content-Type, Idempotency-Key, Last-Event-ID",
    "access-control-max-age": "600",
}
CORS_HEADERS = ("access-control-allow-origin", "access-control-expose-headers")


@pytest.fixture
def agent(tmp_path: Path, llm_server: Callable[..., MockLlmServer]) -> Path:
    llm = llm_server({"rules": [{"reply": {"content": "hello"}}]})
    return write_agent(tmp_path, "plain", llm.url)


def _with_origin(origin: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = dict(extra or {})
    if origin is not None:
        headers["Origin"] = origin
    return headers


def _assert_cors(answer: httpx.Response, origin: str) -> None:
    assert answer.headers["access-control-allow-origin"] == origin
    assert answer.headers["access-control-expose-headers"] == "Location, Idempotent-Replayed"
    assert "Origin" in [v.strip() for v in answer.headers["vary"].split(",")]


def _assert_no_cors(answer: httpx.Response) -> None:
    assert not any(name in answer.headers for name in CORS_HEADERS), dict(answer.headers)


def test_without_auth_only_loopback_and_listed_origins_get_in(agent: Path, start_server: Callable[..., Server]) -> None:
    server = start_server([agent], extra_args=["--cors-origin", APP, "--cors-origin", LOCAL_APP])
    body = json.dumps({"agent": "plain", "prompt": "hi"})
    # no Origin (curl, servers) and loopback origins, any scheme and port: in, without CORS headers
    for origin in (None, "http://localhost:3000", "https://127.0.0.1", "http://[::1]:8000", "http://LOCALHOST"):
        answer = server.client.get("/v1/sessions", headers=_with_origin(origin))
        assert answer.status_code == 200, (origin, answer.text)
        _assert_no_cors(answer)
    # unlisted, non-loopback origins: 403 forbidden_origin, nothing stored
    for origin in (
        "https://evil.example",
        "null",
        "https://app.example.com:8443",
        "http://app.example.com",
        "https://app.example.com.evil.example",
        "http://localhost.evil.example",
        "http://127.0.0.2",
        "not an origin",
    ):
        refused(
            server, "POST", "/v1/sessions", 403, "forbidden_origin", headers=_with_origin(origin), body=json.loads(body)
        )
        refused(server, "GET", "/v1/agents", 403, "forbidden_origin", headers=_with_origin(origin))
        refused(server, "OPTIONS", "/v1/sessions", 403, "forbidden_origin", headers=_with_origin(origin))
    # the three open paths are answered before the check
    evil = _with_origin("https://evil.example")
    assert server.client.get("/healthz", headers=evil).status_code == 200
    assert server.client.get("/openapi.json", headers=evil).status_code == 200
    page = server.client.get("/", headers=evil)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")

    # a listed origin: in, with the CORS headers on answers of every kind
    created = server.client.post("/v1/sessions?wait=true", headers=_with_origin(APP), content=body)
    assert created.status_code == 201
    _assert_cors(created, APP)
    assert created.headers["location"] == f"/v1/sessions/{created.json()['session_id']}"
    # the host is case-insensitive; the header echoes what the browser sent
    shouting = "https://APP.Example.com"
    _assert_cors(server.client.get("/v1/agents", headers=_with_origin(shouting)), shouting)
    missing = server.client.get(f"/v1/sessions/{uuid.uuid4()}", headers=_with_origin(LOCAL_APP))
    assert missing.status_code == 404
    _assert_cors(missing, LOCAL_APP)
    bad = server.client.post("/v1/sessions", headers=_with_origin(APP), content="{")
    assert bad.status_code == 400
    _assert_cors(bad, APP)
    _assert_cors(server.client.get("/healthz", headers=_with_origin(APP)), APP)
    stream = SseReader(f"{server.url}/v1/sessions/{created.json()['session_id']}/events", headers=_with_origin(APP))
    assert stream.status == 200
    assert stream.response_headers["access-control-allow-origin"] == APP
    assert stream.response_headers["access-control-expose-headers"] == "Location, Idempotent-Replayed"
    stream.close()

    # preflights: 204 on any path, before anything else
    for path in ("/v1/sessions", f"/v1/sessions/{uuid.uuid4()}/messages", "/no/such/path"):
        listed = server.client.options(path, headers=_with_origin(APP, {"Access-Control-Request-Method": "POST"}))
        assert listed.status_code == 204 and listed.content == b""
        assert {k: listed.headers[k] for k in PREFLIGHT} == PREFLIGHT
        _assert_cors(listed, APP)
        local = server.client.options(path, headers=_with_origin("http://localhost:1234"))
        assert local.status_code == 204 and {k: local.headers[k] for k in PREFLIGHT} == PREFLIGHT
        _assert_no_cors(local)

    # websockets: the same origin rule
    ws = server.url.replace("http", "ws") + "/v1/ws/events"
    assert ws_open(ws, origin="https://evil.example") == 403
    assert json.loads(ws_open(ws, origin=APP))["event"] == "replay"
    assert json.loads(ws_open(ws, origin="http://localhost:9999"))["event"] == "replay"
    assert json.loads(ws_open(ws))["event"] == "replay"


def test_with_auth_origins_are_not_checked_and_only_listed_ones_get_cors(
    tmp_path: Path, agent: Path, start_server: Callable[..., Server]
) -> None:
    server = start_server([agent], extra_args=["--auth-tokens", str(write_tokens(tmp_path)), "--cors-origin", APP])
    evil = "https://evil.example"
    # any origin passes the (absent) origin check; the token decides
    answer = server.client.get("/v1/sessions", headers=_with_origin(evil, owner("alice")))
    assert answer.status_code == 200
    _assert_no_cors(answer)
    refused(server, "GET", "/v1/sessions", 401, "unauthorized", headers=_with_origin(evil))
    # a listed origin gets the headers on errors too
    unauthorized = server.client.get("/v1/sessions", headers=_with_origin(APP))
    assert unauthorized.status_code == 401
    _assert_cors(unauthorized, APP)
    created = server.client.post(
        "/v1/sessions?wait=true",
        headers=_with_origin(APP, owner("alice")),
        content=json.dumps({"agent": "plain", "prompt": "hi"}),
    )
    assert created.status_code == 201
    _assert_cors(created, APP)
    # preflights need no token; unlisted origins get no CORS headers
    for origin, listed in ((APP, True), (evil, False), ("http://localhost:3000", False)):
        preflight = server.client.options("/v1/sessions", headers=_with_origin(origin))
        assert preflight.status_code == 204 and {k: preflight.headers[k] for k in PREFLIGHT} == PREFLIGHT
        if listed:
            _assert_cors(preflight, origin)
        else:
            _assert_no_cors(preflight)
    # the event stream cross-origin, with the token in the query (EventSource sends no headers)
    sid = created.json()["session_id"]
    stream = SseReader(f"{server.url}/v1/sessions/{sid}/events?access_token={TOKENS['alice']}", headers={"Origin": APP})
    assert stream.status == 200
    assert stream.response_headers["access-control-allow-origin"] == APP
    stream.wait_for(lambda e: e and e[0]["event"] == "snapshot")
    stream.close()
    everything = SseReader(f"{server.url}/v1/events?access_token={TOKENS['alice']}", headers={"Origin": APP})
    assert everything.status == 200 and everything.response_headers["access-control-allow-origin"] == APP
    everything.close()
    # websockets: no origin check with auth, the token decides
    ws = server.url.replace("http", "ws") + "/v1/ws/events"
    assert json.loads(ws_open(f"{ws}?access_token={TOKENS['alice']}", origin=evil))["event"] == "replay"
    assert ws_open(ws, origin=APP) == 403


def test_a_cors_wildcard_lets_any_origin_in_without_auth(agent: Path, start_server: Callable[..., Server]) -> None:
    server = start_server([agent], extra_args=["--cors-origin", "*"])
    for origin in ("https://anywhere.example", "http://10.0.0.1:8080"):
        answer = server.client.get("/v1/agents", headers=_with_origin(origin))
        assert answer.status_code == 200
        # the origin is echoed, never a literal *
        _assert_cors(answer, origin)
