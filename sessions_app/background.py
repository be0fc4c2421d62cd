"""The rows of tool calls that run outside the step: background (``runAsync``) and detached calls.

A BackgroundCall row is created with the step that starts the call, claimed by its executor
(``sessions_app.executor``), renewed by its heartbeat and finished once. The run reads the rows to
wait for attached calls; a cancellation is a flag on the row that the executor turns into a kill.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
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




def claim(call_id: uuid.UUID, executor: str, limit: int | None = None) -> bool:
    """Take a background call for execution.

    Args:
        call_id: the BackgroundCall.
        executor: the name of the process taking it.
        limit: the most calls of its session that may execute at once, in every process
            (the agent's ``maxConcurrency``, docs/sessions.md §4.6); ``None``: no limit.
    Returns:
        ``False`` when another executor has it, it ended, or ``limit`` calls of its session are
        executing already (it stays waiting: :func:`waiting` finds it when one of them ends).
    """
    pending = BackgroundCall.objects.filter(pk=call_id, state=BackgroundCall.State.RUNNING, executor="")
    if limit is None:
        return pending.update(executor=executor, heartbeat_at=timezone.now()) == 1
    with transaction.atomic():
        session_id = pending.values_list("session_id", flat=True).first()
        if session_id is None:
            return False
        # the session's row lock makes the count and the claim one step for every process: two
        # claims counting at once would each see a free slot (SQLite runs one writer at a time,
        # and the count is inside the UPDATE)
        list(Session.objects.select_for_update().filter(pk=session_id).values_list("pk", flat=True))
        executing = (
            BackgroundCall.objects.filter(session_id=OuterRef("session_id"), state=BackgroundCall.State.RUNNING)
            .exclude(executor="")
            .order_by()
            .values("session_id")
            .annotate(n=Count("pk"))
            .values("n")
        )
        claimed = (
            pending.alias(executing=Coalesce(Subquery(executing), 0))
            .filter(executing__lt=limit)
            .update(executor=executor, heartbeat_at=timezone.now())
        )
    return claimed == 1


def waiting(session_id: uuid.UUID) -> list[uuid.UUID]:
    """The background calls of a session not yet claimed, oldest first: those a full
    ``maxConcurrency`` held back, and those whose task has not reached a worker yet."""
    query = BackgroundCall.objects.filter(session_id=session_id, state=BackgroundCall.State.RUNNING, executor="")
    return list(query.order_by("created_at").values_list("pk", flat=True))


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
