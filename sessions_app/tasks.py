"""Celery tasks: thin wrappers over the run loop."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings

from sessions_app import events, runner


@shared_task(name="sessions.run_session", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_session_task(session_id: str, run_id: str) -> None:
    """Execute run ``run_id`` of a session; a duplicate delivery finds it claimed and exits."""
    runner.run_session(session_id, run_id)


@shared_task(name="events.prune", ignore_result=True)
def prune_events_task() -> int:
    """Delete events older than ``AGENTS_EVENT_RETENTION_SECONDS`` (run periodically by beat)."""
    return events.prune(timedelta(seconds=settings.AGENTS["EVENT_RETENTION_SECONDS"]))
