"""Runs: runs per second, latency percentiles and CPU per run, for this product and its peers.

    .venv/bin/python bench/runs.py [--systems product-embedded,product-scaled,product-scaled-2w,langgraph,aegra]
                                   [--variants plain,tool] [--clients 8,32] [--runs 200] [--rounds 4]
                                   [--warmup 16] [--json out.json]

What one run is, on every system: a new conversation with one user message, answered by the
scripted model (``bench/mockserver.py``, a process of its own answering in about a millisecond),
waited for over HTTP until the run has finished and is stored:

- ``plain``: the model answers at once (one model call);
- ``tool``: the model calls the bash tool ``bash_hello`` (a two-line bash script) once, then
  answers with its output (two model calls and one process).

The systems (each started here, on this machine, and stopped at the end):

- ``product-embedded``: one ``agents serve`` on a fresh SQLite file, its Celery worker in the
  same process (4 runs at once, the default); a run is ``POST /v1/sessions?wait=true``.
- ``product-scaled``: PostgreSQL (a fresh database) and Redis (an empty database), one
  ``agents serve`` and one ``agents worker`` (concurrency 4, the default); ``product-scaled-2w``
  the same with two workers.
- ``langgraph``: LangGraph's API server, ``langgraph dev`` (in-memory runtime, 4 jobs at once),
  serving ``bench/peers/graph.py``; a run is ``POST /threads`` then
  ``POST /threads/{id}/runs/wait``.
- ``aegra``: Aegra 0.6 (``aegra serve``) on a fresh PostgreSQL database, the same graphs and calls.

How it is measured: ``--clients`` concurrent clients (asyncio and one ``httpx.AsyncClient``
with a connection per client) start runs back to back until ``--runs`` runs are done. The runs
of one (variant, clients) pair are split into ``--rounds`` chunks, and the systems take turns
chunk by chunk (in an order that rotates every round), so that whatever else the machine is
doing falls on all of them alike; each system first gets ``--warmup`` runs that are not counted.

- **runs/s**: runs that succeeded, divided by the wall time of the chunks.
- **p50/p95/p99**: the latency of each successful run, as its client saw it (both requests for
  the peers).
- **CPU/run**: CPU seconds (user + system, from psutil) used during the chunks by every process
  of the system under test (servers, workers, and their children, running or reaped: the bash
  tool's processes count), divided by the runs. **services CPU/run** is the same for the
  PostgreSQL and Redis servers, which are shared with anything else on the machine (on the
  embedded default and LangGraph it is only what others used meanwhile).
- **client CPU/run** is the load generator's own CPU, **model CPU/run** the scripted model's:
  neither belongs to the system under test, both are shown to see that they were not the limit.
- **PG conns/run**: connections opened to the system's PostgreSQL database per run
  (``pg_stat_database.sessions``), for the systems that have one.
- **load**: the 1-minute load average at the start of the system's chunks (mean); the machine
  has 2 cores, so a figure taken above 2 or so had company.
- A run that answers anything but a finished conversation with the expected text is an error,
  counted apart and left out of the figures; its first message is shown.

The ratios divide the product's figure by the peer's: above 1 for runs/s means the product did
more runs per second; below 1 for latency and CPU means it took less.
A peer that cannot be installed or started is listed with its error, and the others are still
measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import (  # noqa: E402
    Processes,
    fmt,
    loadavg,
    markdown_table,
    own_cpu,
    percentile,
    phase,
    service_pids,
    tree_cpu,
)
from bench.peers import PeerUnavailable, start_aegra, start_langgraph  # noqa: E402

PRODUCTS = ("product-embedded", "product-scaled", "product-scaled-2w")
PEERS = ("langgraph", "aegra")
ALL_SYSTEMS = (*PRODUCTS, *PEERS)
VARIANTS = ("plain", "tool")
#: (product, peer) pairs whose ratios are printed.
PAIRS = (
    ("product-embedded", "langgraph"),
    ("product-scaled", "langgraph"),
    ("product-scaled", "aegra"),
    ("product-scaled-2w", "aegra"),
)
EXPECTED = {"plain": "hello from the scripted model", "tool": "the tool said hello from bash"}
AGENTS = {"plain": "bench", "tool": "bench-tool"}

RunOnce = Callable[[httpx.AsyncClient, str], Awaitable[None]]


class RunFailed(Exception):
    """A run answered something other than a finished conversation with the expected text."""


async def product_run(client: httpx.AsyncClient, variant: str) -> None:
    """One run on the product: create a session and wait for its run to stop."""
    body = {"agent": AGENTS[variant], "prompt": "hi"}
    answer = await client.post("/v1/sessions?wait=true&timeout=300", content=json.dumps(body))
    if answer.status_code != 201:
        raise RunFailed(f"HTTP {answer.status_code}: {answer.text[:200]}")
    view = answer.json()
    if view["status"] != "idle":
        raise RunFailed(f"status {view['status']}: {view.get('status_detail')}")
    text = view["session"]["turns"][0]["contents"]["llmResponse"]["responseText"]
    if not text.strip().startswith(EXPECTED[variant]):
        raise RunFailed(f"answer {text[:100]!r}")


async def peer_run(client: httpx.AsyncClient, variant: str) -> None:
    """One run on a LangGraph-API server: a thread, then a run on it waited for."""
    answer = await client.post("/threads", json={})
    if answer.status_code != 200:
        raise RunFailed(f"POST /threads: HTTP {answer.status_code}: {answer.text[:200]}")
    thread = answer.json()["thread_id"]
    body = {"assistant_id": variant, "input": {"messages": [{"role": "user", "content": "hi"}]}}
    answer = await client.post(f"/threads/{thread}/runs/wait", json=body)
    if answer.status_code != 200:
        raise RunFailed(f"runs/wait: HTTP {answer.status_code}: {answer.text[:200]}")
    messages = answer.json().get("messages") or []
    text = messages[-1].get("content") if messages else None
    if not isinstance(text, str) or not text.strip().startswith(EXPECTED[variant]):
        raise RunFailed(f"runs/wait answered {answer.text[:200]}")


@dataclass
class System:
    """A system under test, started or not."""

    name: str
    url: str = ""
    pids: list[int] = field(default_factory=list)
    error: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    database: str = ""  # its PostgreSQL database's URL, if any

    @property
    def run_once(self) -> Callable[[httpx.AsyncClient, str], Awaitable[None]]:
        return product_run if self.name.startswith("product") else peer_run


@dataclass
class Cell:
    """What was measured for one (system, variant, clients)."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    wall: float = 0.0
    cpu: float = 0.0
    services_cpu: float = 0.0
    client_cpu: float = 0.0
    model_cpu: float = 0.0
    pg_sessions: int | None = None
    loads: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        ok = len(self.latencies)
        per_run = (lambda seconds: seconds * 1000 / ok) if ok else (lambda _: float("nan"))
        return {
            "runs": ok + self.errors,
            "ok": ok,
            "errors": self.errors,
            "first_error": self.first_error,
            "runs_per_s": ok / self.wall if self.wall else float("nan"),
            "p50_ms": percentile(self.latencies, 0.50) * 1000,
            "p95_ms": percentile(self.latencies, 0.95) * 1000,
            "p99_ms": percentile(self.latencies, 0.99) * 1000,
            "cpu_ms_per_run": per_run(self.cpu),
            "services_cpu_ms_per_run": per_run(self.services_cpu),
            "client_cpu_ms_per_run": per_run(self.client_cpu),
            "model_cpu_ms_per_run": per_run(self.model_cpu),
            "pg_connections_per_run": self.pg_sessions / ok if ok and self.pg_sessions is not None else float("nan"),
            "load1": sum(self.loads) / len(self.loads) if self.loads else float("nan"),
        }


