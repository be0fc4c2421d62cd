"""Recovery: runs whose worker died, and runs nobody claimed (docs/sessions.md §4.8)."""

from __future__ import annotations

import functools
import logging
from datetime import timedelta
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import transaction

from agentfiles import document as doc
from agents_app.runtime import runtime_agent
from foundation.common import db_now
from foundation.errors import UnknownAgent, UnreadableSession
from sessions_app import background, events, mailbox
from sessions_app.background import cancel_calls
from sessions_app.dispatch import enqueue_run
from sessions_app.event_types import EventKind, RunStopped, SessionFailed
from sessions_app.models import Continuation, Session
from sessions_app.services import params as values
from sessions_app.services.tree import STRANDED, deliver_to_parent, free_stranded_children, waits_on
from sessions_app.store import lock_session, run_fields, store, store_columns

log = logging.getLogger("sessions.recovery")

#: Takeovers after which a helper session its parent waits on is failed rather than resumed.
MAX_HELPER_RESUMES = 3


def recover_stale_runs(*, all_claimed: bool) -> tuple[list[str], list[str]]:
    """Free sessions whose run died with its worker, and resend runs nobody claimed.

    A claimed run whose lease has expired (or every claimed run, with ``all_claimed``: at the
    start of the embedded server no other process can hold one) is stored as a restart would
    store it: the interrupted step is lost, the status is the one its turns imply, and nothing
    resumes on its own (docs/sessions.md §4.8). The controls posted to it and never read are
    consumed: a Pause leaves the session ``paused``, a StopRun cancels its background calls, and
    none is left to stop the next run (docs/sessions.md §6.3). A helper session its parent waits
    on is not left there: see :func:`_helper_outcome`. A run requested more than a lease ago and
    still unclaimed (its task was lost with a broker or a process) is enqueued again; the claim
    makes a duplicate harmless.

    Returns:
        ``(recovered_ids, resent_ids)``.
    """
    now = db_now()
    claimed = Session.objects.filter(status=Session.Status.RUNNING, run_owner__isnull=False)
    if not all_claimed:
        claimed = claimed.filter(run_lease_until__lt=now)
    recovered = []
    for session_id in claimed.values_list("pk", flat=True):
        with transaction.atomic():
            session = lock_session(session_id)
            if session.status != Session.Status.RUNNING or session.run_owner is None:
                continue
            if not all_claimed and session.run_lease_until is not None and session.run_lease_until >= now:
                continue
            released: dict[str, Any] = {
                "run_id": None,
                "run_mode": None,
                "run_owner": None,
                "run_lease_until": None,
                "takeovers": session.takeovers + 1,
            }
            values.drop_run_on_commit(session.pk, session.run_id)
            stop = None
            status: str
            detail: str | None
            document: dict[str, Any] | None
            try:
                document = session.document
            except UnreadableSession as error:
                # nothing can be made of its turns: it is failed, saying why
                status, detail, document = Session.Status.FAILED, error.message, None
            else:
                # controls posted to the dead run go with it: a Pause is kept (the session is
                # stored paused), a StopRun stops its background calls; none stops a later run
                if mailbox.may_have_unread(session.last_mail_seq, document):
                    document, stop, _ = mailbox.take_controls(session, document)
                if stop == mailbox.Control.STOP_RUN:
                    cancel_calls(session, None)
                document, detail = _lost_parameters(session, document)
                status = Session.Status.PAUSED if stop == mailbox.Control.PAUSE else doc.status_of(document)
            outcome = _helper_outcome(session, status, stop)
            if outcome == _Helper.LEAVE and _results_wait_for_a_run(session, document, stop):
                # a deferred result posted while the dead run held the session was queued for that
                # run (docs/sessions.md §4.8): its client asked for the run that folds it in
                outcome = _Helper.RESUME
            if outcome == _Helper.RESUME:
                assert document is not None  # noqa: S101 - narrows the type (only a session read as ready resumes)
                session = store(session, document, **{**released, **run_fields(Session.RunMode.UNTIL_BLOCKED)})
                enqueue_run(session.pk, session.run_id)
                status = Session.Status.RUNNING
            else:
                if outcome == _Helper.GIVE_UP:
                    status = Session.Status.FAILED
                    detail = f"taken over {released['takeovers']} times: the worker running it stopped each time"
                    events.emit(EventKind.SESSION_FAILED, session.pk, session.owner, SessionFailed(message=detail))
                fields = {**released, "status": status, "status_detail": detail}
                if document is None:
                    session = store_columns(session, **fields)
                else:
                    session = store(session, document, **fields)
                if session.parent_id is not None and status != Session.Status.RUNNING:
                    cancelled = stop == mailbox.Control.STOP_RUN
                    transaction.on_commit(functools.partial(deliver_to_parent, session.pk, cancelled=cancelled))
            if status != Session.Status.RUNNING:
                # a session whose helpers work for it is still running to its clients
                events.emit(EventKind.RUN_STOPPED, session.pk, session.owner, RunStopped(status=status))
        recovered.append(str(session_id))
    cutoff = now - timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
    unclaimed = Session.objects.filter(status=Session.Status.RUNNING, run_owner__isnull=True)
    if not all_claimed:
        unclaimed = unclaimed.filter(updated_at__lt=cutoff)
    resent = []
    for session_id, run_id in unclaimed.values_list("pk", "run_id"):
        if run_id is not None:
            with transaction.atomic():
                enqueue_run(session_id, run_id)
            resent.append(str(session_id))
    return recovered, resent


