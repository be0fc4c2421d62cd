"""``agents serve --socket PATH``: the API on a Unix socket too (issue 18; docs/guide-chat.md §1).

The socket is created mode 0600, a stale one is replaced, it is unlinked on SIGTERM, and requests
through it skip the origin check (the file's mode is the trust boundary) but not the tokens.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.harness import ROOT, Processes, Server, base_env, write_agent
from tests.owners import TOKENS, write_tokens

EVIL = "https://evil.example"


def curl(path: Path, url: str, *headers: str) -> tuple[int, dict]:
    """``curl --unix-socket``: the status and the JSON body of a GET."""
    argv = ["curl", "-s", "-w", "\n%{http_code}", "--unix-socket", str(path)]
    for header in headers:
        argv += ["-H", header]
    done = subprocess.run([*argv, f"http://localhost{url}"], capture_output=True, text=True, timeout=60, check=True)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), json.loads(body)


def stale_socket(path: Path) -> None:
    """Leave a socket file nobody listens on, as a killed server would."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()


def test_the_socket_is_private_replaces_a_stale_one_skips_the_origin_check_and_goes_on_sigterm(
    tmp_path: Path, start_server: Callable[..., Server]
) -> None:
    path = tmp_path / "agents.sock"
    stale_socket(path)
    assert stat.S_ISSOCK(path.stat().st_mode)
    server = start_server([write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")], extra_args=["--socket", str(path)])

    status, health = curl(path, "/healthz")
    assert status == 200 and health["ok"] is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # a browser's foreign origin is refused over TCP, not through the socket
    assert server.client.get("/v1/agents", headers={"Origin": EVIL}).json()["error"] == "forbidden_origin"
    status, agents = curl(path, "/v1/agents", f"Origin: {EVIL}")
    assert status == 200 and [agent["slug"] for agent in agents] == ["plain"]

    server.process.proc.send_signal(15)
    assert server.process.proc.wait(30) == 0
    assert not path.exists()


def test_through_the_socket_tokens_are_still_needed(tmp_path: Path, start_server: Callable[..., Server]) -> None:
    path = tmp_path / "agents.sock"
    start_server(
        [write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")],
        extra_args=["--socket", str(path), "--auth-tokens", str(write_tokens(tmp_path))],
    )
    status, body = curl(path, "/v1/agents")
    assert status == 401 and body["error"] == "unauthorized"
    status, agents = curl(path, "/v1/agents", f"Authorization: Bearer {TOKENS['alice']}", f"Origin: {EVIL}")
    assert status == 200 and agents[0]["slug"] == "plain"


def test_a_socket_path_that_is_not_a_stale_socket_is_refused_at_start(tmp_path: Path, processes: Processes) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    argv = [sys.executable, "-m", "agentsite.cli", "serve", "--db", str(tmp_path / "a.db"), "--agent-file", str(agent)]
    done = processes.run(
        [*argv, "--socket", str(path)], cwd=ROOT, env=base_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert f"agents serve: --socket {path} exists and is not a socket" in done.stderr
    assert path.read_text() == "keep me"

    # a live server's socket is not taken over either
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(str(tmp_path / "live.sock"))
        live.listen(1)
        done = processes.run(
            [*argv, "--socket", str(tmp_path / "live.sock")],
            cwd=ROOT, env=base_env(), capture_output=True, text=True, timeout=60,
        )
    assert done.returncode == 2
    assert "another server is listening on it" in done.stderr
