"""Soak test: sessions through create, deferred call, continuation and final answer across two
servers and two Celery workers, while one worker is killed (SIGKILL) and restarted at random.

    .venv/bin/python bench/soak.py [--sessions 200] [--kill-every 3] [--clients 16]

Needs PostgreSQL and Redis (TEST_POSTGRES_URL / TEST_REDIS_URL, as the tests). Each client drives
its session to the end the way a real client would: it completes the deferred call, and resumes a
session that recovery left ``ready`` (nothing resumes on its own after a crash). It prints sessions
completed, sessions stuck, turns duplicated and turns lost (the last three must be 0) and the wall
time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devtools.mockllm import MockLlmServer  # noqa: E402
from tests.harness import POSTGRES_URL, REDIS_URL, Server, Worker, write_agent  # noqa: E402

EXPECTED = ["LlmTurn", "UserTurn", "LlmTurn", "UserTurn"]


def drive(servers: list[Server], index: int, deadline: float) -> tuple[str, list[str]]:
    """Run one session to its final answer; return its outcome and its turn tags."""
    first, second = servers[index % 2], servers[(index + 1) % 2]
    with httpx.Client(base_url=first.url, timeout=90) as a, httpx.Client(base_url=second.url, timeout=90) as b:
        body = json.dumps({"agent": "soak", "prompt": f"question {index}"})
        view = a.post("/v1/sessions?wait=true&timeout=30", content=body).json()
        sid = view["session_id"]
        while time.monotonic() < deadline:
            status = view["status"]
            if status == "idle":
                return "completed", [t["tag"] for t in view["session"]["turns"]]
            if status == "waiting_external" and view["pending"]:
                token = view["pending"][0]["continuation_token"]
                answer = b.post(f"/v1/continuations/{token}?wait=true&timeout=30", content=json.dumps({"result": "42"}))
                view = answer.json() if answer.status_code in (200, 202) else b.get(f"/v1/sessions/{sid}").json()
            elif status in ("ready", "failed"):
                answer = a.post(f"/v1/sessions/{sid}/resume?wait=true&timeout=30")
                view = answer.json() if answer.status_code in (200, 202) else a.get(f"/v1/sessions/{sid}").json()
            else:
                view = b.get(f"/v1/sessions/{sid}?wait=true&timeout=10").json()
        return "stuck", [t["tag"] for t in view["session"]["turns"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between kills (randomised)")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds before a session counts as stuck")
    args = parser.parse_args()

    database = f"agents_soak_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{database}"')
    db_url = f"{POSTGRES_URL.rsplit('/', 1)[0]}/{database}"
    redis.Redis.from_url(REDIS_URL).flushdb()
    llm = MockLlmServer(
        {
            "rules": [
                {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}},
                {"reply": {"delay": 0.2, "content": "the answer is {last_content}"}},
            ]
        }
    ).start()
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    agent = write_agent(tmp, "soak", llm.url, toolCallPolicyConfig={"default": {"tag": "defer"}})
    env = {"REDIS_URL": REDIS_URL, "AGENTS_LEASE_SECONDS": "5", "AGENTS_SWEEP_EVERY_SECONDS": "1"}
    servers = [Server([agent], tmp, db=db_url, env=env) for _ in range(2)]
    workers = [
        Worker([agent], tmp, db=db_url, env={**env, "AGENTS_WORKER_BEAT": "1"}),
        Worker([agent], tmp, db=db_url, env=env),
    ]
    stop = threading.Event()
    kills = 0

    def killer() -> None:
        nonlocal kills
        while not stop.wait(random.uniform(0.5, 1.5) * args.kill_every):
            index = random.randrange(len(workers))
            victim = workers[index]
            os.killpg(victim.process.proc.pid, signal.SIGKILL)
            victim.process.proc.wait()
            victim.process.log.close()
            beat = {"AGENTS_WORKER_BEAT": "1"} if index == 0 else {}
            workers[index] = Worker([agent], tmp, db=db_url, env={**env, **beat})
            kills += 1

    started = time.monotonic()
    chaos = threading.Thread(target=killer, daemon=True)
    chaos.start()
    deadline = started + args.deadline
    try:
        with ThreadPoolExecutor(args.clients) as pool:
            outcomes = list(pool.map(lambda i: drive(servers, i, deadline), range(args.sessions)))
    finally:
        stop.set()
        chaos.join(10)
        wall = time.monotonic() - started
        for process in [*servers, *workers]:
            process.stop()
        llm.stop()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    completed = sum(1 for outcome, _ in outcomes if outcome == "completed")
    stuck = sum(1 for outcome, _ in outcomes if outcome == "stuck")
    duplicated = sum(max(0, len(tags) - len(EXPECTED)) for outcome, tags in outcomes if outcome == "completed")
    lost = sum(1 for outcome, tags in outcomes if outcome == "completed" and tags != EXPECTED and len(tags) <= 4)
    print(f"sessions: {args.sessions}, workers killed: {kills}")
    print(f"completed: {completed}")
    print(f"stuck: {stuck}")
    print(f"turns duplicated: {duplicated}")
    print(f"turns lost: {lost}")
    print(f"wall time: {wall:.1f} s")
    return 0 if completed == args.sessions and not (stuck or duplicated or lost) else 1


if __name__ == "__main__":
    raise SystemExit(main())
