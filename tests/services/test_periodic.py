"""The periodic tasks in process: one process at a time runs each, when it is due, and /healthz
says when no process has swept runs for a few periods (docs/sessions.md §4.9)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from foundation.common import db_now
from sessions_app import periodic
from sessions_app.models import PeriodicLease, Session
from sessions_app.periodic import PeriodicTask, claim, run_if_due
from tests.factories import SessionFactory
from tests.services.conftest import RecordingWorker

pytestmark = pytest.mark.django_db

SWEEP_EVERY = 10.0


def _task(calls: list[str], name: str = PeriodicLease.SWEEP) -> PeriodicTask:
    return PeriodicTask(name, SWEEP_EVERY, lambda: calls.append(name))


def test_a_due_task_is_run_by_the_first_process_that_takes_it_and_by_no_other_until_its_next_period() -> None:
    calls: list[str] = []
    assert run_if_due(_task(calls), "worker-a") is True
    assert run_if_due(_task(calls), "worker-b") is False, "ran a moment ago: not due"
    assert calls == [PeriodicLease.SWEEP]
    row = PeriodicLease.objects.get(name=PeriodicLease.SWEEP)
    assert row.holder == "worker-a" and row.held_until is None and row.finished_at is not None
    # a period later, any process may take it
    PeriodicLease.objects.update(started_at=db_now() - timedelta(seconds=SWEEP_EVERY))
    assert run_if_due(_task(calls), "worker-b") is True
    assert calls == [PeriodicLease.SWEEP] * 2
    assert PeriodicLease.objects.get(name=PeriodicLease.SWEEP).holder == "worker-b"


def test_a_task_held_by_a_live_process_is_not_taken_even_when_due_and_a_dead_holders_hold_runs_out() -> None:
    assert claim(PeriodicLease.SWEEP, SWEEP_EVERY, "worker-a") is True
    # its run takes longer than a period: still held, nobody else starts it
    PeriodicLease.objects.update(started_at=db_now() - timedelta(seconds=5 * SWEEP_EVERY))
    assert claim(PeriodicLease.SWEEP, SWEEP_EVERY, "worker-b") is False
    # worker-a died: its hold runs out, and another process takes the task
    PeriodicLease.objects.update(held_until=db_now() - timedelta(seconds=1))
    assert claim(PeriodicLease.SWEEP, SWEEP_EVERY, "worker-b") is True
    assert PeriodicLease.objects.get(name=PeriodicLease.SWEEP).holder == "worker-b"


def test_a_task_that_raises_is_not_recorded_as_finished_and_lets_its_row_go() -> None:
    def broken() -> None:
        raise RuntimeError("database away")

    assert run_if_due(PeriodicTask(PeriodicLease.SWEEP, SWEEP_EVERY, broken), "worker-a") is True
    row = PeriodicLease.objects.get(name=PeriodicLease.SWEEP)
    assert row.finished_at is None and row.held_until is None


def test_the_sweep_takes_over_expired_runs_and_frees_stranded_helpers(worker: RecordingWorker) -> None:
    dead = SessionFactory(
        status=Session.Status.RUNNING,
        run_id=uuid.uuid4(),
        run_mode="until_blocked",
        run_owner="gone@test",
        run_lease_until=db_now() - timedelta(seconds=5),
    )
    [sweep] = [task for task in periodic.periodic_tasks() if task.name == PeriodicLease.SWEEP]
    assert run_if_due(sweep, "worker-a") is True
    assert Session.objects.get(pk=dead.pk).status == Session.Status.READY


@pytest.mark.django_db(transaction=True)
def test_the_periodic_runner_runs_each_task_at_start_in_its_own_thread() -> None:
    ran = threading.Event()
    runner = periodic.PeriodicRunner("worker-a", [PeriodicTask(PeriodicLease.PRUNE, 600.0, ran.set)])
    runner.start()
    try:
        assert ran.wait(30), "a process that starts tries every task at once"
    finally:
        runner.stop()


def test_healthz_says_recovery_is_stale_when_no_sweep_ever_ran_or_none_finished_for_three_periods() -> None:
    def recovery() -> dict:
        answer = APIClient().get("/healthz")
        assert answer.status_code == 200 and answer.json()["ok"] is True
        return answer.json()["recovery"]

    every = settings.AGENTS["SWEEP_EVERY_SECONDS"]
    # no worker ever swept (scaled out, none started)
    assert recovery() == {"last_sweep_at": None, "sweep_every_seconds": every, "stale": True}
    assert run_if_due(_task([]), "worker-a") is True
    fresh = recovery()
    assert fresh["stale"] is False and fresh["last_sweep_at"] is not None
    # every worker died: the last sweep grows old
    PeriodicLease.objects.update(finished_at=db_now() - timedelta(seconds=3 * every + 1))
    assert recovery()["stale"] is True
    # a sweep going on (a long one) is not stale
    PeriodicLease.objects.update(held_until=db_now() + timedelta(seconds=30))
    assert recovery()["stale"] is False
