"""Sending work to the workers: runs and background tool calls, after commit, by task name.

Services and the run loop enqueue through here and never import the tasks module, which imports
them (docs/architecture.md §1). A task is sent only once the transaction that requested
it has committed, so a worker never looks for a row it cannot see yet; a task that finds nothing
to do (claimed already, or gone) exits. Scaled out, tasks go to the Celery broker; on the
embedded default, to the thread pools of this process (``agentsite.embedded``), installed at
start with :func:`use_embedded_worker`. The broker is the current Celery app's
(``celery.current_app``): the project's wiring makes its app the default of every thread, and
this app never imports the project.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from celery import current_app
from django.db import transaction
from opentelemetry import context as otel_context

#: The task names of ``sessions_app.tasks``.
RUN_SESSION_TASK = "sessions.run_session"
RUN_BACKGROUND_CALL_TASK = "sessions.run_background_call"
FORWARD_WATCHED_EVENT_TASK = "sessions.forward_watched_event"
#: The task a deferred call routed to a queue is published as; the user's worker implements it
#: (docs/guide-deferred.md §1).
DEFERRED_CALL_TASK = "agents.deferred_call"

log = logging.getLogger("sessions.dispatch")


class LocalWorker(Protocol):
    """What runs tasks inside this process (``agentsite.embedded.EmbeddedWorker``)."""

    def submit(self, name: str, args: list[str], *, background_call: bool = False) -> None:
        """Run task ``name`` with ``args`` soon, without blocking."""


_local: LocalWorker | None = None


def use_embedded_worker(worker: LocalWorker | None) -> None:
    """Send every task of this process to ``worker`` from now on (``None``: to the broker again)."""
    global _local
    _local = worker


def _send(name: str, args: list[str], *, background_call: bool = False) -> None:
    if _local is not None:
        _local.submit(name, args, background_call=background_call)
    else:
        current_app.signature(name, args=args).apply_async()


def enqueue_task(name: str, args: list[str]) -> None:
    """Send task ``name`` of another app (registered under that name) with ``args`` once the current
    transaction commits: to the broker scaled out, to this process's pools on the embedded default."""
    sent = list(args)
    transaction.on_commit(lambda: _send(name, sent))


def send_task(name: str, args: list[str]) -> None:
    """Send task ``name`` with ``args`` now (outside any transaction), as :func:`enqueue_task` does."""
    _send(name, list(args))


def enqueue_run(session_id: uuid.UUID, run_id: uuid.UUID | None) -> None:
    """Send run ``run_id`` of ``session_id`` to a worker once the current transaction commits.

    ``run_id`` is the session's ``run_id`` column, which the status change to running that the
    caller just made has set (docs/sessions.md §4.1).

    Raises:
        ValueError: ``run_id`` is ``None``: no run was started, and a worker would look for one
            called ``"None"``.
    """
    if run_id is None:
        raise ValueError(f"session {session_id} has no run to send")
    args = [str(session_id), str(run_id)]
    # sent in the trace context of whoever asked for the run (the request's span, a helper call's)
    parent = otel_context.get_current()
    transaction.on_commit(lambda: _in_context(parent, send_run, *args))


def _in_context(parent: otel_context.Context, send: Callable[..., None], *args: str) -> None:
    token = otel_context.attach(parent)
    try:
        send(*args)
    finally:
        otel_context.detach(token)


def send_run(session_id: str, run_id: str) -> None:
    """Send run ``run_id`` of ``session_id`` to a worker now (outside any transaction)."""
    _send(RUN_SESSION_TASK, [session_id, run_id])


def enqueue_background_call(call_id: uuid.UUID) -> None:
    """Send a ``runAsync`` call (a BackgroundCall row) to a worker once the transaction commits."""
    call = str(call_id)
    transaction.on_commit(lambda: send_background_call(call))


def send_background_call(call_id: str) -> None:
    """Send a ``runAsync`` call to a worker now (outside any transaction); a worker that finds it
    claimed, or its session's ``maxConcurrency`` reached, leaves it."""
    _send(RUN_BACKGROUND_CALL_TASK, [call_id], background_call=True)


def enqueue_watched_event(event_seq: int) -> None:
    """Send event ``event_seq`` to a worker that mails it to its watchers, once the transaction
    that wrote it commits (docs/guide-sessions.md §3)."""
    args = [str(event_seq)]
    transaction.on_commit(lambda: _send(FORWARD_WATCHED_EVENT_TASK, args))


def publish_deferred_call(queue: str, payload: dict[str, Any]) -> None:
    """Publish ``agents.deferred_call`` with ``payload`` (keyword arguments) to Celery queue
    ``queue`` once the transaction commits (docs/guide-deferred.md §1).

    Only a server with a broker other processes share (``REDIS_URL``) can publish: on the
    embedded default the call stays deferred, completable over HTTP, and a warning is logged.
    Neither log line names the continuation token: whoever holds it may complete the call
    (docs/api.md §14.3); the session and the model's call id say which call it is.
    """
    call = {"queue": queue, "session_id": payload.get("session_id"), "tool_call_id": payload.get("tool_call_id")}
    if _local is not None or str(current_app.conf.broker_url).startswith("memory"):
        log.warning("deferred call not published: no shared broker", extra={"kind": "deferred.not_published", **call})
        return
    kwargs = dict(payload)

    def publish() -> None:
        current_app.send_task(DEFERRED_CALL_TASK, kwargs=kwargs, queue=queue)
        log.info("deferred call published", extra={"kind": "deferred.published", **call})

    transaction.on_commit(publish)