async def drive(url: str, run_once: RunOnce, variant: str, clients: int, runs: int) -> tuple[list[float], list[str]]:
    """``runs`` runs by ``clients`` concurrent clients; returns the latencies and the errors."""
    latencies: list[float] = []
    errors: list[str] = []
    remaining = [runs]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def one_client() -> None:
            while remaining[0] > 0:
                remaining[0] -= 1
                started = time.perf_counter()
                try:
                    await run_once(client, variant)
                except (RunFailed, httpx.HTTPError, KeyError, ValueError, TypeError, IndexError) as error:
                    errors.append(f"{type(error).__name__}: {error}")
                else:
                    latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(one_client() for _ in range(clients)))
    return latencies, errors


def measure_chunk(system: System, variant: str, clients: int, runs: int, cell: Cell, mock_pid: int) -> None:
    """Run one chunk against ``system`` and add what it cost to ``cell``."""
    services = service_pids()
    cell.loads.append(loadavg()[0])
    connections = common.pg_sessions(system.database) if system.database else None
    before = (tree_cpu(system.pids), tree_cpu(services), own_cpu(), tree_cpu([mock_pid]), time.perf_counter())
    latencies, errors = asyncio.run(drive(system.url, system.run_once, variant, clients, runs))
    after = (tree_cpu(system.pids), tree_cpu(services), own_cpu(), tree_cpu([mock_pid]), time.perf_counter())
    cell.wall += after[4] - before[4]
    cell.cpu += after[0] - before[0]
    cell.services_cpu += after[1] - before[1]
    cell.client_cpu += after[2] - before[2]
    cell.model_cpu += after[3] - before[3]
    cell.latencies += latencies
    cell.errors += len(errors)
    if connections is not None:
        time.sleep(1)  # the statistics of the last connections reach pg_stat_database
        opened = (common.pg_sessions(system.database) or 0) - connections
        cell.pg_sessions = (cell.pg_sessions or 0) + opened
    if errors and cell.first_error is None:
        cell.first_error = errors[0]


