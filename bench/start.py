"""Start time: from launching ``agents serve`` to its first 200 on ``/healthz``.

Each run starts the server on the embedded default with a fresh SQLite database (so ``migrate``
creates every table) and the two demo agents of examples/, waits for ``GET /healthz`` to answer
200, stops it with SIGTERM, and prints the time; then the median, min and max.

    .venv/bin/python bench/start.py [--runs 9] [--checkout DIR ...]

``--checkout`` (repeatable) measures other checkouts of the project with this interpreter, the
runs interleaved so that every checkout sees the same load on the machine; ``DIR`` goes first on
``PYTHONPATH``, so its own code runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_once(checkout: Path, timeout: float = 60) -> float:
    """Seconds from launching ``agents serve`` in ``checkout`` to its first 200 on ``/healthz``.

    Raises:
        RuntimeError: the server exited, or did not answer within ``timeout`` seconds.
    """
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        unset = ("AGENTS_", "DATABASE_URL", "REDIS_URL", "DJANGO_")
        env = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
        # TMPDIR too: whatever a checkout writes to the temporary directory goes with this one
        env.update(PYTHONPATH=str(checkout), TMPDIR=tmp)
        argv = [sys.executable, "-m", "agentsite.cli", "serve", "--port", str(port), "--db", f"{tmp}/agents-server.db"]
        argv += ["--agent-file", str(checkout / "examples" / "weather" / "weather.json")]
        argv += ["--agent-file", str(checkout / "examples" / "shell" / "shell.json")]
        with open(Path(tmp) / "server.log", "wb") as log:
            started = time.monotonic()
            process = subprocess.Popen(argv, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
            try:
                while time.monotonic() - started < timeout:
                    if process.poll() is not None:
                        raise RuntimeError(f"the server exited with {process.returncode}")
                    try:
                        if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                            return time.monotonic() - started
                    except httpx.TransportError:
                        time.sleep(0.01)
                raise RuntimeError(f"no answer within {timeout} s")
            finally:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(30)


def main() -> int:
    """Measure every checkout ``--runs`` times, interleaved, and print each run and the summaries."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--checkout", action="append", type=Path, help="another checkout to measure (repeatable)")
    args = parser.parse_args()
    checkouts = [ROOT, *(path.resolve() for path in args.checkout or [])]
    times: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
    for run in range(args.runs):
        for checkout in checkouts:
            times[checkout].append(start_once(checkout))
            print(f"run {run + 1}: {checkout}: {times[checkout][-1]:.3f} s", flush=True)
    for checkout, measured in times.items():
        print(
            f"{checkout}: median {statistics.median(measured):.3f} s, min {min(measured):.3f} s,"
            f" max {max(measured):.3f} s over {len(measured)} runs"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