def _results_wait_for_a_run(session: Session, document: dict[str, Any] | None, stop: mailbox.Control | None) -> bool:
    """Whether a taken-over session holds deferred results posted and never applied (a
    Continuation completed while its run was going), with nothing stopping a new run."""
    return (
        document is not None
        and stop is None
        and session.takeovers < MAX_HELPER_RESUMES
        and Continuation.objects.filter(session=session, completed_at__isnull=False, applied_at__isnull=True).exists()
    )


class _Helper(StrEnum):
    """What the recovery does with a helper session whose parent waits on it."""

    RESUME = "resume"
    GIVE_UP = "give_up"
    LEAVE = "leave"


def _helper_outcome(session: Session, status: str, stop: mailbox.Control | None) -> _Helper:
    """Whether a taken-over session is a helper to resume, to fail, or to store as any session.

    A helper whose parent waits on it and whose turns leave work to do (``ready``) is resumed at
    once, up to :data:`MAX_HELPER_RESUMES` takeovers: a parent waits on its helpers without a run
    of its own, and no client would think of resuming the helper. After that many takeovers the
    helper is ``failed``, saying so, which its parent reads as the helper's answer: a helper that
    kills its worker every time must not do it for ever (docs/sessions.md §4.8). A StopRun or
    a Pause left for the dead run is obeyed instead.
    """
    if session.parent_id is None or status != Session.Status.READY or stop is not None:
        return _Helper.LEAVE
    parent = Session.objects.filter(pk=session.parent_id).first()
    try:
        if parent is None or not waits_on(parent, session.pk):
            return _Helper.LEAVE
    except UnreadableSession:
        return _Helper.LEAVE
    return _Helper.RESUME if session.takeovers < MAX_HELPER_RESUMES else _Helper.GIVE_UP


def free_stranded_helpers(*, all_claimed: bool) -> list[str]:
    """Set moving the helpers that parents wait on and that nothing will move (docs/sessions.md §4.8).

    A parent waiting on helpers has no run of its own (``running`` without a ``run_id``); a
    helper of it that is ``ready``, ``idle`` or ``failed`` was left so by a process that died
    between two writes, unless the parent no longer waits on it (``tree.free_stranded_children``
    decides). Only helpers not written for a lease are concerned, unless ``all_claimed`` (the
    embedded server's start: no other process can be delivering anything). One query finds the
    candidates, so a sweep reads no parent that has none.

    Returns:
        The ids of the helpers set moving.
    """
    settled = None if all_claimed else db_now() - timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
    candidates = Session.objects.filter(
        parent__status=Session.Status.RUNNING, parent__run_id__isnull=True, status__in=STRANDED
    )
    if settled is not None:
        candidates = candidates.filter(updated_at__lt=settled)
    freed: list[str] = []
    for parent_id in sorted(set(candidates.values_list("parent_id", flat=True))):
        with transaction.atomic():
            parent = Session.objects.filter(pk=parent_id, status=Session.Status.RUNNING, run_id__isnull=True).first()
            if parent is None:
                continue
            try:
                freed += free_stranded_children(parent, settled_before=settled)
            except UnreadableSession:
                # a parent (or helper) that cannot be read is failed by its own next run or takeover
                continue
    return freed


def _lost_parameters(session: Session, document: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A recovered session whose required session-scope values are gone (a secret held by the
    processes that died): its running calls fail now, naming them, and its ``status_detail`` says
    ``params_required: <names>`` (docs/sessions.md §4.8). Returns the document and the detail."""
    try:
        agent = runtime_agent(session.agent_slug)
    except UnknownAgent:
        return document, None
    missing = values.missing_session_values(agent, session)
    if not missing:
        return document, None
    log.warning(
        "parameters required", extra={"kind": "sessions.params_required", "session_id": str(session.pk),
                                      "params": missing}
    )
    head = doc.head(document)
    if head is not None and head["tag"] == "PartialUserTurn":
        head = doc.current_partial(head)
        failed = []
        for tc in doc.tracked_calls(head):
            if tc["tcState"] == "Running":
                tc["tcState"] = "Failed"
                tc["tcResult"] = "Error: " + "; ".join(f"parameter {name} is not bound" for name in missing)
                failed.append(tc["tcId"])
        if failed:
            background.cancel_calls(session, failed)
            document = doc.replace_head(document, doc.close_partial(head) if doc.all_final(head) else head)
    return document, f"params_required: {', '.join(missing)}"