def start_system(procs: Processes, name: str, agent_files: list[Path], mock_url: str, tool: Path) -> System:
    """Start one system; a failure is kept in ``System.error`` rather than raised."""
    system = System(name)
    try:
        with phase(f"starting {name}"):
            if name == "product-embedded":
                product = common.start_embedded(procs, agent_files)
                system.url, system.pids = product.url, product.pids()
            elif name in ("product-scaled", "product-scaled-2w"):
                product = common.start_scaled(procs, agent_files, 2 if name.endswith("2w") else 1, name)
                system.url, system.pids, system.database = product.url, product.pids(), product.db
            elif name == "langgraph":
                peer = start_langgraph(procs, mock_url, tool)
                system.url, system.pids, system.versions = peer.url, peer.pids(), peer.versions
            elif name == "aegra":
                peer = start_aegra(procs, mock_url, tool)
                system.url, system.pids, system.versions = peer.url, peer.pids(), peer.versions
                system.database = peer.database
    except (PeerUnavailable, RuntimeError, OSError) as error:
        system.error = str(error).replace("\n", " / ")[:500]
        print(f"{name} unavailable: {system.error}", file=sys.stderr)
    except Exception as error:  # noqa: BLE001 - a system that cannot start must not end the others
        system.error = f"{type(error).__name__}: {error}".replace("\n", " / ")[:500]
        print(f"{name} unavailable: {system.error}", file=sys.stderr)
    return system


def check_system(system: System, variant: str) -> None:
    """One run, to see that the system answers as expected before it is measured."""
    latencies, errors = asyncio.run(drive(system.url, system.run_once, variant, 1, 1))
    if errors:
        system.error = f"{variant}: first run failed: {errors[0]}"[:500]
        print(f"{system.name} unavailable: {system.error}", file=sys.stderr)


def results_table(systems: list[System], results: dict[tuple[str, str, int], dict[str, Any]]) -> str:
    """The figures, one row per (system, variant, clients); unavailable systems with their error."""
    headers = [
        "system", "variant", "clients", "runs ok", "errors", "runs/s", "p50 ms", "p95 ms", "p99 ms",
        "CPU ms/run", "services CPU ms/run", "client CPU ms/run", "model CPU ms/run", "PG conns/run", "load",
    ]  # fmt: skip
    rows = []
    for (name, variant, clients), s in results.items():
        rows.append([
            name, variant, str(clients), str(s["ok"]), str(s["errors"]), fmt(s["runs_per_s"]),
            fmt(s["p50_ms"]), fmt(s["p95_ms"]), fmt(s["p99_ms"]), fmt(s["cpu_ms_per_run"]),
            fmt(s["services_cpu_ms_per_run"]), fmt(s["client_cpu_ms_per_run"]), fmt(s["model_cpu_ms_per_run"]),
            fmt(s["pg_connections_per_run"]), fmt(s["load1"], 2),
        ])  # fmt: skip
    for system in systems:
        if system.error:
            rows.append([system.name, *["-"] * (len(headers) - 1)])
    return markdown_table(headers, rows)


