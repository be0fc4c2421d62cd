"""Memory: resident memory of the embedded server after 1,000 and after 10,000 completed sessions.

    .venv/bin/python bench/memory.py [--counts 1000,10000] [--clients 8] [--variant plain|tool]
                                     [--json out.json]

It starts the scripted model and one ``agents serve`` on the embedded default (SQLite, in-process
worker), then completes sessions (``POST /v1/sessions?wait=true``, the ``bench`` agent: one short
answer each; ``--variant tool`` uses ``bench-tool``, one bash tool call each) with ``--clients``
concurrent clients, and reads the server's resident set size (RSS, psutil; the server process and
any child it has at that moment) at start (after 20 warm-up sessions) and after each count of
``--counts`` completed sessions, once the server has been idle for two seconds. It also shows the
peak RSS seen (sampled every half second while the sessions ran) and the database file's size.

The figure that matters is the ratio of the last count's RSS to the first's: memory that grows
with the number of sessions a server has completed (a cache without bound, a list that keeps
every run) shows up as a ratio well above 1; a server that keeps nothing per finished session
stays near 1, whatever its baseline.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.common import Processes, fmt, loadavg, markdown_table, phase, rss_mib  # noqa: E402


class PeakSampler(threading.Thread):
    """The highest RSS of ``pid`` seen, sampled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0.0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except common.psutil.Error:
                return


def complete(url: str, agent: str, count: int, clients: int) -> int:
    """Complete ``count`` sessions with ``clients`` concurrent clients; returns the failures."""
    failures = [0]
    body = json.dumps({"agent": agent, "prompt": "hi"})

    def one(client: httpx.Client) -> None:
        try:
            answer = client.post("/v1/sessions?wait=true&timeout=300", content=body)
            if answer.status_code != 201 or answer.json()["status"] != "idle":
                failures[0] += 1
        except httpx.HTTPError:
            failures[0] += 1

    with httpx.Client(base_url=url, timeout=300, limits=httpx.Limits(max_connections=clients)) as client:
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(lambda _: one(client), range(count)))
    return failures[0]


def main() -> int:
    """Start the server, complete sessions up to each count, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="1000,10000", help="completed sessions at which RSS is read")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--variant", choices=["plain", "tool"], default="plain")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    counts = sorted(int(c) for c in args.counts.split(","))
    agent = "bench" if args.variant == "plain" else "bench-tool"
    rows: list[dict[str, Any]] = []
    with Processes(keep=args.keep) as procs:
        mock = common.start_mock(procs)
        agent_files = common.write_agents(procs.workdir, mock.url)
        product = common.start_embedded(procs, agent_files, "memory")
        pid = product.pids()[0]
        complete(product.url, agent, 20, 4)
        time.sleep(2)
        rows.append({"sessions": 0, "rss_mib": rss_mib(pid), "peak_mib": float("nan"), "seconds": 0.0})
        rows[-1].update(db_mib=Path(product.db).stat().st_size / 2**20, failures=0, load1=loadavg()[0])
        done = 0
        for count in counts:
            sampler = PeakSampler(pid)
            sampler.start()
            with phase(f"completing sessions {done + 1}..{count}"):
                started = time.monotonic()
                failures = complete(product.url, agent, count - done, args.clients)
                seconds = time.monotonic() - started
            sampler.halt.set()
            sampler.join()
            done = count
            mock.timings()  # forget them
            time.sleep(2)
            rows.append(
                {
                    "sessions": count,
                    "rss_mib": rss_mib(pid),
                    "peak_mib": sampler.peak,
                    "seconds": seconds,
                    "db_mib": Path(product.db).stat().st_size / 2**20,
                    "failures": failures,
                    "load1": loadavg()[0],
                }
            )
    print(f"\n## Memory of the embedded server ({args.variant}, {args.clients} clients)\n")
    headers = ["completed sessions", "RSS MiB", "peak RSS MiB", "seconds", "SQLite MiB", "failures", "load"]
    table = [
        [str(r["sessions"]), fmt(r["rss_mib"]), fmt(r["peak_mib"]), fmt(r["seconds"]), fmt(r["db_mib"]),
         str(r["failures"]), fmt(r["load1"], 2)]
        for r in rows
    ]  # fmt: skip
    print(markdown_table(headers, table))
    ratio = rows[-1]["rss_mib"] / rows[1]["rss_mib"] if len(rows) > 2 else float("nan")
    if len(rows) > 2:
        print(f"\nRSS after {rows[-1]['sessions']} / after {rows[1]['sessions']} sessions: {ratio:.2f}")
    print(f"load average at the end: {loadavg()}")
    common.write_json(args.json, {"benchmark": "memory", "options": vars(args), "results": rows, "ratio": ratio})
    return 0


if __name__ == "__main__":
    common.run_main(main)
