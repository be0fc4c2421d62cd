"""The peers ``bench/runs.py`` compares the product with: LangGraph's own API server and Aegra.

Each peer is installed into a virtual environment of its own under ``.bench-peers/<name>``
(gitignored) by this interpreter's ``venv`` and ``pip``, once: a stamp file names the pinned
requirements it was made with, and a change of pins makes it again. Both serve the graphs of
``bench/peers/graph.py``, which call the benchmarks' scripted model through ``langchain-openai``.

- **LangGraph**: ``langgraph dev --no-browser --no-reload --n-jobs-per-worker 4`` (the in-memory
  runtime of ``langgraph-cli[inmem]``; 4 runs at once, as the product's worker), started in a
  temporary directory holding its ``langgraph.json``.
- **Aegra**: ``aegra serve`` (uvicorn without reload) with its ``aegra.json``, on a PostgreSQL
  database of its own made for the run (``DATABASE_URL``); it applies its migrations at start.
  0.6 is the newest release that runs on Python 3.11; it needs ``greenlet`` beside it.

Both are driven over their HTTP API the same way: ``POST /threads``, then
``POST /threads/{id}/runs/wait`` with ``{"assistant_id": <graph>, "input": {"messages": [...]}}``:
a stateful thread per run, as the product keeps a session per run.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.common import PEERS_DIR, Proc, Processes, clean_env, create_database, free_port, wait_http

GRAPH_FILE = Path(__file__).resolve().parent / "graph.py"

#: Pinned so that figures taken on different days compare; change them to measure other releases.
REQUIREMENTS: dict[str, list[str]] = {
    "langgraph": [
        "langgraph-cli[inmem]==0.4.40",
        "langgraph-api==0.16.7",
        "langgraph-runtime-inmem==0.36.7",
        "langgraph==1.2.24",
        "langchain-openai==1.7.4",
    ],
    "aegra": [
        "aegra-cli==0.6.0",
        "aegra-api==0.6.0",
        "greenlet>=3",
        "langchain-openai==1.7.4",
    ],
}

#: The graphs, by the names the drivers use as ``assistant_id``.
GRAPHS = {"plain": f"{GRAPH_FILE}:plain", "tool": f"{GRAPH_FILE}:tool_graph"}


class PeerUnavailable(Exception):
    """A peer could not be installed or started; the message says why."""


def install(name: str, log: Path) -> Path:
    """Make ``.bench-peers/<name>`` with the peer's pinned requirements unless it is already there.

    Returns:
        The virtual environment's ``bin`` directory.
    Raises:
        PeerUnavailable: venv or pip failed (the last lines of pip's output say why).
    """
    venv = PEERS_DIR / name
    requirements = REQUIREMENTS[name]
    stamp = venv / f".bench-{hashlib.sha256(json.dumps(requirements).encode()).hexdigest()[:16]}"
    if stamp.exists():
        return venv / "bin"
    print(f"installing {name} into {venv} (once) ...", file=sys.stderr, flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    with open(log, "wb") as out:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements],
        ]
        for argv in steps:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                lines = [
                    line
                    for line in log.read_text(errors="replace").splitlines()
                    if line.strip() and not line.startswith("WARNING: Location")
                ]
                raise PeerUnavailable(f"{' '.join(argv[:4])} ... failed: {' / '.join(lines[-3:])}")
    stamp.touch()
    return venv / "bin"


def versions(bin_dir: Path, packages: list[str]) -> dict[str, str]:
    """The installed versions of ``packages`` in a peer's environment."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for p in sys.argv[1:]:\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    done = subprocess.run([str(bin_dir / "python"), "-c", code, *packages], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


@dataclass
class Peer:
    """A started peer server."""

    name: str
    url: str
    proc: Proc
    versions: dict[str, str]
    database: str = ""

    def pids(self) -> list[int]:
        """The root process of the system under test."""
        return [self.proc.pid]


def _peer_env(model_url: str, tool: Path, **extra: str) -> dict[str, str]:
    return clean_env(
        BENCH_MODEL_URL=model_url,
        BENCH_TOOL=str(tool),
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        **extra,
    )


def start_langgraph(procs: Processes, model_url: str, tool: Path, jobs: int = 4) -> Peer:
    """Install (once) and start ``langgraph dev`` with the benchmark graphs; wait for ``/ok``."""
    bin_dir = install("langgraph", procs.workdir / "install-langgraph.log")
    home = procs.workdir / f"langgraph-{uuid.uuid4().hex[:6]}"
    home.mkdir()
    config = home / "langgraph.json"
    config.write_text(json.dumps({"dependencies": [str(GRAPH_FILE.parent)], "graphs": GRAPHS}))
    port = free_port()
    argv = [str(bin_dir / "langgraph"), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--n-jobs-per-worker", str(jobs), "--config", str(config)]
    proc = procs.start("langgraph", argv, _peer_env(model_url, tool), cwd=home)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/ok", 120, proc)
    except RuntimeError as error:
        raise PeerUnavailable(str(error)) from error
    found = versions(
        bin_dir, ["langgraph", "langgraph-api", "langgraph-runtime-inmem", "langgraph-cli", "langchain-openai"]
    )
    return Peer("langgraph", url, proc, found)


def start_aegra(procs: Processes, model_url: str, tool: Path) -> Peer:
    """Install (once) and start ``aegra serve`` on a fresh PostgreSQL database; wait for ``/health``."""
    bin_dir = install("aegra", procs.workdir / "install-aegra.log")
    home = procs.workdir / f"aegra-{uuid.uuid4().hex[:6]}"
    home.mkdir()
    config = home / "aegra.json"
    config.write_text(json.dumps({"graphs": GRAPHS}))
    try:
        database = create_database(procs, "aegra_bench")
    except Exception as error:  # noqa: BLE001 - any failure here makes the peer unavailable
        raise PeerUnavailable(f"cannot create its PostgreSQL database: {error}") from error
    port = free_port()
    argv = [str(bin_dir / "aegra"), "serve", "--host", "127.0.0.1", "--port", str(port), "-c", str(config)]
    env = _peer_env(model_url, tool, DATABASE_URL=database.replace("postgres://", "postgresql://", 1))
    proc = procs.start("aegra", argv, env, cwd=home)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health", 120, proc)
    except RuntimeError as error:
        raise PeerUnavailable(str(error)) from error
    found = versions(bin_dir, ["aegra-api", "aegra-cli", "langgraph", "langchain-openai"])
    return Peer("aegra", url, proc, found, database)
