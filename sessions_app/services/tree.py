"""Session trees: helper agents as child sessions, fork and delete (docs/sessions.md §7, §8;
docs/decisions.md §12, §13)."""

from __future__ import annotations

import copy
import functools
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction

from agentfiles import document as doc
from agents_app.narrowing import narrowed_toolset
from agents_app.runtime import runtime_agent
from foundation.common import db_now
from foundation.errors import RunInProgress, TokenAlreadyCompleted, UnknownTurn
from foundation.telemetry import attach_parent, detach
from sessions_app import events, mailbox, selectors
from sessions_app.background import CANCELLED_TEXT, cancel_calls
from sessions_app.dispatch import enqueue_run
from sessions_app.event_types import (
    EventKind,
    RunStopped,
    SessionDeleted,
    SubcallCompleted,
    SubcallFailed,
    SubcallStarted,
    bounded,
)
from sessions_app.models import DOCUMENTS, Continuation, Session
from sessions_app.outcomes import NewChild
from sessions_app.services import params as values
from sessions_app.services.agentmail import spawned_answer
from sessions_app.services.continuations import continuation_complete
from sessions_app.services.mail import append_mail
from sessions_app.store import insert_session, run_fields, run_is_active, store


def session_fork(
    *, session_id: uuid.UUID, at_turn: int | None, agent_slug: str | None, params: dict[str, Any] | None = None
) -> Session:
    """Copy a session into a new one that starts no run (``POST /v1/sessions/:id/fork``).

    ``at_turn`` indexes ``turns`` newest first; the fork keeps that turn and every older one
    (docs/decisions.md §12). Deferred and background calls are not copied: a kept head that
    still waits on calls is closed as a cancelled run closes it. The fork keeps the source's
    parent link and non-secret params (those its agent declares), not its secrets, seal, token
    or mail; ``params`` are merged over them (docs/api.md §7.15), required ones not enforced.

    Raises:
        ApiError: 404 ``unknown_session``, ``unknown_turn``, ``unknown_agent``; the parameter
            errors of docs/api.md §7.15.
    """
    source = selectors.session_get(session_id)
    slug = agent_slug or source.agent_slug
    agent = runtime_agent(slug)
    checked = values.check_request(agent, params)
    checked.refuse_message_scope()
    declared = {name: value for name, value in (source.params or {}).items() if name in agent.parameters.decls}
    document = source.document
    turns = document.get("turns") or []
    index = 0 if at_turn is None else at_turn
    if at_turn is not None and not 0 <= at_turn < len(turns):
        raise UnknownTurn(session_id, at_turn, len(turns))
    kept = copy.deepcopy(turns[index:])
    if kept and kept[0]["tag"] == "PartialUserTurn":
        head = doc.current_partial(kept[0])
        for tc in doc.tracked_calls(head):
            if tc["tcState"] not in doc.FINAL_STATES:
                tc["tcState"], tc["tcResult"] = "Failed", CANCELLED_TEXT
        kept[0] = doc.close_partial(head)
    new_id = uuid.uuid4()
    forked = doc.new_document(str(new_id))
    forked["turns"] = kept
    forked["forkedFromSessionId"] = str(source.pk)
    with transaction.atomic():
        values.hold_on_commit(new_id, secrets=values.secret_updates(agent, checked.session))
        session = insert_session(
            forked,
            id=new_id,
            agent_slug=slug,
            parent_id=source.parent_id,
            owner=source.owner,
            status=doc.status_of(forked),
            forked_from=source.pk,
            params=values.stored_params(agent, declared, checked.session),
        )
    return session


def deletion_plan(session_id: uuid.UUID) -> tuple[list[Session], int]:
    """The sessions a delete removes (deepest first) and their continuation count.

    Raises:
        ApiError: 404 ``unknown_session``; 409 ``run_in_progress`` when a run is active anywhere
            in the tree or in an ancestor.
    """
    root = selectors.session_get(session_id)
    ancestor = root.parent
    while ancestor is not None:
        if run_is_active(ancestor):
            raise RunInProgress(ancestor.pk)
        ancestor = ancestor.parent
    levels = [[root]]
    while levels[-1]:
        levels.append(list(Session.objects.filter(parent__in=levels[-1])))
    tree = [s for level in reversed(levels) for s in level]
    for session in tree:
        if run_is_active(session):
            raise RunInProgress(session.pk)
    continuations = Continuation.objects.filter(session__in=tree).count()
    return tree, continuations