def ratios_table(results: dict[tuple[str, str, int], dict[str, Any]]) -> str:
    """product / peer for the pairs of :data:`PAIRS` measured."""
    headers = ["product / peer", "variant", "clients", "runs/s", "p50", "p95", "CPU/run", "CPU+services/run"]
    rows = []
    keys = sorted({(variant, clients) for (_, variant, clients) in results})
    for product, peer in PAIRS:
        for variant, clients in keys:
            a, b = results.get((product, variant, clients)), results.get((peer, variant, clients))
            if not a or not b or not a["ok"] or not b["ok"]:
                continue

            def ratio(x: float, y: float) -> str:
                return fmt(x / y, 2) if y else "-"

            rows.append([
                f"{product} / {peer}", variant, str(clients),
                ratio(a["runs_per_s"], b["runs_per_s"]), ratio(a["p50_ms"], b["p50_ms"]),
                ratio(a["p95_ms"], b["p95_ms"]), ratio(a["cpu_ms_per_run"], b["cpu_ms_per_run"]),
                ratio(a["cpu_ms_per_run"] + a["services_cpu_ms_per_run"],
                      b["cpu_ms_per_run"] + b["services_cpu_ms_per_run"]),
            ])  # fmt: skip
    return markdown_table(headers, rows) if rows else "(no pair of product and peer was measured)"


def main() -> int:
    """Start the systems, measure them in rounds, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--systems", default=",".join(ALL_SYSTEMS), help=f"comma-separated, of {', '.join(ALL_SYSTEMS)}"
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="plain (no tools), tool (one bash tool call)")
    parser.add_argument("--clients", default="8,32", help="concurrent clients, comma-separated")
    parser.add_argument("--runs", type=int, default=200, help="measured runs per system, variant and clients")
    parser.add_argument("--rounds", type=int, default=4, help="chunks the runs are split into, systems alternating")
    parser.add_argument("--warmup", type=int, default=16, help="runs per system before each measurement, not counted")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the working directory (logs, databases)")
    args = parser.parse_args()
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in ALL_SYSTEMS]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if unknown or any(v not in VARIANTS for v in variants):
        parser.error(f"unknown system or variant: {unknown or variants}")
    client_counts = [int(c) for c in args.clients.split(",")]

    results: dict[tuple[str, str, int], dict[str, Any]] = {}
    with Processes(keep=args.keep) as procs:
        print(f"working directory {procs.workdir}", file=sys.stderr)
        mock = common.start_mock(procs)
        agent_files = common.write_agents(procs.workdir, mock.url)
        tool = procs.workdir / "tools" / "hello"
        systems = [start_system(procs, name, agent_files, mock.url, tool) for name in names]
        for system in systems:
            for variant in variants:
                if not system.error:
                    check_system(system, variant)
        live = [s for s in systems if not s.error]
        for variant in variants:
            for clients in client_counts:
                cells = {s.name: Cell() for s in live}
                for system in live:
                    with phase(f"warm-up {system.name} {variant} x{clients}"):
                        asyncio.run(drive(system.url, system.run_once, variant, clients, args.warmup))
                for round_index, chunk in enumerate(common.split(args.runs, args.rounds)):
                    order = live[round_index % len(live) :] + live[: round_index % len(live)] if live else []
                    for system in order:
                        with phase(f"{system.name} {variant} x{clients} round {round_index + 1}: {chunk} runs"):
                            measure_chunk(system, variant, clients, chunk, cells[system.name], mock.proc.pid)
                for system in live:
                    results[(system.name, variant, clients)] = cells[system.name].summary()
                    mock.timings()  # forget them

    print(f"\n## Runs ({args.runs} runs per cell, {args.rounds} rounds, warm-up {args.warmup}; 2-core machine)\n")
    print(results_table(systems, results))
    for system in systems:
        if system.error:
            print(f"\n- {system.name}: unavailable: {system.error}")
        elif system.versions:
            print(f"\n- {system.name}: {', '.join(f'{k} {v}' for k, v in system.versions.items())}")
    for (name, variant, clients), s in results.items():
        if s["errors"]:
            print(f"- {name} {variant} x{clients}: {s['errors']} errors, the first: {s['first_error']}")
    print("\n## Ratios (product / peer; runs/s above 1 and the others below 1 favour the product)\n")
    print(ratios_table(results))
    print(f"\nload average at the end: {loadavg()}")
    common.write_json(
        args.json,
        {
            "benchmark": "runs",
            "options": vars(args),
            "systems": {s.name: {"error": s.error, "versions": s.versions} for s in systems},
            "results": [{"system": n, "variant": v, "clients": c, **s} for (n, v, c), s in results.items()],
        },
    )
    return 0


if __name__ == "__main__":
    common.run_main(main)
