"""Real processes for integration tests: the server (daphne), Celery workers, agent files.

Nothing here patches the server: tests talk to it over HTTP, and the LLM is the scripted
OpenAI-compatible server (``devtools.mockllm``) running as a real HTTP server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from tests import contract

ROOT = Path(__file__).resolve().parent.parent
#: The agents-exe agent and session files used as they are: ``../shared/fixtures`` beside the
#: project (as CI lays it out), or the folder named by AGENTS_TEST_FIXTURES.
FIXTURES = Path(os.environ.get("AGENTS_TEST_FIXTURES", ROOT.parent / "shared" / "fixtures"))
#: Seconds a test waits for a process it started to be ready, or to finish, before it fails: a
#: guard against hangs, not a speed check. On a loaded machine, with the suite running in
#: parallel, starting the ``agents`` command line alone can take tens of seconds.
PROCESS_TIMEOUT = 240.0
POSTGRES_URL = os.environ.get("TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_agent(directory: Path, slug: str, model_url: str, **extra: Any) -> Path:
    """Write an enveloped agent file ``<directory>/<slug>.json`` and return its path."""
    contents = {
        "slug": slug,
        "apiKeyId": "test",
        "flavor": "OpenAIv1",
        "modelUrl": model_url,
        "modelName": "scripted",
        "announce": f"the {slug} test agent",
        "systemPrompt": [f"You are {slug}."],
        **extra,
    }
    path = directory / f"{slug}.json"
    path.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": contents}, indent=2))
    return path


def write_tool(directory: Path, name: str, describe: dict[str, Any], run_body: str) -> Path:
    """Write an executable bash tool speaking protocol v1; ``run_body`` is the ``run`` branch."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(
        "#!/usr/bin/env bash\nset -eu\n"
        f"if [ \"${{1:-}}\" = describe ]; then\ncat <<'JSON'\n{json.dumps(describe)}\nJSON\nexit 0\nfi\n"
        "shift\n"
        f"{run_body}\n"
    )
    path.chmod(0o755)
    return path


class Process:
    """A child process with its output in a log file, stopped with SIGTERM then SIGKILL."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log_path: Path, cwd: Path = ROOT) -> None:
        self.log_path = log_path
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            list(argv), env=env, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self) -> str:
        """Everything the process wrote so far."""
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it if it is still there after ``timeout`` seconds."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


class Processes:
    """The processes one test starts, through the ``processes`` fixture (docs/testing.md §1): the
    fixture marks its users as integration tests, and kills at teardown what is still running.

    ``run`` and ``popen`` take the arguments of ``subprocess.run`` and ``subprocess.Popen``.
    """

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[Any]] = []

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` to its end, as ``subprocess.run`` does; returns its completed process."""
        return subprocess.run(list(argv), **kwargs)

    def popen(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` as ``subprocess.Popen`` does; killed at teardown if it is still running."""
        process = subprocess.Popen(list(argv), **kwargs)
        self.started.append(process)
        return process

    def stop(self) -> None:
        """Kill and reap every process started by ``popen`` that has not ended."""
        for process in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


#: The secret key of the processes that share a PostgreSQL database, which the server refuses to
#: make up; on SQLite each server keeps its own beside the database.
SHARED_SECRET_KEY = "agents-server-integration-tests"


def base_env(**extra: str) -> dict[str, str]:
    """The test processes' environment: this one, without settings a developer may have set (nor
    the test settings pytest-django names: the processes under test use the server's own)."""
    prefixes = ("AGENTS_", "DATABASE_URL", "REDIS_URL", "DJANGO_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update({"PYTHONUNBUFFERED": "1", "AGENTS_LOG_LEVEL": "INFO"})
    env.update(extra)
    return env


def _database_env(db: str) -> dict[str, str]:
    """What a process on the database ``db`` (a SQLite path or a URL) needs besides ``--db``."""
    return {"DJANGO_SECRET_KEY": SHARED_SECRET_KEY} if db.startswith("postgres") else {}


class Server:
    """``agents serve`` as a real process; ``client`` talks to it over HTTP."""

    def __init__(
        self,
        agent_files: Sequence[Path],
        tmp: Path,
        *,
        db: str | None = None,
        env: dict[str, str] | None = None,
        extra_args: Sequence[str] = (),
        cwd: Path = ROOT,
        port: int | None = None,
    ) -> None:
        # ``--port 0`` unless a test needs a known port (a restart on the same one): the kernel
        # picks a free port at bind time, so two servers started at once never share one, and a
        # port picked earlier cannot be taken by someone else's server in between
        self.db = db or str(tmp / "agents-server.db")
        argv = [sys.executable, "-m", "agentsite.cli", "serve", "--port", str(port or 0), "--db", self.db]
        for path in agent_files:
            argv += ["--agent-file", str(path)]
        argv += list(extra_args)
        environment = base_env(**{**_database_env(self.db), **(env or {})})
        self.process = Process(argv, environment, tmp / f"server-{uuid.uuid4().hex[:8]}.log", cwd)
        self.port = self._wait_listening()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = httpx.Client(base_url=self.url, timeout=60, event_hooks=contract.hooks())
        self._wait_ready()

    def _wait_listening(self, timeout: float = PROCESS_TIMEOUT) -> int:
        """The TCP port this process bound, from its ``server.listening`` log line: proof that what
        answers on that port is this server and not another test's."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.process.output().splitlines():
                if '"server.listening"' in line and '"port"' in line:
                    return int(json.loads(line)["port"])
            if self.process.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.proc.returncode}:\n{self.process.output()}")
            time.sleep(0.05)
        raise RuntimeError(f"server not listening after {timeout}s:\n{self.process.output()}")

    def _wait_ready(self, timeout: float = PROCESS_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.proc.returncode}:\n{self.process.output()}")
            try:
                if self.client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.process.output()}")

    def stop(self) -> None:
        """Stop the server process."""
        self.client.close()
        self.process.stop()


class Worker:
    """``agents worker`` as a real process (scaled-out mode)."""

    def __init__(self, agent_files: Sequence[Path], tmp: Path, *, db: str, env: dict[str, str]) -> None:
        argv = [
            sys.executable,
            "-m",
            "agentsite.cli",
            "worker",
            "--db",
            db,
            "--hostname",
            f"w{uuid.uuid4().hex[:6]}@test",
        ]
        for path in agent_files:
            argv += ["--agent-file", str(path)]
        environment = base_env(**{**_database_env(db), **env})
        self.process = Process(argv, environment, tmp / f"worker-{uuid.uuid4().hex[:6]}.log")

    def stop(self) -> None:
        """Stop the worker process."""
        self.process.stop()


def wait_until(predicate: Any, timeout: float = 30, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def sqlite_snapshot(path: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the session and continuation tables of a SQLite database, for equality checks."""
    with sqlite3.connect(path) as connection:
        return {
            table: sorted(connection.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
            for table in ("sessions_app_session", "sessions_app_continuation")
        }
