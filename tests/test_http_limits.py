"""Bad clients cannot hurt the server: oversized heads are answered, slow ones closed (issue 11,
acceptance 6; docs/api.md §1.5)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from devtools.mockllm import MockLlmServer
from tests.harness import Server, write_agent


def _raw(server: Server, head: bytes) -> bytes:
    """Send ``head`` on a fresh connection and read the whole answer (the server closes it)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(head)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def test_oversized_heads_are_answered_in_the_error_shape(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server([write_agent(tmp_path, "plain", llm_server({"rules": []}).url)])
    big_header = server.client.get("/v1/sessions", headers={"X-Padding": "a" * 20_000})
    assert big_header.status_code == 431
    too_large = {"error": "headers_too_large", "message": "the request headers are larger than 16384 bytes"}
    assert big_header.json() == too_large
    long_path = server.client.get("/v1/sessions/" + "a" * 20_000)
    assert long_path.status_code == 414
    assert long_path.json() == {"error": "uri_too_long", "message": "the request line is longer than 16384 bytes"}
    # many headers, each short, that add up to more than the limit
    many = {f"X-Header-{n}": "b" * 100 for n in range(200)}
    assert server.client.get("/v1/sessions", headers=many).status_code == 431
    raw = _raw(server, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-A: " + b"c" * 17_000 + b"\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert raw.endswith(b'{"error":"headers_too_large","message":"the request headers are larger than 16384 bytes"}')
    # the server goes on answering
    assert server.client.get("/healthz").status_code == 200


def test_slow_connections_are_closed_after_the_timeout_while_the_server_answers(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    server = start_server(
        [write_agent(tmp_path, "plain", llm_server({"rules": []}).url)], env={"AGENTS_HEADER_TIMEOUT": "10"}
    )
    pid = server.process.proc.pid
    before = len(os.listdir(f"/proc/{pid}/fd"))
    slow: list[socket.socket] = []
    latencies: list[float] = []
    opening = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=10) as probe:
        for _ in range(2000):
            connection = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            # a head that never ends
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            slow.append(connection)
            if len(slow) % 100 == 0:
                started = time.monotonic()
                assert probe.get("/healthz").status_code == 200
                latencies.append(time.monotonic() - started)
        print(f"2000 slow connections opened in {time.monotonic() - opening:.1f} s")
        # every one of them holds a descriptor of the server until its time is up
        assert len(os.listdir(f"/proc/{pid}/fd")) >= before + 1900
        deadline = time.monotonic() + 30
        # what stays open beside the listening socket: database files of the request threads
        while time.monotonic() < deadline and len(os.listdir(f"/proc/{pid}/fd")) > before + 64:
            started = time.monotonic()
            assert probe.get("/healthz").status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(0.2)
    closed = 0
    for connection in slow:
        connection.settimeout(5)
        try:
            closed += connection.recv(1) == b""
        except ConnectionResetError:
            closed += 1
        connection.close()
    assert closed == 2000
    assert len(os.listdir(f"/proc/{pid}/fd")) <= before + 64
    print(f"/healthz with 2000 slow connections: max {max(latencies) * 1000:.0f} ms, "
          f"median {sorted(latencies)[len(latencies) // 2] * 1000:.0f} ms over {len(latencies)} requests")
    assert max(latencies) < 1.0
