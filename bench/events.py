"""Events: commit-to-arrival delay at 1, 10 and 100 SSE clients, and events per second from one
server to one client.

    .venv/bin/python bench/events.py [--clients 1,10,100] [--sessions 20] [--burst 40] [--words 100]
                                     [--topology embedded|scaled] [--json out.json]

It starts the scripted model and ``agents serve --stream-tokens`` (the embedded default; with
``--topology scaled``, PostgreSQL, Redis, one server and one worker), then:

- **delay**, for each client count: that many clients follow ``GET /v1/events`` (server-sent
  events, all in one asyncio loop of this process); ``--sessions`` sessions are run one after
  the other (the ``bench`` agent, one short answer), and for every ``session.updated`` event of
  those sessions that reaches a client, the delay is the client's clock when the frame was read
  minus the event's ``updated_at`` (the time the server stored that version, in the transaction
  that wrote the event). Same machine, same clock. The table prints p50, p95 and max over every
  (event, client) pair.
- **live events/s**: one client follows ``/v1/events`` while ``--burst`` sessions (8 at once)
  each stream an answer of ``--words`` words, one ``text.delta`` event per word plus the
  session's own events; the rate is the events of those sessions the client received, divided by
  the time from the first to the last arrival. The events are made by runs in the system under
  test, so this is what it produces and delivers together.
- **replay events/s**: a fresh client asks for the same events again (``?after=`` the seq before
  the burst): the server reads them back from the database and sends them as fast as it can;
  the time runs from the request to the last event of the burst. This is delivery alone.

The product's CPU (psutil: the server, and the worker when scaled out) per event delivered is
shown for the last two.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import Processes, fmt, loadavg, markdown_table, percentile, phase, tree_cpu  # noqa: E402


class Readers:
    """SSE clients on one URL, in an asyncio loop of their own thread; each keeps (arrival, data)
    for every frame it reads."""

    def __init__(self, url: str, count: int) -> None:
        self.url = url
        self.count = count
        self.arrivals: list[list[tuple[float, dict[str, Any]]]] = [[] for _ in range(count)]
        self.connected = 0
        self.errors: list[str] = []
        self.started_at = 0.0
        self.loop = asyncio.new_event_loop()
        self._tasks: list[asyncio.Task[None]] = []
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _read(self, client: httpx.AsyncClient, index: int) -> None:
        try:
            async with client.stream("GET", self.url) as response:
                self.connected += 1
                buffer = ""
                async for chunk in response.aiter_text():
                    now = time.time()
                    buffer += chunk
                    while "\n\n" in buffer:
                        frame, buffer = buffer.split("\n\n", 1)
                        for line in frame.split("\n"):
                            if line.startswith("data: "):
                                self.arrivals[index].append((now, json.loads(line[6:])))
        except httpx.HTTPError as error:
            self.errors.append(repr(error))

    async def _start(self) -> None:
        limits = httpx.Limits(max_connections=self.count + 1)
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(30, read=None), limits=limits)
        self.started_at = time.time()
        self._tasks = [asyncio.create_task(self._read(self._client, i)) for i in range(self.count)]

    def start(self, timeout: float = 60) -> Readers:
        """Open every stream and wait until each has its answer's headers."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        deadline = time.monotonic() + timeout
        while self.connected < self.count:
            if time.monotonic() > deadline or self.errors:
                raise RuntimeError(f"{self.connected} of {self.count} streams opened: {self.errors[:1]}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Close every stream and the loop."""

        async def close() -> None:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._client.aclose()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def frames_for(self, index: int, session_ids: set[str], kind: str | None = None) -> list[tuple[float, dict]]:
        """What client ``index`` received about ``session_ids`` (of ``kind`` when given)."""
        return [
            (t, d)
            for t, d in list(self.arrivals[index])
            if d.get("session_id") in session_ids and (kind is None or d.get("kind") == kind)
        ]


def run_session(client: httpx.Client, agent: str, prompt: str) -> str:
    """Create a session, wait for its run, return its id."""
    answer = client.post("/v1/sessions?wait=true&timeout=300", content=json.dumps({"agent": agent, "prompt": prompt}))
    if answer.status_code != 201 or answer.json()["status"] != "idle":
        raise RuntimeError(f"session failed: HTTP {answer.status_code}: {answer.text[:300]}")
    return str(answer.json()["session_id"])


def measure_delay(url: str, clients: int, sessions: int) -> dict[str, Any]:
    """Commit-to-arrival delays of ``session.updated`` at ``clients`` followers."""
    readers = Readers(f"{url}/v1/events", clients).start()
    try:
        time.sleep(0.3)
        ids: set[str] = set()
        with httpx.Client(base_url=url, timeout=300) as http:
            for index in range(sessions):
                ids.add(run_session(http, "bench", f"delay {index}"))
        expected = len(readers.frames_for(0, ids, "session.updated"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.2)
            counts = [len(readers.frames_for(i, ids, "session.updated")) for i in range(clients)]
            expected = max(counts)
            if min(counts) == expected:
                break
        delays: list[float] = []
        for index in range(clients):
            for arrived, data in readers.frames_for(index, ids, "session.updated"):
                stored = datetime.fromisoformat(data["updated_at"].replace("Z", "+00:00")).timestamp()
                delays.append(arrived - stored)
        received = sum(len(readers.frames_for(i, ids, "session.updated")) for i in range(clients))
    finally:
        readers.stop()
    return {
        "clients": clients,
        "events": expected,
        "deliveries": received,
        "missing": expected * clients - received,
        "p50_ms": percentile(delays, 0.5) * 1000,
        "p95_ms": percentile(delays, 0.95) * 1000,
        "max_ms": max(delays) * 1000 if delays else float("nan"),
        "load1": loadavg()[0],
    }


def latest_seq(url: str) -> int:
    """The newest event's seq: that of the ``run.stopped`` of a marker session, read by a follower."""
    readers = Readers(f"{url}/v1/events", 1).start()
    try:
        with httpx.Client(base_url=url, timeout=300) as http:
            session_id = run_session(http, "bench", "mark")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            frames = readers.frames_for(0, {session_id})
            if any(d["kind"] == "run.stopped" for _, d in frames):
                return max(int(d["seq"]) for _, d in frames)
            time.sleep(0.05)
        raise RuntimeError("the marker session's events did not arrive")
    finally:
        readers.stop()


def measure_throughput(url: str, pids: list[int], burst: int, words: int) -> dict[str, Any]:
    """Live and replayed events per second through one server to one client."""
    after = latest_seq(url)
    readers = Readers(f"{url}/v1/events", 1).start()
    time.sleep(0.3)
    cpu_before = tree_cpu(pids)
    started = time.time()
    try:
        with httpx.Client(base_url=url, timeout=300) as http, ThreadPoolExecutor(8) as pool:
            ids = set(pool.map(lambda i: run_session(http, "bench-stream", f"stream {i}"), range(burst)))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stopped = {d["session_id"] for _, d in readers.frames_for(0, ids, "run.stopped")}
            if stopped == ids:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        live = readers.frames_for(0, ids)
    finally:
        readers.stop()
    live_cpu = tree_cpu(pids) - cpu_before
    deltas = sum(1 for _, d in live if d["kind"] == "text.delta")
    # the streamed words that arrived: a text.delta joins the pieces of 25 ms (docs/api.md §9.6)
    words_live = sum(len(d["text"].split()) for _, d in live if d["kind"] == "text.delta")
    live_seconds = live[-1][0] - live[0][0] if len(live) > 1 else float("nan")
    last_seq = max(int(d["seq"]) for _, d in live)

    # the same events again, read back from the database
    replay = Readers(f"{url}/v1/events?after={after}", 1)
    cpu_before = tree_cpu(pids)
    requested = time.time()
    replay.start()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            frames = replay.arrivals[0]
            if frames and int(frames[-1][1]["seq"]) >= last_seq:
                break
            time.sleep(0.01)
        replayed = [(t, d) for t, d in list(replay.arrivals[0]) if int(d["seq"]) <= last_seq]
    finally:
        replay.stop()
    replay_cpu = tree_cpu(pids) - cpu_before
    replay_seconds = replayed[-1][0] - requested if replayed else float("nan")
    return {
        "sessions": burst,
        "live_events": len(live),
        "text_deltas": deltas,
        "live_seconds": live_seconds,
        "live_events_per_s": len(live) / live_seconds,
        "live_words": words_live,
        "live_words_per_s": words_live / live_seconds,
        "live_cpu_ms_per_event": live_cpu * 1000 / len(live),
        "wall_from_first_request_s": live[-1][0] - started,
        "replayed_events": len(replayed),
        "replay_seconds": replay_seconds,
        "replay_events_per_s": len(replayed) / replay_seconds,
        "replay_cpu_ms_per_event": replay_cpu * 1000 / max(1, len(replayed)),
        "load1": loadavg()[0],
    }


def main() -> int:
    """Start the model and the server, measure, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="1,10,100", help="followers for the delay, comma-separated")
    parser.add_argument("--sessions", type=int, default=20, help="sessions run for each delay figure")
    parser.add_argument("--burst", type=int, default=40, help="sessions streaming an answer for events/s")
    parser.add_argument("--words", type=int, default=100, help="words (text.delta events) per streamed answer")
    parser.add_argument("--topology", choices=["embedded", "scaled"], default="embedded")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    words = " ".join(f"w{i}" for i in range(args.words))
    script = {
        "rules": [
            {"when": {"last_contains": "stream"}, "reply": {"content": words}},
            {"reply": {"content": "hello from the scripted model"}},
        ]
    }
    with Processes(keep=args.keep) as procs:
        mock = common.start_mock(procs, script)
        agent_files = common.write_agents(procs.workdir, mock.url)
        stream_agent = json.loads(agent_files[0].read_text())
        stream_agent["contents"]["slug"] = "bench-stream"
        (procs.workdir / "bench-stream.json").write_text(json.dumps(stream_agent))
        agent_files.append(procs.workdir / "bench-stream.json")
        with phase(f"starting the product ({args.topology})"):
            if args.topology == "scaled":
                product = common.start_scaled(procs, agent_files, 1, extra=("--stream-tokens",))
            else:
                product = common.start_embedded(procs, agent_files, extra=("--stream-tokens",))
        with httpx.Client(base_url=product.url, timeout=300) as http:
            for index in range(5):
                run_session(http, "bench", f"warm-up {index}")
        delays = []
        for clients in (int(c) for c in args.clients.split(",")):
            with phase(f"delay at {clients} clients"):
                delays.append(measure_delay(product.url, clients, args.sessions))
        with phase(f"events/s: {args.burst} sessions of {args.words} words"):
            throughput = measure_throughput(product.url, product.pids(), args.burst, args.words)

    print(f"\n## Events: commit-to-arrival delay of session.updated ({args.topology}, {args.sessions} sessions)\n")
    rows = [
        [str(d["clients"]), str(d["events"]), str(d["missing"]), fmt(d["p50_ms"]), fmt(d["p95_ms"]), fmt(d["max_ms"]),
         fmt(d["load1"], 2)]
        for d in delays
    ]  # fmt: skip
    print(markdown_table(["clients", "events", "missing", "p50 ms", "p95 ms", "max ms", "load"], rows))
    t = throughput
    print(f"\n## Events per second through one server to one client ({args.topology})\n")
    rows = [
        ["live (runs streaming)", str(t["live_events"]), fmt(t["live_seconds"], 2), fmt(t["live_events_per_s"], 0),
         fmt(t["live_cpu_ms_per_event"], 2), fmt(t["load1"], 2)],
        ["replay (?after=)", str(t["replayed_events"]), fmt(t["replay_seconds"], 2), fmt(t["replay_events_per_s"], 0),
         fmt(t["replay_cpu_ms_per_event"], 2), fmt(t["load1"], 2)],
    ]  # fmt: skip
    print(markdown_table(["path", "events", "seconds", "events/s", "product CPU ms/event", "load"], rows))
    print(
        f"\n({t['sessions']} sessions, {t['text_deltas']} text.delta events among them, carrying "
        f"{t['live_words']} streamed words: {fmt(t['live_words_per_s'], 0)} words/s live)"
    )
    print(f"load average at the end: {loadavg()}")
    common.write_json(
        args.json, {"benchmark": "events", "options": vars(args), "delay": delays, "throughput": throughput}
    )
    return 0


if __name__ == "__main__":
    common.run_main(main)
