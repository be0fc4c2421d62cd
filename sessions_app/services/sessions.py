"""Sessions: create, post a message, resume, pause and cancel (docs/api.md §7).

A change that starts a run writes the change and requests the run (``status=running`` and a fresh
``run_id``) in one transaction, and sends the run task on commit (docs/sessions.md §4.1).
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from django.db import IntegrityError, transaction

from agentfiles import document as doc
from agentfiles.document_shape import document_problem
from agentfiles.session_text import FileLayout, document_layout
from agents_app.registry import get_registry
from agents_app.runtime import runtime_agent
from foundation.errors import (
    BadRequest,
    Conflict,
    NoActiveRun,
    RunInProgress,
    UnknownAgent,
    UnknownSession,
)
from sessions_app import mailbox
from sessions_app.background import cancel_calls
from sessions_app.dispatch import enqueue_run
from sessions_app.models import Session
from sessions_app.services import params as values
from sessions_app.services.continuations import adopt_deferred_calls
from sessions_app.services.mail import after_mail, append_mail, mail_send, message_wakes
from sessions_app.services.tree import (
    cancel_helpers,
    free_stranded_children,
    has_active_descendants,
    stop_children,
)
from sessions_app.store import (
    insert_session,
    lock_session,
    run_fields,
    run_is_active,
    run_requested,
    store,
    store_params,
)


def session_create(
    *,
    agent_slug: str,
    prompt: str | None,
    media: list[dict[str, Any]] | None,
    run: str,
    parent_id: uuid.UUID | None = None,
    owner: str | None = None,
    sealed: bool = False,
    session_token_sha256: str | None = None,
    params: dict[str, Any] | None = None,
) -> Session:
    """Create a session (``POST /v1/sessions``, docs/api.md §7.1).

    Without a prompt and media the session is empty and ``ready``; with ``run="none"`` its first
    turn is stored and it stays ``ready``; otherwise a run is requested. A sub-session belongs to
    its root's owner (docs/api.md §10.3), whoever creates it; ``sealed`` and the session token's
    digest (docs/api.md §10.5) are the new session's own, never inherited. ``params`` are checked
    before anything is stored (docs/api.md §7.15): its session-scope values are the session's, its
    message-scope ones the run's.

    Raises:
        ApiError: 404 ``unknown_agent``; 404 ``unknown_session`` for a missing parent; the
            parameter errors of docs/api.md §7.15.
    """
    if get_registry().get(agent_slug) is None:
        # helpers run as children of their caller; sessions are created for root agents
        raise UnknownAgent(agent_slug)
    agent = runtime_agent(agent_slug)
    query = doc.make_query(prompt, media)
    starts_run = query is not None and run != Session.NO_RUN
    checked = values.check_request(agent, params)
    if not starts_run:
        checked.refuse_message_scope()
    given = values.merged(agent, {}, checked.session)
    message = values.message_values(agent, checked.message)
    values.require(agent, given, message, ["session", "message"] if starts_run else ["session"])
    with transaction.atomic():
        parent = None
        if parent_id is not None:
            parent = Session.objects.filter(pk=parent_id).first()
            if parent is None:
                raise UnknownSession(parent_id)
        session_id = uuid.uuid4()
        document = doc.new_document(str(session_id))
        if query is not None:
            turn = doc.user_turn(agent.system_prompt, agent.system_tools(agent.resolve_params(given)), query)
            document = doc.push_turn(document, turn)
        fields: dict[str, Any] = {"status": Session.Status.READY}
        if starts_run:
            fields = run_fields(Session.RunMode(run))
        values.hold_on_commit(session_id, secrets=values.secret_updates(agent, checked.session), message=message)
        session = insert_session(
            document,
            id=session_id,
            agent_slug=agent_slug,
            parent=parent,
            owner=parent.owner if parent is not None else owner,
            sealed=sealed,
            session_token_sha256=session_token_sha256,
            params=values.stored_params(agent, {}, checked.session),
            **fields,
        )
        if starts_run:
            enqueue_run(session.pk, session.run_id)
    return session


def _readable_session_id(document: Any) -> uuid.UUID:
    """The ``sessionId`` of a session document this server can read; 400 ``bad_request`` otherwise."""
    problem = document_problem(document)
    if problem is not None:
        raise BadRequest(f"the session document cannot be read: {problem}")
    try:
        return uuid.UUID(str(document.get("sessionId")))
    except ValueError:
        raise BadRequest(f"sessionId {document.get('sessionId')!r} is not a UUID") from None


def session_import(
    *,
    document: Any,
    agent_slug: str,
    owner: str | None = None,
    require_agent: bool = False,
    layout: FileLayout | None = None,
) -> Session:
    """Store a session document written by agents-exe as a new session of ``agent_slug``.

    The document is kept as it is (docs/sessions.md §1.1, §1.7), under its own ``sessionId``; its
    status is the one its turns imply, and its deferred calls get their continuations, so that
    it goes on as if this server had written it (``agents session import``, ``POST
    /v1/sessions/import``). The agent need not be loaded now (it must be when the session runs),
    unless ``require_agent``. ``layout`` is how the file was laid out (``agentfiles.session_text``),
    kept for its export (docs/sessions.md §1.12); without it, the document's own: compact, its keys
    sorted if they came sorted.

    Raises:
        ApiError: 404 ``unknown_agent`` with ``require_agent`` and no such root agent.
        ApiError: 400 ``bad_request``: a document this server cannot read (naming the turn and
            what is wrong), a ``sessionId`` that is not a UUID, a deferred call without a usable
            continuation token.
        ApiError: 409 ``conflict``: a session with that ``sessionId`` exists (docs/api.md §7.16).
    """
    if require_agent and get_registry().get(agent_slug) is None:
        raise UnknownAgent(agent_slug)
    session_id = _readable_session_id(document)
    with transaction.atomic():
        try:
            # the primary key decides, so that two imports of one file at once cannot both store it
            with transaction.atomic():
                session = insert_session(
                    document,
                    id=session_id,
                    agent_slug=agent_slug,
                    owner=owner,
                    status=doc.status_of(document),
                    file_layout=(layout or document_layout(document)).to_json(),
                )
        except IntegrityError:
            raise Conflict(f"session {session_id} exists already") from None
        adopt_deferred_calls(session, document)
    return session


def session_from_file(
    *, document: Any, agent_slug: str, owner: str | None = None, layout: FileLayout | None = None
) -> Session:
    """The session of a session file (``agents run --session-file``, docs/cli.md §3.1): imported
    when this database does not have it yet (:func:`session_import`), else brought to the file's
    document when the two differ (the file is what the user kept: it wins).

    Raises:
        ApiError: those of :func:`session_import`; 400 ``bad_request`` when the stored session went
            on from the file (the file is older: taking it would lose turns); 409 ``run_in_progress``
            when the stored session differs from the file and a run is going on it.
    """
    session_id = _readable_session_id(document)
    with transaction.atomic():
        if not Session.objects.filter(pk=session_id).exists():
            return session_import(document=document, agent_slug=agent_slug, owner=owner, layout=layout)
        session = lock_session(session_id)
        stored = session.document
        if stored == document:
            return session
        if _is_older(document, stored):
            # the file was written before later turns (a continuation, a resume): taking it would
            # drop them and leave their calls answered in the database but pending in the file
            raise BadRequest(
                f"the database holds a newer version of session {session_id} than this file"
                f" ({len(stored.get('turns') or [])} turns against {len(document.get('turns') or [])}):"
                " export it to the file first (agents session export)"
            )
        if run_is_active(session):
            raise RunInProgress(session.pk)
        session = store(session, document, status=doc.status_of(document), status_detail=None)
        adopt_deferred_calls(session, document)
    return session


def _is_older(document: dict[str, Any], stored: dict[str, Any]) -> bool:
    """Whether ``document``'s turns are the oldest turns of ``stored``, which has more (turns are
    newest first): the stored session went on from the file's."""
    turns, later = document.get("turns") or [], stored.get("turns") or []
    return len(later) > len(turns) and later[len(later) - len(turns):] == turns


