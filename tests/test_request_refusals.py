"""Requests the HTTP server or the origin check refuse, each in the error shape with nothing stored
(docs/api.md §1.5, §2, §10.7): an origin whose host only begins with a loopback address, control
characters in a header value and other malformed requests, static paths that climb out, and a
body that arrives too slowly. Over real HTTP, with raw sockets where a client library would not
send the request."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.harness import Server, free_port, write_agent
from tests.owners import refused, snapshot, ws_open

# one server for the module: every test here refuses requests and changes nothing
pytestmark = pytest.mark.integration

BODY_TIMEOUT = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("refusals")
    # no run is started: the model's address is never called
    agent = write_agent(tmp, "plain", f"http://127.0.0.1:{free_port()}/v1")
    started = Server([agent], tmp, env={"AGENTS_BODY_TIMEOUT": str(BODY_TIMEOUT)})
    yield started
    started.stop()


def _raw(server: Server, request: bytes, timeout: float = 30) -> bytes:
    """Send ``request`` on a fresh connection and read the whole answer (the server closes it)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def _error(answer: bytes, status: bytes) -> dict[str, str]:
    """The JSON error of a whole raw answer (a Content-Length or a chunked body)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status), answer
    assert b"content-type: application/json" in head.lower(), answer
    if b"transfer-encoding: chunked" in head.lower():
        size, _, rest = body.partition(b"\r\n")
        body = rest[: int(size, 16)]
    payload = json.loads(body)
    assert set(payload) == {"error", "message"} and payload["message"], payload
    return payload


def test_an_origin_whose_host_only_begins_with_a_loopback_address_is_refused(server: Server) -> None:
    ws = f"ws://127.0.0.1:{server.port}/v1/ws/events"
    for origin in ("http://[::1].evil.com", "http://[::1]x:80", "http://localhost.evil.com", "http://127.0.0.1@evil.com"):
        headers = {"Origin": origin}
        refused(server, "GET", "/v1/sessions", 403, "forbidden_origin", headers=headers)
        refused(server, "POST", "/v1/sessions", 403, "forbidden_origin", headers=headers, body={"agent": "plain"})
        refused(server, "OPTIONS", "/v1/sessions", 403, "forbidden_origin", headers=headers)
        assert ws_open(ws, origin=origin) == 403, origin
    # the loopback origins still pass, bracketed IPv6 included
    for origin in ("http://[::1]:8000", "http://[::1]", "http://localhost:3000"):
        assert server.client.get("/v1/sessions", headers={"Origin": origin}).status_code == 200, origin
        assert json.loads(ws_open(ws, origin=origin))["event"] == "replay"


@pytest.mark.parametrize("value", [b"a\x00b", b"a\x01b", b"a\x1fb", b"a\x7fb", b"a\x0bb"])
def test_a_control_character_in_a_header_value_is_a_bad_request(server: Server, value: bytes) -> None:
    before = snapshot(server.db)
    body = b'{"agent": "plain", "prompt": "hi"}'
    answer = _raw(
        server,
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + b"X-Note: " + value + b"\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode() + body,
    )
    assert _error(answer, b"400") == {
        "error": "bad_request",
        "message": "header values must not contain control characters",
    }
    assert snapshot(server.db) == before
    # a tab is a value's whitespace, not a control character to refuse
    assert b"HTTP/1.1 200 " in _raw(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Note: a\tb\r\n"
                                    b"Connection: close\r\n\r\n")


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nNo colon here\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Name: x\r\n\r\n",
        b"GET /healthz\r\n\r\n",
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
        b"Content-Length: 12\r\n\r\nnot multipar",
    ],
)
def test_twisted_refusals_of_malformed_requests_are_in_the_error_shape(server: Server, request_bytes: bytes) -> None:
    assert _error(_raw(server, request_bytes), b"400") == {"error": "bad_request", "message": "malformed HTTP request"}


@pytest.mark.parametrize(
    "path",
    [
        b"/static/%2e%2e/%2e%2e/etc/passwd",
        b"/static/%2e%2e/agentsite/settings/base.py",
        b"/static/..%2f..%2fpyproject.toml",
        b"/static/%00",
    ],
)
def test_a_static_path_that_climbs_out_is_not_found(server: Server, path: bytes) -> None:
    answer = _raw(server, b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert _error(answer, b"404")["error"] == "not_found"
    # the admin's own files are still served
    assert server.client.get("/static/admin/css/base.css").status_code == 200


def _trickle(server: Server) -> tuple[bytes, float]:
    """Send a head announcing 200 bytes, then a byte every half second; the answer, and the
    seconds from the head to the end of the connection."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=0.5) as connection:
        connection.sendall(
            b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200\r\n\r\n"
        )
        started = time.monotonic()
        answer = b""
        while time.monotonic() < started + BODY_TIMEOUT + 30:
            try:
                connection.sendall(b" ")
                chunk = connection.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not chunk:
                break
            answer += chunk
        return answer, time.monotonic() - started


def test_a_body_that_arrives_too_slowly_is_answered_408_and_one_in_time_is_read(server: Server) -> None:
    before = snapshot(server.db)
    answer, elapsed = _trickle(server)
    assert _error(answer, b"408") == {
        "error": "request_timeout",
        "message": f"the request body did not arrive within {BODY_TIMEOUT} seconds",
    }
    assert BODY_TIMEOUT - 0.5 <= elapsed < BODY_TIMEOUT + 15, elapsed
    assert snapshot(server.db) == before

    # a body that comes in time is read, and its connection kept for the next request: the
    # body's timer does not outlive its body
    body = json.dumps({"agent": "nobody", "prompt": "hi"}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(
            b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        time.sleep(1)
        connection.sendall(body)
        first = b""
        while b'"unknown_agent"' not in first:
            first += connection.recv(65536)
        time.sleep(BODY_TIMEOUT + 1)
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        second = b""
        while chunk := connection.recv(65536):
            second += chunk
    assert first.startswith(b"HTTP/1.1 404 ")
    assert second.startswith(b"HTTP/1.1 200 "), second
