"""The run loop, executed by a Celery worker (spec/ARCHITECTURE.md "The flow of one run", 2-4).

A run is requested by a service (``status=running`` and a fresh ``run_id``). The task claims it
with one conditional UPDATE; a second delivery of the same task, or a task for an older run,
changes no row and exits, so a run never executes two steps at once. While the run goes on a
heartbeat thread renews the lease; every store is fenced by the version and by the lease.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Q

from agents_app.llm import LlmError
from sessions_app import document as doc
from sessions_app import events, services
from sessions_app.engine import NothingToDo, step
from sessions_app.models import Session
from sessions_app.runtime import runtime_agent

log = logging.getLogger("sessions.runner")

#: This process's name in ``run_owner``: unique per process, readable in the admin.
WORKER_NAME = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class LeaseLost(Exception):
    """Another worker holds the run now; stop without storing anything."""


def claim_run(session_id: uuid.UUID, run_id: uuid.UUID) -> bool:
    """Take the lease of run ``run_id`` if it is still requested and no live lease holds it.

    Returns:
        ``True`` when this worker now holds the run.
    """
    with transaction.atomic():
        now = services.db_now()
        changed = (
            Session.objects.filter(pk=session_id, run_id=run_id, status=Session.Status.RUNNING)
            .filter(Q(run_owner__isnull=True) | Q(run_lease_until__lt=now))
            .update(run_owner=WORKER_NAME, run_lease_until=services.lease_deadline(now))
        )
        if changed != 1:
            return False
        session = Session.objects.get(pk=session_id)
        events.emit("run.started", session.pk, session.owner, mode=session.run_mode or "until_blocked")
    return True


class _Heartbeat(threading.Thread):
    """Renews the lease every ``AGENTS_LEASE_RENEW_SECONDS`` until stopped or lost."""

    def __init__(self, session_id: uuid.UUID, run_id: uuid.UUID) -> None:
        super().__init__(name=f"lease-{session_id}", daemon=True)
        self.session_id = session_id
        self.run_id = run_id
        self.stopped = threading.Event()
        self.lost = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(settings.AGENTS["LEASE_RENEW_SECONDS"]):
                now = services.db_now()
                renewed = Session.objects.filter(pk=self.session_id, run_id=self.run_id, run_owner=WORKER_NAME).update(
                    run_lease_until=services.lease_deadline(now)
                )
                if renewed != 1:
                    self.lost.set()
                    return
        finally:
            connection.close()


def run_session(session_id: str, run_id: str) -> None:
    """Execute run ``run_id`` of session ``session_id`` if this worker can claim it.

    Steps until the LLM answers (``idle``), only deferred calls remain (``waiting_external``),
    or after one step in ``step`` mode; a provider error or any exception stores ``failed`` with
    a ``status_detail`` and keeps every stored turn.
    """
    sid, rid = uuid.UUID(session_id), uuid.UUID(run_id)
    close_old_connections()
    if not claim_run(sid, rid):
        log.info("run not claimed", extra={"kind": "run.not_claimed", "session_id": session_id})
        return
    heartbeat = _Heartbeat(sid, rid)
    heartbeat.start()
    try:
        _loop(sid, heartbeat)
    except LeaseLost:
        log.warning("lease lost", extra={"kind": "run.lease_lost", "session_id": session_id})
    finally:
        heartbeat.stopped.set()
        close_old_connections()


def _loop(session_id: uuid.UUID, heartbeat: _Heartbeat) -> None:
    session = Session.objects.get(pk=session_id)
    mode = session.run_mode or "until_blocked"
    log.info("run started", extra={"kind": "run.started", "session_id": str(session_id), "mode": mode})
    steps = 0
    try:
        agent = runtime_agent(session.agent_slug)
        while True:
            if heartbeat.lost.is_set():
                raise LeaseLost()
            session = Session.objects.get(pk=session_id)
            document, applied = services.apply_completed_continuations(session, session.document)
            if applied:
                with transaction.atomic():
                    session = _fenced_store(session, document)
                    services.mark_applied(applied)
            done = steps >= 1 and mode == "step"
            if not done:
                try:
                    result = step(
                        document,
                        agent,
                        str(session_id),
                        on_text_delta=_text_delta_emitter(session) if settings.AGENTS["STREAM_TOKENS"] else None,
                        on_tool_event=_tool_event_emitter(session),
                        owner=session.owner,
                    )
                except NothingToDo:
                    done = True
                else:
                    with transaction.atomic():
                        session = _fenced_store(session, result.document)
                        services.create_continuations(session, result.continuations)
                        if result.continuations:
                            tokens = {c.token for c in result.continuations}
                            calls = [c for c in doc.pending_calls(result.document) if c["continuation_token"] in tokens]
                            events.emit("calls.deferred", session.pk, session.owner, calls=calls)
                    steps += 1
            if done and _finish(session_id, mode, None, None):
                return
    except LeaseLost:
        raise
    except LlmError as error:
        _finish(session_id, mode, Session.Status.FAILED, error.detail)
    except services.VersionConflict:
        _finish(session_id, mode, Session.Status.FAILED, "concurrent modification")
    except Exception as error:
        log.exception("run failed", extra={"kind": "run.failed", "session_id": str(session_id)})
        _finish(session_id, mode, Session.Status.FAILED, f"{type(error).__name__}: {error}")


def _text_delta_emitter(session: Session) -> Callable[[str], None]:
    def emit_delta(text: str) -> None:
        events.emit("text.delta", session.pk, session.owner, text=text)

    return emit_delta


def _tool_event_emitter(session: Session) -> Callable[..., None]:
    def emit_tool_event(kind: str, **payload: Any) -> None:
        events.emit(kind, session.pk, session.owner, **payload)

    return emit_tool_event


def _fenced_store(session: Session, document: dict[str, Any]) -> Session:
    try:
        return services.store(session, document, fence_run=WORKER_NAME)
    except services.VersionConflict:
        holder = Session.objects.filter(pk=session.pk).values_list("run_owner", flat=True).first()
        if holder != WORKER_NAME:
            raise LeaseLost() from None
        raise


def _finish(session_id: uuid.UUID, mode: str, status: str | None, detail: str | None) -> bool:
    """Release the lease and store the final status (derived from the turns unless given).

    Under the row lock, results posted since the last step are applied first, so none is left
    behind by a run that was about to stop. If they let an ``until_blocked`` run go on, the
    lease is kept and ``False`` is returned: the loop continues.
    """
    with transaction.atomic():
        session = Session.objects.select_for_update().get(pk=session_id)
        if session.run_owner != WORKER_NAME:
            raise LeaseLost()
        document, applied = services.apply_completed_continuations(session, session.document)
        services.mark_applied(applied)
        if applied and status is None and mode == "until_blocked" and doc.status_of(document) == "ready":
            services.store(session, document, fence_run=WORKER_NAME)
            return False
        final = status or doc.status_of(document)
        if status == Session.Status.FAILED:
            events.emit("session.failed", session.pk, session.owner, message=detail)
        session = services.store(
            session,
            document,
            fence_run=WORKER_NAME,
            status=final,
            status_detail=detail,
            run_id=None,
            run_mode=None,
            run_owner=None,
            run_lease_until=None,
        )
        events.emit("run.stopped", session.pk, session.owner, status=final)
    log.info("run stopped", extra={"kind": "run.stopped", "session_id": str(session_id), "status": final})
    return True
