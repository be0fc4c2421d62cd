"""Event delivery benchmark: commit-to-arrival delay at 1, 10 and 100 SSE clients, and events per
second through one server process.

Starts a scripted LLM and ``agents serve`` (the embedded default unless --db/--redis say
otherwise), opens the clients on ``GET /v1/events``, runs sessions and prints the figures.

    .venv/bin/python bench/events.py [--clients 1,10,100] [--sessions 20] [--burst 200]

The delay is measured from the ``updated_at`` of each ``session.updated`` event (taken when its
version is stored, in the same transaction as the event) to the moment a client has read the
frame, on the same machine's clock.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.mockllm import MockLlmServer  # noqa: E402
from tests.harness import Server, write_agent  # noqa: E402


class Client(threading.Thread):
    """One SSE client recording (arrival time, data) for every event frame."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.arrivals: list[tuple[float, dict]] = []
        self.ready = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            with httpx.Client(timeout=None) as http, http.stream("GET", self.url) as response:
                self.ready.set()
                buffer = ""
                for chunk in response.iter_text():
                    now = time.time()
                    buffer += chunk
                    while "\n\n" in buffer:
                        frame, buffer = buffer.split("\n\n", 1)
                        for line in frame.split("\n"):
                            if line.startswith("data: "):
                                self.arrivals.append((now, json.loads(line[6:])))
                    if self.stop.is_set():
                        return
        except httpx.HTTPError:
            # the server went away at the end of the benchmark
            return


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure_delay(server: Server, clients: int, sessions: int) -> list[float]:
    readers = [Client(f"{server.url}/v1/events") for _ in range(clients)]
    for reader in readers:
        reader.start()
        reader.ready.wait(30)
    time.sleep(0.5)
    ids = set()
    for _ in range(sessions):
        view = server.client.post("/v1/sessions?wait=true", content=json.dumps({"agent": "bench", "prompt": "hi"}))
        ids.add(view.json()["session_id"])
    deadline = time.time() + 60
    expected = sessions * 4  # session.updated events per session: create, LLM turn, stop... at least 3
    while time.time() < deadline and any(
        sum(1 for _, d in r.arrivals if d["kind"] == "session.updated" and d["session_id"] in ids) < expected * 0.75
        for r in readers
    ):
        time.sleep(0.1)
    delays = []
    for reader in readers:
        reader.stop.set()
        for arrived, data in reader.arrivals:
            if data["kind"] == "session.updated" and data["session_id"] in ids:
                stored = datetime.fromisoformat(data["updated_at"].replace("Z", "+00:00")).timestamp()
                delays.append(arrived - stored)
    return delays


def measure_throughput(server: Server, events_count: int) -> tuple[int, float]:
    """Write ``events_count`` events straight into the server's database, as fast as one writer can,
    and time their arrival at one client: what one server process delivers per second."""
    import os

    os.environ["DATABASE_URL"] = server.db if "://" in server.db else f"sqlite:///{server.db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
    import django

    django.setup()
    from django.db import transaction

    from sessions_app import events

    reader = Client(f"{server.url}/v1/events")
    reader.start()
    reader.ready.wait(30)
    time.sleep(0.5)
    start = time.time()
    session_id = "00000000-0000-0000-0000-000000000000"
    for batch in range(0, events_count, 100):
        with transaction.atomic():
            for _ in range(min(100, events_count - batch)):
                events.emit("text.delta", session_id, None, text="benchmark ")
    written = time.time() - start
    print(f"(the writer stored {events_count} events in {written:.2f} s)")
    deadline = time.time() + 120
    while time.time() < deadline and len(reader.arrivals) < events_count:
        time.sleep(0.05)
    reader.stop.set()
    received = len(reader.arrivals)
    elapsed = (reader.arrivals[-1][0] - start) if reader.arrivals else float("nan")
    return received, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,10,100")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--events", type=int, default=5000, help="events written for the throughput figure")
    parser.add_argument("--db", default=None, help="database URL (default: a SQLite file)")
    parser.add_argument("--redis", default=None, help="REDIS_URL (then start a worker yourself)")
    args = parser.parse_args()
    llm = MockLlmServer({"rules": [{"reply": {"content": "hello"}}]}).start()
    with tempfile.TemporaryDirectory() as tmp:
        agent = write_agent(Path(tmp), "bench", llm.url)
        env = {"REDIS_URL": args.redis} if args.redis else {}
        server = Server([agent], Path(tmp), db=args.db, env=env)
        try:
            print(f"server on {server.url}, database {'SQLite' if args.db is None else args.db}")
            for count in (int(c) for c in args.clients.split(",")):
                delays = measure_delay(server, count, args.sessions)
                if not delays:
                    print(f"{count:>4} clients: no events measured")
                    continue
                print(
                    f"{count:>4} clients: commit-to-arrival delay over {len(delays)} events: "
                    f"median {statistics.median(delays) * 1000:.1f} ms, p95 {percentile(delays, 0.95) * 1000:.1f} ms, "
                    f"max {max(delays) * 1000:.1f} ms"
                )
            received, elapsed = measure_throughput(server, args.events)
            rate = received / elapsed
            print(
                f"throughput: {received} events delivered in {elapsed:.2f} s = {rate:.0f} events/s through one server"
            )
        finally:
            server.stop()
            llm.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
