"""Webhook deliveries scaled out (issue 28, acceptance 3): a server and two Celery workers on
PostgreSQL and Redis; one worker is SIGKILLed while deliveries are due and in flight. Every
delivery arrives at least once, none is lost, and none arrives before its event was committed
(docs/webhooks.md §3-4)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from devtools.mockllm import MockLlmServer
from tests.harness import Server, Worker, wait_until
from tests.test_webhooks import WEATHER, _deliveries, _subscribe, _weather
from tests.webhook_receiver import Received, webhook_receiver

SESSIONS = 8


def test_a_worker_killed_with_deliveries_due_loses_none_and_none_comes_before_its_commit(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    postgres_url: str,
    redis_url: str,
) -> None:
    agent = _weather(tmp_path, llm_server(WEATHER))
    env = {
        "REDIS_URL": redis_url,
        # the receiver listens on loopback
        "AGENTS_WEBHOOK_BLOCK_PRIVATE": "false",
        "AGENTS_WEBHOOK_RETRY_SECONDS": "0.5,0.5,0.5,0.5,0.5,0.5",
        "AGENTS_WEBHOOK_SWEEP_SECONDS": "0.5",
        "AGENTS_WEBHOOK_TIMEOUT_SECONDS": "2",
    }
    server = start_server([agent], db=postgres_url, env=env)
    doomed = start_worker([agent], db=postgres_url, env=env)
    start_worker([agent], db=postgres_url, env=env)
    with webhook_receiver() as receiver, httpx.Client(base_url=server.url, timeout=30) as reader:

        def committed(item: Received) -> int:
            # the session the event is about must be readable when its delivery arrives
            return reader.get(f"/v1/sessions/{json.loads(item.body)['data']['session_id']}").status_code

        receiver.check = committed
        # every answer comes after a second: deliveries pile up in flight on both workers
        receiver.default = (200, 1.0, {})
        created = _subscribe(server, receiver, ["session.created", "run.stopped"])
        for _ in range(SESSIONS):
            body = json.dumps({"agent": "weather", "prompt": "Weather in Paris?"})
            assert server.client.post("/v1/sessions", content=body).status_code == 201
        wait_until(lambda: len(receiver.received) >= 2, timeout=60)
        os.killpg(doomed.process.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()

        def settled() -> bool:
            rows = _deliveries(server, created["webhook_id"])
            return len(rows) == 2 * SESSIONS and all(row["state"] == "delivered" for row in rows)

        wait_until(settled, timeout=120)
        rows = _deliveries(server, created["webhook_id"])
        assert set(receiver.processed()) == {row["delivery_id"] for row in rows}
        assert all(item.verified for item in receiver.received)
        assert all(item.checked == 200 for item in receiver.received), [item.checked for item in receiver.received]
        # each delivery carries its event's final seq, as the event streams give it (on PostgreSQL
        # events are numbered just before commit: the outbox is written then, docs/api.md §9.7)
        seqs = {item.payload["data"]["seq"] for item in receiver.received}
        assert all(seq > 0 for seq in seqs) and seqs == {row["event_seq"] for row in rows}
        # per session, its creation is delivered before its run's end
        for session_id in {row["session_id"] for row in rows}:
            kinds = [
                item.payload["type"] for item in receiver.received if item.payload["data"]["session_id"] == session_id
            ]
            assert kinds.index("session.created") < kinds.index("run.stopped"), kinds
            numbered = {r["event_kind"]: r["event_seq"] for r in rows if r["session_id"] == session_id}
            assert numbered["session.created"] < numbered["run.stopped"], numbered
        duplicates = len(receiver.received) - len(receiver.processed())
        elapsed = time.monotonic() - killed_at
        print(f"{len(rows)} deliveries settled {elapsed:.1f} s after the kill, {duplicates} sent twice")