def session_delete(*, session_id: uuid.UUID, dry_run: bool) -> dict[str, Any]:
    """Delete a session and its descendants, leaves first (``DELETE /v1/sessions/:id``).

    Returns:
        The DeletionPlan ``{"sessions": [ids deepest first], "continuations": n, "dry_run": b}``.
    Raises:
        ApiError: 404 ``unknown_session``; 409 ``run_in_progress`` (also on a dry run).
    """
    with transaction.atomic():
        tree, continuations = deletion_plan(session_id)
        if not dry_run:
            for session in tree:
                Session.objects.filter(pk=session.pk).delete()
                DOCUMENTS.forget(session.pk)
                events.emit(EventKind.SESSION_DELETED, session.pk, session.owner, SessionDeleted())
            values.forget_on_commit(s.pk for s in tree)
    return {"sessions": [str(s.pk) for s in tree], "continuations": continuations, "dry_run": dry_run}


def child_create(parent: Session, child: NewChild, call: dict[str, Any]) -> Session:
    """Create and start the child session answering a helper call (inside the step's transaction).

    The child belongs to the owner of the parent's root and is listed under ``?parent=``. Its
    values are those its caller gave (``with``): non-secret ones stored with it, secret ones
    held outside the database with its narrowing (docs/tools.md §8.6), before its run is sent.
    """
    agent = runtime_agent(child.agent_slug)
    document = doc.new_document(str(child.session_id))
    if child.narrowing is not None:
        # the narrowing itself is held outside the database; a run that finds it gone stops
        document["narrowed"] = True
    visible = agent.resolve_params(child.params)
    tools = narrowed_toolset(agent.toolset, child.narrowing.here) if child.narrowing is not None else agent.toolset
    document = doc.push_turn(document, doc.user_turn(agent.system_prompt, tools.system_tools(visible), child.prompt))
    values.hold_on_commit(
        child.session_id,
        secrets={name: value.value for name, value in child.params.items() if value.secret},
        narrowing=child.narrowing,
    )
    session = insert_session(
        document,
        id=child.session_id,
        agent_slug=child.agent_slug,
        parent=parent,
        owner=parent.owner,
        params={name: value.value for name, value in child.params.items() if not value.secret},
        **run_fields(Session.RunMode.UNTIL_BLOCKED),
    )
    started = SubcallStarted(
        child_session_id=str(session.pk),
        slug=child.agent_slug,
        depth=child.depth,
        tool_call_id=str(call.get("id") or ""),
    )
    events.emit(EventKind.SUBCALL_STARTED, parent.pk, parent.owner, started)
    # the child's runs are children of the helper call's execute_tool span: one trace
    token = attach_parent(child.traceparent)
    try:
        enqueue_run(session.pk, session.run_id)
    finally:
        detach(token)
    return session


def deliver_to_parent(child_id: uuid.UUID, *, cancelled: bool = False) -> None:
    """Give a stopped child's outcome to the parent call waiting on it.

    An ``idle`` child answers with its final text; a ``failed`` or cancelled one with an error; a
    child that stopped for another reason (waiting on its own deferred calls, paused) leaves the
    parent waiting. The parent resumes as it would after a continuation. A child started by
    ``spawn-session`` answers by mail instead (``agentmail.spawned_answer``).
    """
    if not cancelled:
        spawned_answer(child_id)
    child = Session.objects.filter(pk=child_id).select_related("parent").first()
    if child is None or child.parent is None:
        return
    if not cancelled and child.status not in (Session.Status.IDLE, Session.Status.FAILED):
        return
    parent = child.parent
    head = doc.head(parent.document)
    if head is None or head["tag"] != "PartialUserTurn":
        return
    waiting = [
        tc for tc in doc.tracked_calls(head) if tc.get("tcChild") == str(child.pk) and tc["tcState"] == "Deferred"
    ]
    if not waiting:
        return
    if cancelled:
        result: Any = f"Error: the helper agent {child.agent_slug} was cancelled"
        failed = SubcallFailed(child_session_id=str(child.pk), message="cancelled")
        events.emit(EventKind.SUBCALL_FAILED, parent.pk, parent.owner, failed)
    elif child.status == Session.Status.IDLE:
        child_head = doc.head(child.document)
        answer = doc.response_text(child_head["contents"]) if child_head and child_head["tag"] == "LlmTurn" else ""
        result = answer
        shown = bounded(answer, settings.AGENTS["EVENT_VALUE_MAX_BYTES"])
        completed = SubcallCompleted(child_session_id=str(child.pk), result=shown)
        events.emit(EventKind.SUBCALL_COMPLETED, parent.pk, parent.owner, completed)
    else:
        result = f"Error: the helper agent {child.agent_slug} failed: {child.status_detail}"
        failed = SubcallFailed(child_session_id=str(child.pk), message=child.status_detail)
        events.emit(EventKind.SUBCALL_FAILED, parent.pk, parent.owner, failed)
    try:
        continuation_complete(
            token=uuid.UUID(waiting[0]["tcContinuation"]), result=result, resume=True, from_helper=True
        )
    except TokenAlreadyCompleted:
        # already answered (e.g. the parent was cancelled meanwhile): nothing left to deliver
        return


