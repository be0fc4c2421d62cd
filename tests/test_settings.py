"""Configuration from the environment: the data directory, the secret key and the allowed hosts.

The helpers are tested in this process; the startup refusal and the Host check on real
``agents serve`` processes.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured

from agentsite.secret_key import KEY_FILE, ensure_secret_key, secret_key
from foundation.env import data_dir, database_url, default_allowed_hosts
from tests.harness import PROCESS_TIMEOUT, ROOT, Process, Server, base_env, free_port, wait_until, write_agent

POSTGRES = "postgres://agents@db.example:5432/agents"


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No configuration from the developer's environment; the working directory is ``tmp_path``."""
    for name in ("DJANGO_SECRET_KEY", "AGENTS_DATA_DIR", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


@pytest.mark.parametrize(
    ("bind", "extra"),
    [
        ("127.0.0.1", []),
        ("localhost", []),
        ("::1", []),
        ("0.0.0.0", []),
        ("::", []),
        ("192.168.1.20", ["192.168.1.20"]),
        ("fd00::20", ["[fd00::20]"]),
        ("[fd00::20]", ["[fd00::20]"]),
        ("Agents.Example", ["agents.example"]),
    ],
)
def test_the_default_allowed_hosts_are_the_loopback_names_and_a_bound_address(bind: str, extra: list[str]) -> None:
    assert default_allowed_hosts(bind) == ["localhost", "127.0.0.1", "[::1]", *extra]


def test_the_data_directory_is_the_databases_unless_given(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert data_dir() == tmp_path
    clean_env.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'sub' / 'x.db'}")
    assert data_dir() == tmp_path / "sub"
    clean_env.setenv("DATABASE_URL", POSTGRES)
    assert data_dir() is None
    clean_env.setenv("AGENTS_DATA_DIR", "state")
    assert data_dir() == tmp_path / "state"


def test_database_url_takes_a_sqlite_file_path_as_well_as_a_url(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert database_url() == f"sqlite:///{tmp_path / 'agents-server.db'}"
    clean_env.setenv("DATABASE_URL", "data/agents.db")
    assert database_url() == f"sqlite:///{tmp_path / 'data' / 'agents.db'}"
    assert data_dir() == tmp_path / "data"
    clean_env.setenv("DATABASE_URL", str(tmp_path / "abs.db"))
    assert database_url() == f"sqlite:///{tmp_path / 'abs.db'}"
    clean_env.setenv("DATABASE_URL", POSTGRES)
    assert database_url() == POSTGRES
    clean_env.setenv("DATABASE_URL", "sqlite:///:memory:")
    assert database_url() == "sqlite:///:memory:"


def test_on_sqlite_a_key_is_made_once_private_and_reused(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert secret_key() == ""
    ensure_secret_key()
    key_file = tmp_path / KEY_FILE
    key = secret_key()
    assert len(key) >= 50 and key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    ensure_secret_key()
    assert secret_key() == key
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY_FILE]


def test_the_environment_s_key_wins_and_no_file_is_made(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("DJANGO_SECRET_KEY", "from-the-environment")
    ensure_secret_key()
    assert secret_key() == "from-the-environment"
    assert not (tmp_path / KEY_FILE).exists()


def test_with_postgresql_a_key_is_never_made_up(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("DATABASE_URL", POSTGRES)
    with pytest.raises(ImproperlyConfigured, match="set DJANGO_SECRET_KEY"):
        ensure_secret_key()
    clean_env.setenv("AGENTS_DATA_DIR", str(tmp_path / "state"))
    with pytest.raises(ImproperlyConfigured, match="set DJANGO_SECRET_KEY"):
        ensure_secret_key()
    assert not (tmp_path / "state").exists()


def test_with_postgresql_a_key_file_in_the_data_directory_is_used(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("DATABASE_URL", POSTGRES)
    clean_env.setenv("AGENTS_DATA_DIR", str(tmp_path))
    (tmp_path / KEY_FILE).write_text("shared-by-every-process\n")
    ensure_secret_key()
    assert secret_key() == "shared-by-every-process"


def test_an_empty_key_file_is_refused(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_text("\n")
    with pytest.raises(ImproperlyConfigured, match="is empty"):
        secret_key()


def _serve_until_refused(agent: Path, port_flag: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``agents serve`` with ``agent`` and ``port_flag`` (``--port=N``), which these tests expect
    to refuse to start, and return what it did."""
    return subprocess.run(
        [sys.executable, "-m", "agentsite.cli", "serve", "--agent-file", str(agent), port_flag],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )


@pytest.mark.integration
def test_serve_on_postgresql_without_a_key_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    result = _serve_until_refused(agent, f"--port={free_port()}", cwd=ROOT, env=base_env(DATABASE_URL=POSTGRES))
    assert result.returncode == 2
    assert result.stderr.startswith("agents serve: set DJANGO_SECRET_KEY")
    assert len(result.stderr.splitlines()) == 1


@pytest.mark.integration
def test_serve_on_a_taken_port_stops_with_status_2_saying_so(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _serve_until_refused(agent, f"--port={port}", cwd=tmp_path, env=base_env())
    assert result.returncode == 2, result.stderr
    said = [line for line in result.stderr.splitlines() if line.startswith("agents serve: cannot listen")]
    assert said and said[0].startswith(f"agents serve: cannot listen on 127.0.0.1:{port}: "), result.stderr


@pytest.mark.integration
@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_serve_refuses_a_port_that_is_not_one(tmp_path: Path, port: str) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    result = _serve_until_refused(agent, f"--port={port}", cwd=tmp_path, env=base_env())
    assert result.returncode == 2
    assert "argument --port" in result.stderr and "Traceback" not in result.stderr


def test_a_server_keeps_its_key_beside_its_database_across_restarts(
    tmp_path: Path, start_server: Callable[..., Server]
) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    first = start_server([agent])
    key = (tmp_path / KEY_FILE).read_text()
    first.stop()
    start_server([agent], db=first.db)
    assert (tmp_path / KEY_FILE).read_text() == key


def test_a_loopback_server_answers_its_loopback_names_only(tmp_path: Path, start_server: Callable[..., Server]) -> None:
    server = start_server([write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")])
    for host in ("localhost", "127.0.0.1", "[::1]"):
        assert server.client.get("/v1/agents", headers={"Host": f"{host}:{server.port}"}).status_code == 200
    refused = server.client.get("/v1/agents", headers={"Host": f"rebound.example:{server.port}"})
    assert refused.status_code == 400
    assert refused.json() == {
        "error": "bad_request",
        "message": "the Host header names a host this server does not answer to",
    }
    # any client can send a bad Host: one warning line, never a traceback
    lines = [line for line in server.process.output().splitlines() if "rebound.example" in line]
    assert lines and all(json.loads(line)["level"] == "warning" for line in lines), lines
    assert "Traceback" not in server.process.output()


def test_allowed_hosts_from_the_environment(tmp_path: Path, start_server: Callable[..., Server]) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    server = start_server([agent], env={"DJANGO_ALLOWED_HOSTS": "127.0.0.1, agents.example"})
    assert server.client.get("/v1/agents", headers={"Host": "agents.example"}).status_code == 200
    assert server.client.get("/v1/agents", headers={"Host": "localhost"}).status_code == 400


@pytest.mark.integration
def test_a_server_bound_to_an_address_answers_requests_naming_it(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    port = free_port()
    argv = [sys.executable, "-m", "agentsite.cli", "serve", "--bind", "127.0.0.2", "--port", str(port)]
    argv += ["--agent-file", str(agent), "--db", str(tmp_path / "agents-server.db")]
    process = Process(argv, base_env(), tmp_path / "server.log")
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.2:{port}/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, timeout=PROCESS_TIMEOUT, interval=0.1)
        assert httpx.get(f"http://127.0.0.2:{port}/v1/agents").status_code == 200
    finally:
        process.stop()


@pytest.mark.integration
def test_serve_on_port_0_logs_the_port_the_kernel_chose_and_answers_there(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, "plain", "http://127.0.0.1:9/v1")
    argv = [sys.executable, "-m", "agentsite.cli", "serve", "--port", "0", "--agent-file", str(agent)]
    argv += ["--db", str(tmp_path / "agents-server.db")]
    process = Process(argv, base_env(), tmp_path / "server.log")
    try:

        def listening() -> dict | None:
            lines = [json.loads(line) for line in process.output().splitlines() if line.startswith("{")]
            return next((line for line in lines if line["kind"] == "server.listening"), None)

        line = wait_until(listening, timeout=PROCESS_TIMEOUT, interval=0.1)
        assert line["bind"] == "127.0.0.1" and 0 < line["port"] < 65536
        assert httpx.get(f"http://127.0.0.1:{line['port']}/healthz", timeout=30).json()["ok"] is True
    finally:
        process.stop()
