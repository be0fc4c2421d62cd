"""Tool calls that run outside the step: background (``runAsync``) and detached calls.

The executing side (a Celery task for ``runAsync``, a worker thread for a call an interrupt
detached) runs the tool while a watcher renews the call's heartbeat and turns a cancellation
request, written by any process, into a kill of the tool's process group. When the call ends its
row is finished, never overwriting a cancellation; if the call was detached by then, its result
is posted to the session as ``toolCallFinished`` mail (spec/sessions.md §3.6, §3.9).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from sessions_app.models import BackgroundCall, Session

log = logging.getLogger("sessions.background")

CANCELLED_TEXT = "async tool call was cancelled"
ORPHANED_TEXT = "Error: the tool call was orphaned (the process running it stopped)"

#: Seconds between two heartbeats (and cancellation checks) of a running call.
HEARTBEAT_SECONDS = 0.5


def create(session: Session, tracked: dict[str, Any], *, attached: bool) -> BackgroundCall:
    """A running BackgroundCall row for a tracked call (inside the caller's transaction)."""
    now = timezone.now()
    call = tracked["tcCall"]
    return BackgroundCall.objects.create(
        session=session,
        tool_call_id=tracked["tcId"],
        provider_call_id=str(call.get("id") or ""),
        tool=(call.get("function") or {}).get("name") or "",
        call=call,
        attached=attached,
        heartbeat_at=now,
        created_at=now,
    )


def cancel_calls(session: Session, tool_call_ids: list[str] | None) -> int:
    """Ask the running calls of ``session`` (all, or those ids: internal or provider) to stop."""
    query = BackgroundCall.objects.filter(session=session, state=BackgroundCall.State.RUNNING)
    if tool_call_ids is not None:
        query = query.filter(tool_call_id__in=tool_call_ids) | query.filter(provider_call_id__in=tool_call_ids)
    return query.update(cancel_requested=True)


class Watcher(threading.Thread):
    """Renews a running call's heartbeat and sets ``cancel`` when a cancellation is requested."""

    def __init__(self, call_id: uuid.UUID, cancel: threading.Event) -> None:
        super().__init__(name=f"bg-{call_id}", daemon=True)
        self.call_id = call_id
        self.cancel = cancel
        self.done = threading.Event()

    def run(self) -> None:
        try:
            while not self.done.wait(HEARTBEAT_SECONDS):
                BackgroundCall.objects.filter(pk=self.call_id).update(heartbeat_at=timezone.now())
                if BackgroundCall.objects.filter(pk=self.call_id, cancel_requested=True).exists():
                    self.cancel.set()
        finally:
            connection.close()


def claim(call_id: uuid.UUID, executor: str) -> bool:
    """Take a background call for execution; ``False`` if another executor has it or it ended."""
    return (
        BackgroundCall.objects.filter(pk=call_id, state=BackgroundCall.State.RUNNING, executor="").update(
            executor=executor, heartbeat_at=timezone.now()
        )
        == 1
    )


def execute(call_id: uuid.UUID, work: Callable[[threading.Event], tuple[str, Any]]) -> None:
    """Run ``work(cancel_event)`` for a claimed BackgroundCall, with heartbeat and cancellation.

    Args:
        call_id: the BackgroundCall.
        work: runs the tool; returns ``(state, response)`` with state ``Completed`` or ``Failed``.
    """
    cancel = threading.Event()
    watcher = Watcher(call_id, cancel)
    watcher.start()
    try:
        state, response = work(cancel)
    except Exception as error:
        log.exception("background call failed", extra={"kind": "tools.background_failed"})
        state, response = "Failed", f"Error: {type(error).__name__}: {error}"
    finally:
        watcher.done.set()
    if cancel.is_set():
        state, response = "Failed", CANCELLED_TEXT
    finish(call_id, state, response)
    close_old_connections()


def finish(call_id: uuid.UUID, state: str, response: Any) -> None:
    """Record a call's end; post ``toolCallFinished`` mail when it is detached."""
    from sessions_app.services import mail_send

    with transaction.atomic():
        row = BackgroundCall.objects.select_for_update().filter(pk=call_id).first()
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
        from sessions_app import hub

        transaction.on_commit(hub.announce)


def orphan_stale(session: Session) -> int:
    """Fail the running calls of ``session`` whose executor stopped beating (its process died)."""
    cutoff = timezone.now() - timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
    stale = BackgroundCall.objects.filter(session=session, state=BackgroundCall.State.RUNNING, heartbeat_at__lt=cutoff)
    return stale.update(state=BackgroundCall.State.FAILED, result=ORPHANED_TEXT, finished_at=timezone.now())


def results_for(session: Session, tool_call_ids: list[str]) -> dict[str, BackgroundCall]:
    """The BackgroundCall rows of these tracked calls, by tool-call id."""
    rows = BackgroundCall.objects.filter(session=session, tool_call_id__in=tool_call_ids)
    return {row.tool_call_id: row for row in rows}


def detach(session: Session, tool_call_ids: list[str]) -> dict[str, BackgroundCall]:
    """Stop waiting for these calls: their results will come as mail.

    Returns:
        The calls that had already ended (by tool-call id): their results are applied at once,
        since no mail will announce them.
    """
    with transaction.atomic():
        rows = list(BackgroundCall.objects.select_for_update().filter(session=session, tool_call_id__in=tool_call_ids))
        running = [r.pk for r in rows if r.state == BackgroundCall.State.RUNNING]
        BackgroundCall.objects.filter(pk__in=running).update(attached=False)
    return {r.tool_call_id: r for r in rows if r.state != BackgroundCall.State.RUNNING}
