"""The cost of tracing per step: off (the default), on (exporting over OTLP/HTTP), and, with
``--baseline``, another checkout (the code before tracing existed).

    .venv/bin/python bench/tracing.py [--runs 300] [--rounds 5] [--baseline /path/to/checkout] [--json out.json]

Each variant is one ``agents serve`` (embedded worker, SQLite) running the ``bench-tool`` agent:
a run is three steps (the model asks for the bash tool, the tool runs, the model answers).
Runs go one at a time, ``POST /v1/sessions?wait=true``, in ``--rounds`` rounds with the variants
alternating so that the machine's other load falls on all alike. Printed per variant: the
server's CPU milliseconds per step (psutil, the server and its tools' processes), the wall
milliseconds per step (p50 and p95 of a run's time over three), and the 1-minute load average.
"on" exports every span to a receiver in this process that reads and drops the batches (the
export's cost is the server's: its batch thread encodes and sends them).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import Processes, fmt, loadavg, markdown_table, percentile, phase  # noqa: E402

STEPS_PER_RUN = 3


class _Drop(BaseHTTPRequestHandler):
    """Reads an OTLP batch and answers 200 with an empty body."""

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def _receiver() -> str:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Drop)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def _shim(workdir: Path) -> Path:
    """A ``sitecustomize`` that takes this checkout's editable-install finder off ``sys.meta_path``,
    so that the baseline's packages, first on ``PYTHONPATH``, are the ones imported."""
    shim = workdir / "baseline-shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]\n"
    )
    return shim


def main() -> int:
    """Start the variants, take the samples, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300, help="measured runs per variant")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a checkout without tracing, measured as 'before'")
    parser.add_argument("--json")
    args = parser.parse_args()
    common.ensure_psutil()
    with Processes() as procs:
        mock = common.start_mock(procs)
        agents = common.write_agents(procs.workdir, mock.url)
        variants: dict[str, dict[str, str]] = {
            "off": {},
            "on": {"OTEL_EXPORTER_OTLP_ENDPOINT": _receiver(), "OTEL_BSP_SCHEDULE_DELAY": "200"},
        }
        if args.baseline is not None:
            variants["before"] = {"PYTHONPATH": f"{_shim(procs.workdir)}:{args.baseline.resolve()}"}
        with phase(f"starting {len(variants)} servers"):
            servers = {name: common.start_embedded(procs, agents, name=name, **env) for name, env in variants.items()}
        clients = {name: httpx.Client(base_url=server.url, timeout=60) for name, server in servers.items()}
        walls: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, float] = dict.fromkeys(variants, 0.0)
        loads: list[float] = []
        per_round = max(1, args.runs // args.rounds)
        for name in variants:  # warm up: the first runs load the agent's tools and the SDK
            for _ in range(5):
                _run(clients[name])
        for round_number in range(args.rounds):
            with phase(f"round {round_number + 1} of {args.rounds}"):
                for name, server in servers.items():
                    before = common.tree_cpu(server.pids())
                    for _ in range(per_round):
                        walls[name].append(_run(clients[name]))
                    cpu[name] += common.tree_cpu(server.pids()) - before
                    loads.append(loadavg()[0])
        rows = []
        figures = {}
        for name in variants:
            steps = len(walls[name]) * STEPS_PER_RUN
            per_step = [wall / STEPS_PER_RUN * 1000 for wall in walls[name]]
            figures[name] = {
                "cpu_ms_per_step": cpu[name] / steps * 1000,
                "wall_ms_per_step_p50": percentile(per_step, 0.5),
                "wall_ms_per_step_p95": percentile(per_step, 0.95),
                "steps": steps,
            }
            row = figures[name]
            rows.append([name, str(steps), fmt(row["cpu_ms_per_step"], 2), fmt(row["wall_ms_per_step_p50"], 2),
                         fmt(row["wall_ms_per_step_p95"], 2)])
        print(markdown_table(["tracing", "steps", "CPU ms/step", "wall ms/step p50", "p95"], rows))
        print(f"\nload average (1 min) during the samples: {min(loads):.2f} to {max(loads):.2f}")
        common.write_json(args.json, {"figures": figures, "load": loads, "machine": common.machine()})
    return 0


def _run(client: httpx.Client) -> float:
    started = time.perf_counter()
    answer = client.post("/v1/sessions?wait=true&timeout=60", content=b'{"agent": "bench-tool", "prompt": "hi"}')
    elapsed = time.perf_counter() - started
    if answer.status_code != 201 or answer.json()["status"] != "idle":
        raise RuntimeError(f"run failed: {answer.status_code} {answer.text[:300]}")
    return elapsed


if __name__ == "__main__":
    common.run_main(main)
