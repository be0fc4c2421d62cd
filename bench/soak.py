"""Soak: sessions through a bash tool, a deferred call and a helper, on two servers and two Celery
workers (PostgreSQL, Redis), while servers and workers are killed with SIGKILL at random moments.

    .venv/bin/python bench/soak.py [--sessions 60] [--clients 12] [--kill-every 4] [--kills 24]

Needs PostgreSQL and Redis (BENCH_POSTGRES_URL / TEST_POSTGRES_URL and BENCH_REDIS_URL, as the
other benchmarks). The product runs with its defaults: leases, sweep and recovery are the ones a
fresh install has (no shortened lease, no ``--beat``). Each client behaves as a careful real client
and nothing more:

- it creates its session with an ``Idempotency-Key`` and, when the answer is lost (a connection
  refused or cut, a 5xx), sends the same request again with the same key, to either server;
- it follows the session with ``GET ...?wait=true`` and answers the deferred call through its
  continuation (with a key of its own, retried the same way);
- it never resumes a session while the soak runs. A root session whose run was taken over is left
  ``ready`` by the server, as the reference says (the interrupted step is lost, nothing is
  resumed: docs/sessions.md §4.8); such sessions are counted (``left ready by takeover``), then
  resumed once each after the kills, as their client would, and must then finish.

Killed at random moments are a server (restarted on its port) or a worker (restarted), in turn,
until ``--kills`` kills were made; sessions are then at every stage (created, model step, tool call,
deferred call, helper call). At the end every session is checked in the database and through the
API: none stuck or failed, every root session with exactly the expected turns (none duplicated,
none lost), the bash tool's side effect (a line in a ledger file) at most once per session, exactly
one root session per client request (no duplicate from a retry), and the session's event stream,
replayed from the start, giving each stored event exactly once. Everything started (processes, the
database, the Redis database, the temporary directory) is removed on every exit path, Ctrl-C and
SIGTERM included. Exit status 0 when every check holds.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    SECRET_KEY,
    Proc,
    Processes,
    agents_argv,
    claim_redis_db,
    clean_env,
    create_database,
    free_port,
    loadavg,
    phase,
    run_main,
    start_mock,
    wait_http,
)

#: The root session's turns, newest first: the answer, the helper's result, the helper call, the
#: continuation's result, the deferred call, the bash tool's result, the bash call, the prompt.
EXPECTED = ["LlmTurn", "UserTurn"] * 4
#: Answers that mean "try again": the server died or is going away, or the first request with
#: the same key is still being answered.
RETRYABLE_STATUS = {500, 502, 503, 504}
IN_PROGRESS = "idempotency_key_in_progress"

SCRIPT: dict[str, Any] = {
    "rules": [
        {"when": {"model": "soak-helper"}, "reply": {"delay": 0.3, "content": "the helper agrees"}},
        {"when": {"last_role": "user"}, "reply": {"tool_calls": [{"name": "bash_ledger", "arguments": {}}]}},
        {"when": {"tool_results": 1}, "reply": {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}},
        {
            "when": {"tool_results": 2},
            "reply": {"tool_calls": [{"name": "io_prompt_agent_soakhelper", "arguments": {"what": "agree?"}}]},
        },
        {"reply": {"delay": 0.2, "content": "the answer is {last_content}"}},
    ]
}


def write_files(directory: Path, model_url: str, ledger: Path) -> list[Path]:
    """The root agent ``soak`` (the bash tool ``ledger``, the external tool ``lookup``, the helper
    ``soakhelper``) and the helper's file; returns the root's path."""
    tools = directory / "tools"
    tools.mkdir()
    describe = {"slug": "ledger", "description": "records that it ran", "args": []}
    script = tools / "ledger"
    script.write_text(
        "#!/usr/bin/env bash\n"
        f"if [ \"${{1:-}}\" = describe ]; then echo '{json.dumps(describe)}'; exit 0; fi\n"
        "sleep 0.5\n"
        f'echo "$AGENT_SESSION_ID" >> {ledger}\n'
        "echo recorded\n"
    )
    script.chmod(0o755)

    def agent(slug: str, model: str, **extra: Any) -> Path:
        contents = {
            "slug": slug,
            "apiKeyId": "none",
            "flavor": "OpenAIv1",
            "modelUrl": model_url,
            "modelName": model,
            "announce": f"the {slug} soak agent",
            "systemPrompt": ["You are a soak test."],
            **extra,
        }
        path = directory / f"{slug}.json"
        path.write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": contents}))
        return path

    agent("soakhelper", "soak-helper")
    root = agent(
        "soak",
        "soak-root",
        toolDirectory="tools",
        extraAgents=[{"slug": "soakhelper", "path": "soakhelper.json"}],
        externalTools=[{"name": "lookup", "description": "answered by a person"}],
    )
    return [root]


@dataclass
class Fleet:
    """Two servers on fixed ports and two workers, any of which can be killed and started again."""

    procs: Processes
    agent_files: list[Path]
    db: str
    env: dict[str, str]
    ports: list[int] = field(default_factory=lambda: [free_port(), free_port()])
    servers: list[Proc] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def start_server(self, index: int) -> Proc:
        argv = agents_argv("serve", self.agent_files, self.db, "--port", str(self.ports[index]))
        proc = self.procs.start(f"serve{index}", argv, self.env, cwd=self.procs.workdir)
        wait_http(f"{self.urls[index]}/healthz", 120, proc)
        return proc

    def start_worker(self, index: int) -> Proc:
        flags = ["--hostname", f"soak{index}-{uuid.uuid4().hex[:4]}@%h"]
        return self.procs.start(f"worker{index}", agents_argv("worker", self.agent_files, self.db, *flags), self.env)

    def start(self) -> None:
        self.servers = [self.start_server(0), self.start_server(1)]
        self.workers = [self.start_worker(0), self.start_worker(1)]

    def ensure_up(self) -> None:
        """Start again whatever is not running (a restart the killer could not finish)."""
        with self.lock:
            for index, proc in enumerate(self.servers):
                if not proc.alive():
                    self.servers[index] = self.start_server(index)
            for index, proc in enumerate(self.workers):
                if not proc.alive():
                    self.workers[index] = self.start_worker(index)

    def kill(self, kind: str, index: int) -> None:
        """SIGKILL one process group (the process and its tools) and start it again."""
        group = self.servers if kind == "server" else self.workers
        with self.lock:
            victim = group[index]
            victim.popen.send_signal(signal.SIGKILL)
            victim.stop(timeout=1)
            group[index] = self.start_server(index) if kind == "server" else self.start_worker(index)


class Client:
    """A client that retries lost requests with their idempotency key, on either server."""

    def __init__(self, urls: list[str], deadline: float) -> None:
        self.urls = urls
        self.deadline = deadline
        self.http = httpx.Client(timeout=60)
        self.retries = 0

    def request(self, method: str, path: str, *, key: str | None = None, body: Any = None) -> httpx.Response:
        """Send until an answer that is not a lost one arrives; the same key every time."""
        headers = {"Idempotency-Key": key} if key else {}
        attempt = random.randrange(len(self.urls))
        while True:
            url = self.urls[attempt % len(self.urls)] + path
            attempt += 1
            try:
                answer = self.http.request(method, url, headers=headers, json=body)
                in_progress = answer.status_code == 409 and answer.json().get("error") == IN_PROGRESS
                if answer.status_code not in RETRYABLE_STATUS and not in_progress:
                    return answer
            except (httpx.TransportError, ValueError):
                pass
            if time.monotonic() > self.deadline:
                raise TimeoutError(f"{method} {path}: no answer before the deadline")
            self.retries += 1
            time.sleep(0.2 + random.random() * 0.3)


def follow(client: Client, sid: str, deadline: float) -> None:
    """Follow session ``sid`` until it stops (``idle``, ``failed``, or ``ready`` for a few seconds on
    end) or ``deadline`` (monotonic seconds), answering each deferred call once."""
    answered: set[str] = set()
    ready_since: float | None = None
    while time.monotonic() < deadline:
        try:
            view = client.request("GET", f"/v1/sessions/{sid}?wait=true&timeout=10").json()
        except TimeoutError:
            break
        if view["status"] in ("idle", "failed"):
            break
        # ready with nothing requested, for a few seconds on end: a takeover left it for a client
        # (docs/sessions.md §4.8); the checks count it, and resume it only after counting
        ready_since = (ready_since or time.monotonic()) if view["status"] == "ready" else None
        if ready_since is not None and time.monotonic() - ready_since > 3:
            break
        for call in view.get("pending") or []:
            token = call["continuation_token"]
            if token not in answered:
                client.request(
                    "POST", f"/v1/continuations/{token}", key=f"soak-answer-{token[:16]}", body={"result": "42"}
                )
                answered.add(token)
        time.sleep(0.1)


def drive(client: Client, index: int) -> str | None:
    """Create one session and see it to its end; return its id (None when creation never answered)."""
    body = {"agent": "soak", "prompt": f"question {index}"}
    try:
        created = client.request("POST", "/v1/sessions", key=f"soak-create-{index}-{uuid.uuid4().hex}", body=body)
    except TimeoutError:
        return None
    sid = created.json()["session_id"]
    follow(client, sid, client.deadline)
    return sid


def replayed_events(url: str, sid: str, expected: int) -> list[int]:
    """The event ids of the session's stream read from the start, until ``expected`` arrived or the
    stream was quiet for two seconds."""
    ids: list[int] = []
    try:
        with httpx.stream("GET", f"{url}/v1/sessions/{sid}/events?after=0", timeout=2) as stream:
            for line in stream.iter_lines():
                if line.startswith("id:"):
                    ids.append(int(line[3:].strip()))
                    if len(ids) >= expected:
                        break
    except httpx.ReadTimeout:
        pass
    return ids


def resume_left_ready(client: Client, sids: list[str]) -> int:
    """Resume, once each, the root sessions a takeover left ``ready``, as their client would, and
    wait for them; return how many did not then end ``idle``."""
    unfinished = 0
    for sid in sids:
        client.request("POST", f"/v1/sessions/{sid}/resume", key=f"soak-resume-{sid}")
        follow(client, sid, time.monotonic() + 120)
        unfinished += int(client.request("GET", f"/v1/sessions/{sid}").json()["status"] != "idle")
    return unfinished


def check(fleet: Fleet, client: Client, sids: list[str | None], requested: int, ledger: Path) -> dict[str, int]:
    """Every check of the soak, as counts that must all be 0 (``completed`` and
    ``left_ready_by_takeover`` aside)."""
    import psycopg

    with psycopg.connect(fleet.db, autocommit=True) as db:
        left_ready = [
            sid
            for (sid,) in db.execute(
                "SELECT id::text FROM sessions_app_session WHERE parent_id IS NULL AND status = 'ready'"
            ).fetchall()
        ]
    # the reference resumes nothing after a takeover of a root session: its client does, once
    not_finishing = resume_left_ready(client, left_ready)
    with psycopg.connect(fleet.db, autocommit=True) as db:
        roots = db.execute("SELECT id::text, status FROM sessions_app_session WHERE parent_id IS NULL").fetchall()
        children = db.execute(
            "SELECT status, count(*) FROM sessions_app_session WHERE parent_id IS NOT NULL GROUP BY status"
        ).fetchall()
        event_counts = dict(
            db.execute("SELECT session_id::text, count(*) FROM sessions_app_event GROUP BY 1").fetchall()
        )
    statuses = dict(roots)
    runs = Counter(line.strip() for line in ledger.read_text().splitlines()) if ledger.exists() else Counter()
    counts = Counter(completed=0, stuck=0, failed=0, duplicated=0, lost=0, repeated_side_effects=0, events_wrong=0)
    counts["left_ready_by_takeover"] = len(left_ready)
    counts["not_finishing_after_one_resume"] = not_finishing
    counts["duplicate_sessions"] = len(roots) - requested
    counts["never_created"] = sum(1 for sid in sids if sid is None)
    counts["children_not_idle"] = sum(n for status, n in children if status != "idle")
    url = fleet.urls[0]
    for sid in filter(None, sids):
        status = statuses.get(sid, "missing")
        tags = [turn["tag"] for turn in client.request("GET", f"/v1/sessions/{sid}").json()["session"]["turns"]]
        if status == "idle":
            counts["completed"] += 1
        elif status == "failed":
            counts["failed"] += 1
        else:
            counts["stuck"] += 1
        counts["duplicated"] += max(0, len(tags) - len(EXPECTED))
        counts["lost"] += int(status == "idle" and len(tags) < len(EXPECTED))
        counts["repeated_side_effects"] += int(runs[sid] > 1)
        ids = replayed_events(url, sid, event_counts.get(sid, 0))
        counts["events_wrong"] += int(len(ids) != len(set(ids)) or len(ids) != event_counts.get(sid, 0))
    return dict(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--kill-every", type=float, default=4.0, help="mean seconds between kills")
    parser.add_argument("--kills", type=int, default=24, help="kills to make, servers and workers in turn")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds before a session counts as stuck")
    args = parser.parse_args()

    with Processes() as procs:
        with phase("starting PostgreSQL database, Redis database, model, 2 servers and 2 workers"):
            db = create_database(procs, "agents_soak")
            env = clean_env(DJANGO_SECRET_KEY=SECRET_KEY, REDIS_URL=claim_redis_db(procs))
            mock = start_mock(procs, SCRIPT)
            ledger = procs.workdir / "ledger.txt"
            fleet = Fleet(procs, write_files(procs.workdir, mock.url, ledger), db, env)
            fleet.start()
        stop = threading.Event()
        kills: Counter[str] = Counter()

        kills_done = threading.Event()

        def killer() -> None:
            try:
                while kills.total() < args.kills and not stop.wait(random.uniform(0.5, 1.5) * args.kill_every):
                    kind = "server" if kills.total() % 2 == 0 else "worker"
                    fleet.kill(kind, random.randrange(2))
                    kills[kind] += 1
            finally:
                kills_done.set()
                # what this thread started again dies with it (bench/common.py asks the kernel for
                # that, per thread), so it lives on until the checks are over
                stop.wait()

        started = time.monotonic()
        chaos = threading.Thread(target=killer, name="killer", daemon=True)
        chaos.start()
        client = Client(fleet.urls, started + args.deadline)
        sids: list[str | None] = []
        tickets = iter(range(10**9))
        tickets_lock = threading.Lock()

        def session_after_session() -> None:
            # new sessions keep coming until both the sessions and the kills asked for are done, so
            # that every kill lands among sessions at work
            while time.monotonic() < client.deadline:
                with tickets_lock:
                    index = next(tickets)
                    if index >= args.sessions and kills_done.is_set():
                        return
                sid = drive(client, index)
                with tickets_lock:
                    sids.append(sid)

        with phase(f"at least {args.sessions} sessions by {args.clients} clients, {args.kills} kills"):
            with ThreadPoolExecutor(args.clients) as pool:
                try:
                    for future in [pool.submit(session_after_session) for _ in range(args.clients)]:
                        future.result()
                except BaseException:
                    client.deadline = 0.0  # Ctrl-C, SIGTERM: every client stops at its next request
                    raise
            kills_done.wait(150)
            fleet.ensure_up()
        wall = time.monotonic() - started
        with phase("checking every session"):
            counts = check(fleet, client, sids, len(sids), ledger)
        stop.set()
    print(f"sessions: {len(sids)}, servers killed: {kills['server']}, workers killed: {kills['worker']}")
    print(f"requests retried: {client.retries}")
    for name, value in counts.items():
        print(f"{name.replace('_', ' ')}: {value}")
    print(f"wall time: {wall:.1f} s (load {loadavg()[0]})")
    bad = {
        name: value for name, value in counts.items() if name not in ("completed", "left_ready_by_takeover") and value
    }
    return 0 if not bad and counts["completed"] == len(sids) else 1


if __name__ == "__main__":
    run_main(main)