def message_post(
    *,
    session_id: uuid.UUID,
    prompt: str | None,
    media: list[dict[str, Any]] | None,
    run: str,
    interrupt: bool = False,
    owner: str | None = None,
    params: dict[str, Any] | None = None,
) -> Session:
    """Add a user message (``POST /v1/sessions/:id/messages``, docs/api.md §7.5; docs/decisions.md §7).

    When the session can take a new user turn now (no run, and its head is a final answer, a
    user turn, or nothing), the message becomes that turn and a run starts (unless ``run`` is
    ``none``). Otherwise it is never refused: it is queued as mail, folded in at the next step
    boundary of the active run, or when the session can be asked again. ``interrupt`` posts it
    with interrupt priority, which detaches the calls a run is waiting on. ``params`` are checked
    first (docs/api.md §7.15); message-scope values go to the run the message starts or feeds.

    Raises:
        ApiError: 404 ``unknown_session``; 400 ``bad_request`` for an empty message; the
            parameter errors of docs/api.md §7.15.
    """
    query = doc.make_query(prompt, media)
    if query is None:
        raise BadRequest("a message needs a prompt or media")
    with transaction.atomic():
        session = lock_session(session_id)
        agent = runtime_agent(session.agent_slug)
        checked = values.check_request(agent, params, session=session, caller=owner)
        document = session.document
        head = doc.head(document)
        takes_turn = (
            head is None
            or head["tag"] == "UserTurn"
            or (head["tag"] == "LlmTurn" and not doc.tool_calls_of(head["contents"]))
        )
        active = run_is_active(session)
        sender = {"tag": "user", "owner": owner}
        queued = active or session.status == Session.Status.PAUSED or not takes_turn
        queued = queued or bool(mailbox.unread(session, document))
        runs = (active or message_wakes(session, sender)) if queued else run != Session.NO_RUN
        fields = values.held(session.pk)
        given = values.merged(agent, values.given_values(session, fields), checked.session)
        message = values.message_values(agent, checked.message)
        if runs:
            current = values.active_run_values(session, fields) if active else {}
            values.require(agent, given, {**current, **message}, ["session", "message"])
        else:
            checked.refuse_message_scope()
        new_params = values.stored_params(agent, session.params, checked.session)
        values.hold_on_commit(session.pk, secrets=values.secret_updates(agent, checked.session), message=message)
        if queued:
            if new_params != (session.params or {}):
                session = store_params(session, new_params) if active else store(session, document, params=new_params)
            # mail keeps every message in order, behind anything already queued
            body = {"tag": "userMessage", "query": query}
            priority = "interrupt" if interrupt and active else "normal"
            envelope, _ = append_mail(session, body, priority=priority, sender=sender)
            if not active:
                session = after_mail(session, envelope)
            return session
        tools = agent.system_tools(agent.resolve_params(given), functools.partial(doc.answered_calls, document))
        turn = doc.user_turn(agent.system_prompt, tools, query)
        document = doc.push_turn(document, turn)
        if run == Session.NO_RUN:
            return store(session, document, status=Session.Status.READY, status_detail=None, params=new_params)
        session = store(session, document, params=new_params, **run_fields(Session.RunMode(run)))
        enqueue_run(session.pk, session.run_id)
    return session