def cancel_helpers(session: Session) -> Session:
    """Cancel a session that is running only while its helpers work for it (no run of its own).

    Its open helper calls are closed as a stopped run closes them (``async tool call was
    cancelled``, their continuations completed), the runs of its descendants are asked to stop,
    and it is stored with the status its turns imply, with ``run.stopped``. Call it with the
    session's row locked.
    """
    document = session.document
    newest = doc.head(document)
    assert newest is not None  # noqa: S101 - narrows the type (a session with open helper calls has turns)
    head = doc.current_partial(newest)
    tokens = []
    for tc in doc.tracked_calls(head):
        if tc["tcState"] == "Deferred" and tc.get("tcChild"):
            tc["tcState"], tc["tcResult"] = "Failed", CANCELLED_TEXT
            tokens.append(tc["tcContinuation"])
    document = doc.replace_head(document, doc.close_partial(head) if doc.all_final(head) else head)
    now = db_now()
    Continuation.objects.filter(pk__in=tokens).update(result=CANCELLED_TEXT, completed_at=now, applied_at=now)
    stop_children(session)
    status = doc.status_of(document)
    session = store(session, document, status=status, status_detail=None)
    events.emit(EventKind.RUN_STOPPED, session.pk, session.owner, RunStopped(status=status))
    return session


def has_active_descendants(session: Session) -> bool:
    level = list(Session.objects.filter(parent=session))
    while level:
        if any(run_is_active(child) for child in level):
            return True
        level = list(Session.objects.filter(parent__in=level))
    return False


def stop_children(session: Session) -> None:
    """Ask the active runs of a session's descendants to stop (cancelling a parent cancels its children)."""
    level = list(Session.objects.filter(parent=session))
    while level:
        for child in level:
            if run_is_active(child):
                append_mail(child, mailbox.STOP_RUN, priority="interrupt", sender={"tag": "system", "source": "cancel"})
                cancel_calls(child, None)
        level = list(Session.objects.filter(parent__in=level))


def waits_on(parent: Session, child_id: uuid.UUID) -> bool:
    """Whether the head of ``parent`` has a helper call still ``Deferred`` on child ``child_id``."""
    return str(child_id) in _waited_children(parent)


def _waited_children(parent: Session) -> set[str]:
    """The ids of the helper sessions the head of ``parent`` still waits on."""
    head = doc.head(parent.parsed_document())
    if head is None or head["tag"] != "PartialUserTurn":
        return set()
    return {tc["tcChild"] for tc in doc.tracked_calls(head) if tc["tcState"] == "Deferred" and tc.get("tcChild")}


#: The statuses of a helper session that nobody runs and that its parent cannot wait out: a
#: ``ready`` one has work no run will do, an ``idle`` or ``failed`` one an answer not delivered.
STRANDED = (Session.Status.READY, Session.Status.IDLE, Session.Status.FAILED)


def free_stranded_children(parent: Session, *, settled_before: Any = None) -> list[str]:
    """Set moving again the helper sessions a parent waits on that nothing will move
    (docs/sessions.md §4.8): a ``ready`` one gets an ``until_blocked`` run, an ``idle`` or
    ``failed`` one's outcome is delivered to the parent after commit.

    A helper gets there when the process that ran it died between two of its writes: taken over
    in the middle of a step (``ready``), or stopped with its answer stored and its delivery,
    which follows the commit, lost. A helper ``paused`` or ``waiting_external`` is waiting for a
    client, who can see it under ``?parent=``, and is left alone.

    Args:
        parent: the session, read in the caller's transaction.
        settled_before: when given (a database time), only helpers not written since then are
            concerned, so that a delivery on its way is not raced.
    Returns:
        The ids of the helpers set moving.
    """
    waited = _waited_children(parent)
    if not waited:
        return []
    candidates = Session.objects.filter(pk__in=waited, status__in=STRANDED)
    if settled_before is not None:
        candidates = candidates.filter(updated_at__lt=settled_before)
    freed = []
    for child_id in candidates.values_list("pk", flat=True):
        child = Session.objects.select_for_update().filter(pk=child_id).first()
        if child is None or child.status not in STRANDED:
            continue
        if child.status == Session.Status.READY:
            child = store(child, child.document, **run_fields(Session.RunMode.UNTIL_BLOCKED))
            enqueue_run(child.pk, child.run_id)
        else:
            transaction.on_commit(functools.partial(deliver_to_parent, child.pk))
        freed.append(str(child.pk))
    return freed
