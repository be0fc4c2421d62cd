"""Sending work to the Celery workers: runs and background tool calls, after commit, by task name.

Services and the run loop enqueue through here and never import the tasks module, which imports
them (the README's "How it is built"). A task is sent only once the transaction that requested
it has committed, so a worker never looks for a row it cannot see yet; a task that finds nothing
to do (claimed already, or gone) exits.
"""

from __future__ import annotations

import uuid

from django.db import transaction

from agentsite.celery import app

#: The task names of ``sessions_app.tasks``.
RUN_SESSION_TASK = "sessions.run_session"
RUN_BACKGROUND_CALL_TASK = "sessions.run_background_call"


def enqueue_run(session_id: uuid.UUID, run_id: uuid.UUID) -> None:
    """Send run ``run_id`` of ``session_id`` to a worker once the current transaction commits."""
    args = [str(session_id), str(run_id)]
    transaction.on_commit(lambda: send_run(*args))


def send_run(session_id: str, run_id: str) -> None:
    """Send run ``run_id`` of ``session_id`` to a worker now (outside any transaction)."""
    app.signature(RUN_SESSION_TASK, args=[session_id, run_id]).apply_async()


def enqueue_background_call(call_id: uuid.UUID) -> None:
    """Send a ``runAsync`` call (a BackgroundCall row) to a worker once the transaction commits."""
    args = [str(call_id)]
    transaction.on_commit(lambda: app.signature(RUN_BACKGROUND_CALL_TASK, args=args).apply_async())
