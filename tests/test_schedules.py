"""Scheduled runs over real HTTP (issue 28, acceptance 5 and 6 for schedules).

Every-two-seconds schedules stand for every-minute ones (``AGENTS_SCHEDULE_MIN_INTERVAL_SECONDS``
lets a test use them, docs/webhooks.md §9): scaled out on two workers each tick fires exactly
once; after every process was stopped for three ticks, exactly one catch-up firing comes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from devtools.mockllm import MockLlmServer
from tests.harness import Server, Worker, wait_until, write_agent
from tests.owners import owner, write_tokens

SCRIPT = {"rules": [{"reply": {"content": "good morning"}}]}
TICK = 2.0
FAST = {"AGENTS_SCHEDULE_MIN_INTERVAL_SECONDS": "1", "AGENTS_SCHEDULE_SWEEP_SECONDS": "0.2"}


def _when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _create(server: Server, headers: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    body = {"agent": "morning", "prompt": "Good morning?", "interval_seconds": TICK, **extra}
    answer = server.client.post("/v1/schedules", content=json.dumps(body), headers=headers or {})
    assert answer.status_code == 201, answer.text
    return answer.json()


def _runs(server: Server, schedule_id: str, headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    answer = server.client.get(f"/v1/schedules/{schedule_id}/runs", headers=headers or {})
    assert answer.status_code == 200, answer.text
    return list(reversed(answer.json()["runs"]))


def _sleep_to_mid_tick(anchor: float) -> None:
    """Sleep until halfway between two ticks of a schedule whose ticks are ``anchor + k * TICK``."""
    phase = (time.time() - anchor) % TICK
    time.sleep((TICK / 2 - phase) % TICK)


def test_an_interval_schedule_on_two_workers_fires_exactly_once_per_tick(
    tmp_path: Path,
    llm_server: Callable[..., MockLlmServer],
    start_server: Callable[..., Server],
    start_worker: Callable[..., Worker],
    postgres_url: str,
    redis_url: str,
) -> None:
    agent = write_agent(tmp_path, "morning", llm_server(SCRIPT).url)
    env = {"REDIS_URL": redis_url, **FAST}
    server = start_server([agent], db=postgres_url, env=env)
    workers = [start_worker([agent], db=postgres_url, env=env) for _ in range(2)]
    # the schedule is made once both sweep (a worker coming up later would catch up instead)
    wait_until(lambda: all('"worker.ready"' in worker.process.output() for worker in workers), timeout=60)
    created = _create(server)
    first = _when(created["next_fire_times"][0])
    times = [_when(text) for text in created["next_fire_times"]]
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert len(created["next_fire_times"]) == 5 and all(abs(gap - TICK) < 1e-3 for gap in gaps)
    # five ticks, then stop it halfway to the sixth
    time.sleep(max(0.0, first + 4 * TICK - time.time()))
    _sleep_to_mid_tick(first)
    answer = server.client.patch(f"/v1/schedules/{created['schedule_id']}", content=json.dumps({"enabled": False}))
    assert answer.status_code == 200 and answer.json()["next_fire_times"] == []
    time.sleep(TICK)
    runs = _runs(server, created["schedule_id"])
    ticks = [_when(run["tick_at"]) for run in runs]
    assert len(runs) == 5, runs
    assert [round(tick - first, 3) for tick in ticks] == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert not any(run["caught_up"] or run["error"] for run in runs)
    # each firing started its own session, which ran
    sessions = [run["session_id"] for run in runs]
    assert len(set(sessions)) == 5
    for session_id in sessions:
        wait_until(lambda sid=session_id: server.client.get(f"/v1/sessions/{sid}").json()["status"] == "idle")


def test_ticks_missed_while_everything_was_down_are_caught_up_once(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    agent = write_agent(tmp_path, "morning", llm_server(SCRIPT).url)
    db = str(tmp_path / "agents.db")
    server = start_server([agent], db=db, env=FAST)
    created = _create(server, mode="continue")
    first = _when(created["next_fire_times"][0])
    wait_until(lambda: len(_runs(server, created["schedule_id"])) == 2, timeout=20)
    _sleep_to_mid_tick(first)
    server.stop()
    stopped_at = time.time()
    time.sleep(3 * TICK)  # three ticks pass with no process up
    restarted = start_server([agent], db=db, env=FAST)
    restarted_at = time.time()
    _sleep_to_mid_tick(first)
    time.sleep(0.2)
    runs = _runs(restarted, created["schedule_id"])
    missed = [run for run in runs if stopped_at < _when(run["tick_at"]) < restarted_at]
    assert len(missed) == 1 and missed[0]["caught_up"] is True, runs
    # the catch-up firing is for the latest missed tick; the schedule then goes on at its ticks
    assert restarted_at - _when(missed[0]["tick_at"]) < TICK + 0.5
    wait_until(lambda: len(_runs(restarted, created["schedule_id"])) == len(runs) + 1, timeout=10)
    later = _runs(restarted, created["schedule_id"])[-1]
    assert later["caught_up"] is False and round((_when(later["tick_at"]) - first) / TICK, 3) % 1 == 0
    # "continue": one session, continued at every firing
    assert len({run["session_id"] for run in _runs(restarted, created["schedule_id"])}) == 1


def test_bad_schedules_are_refused_and_other_owners_schedules_answer_404(
    tmp_path: Path, llm_server: Callable[..., MockLlmServer], start_server: Callable[..., Server]
) -> None:
    agent = write_agent(tmp_path, "morning", llm_server(SCRIPT).url)
    tokens = write_tokens(tmp_path)
    server = start_server([agent], env=FAST, extra_args=["--auth-tokens", str(tokens), "--admin-owners", "root"])
    alice, bob = owner("alice"), owner("bob")
    refusals = [
        ({"agent": "morning", "prompt": "x"}, "exactly one of cron and interval_seconds"),
        ({"agent": "morning", "prompt": "x", "cron": "* * * * *", "interval_seconds": 60}, "exactly one"),
        ({"agent": "morning", "prompt": "x", "cron": "61 * * * *"}, "is not valid: a field is out of its range"),
        ({"agent": "morning", "prompt": "x", "cron": "* * * * * *"}, "cron must be five fields"),
        ({"agent": "morning", "prompt": "x", "interval_seconds": 0.5}, "interval_seconds must be from 1"),
        ({"agent": "morning", "prompt": "x", "interval_seconds": "60"}, "interval_seconds: A valid number"),
        ({"agent": "morning", "prompt": "x", "interval_seconds": True}, "interval_seconds: A valid number"),
        ({"agent": "morning", "prompt": 123, "interval_seconds": 60}, "prompt: Not a valid string"),
        ({"agent": "morning", "prompt": "x", "cron": "0 8 * * *", "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"agent": "morning", "prompt": "x", "cron": "0 8 * * *", "mode": "sometimes"}, "mode"),
    ]
    for body, message in refusals:
        answer = server.client.post("/v1/schedules", content=json.dumps(body), headers=alice)
        assert answer.status_code == 400 and answer.json()["error"] == "bad_request", (body, answer.text)
        assert message in answer.json()["message"], (body, answer.text)
    answer = server.client.post(
        "/v1/schedules", content=json.dumps({"agent": "nobody", "prompt": "x", "cron": "0 8 * * *"}), headers=alice
    )
    assert answer.status_code == 404 and answer.json()["error"] == "unknown_agent"
    assert server.client.get("/v1/schedules", headers=alice).json()["schedules"] == []

    # a cron schedule, read in its time zone: 08:00 in Tokyo is 23:00 UTC
    mine = _create(server, alice, cron="0 8 * * *", timezone="Asia/Tokyo", interval_seconds=None)
    assert all(text.endswith("T23:00:00Z") for text in mine["next_fire_times"])
    path = f"/v1/schedules/{mine['schedule_id']}"
    assert server.client.get("/v1/schedules", headers=bob).json()["schedules"] == []
    for method, suffix, body in (("GET", "", None), ("PATCH", "", {"enabled": False}), ("DELETE", "", None)):
        content = json.dumps(body) if body is not None else None
        answer = server.client.request(method, path + suffix, headers=bob, content=content)
        assert answer.status_code == 404, (method, answer.text)
        assert answer.json() == {"error": "unknown_schedule", "message": f"no schedule {mine['schedule_id']}"}
    answer = server.client.get(f"{path}/runs", headers=bob)
    assert answer.status_code == 404 and answer.json()["error"] == "unknown_schedule"
    # bob cannot continue alice's session from his schedule either
    session = server.client.post("/v1/sessions", content=json.dumps({"agent": "morning"}), headers=alice).json()
    answer = server.client.post(
        "/v1/schedules",
        content=json.dumps(
            {
                "agent": "morning",
                "prompt": "x",
                "cron": "0 8 * * *",
                "mode": "continue",
                "session": session["session_id"],
            }
        ),
        headers=bob,
    )
    assert answer.status_code == 404 and answer.json()["error"] == "unknown_session"
    assert server.client.get(path, headers=alice).json()["enabled"] is True
    every = server.client.get("/v1/schedules", headers=owner("root")).json()["schedules"]
    assert [row["schedule_id"] for row in every] == [mine["schedule_id"]]
