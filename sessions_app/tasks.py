"""Celery tasks: thin wrappers over the run loop."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from sessions_app import events, runner, services

log = logging.getLogger("sessions.tasks")


@shared_task(name="sessions.run_session", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_session_task(session_id: str, run_id: str) -> None:
    """Execute run ``run_id`` of a session; a duplicate delivery finds it claimed and exits."""
    runner.run_session(session_id, run_id)


@shared_task(name="events.prune", ignore_result=True)
def prune_events_task() -> int:
    """Delete events older than ``AGENTS_EVENT_RETENTION_SECONDS`` (run periodically by beat)."""
    return events.prune(timedelta(seconds=settings.AGENTS["EVENT_RETENTION_SECONDS"]))


@shared_task(name="sessions.sweep", ignore_result=True)
def sweep_runs_task() -> None:
    """Recover runs whose lease expired and resend unclaimed ones (run periodically by beat)."""
    recovered, resent = services.recover_stale_runs(all_claimed=False)
    if recovered:
        log.warning("sessions taken over", extra={"kind": "sessions.taken_over", "session_ids": recovered})
    if resent:
        log.info("runs resent", extra={"kind": "sessions.runs_resent", "session_ids": resent})
