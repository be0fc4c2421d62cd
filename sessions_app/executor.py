"""Running a tool call outside the step: a ``runAsync`` call's Celery task, or a call an interrupt detached.

The executing side runs the tool while a watcher renews the call's heartbeat and turns a
cancellation request, written by any process, into a kill of the tool's process group. When the
call ends its row is finished, never overwriting a cancellation; if the call was detached by
then, its result is posted to the session as ``toolCallFinished`` mail (docs/sessions.md §4.6,
§6.7). The rows themselves are ``sessions_app.background``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from sessions_app import background, events, hub
from sessions_app.background import CANCELLED_TEXT, HEARTBEAT_SECONDS
from sessions_app.dispatch import send_background_call
from sessions_app.event_types import EventKind, ToolFinished, ToolStarted, bounded
from sessions_app.models import BackgroundCall
from sessions_app.services.mail import mail_send

log = logging.getLogger("sessions.background")

#: Seconds a background call's tool is given beyond the call's time limit, so that the
#: executor's deadline (and its text) ends the call rather than the tool's own timeout.
TIMEOUT_GRACE = 1.0


def timeout_text(seconds: float) -> str:
    """What the model reads of a background call that outlived its time limit (docs/sessions.md §4.6)."""
    return f"async tool call timed out after {seconds:g}s"


class Watcher(threading.Thread):
    """Renews a running call's heartbeat and sets ``cancel`` when a cancellation is requested or
    the call's ``timeout`` (seconds, ``None``: none) has passed (then ``timed_out`` is set)."""

    def __init__(self, call_id: uuid.UUID, cancel: threading.Event, timeout: float | None = None) -> None:
        super().__init__(name=f"bg-{call_id}", daemon=True)
        self.call_id = call_id
        self.cancel = cancel
        self.done = threading.Event()
        self.deadline = time.monotonic() + timeout if timeout is not None else None
        self.timed_out = False

    def run(self) -> None:
        try:
            while not self.done.wait(self._pause()):
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    self.timed_out = True
                    self.cancel.set()
                BackgroundCall.objects.filter(pk=self.call_id).update(heartbeat_at=timezone.now())
                if BackgroundCall.objects.filter(pk=self.call_id, cancel_requested=True).exists():
                    self.cancel.set()
        finally:
            connection.close()

    def _pause(self) -> float:
        if self.deadline is None or self.timed_out:
            return HEARTBEAT_SECONDS
        return max(0.0, min(HEARTBEAT_SECONDS, self.deadline - time.monotonic()))


def execute(
    call_id: uuid.UUID, work: Callable[[threading.Event], tuple[str, Any]], timeout: float | None = None
) -> None:
    """Run ``work(cancel_event)`` for a claimed BackgroundCall, with heartbeat and cancellation.

    Args:
        call_id: the BackgroundCall.
        work: runs the tool; returns ``(state, response)`` with state ``Completed`` or ``Failed``.
        timeout: seconds the call may run; past them it is cancelled and fails with
            :func:`timeout_text` (give the tool itself :data:`TIMEOUT_GRACE` more).
    """
    cancel = threading.Event()
    watcher = Watcher(call_id, cancel, timeout)
    watcher.start()
    try:
        state, response = work(cancel)
    except Exception as error:
        log.exception("background call failed", extra={"kind": "tools.background_failed"})
        state, response = "Failed", f"Error: {type(error).__name__}: {error}"
    finally:
        watcher.done.set()
    if watcher.timed_out and timeout is not None:
        state, response = "Failed", timeout_text(timeout)
    elif cancel.is_set():
        state, response = "Failed", CANCELLED_TEXT
    finish(call_id, state, response)
    close_old_connections()


def started(row: BackgroundCall) -> None:
    """``tool.started`` for a call an executor has just claimed."""
    events.emit(
        EventKind.TOOL_STARTED, row.session_id, row.session.owner, ToolStarted(tool_call_id=row.provider_call_id,
                                                                               tool=row.tool)
    )


def finish(call_id: uuid.UUID, state: str, response: Any) -> None:
    """Record a call's end with its ``tool.completed`` or ``tool.failed`` event (``status``
    ``completed``, ``failed`` or ``cancelled``); post ``toolCallFinished`` mail when it is
    detached. Once committed, the session's calls a full ``maxConcurrency`` held back are sent
    to the workers again (:func:`background.waiting`)."""
    with transaction.atomic():
        row = BackgroundCall.objects.select_for_update().filter(pk=call_id).select_related("session").first()
        if row is None or row.state != BackgroundCall.State.RUNNING:
            return
        cancelled = row.cancel_requested and state != "Completed"
        row.state = (
            BackgroundCall.State.CANCELLED
            if cancelled
            else (BackgroundCall.State.COMPLETED if state == "Completed" else BackgroundCall.State.FAILED)
        )
        row.result = CANCELLED_TEXT if cancelled else response
        row.finished_at = timezone.now()
        row.save(update_fields=["state", "result", "finished_at"])
        detached = not row.attached
        completed = row.state == BackgroundCall.State.COMPLETED
        events.emit(
            EventKind.TOOL_COMPLETED if completed else EventKind.TOOL_FAILED,
            row.session_id,
            row.session.owner,
            ToolFinished(
                tool_call_id=row.provider_call_id,
                tool=row.tool,
                status=str(row.state),
                result=bounded(row.result, settings.AGENTS["EVENT_VALUE_MAX_BYTES"]),
            ),
        )
        session_id = row.session_id
        transaction.on_commit(lambda: _send_waiting(session_id))
    if detached:
        mail_send(
            session_id=row.session_id,
            body={
                "tag": "toolCallFinished",
                "toolCallId": row.tool_call_id,
                "providerCallId": row.provider_call_id,
                "tool": row.tool,
                "state": "Failed" if row.state != BackgroundCall.State.COMPLETED else "Completed",
                "result": row.result,
            },
            sender={"tag": "toolCall", "toolCallId": row.tool_call_id},
        )
    else:
        hub.announce_on_commit(row.session_id)


def _send_waiting(session_id: uuid.UUID) -> None:
    for waiting_id in background.waiting(session_id):
        send_background_call(str(waiting_id))
