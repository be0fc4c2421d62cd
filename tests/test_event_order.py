"""Event ``seq`` numbered at commit on PostgreSQL: no fleet-wide lock held across a transaction,
and still no gap or reordering for any reader (issue 26, acceptance 2; docs/api.md §9.7)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg

from devtools.mockllm import MockLlmServer
from tests.harness import ROOT, Server, base_env, wait_until, write_agent
from tests.streams import SseReader

SESSIONS = 24


def _post(server: Server, path: str, body: dict | None = None):
    return server.client.post(path, content=json.dumps(body) if body is not None else b"")


def _stored_seqs(postgres_url: str) -> list[int]:
    with psycopg.connect(postgres_url) as db:
        return [row[0] for row in db.execute("SELECT seq FROM sessions_app_event ORDER BY seq")]


def test_a_writer_commits_its_events_while_another_transaction_with_events_is_open(postgres_url: str) -> None:
    env = base_env(DATABASE_URL=postgres_url, DJANGO_SECRET_KEY="event-numbering-test")
    done = subprocess.run(
        [sys.executable, "-m", "tests.event_numbering"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # B did not wait for A's open transaction (a lock held from A's first event would have
    # stopped it at lock_timeout), and a reader saw B's event alone
    assert "b_error" not in seen
    assert seen["b_committed_while_a_open"] is True
    assert seen["a_provisional"] < 0
    assert seen["read_after_b"] == [seen["b_final"]]
    # A committed after B, so its events come after B's, in the order A wrote them
    assert seen["b_final"] < seen["a_final"][0] < seen["a_final"][1]
    # the savepoint's event is gone and numbered nothing; the rolled-back transaction left
    # nothing for the next one
    assert seen["savepoint"]["texts"] == ["b", "a", "a2", "kept"]
    texts = [text for _, text in seen["rows"]]
    assert texts == ["b", "a", "a2", "kept", "after"]
    seqs = [seq for seq, _ in seen["rows"]]
    assert seqs == sorted(seqs) and all(seq > 0 for seq in seqs)
    assert seqs[-1] == seen["after_rollback"] and seqs[-2] == seen["savepoint"]["kept"]


def test_readers_on_two_servers_never_see_a_gap_or_a_reordering_under_concurrent_writers(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., object],
    postgres_url: str,
    redis_url: str,
) -> None:
    llm = llm_server({"rules": [{"reply": {"content": "noted: {last_content}"}}]})
    agent = write_agent(tmp_path, "noter", llm.url)
    env = {"REDIS_URL": redis_url}
    servers = [start_server([agent], db=postgres_url, env=env) for _ in range(2)]
    for _ in range(2):
        start_worker([agent], db=postgres_url, env=env)
    live = [SseReader(f"{server.url}/v1/events") for server in servers]
    sessions: list[str] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        for index in range(SESSIONS // 4):
            server = servers[(number + index) % 2]
            created = _post(server, "/v1/sessions", {"agent": "noter", "prompt": f"hello {number}.{index}"})
            assert created.status_code == 201, created.text
            sid = created.json()["session_id"]
            with lock:
                sessions.append(sid)
            other = servers[(number + index + 1) % 2]
            _post(other, f"/v1/sessions/{sid}/messages", {"prompt": "and again"})

    clients = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in clients:
        thread.start()
    # two more readers join in the middle, replaying from where the first reader is
    wait_until(lambda: len(live[0].events()) >= 20, timeout=60)
    cursor = int(live[0].events()[9]["id"])
    replaying = [SseReader(f"{server.url}/v1/events?after={cursor}") for server in servers]
    for thread in clients:
        thread.join(120)

    # a message to a busy session joins its run, so runs are counted by their sessions' status
    wait_until(
        lambda: all(servers[0].client.get(f"/v1/sessions/{sid}").json()["status"] == "idle" for sid in sessions),
        timeout=120,
    )
    stored = _stored_seqs(postgres_url)
    assert stored and len(sessions) == SESSIONS
    for reader in live:
        got = [int(e["id"]) for e in reader.wait_for(lambda e: len(e) >= len(stored), timeout=60)]
        assert got == stored
    after_cursor = [seq for seq in stored if seq > cursor]
    for reader in replaying:
        assert reader.response_headers.get("agents-replay") == "replayed"
        got = [int(e["id"]) for e in reader.wait_for(lambda e: len(e) >= len(after_cursor), timeout=60)]
        assert got == after_cursor
    # a reader that starts at any cursor afterwards reads the same order
    middle = stored[len(stored) // 2]
    again = SseReader(f"{servers[1].url}/v1/events?after={middle}")
    assert [int(e["id"]) for e in again.wait_for(lambda e: len(e) >= len(stored) - len(stored) // 2 - 1)] == [
        seq for seq in stored if seq > middle
    ]
    for reader in [*live, *replaying, again]:
        reader.close()