def session_resume(
    *, session_id: uuid.UUID, mode: Session.RunMode, owner: str | None = None, params: dict[str, Any] | None = None
) -> Session:
    """Start a run on a stored session (``POST /v1/sessions/:id/resume``, docs/api.md §7.6).

    A paused session resumes, even while the run that is pausing has not stopped yet (a Resume
    control then cancels the Pause it follows). ``params`` are checked first (docs/api.md §7.15).
    A parent waiting on a helper that a crash left stranded (``ready``, or stopped with its answer
    undelivered) sets that helper moving instead, and is returned still ``running``; the
    ``params`` are not applied then (docs/sessions.md §4.8).

    Raises:
        ApiError: 404 ``unknown_session``; 409 ``run_in_progress``; the parameter errors of
            docs/api.md §7.15.
    """
    with transaction.atomic():
        session = lock_session(session_id)
        agent = runtime_agent(session.agent_slug)
        checked = values.check_request(agent, params, session=session, caller=owner)
        active = run_is_active(session)
        if active and not any(
            mailbox.control_of(e) == mailbox.Control.PAUSE for e in mailbox.unread(session, session.document)
        ):
            # a parent waiting on a helper that nothing will move: the helper is set moving
            if run_requested(session) or not free_stranded_children(session):
                raise RunInProgress(session.pk)
            return session
        fields = values.held(session.pk)
        given = values.merged(agent, values.given_values(session, fields), checked.session)
        message = values.message_values(agent, checked.message)
        current = values.active_run_values(session, fields) if active else {}
        values.require(agent, given, {**current, **message}, ["session", "message"])
        new_params = values.stored_params(agent, session.params, checked.session)
        values.hold_on_commit(session.pk, secrets=values.secret_updates(agent, checked.session), message=message)
        if active:
            if new_params != (session.params or {}):
                session = store_params(session, new_params)
            append_mail(session, mailbox.RESUME, priority="normal", sender={"tag": "user", "owner": owner})
            return session
        session = store(session, session.document, params=new_params, **run_fields(Session.RunMode(mode)))
        enqueue_run(session.pk, session.run_id)
    return session


def session_pause(*, session_id: uuid.UUID, owner: str | None = None) -> Session:
    """``POST /v1/sessions/:id/pause``: post Pause control mail; return the session."""
    mail_send(session_id=session_id, body=mailbox.PAUSE, sender={"tag": "user", "owner": owner})
    return Session.objects.get(pk=session_id)


def session_cancel(*, session_id: uuid.UUID, owner: str | None = None) -> Session:
    """``POST /v1/sessions/:id/cancel``: stop the active run and its background calls.

    Raises:
        ApiError: 404 ``unknown_session``; 409 ``no_active_run``.
    """
    with transaction.atomic():
        session = lock_session(session_id)
        if not run_is_active(session):
            if has_active_descendants(session):
                # the session waits on helper sessions that are running: cancelling it stops them
                stop_children(session)
                return session
            raise NoActiveRun(session_id)
        if not run_requested(session):
            # running only while its helpers work for it: no run to tell, its calls end now
            return cancel_helpers(session)
        append_mail(session, mailbox.STOP_RUN, priority="interrupt", sender={"tag": "user", "owner": owner})
        cancel_calls(session, None)
        stop_children(session)
    return session


def session_cancel_attached(*, session_id: uuid.UUID, owner: str | None = None) -> Session:
    """``POST /v1/sessions/:id/cancel-attached``: hard-cancel the attached calls, keep the run."""
    mail_send(session_id=session_id, body=mailbox.CANCEL_ALL_ATTACHED, sender={"tag": "user", "owner": owner})
    return Session.objects.get(pk=session_id)
