"""Continuations: results posted for deferred calls (docs/sessions.md §5, docs/decisions.md §3)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.conf import settings
from django.db import transaction
from opentelemetry import trace

from agentfiles import document as doc
from agents_app.runtime import runtime_agent
from foundation.common import db_now
from foundation.errors import BadRequest, TokenAlreadyCompleted, UnknownAgent, UnknownToken
from foundation.telemetry import links_to
from sessions_app import events
from sessions_app.dispatch import enqueue_run, publish_deferred_call
from sessions_app.event_types import EventKind, ToolFinished, bounded
from sessions_app.models import Continuation, Session
from sessions_app.outcomes import NewContinuation
from sessions_app.services import params as values
from sessions_app.store import lock_session, run_fields, run_requested, store, store_params
from sessions_app.values import normalize_tool_result
from tools_app.policy import flatten_disposition


def continuation_complete(
    *,
    token: uuid.UUID,
    result: Any,
    resume: bool,
    params: dict[str, Any] | None = None,
    caller: str | None = None,
    from_helper: bool = False,
) -> Session:
    """Complete a deferred call (``POST /v1/continuations/:token``, docs/api.md §8).

    With a run requested or going, the result is recorded and the run applies it before its next
    step. Otherwise (no run, or a session running only while its helpers work) it is written
    into the session at once and, when ``resume`` is true and no other deferred call of that turn
    is left, a run is requested, except on a ``paused`` session: it keeps the result and stays
    paused until it is resumed (docs/sessions.md §5). ``params`` (from ``caller``) are checked before anything is
    stored (docs/api.md §7.15); message-scope values go to the run that goes on. A helper session
    answering its caller (``from_helper``) brings no values and is never refused for those the
    caller lacks: the run that goes on finds out.

    Raises:
        ApiError: 404 ``unknown_token``; 409 ``token_already_completed``; 400 ``bad_request``;
            the parameter errors of docs/api.md §7.15.
    """
    response = normalize_tool_result(result)
    with transaction.atomic():
        continuation = Continuation.objects.select_for_update().filter(pk=token).first()
        if continuation is None:
            raise UnknownToken(token)
        if continuation.completed_at is not None:
            raise TokenAlreadyCompleted(token)
        # the completion (the request's span, or a helper's run) links to the deferred call's span
        for link in links_to(continuation.traceparent):
            trace.get_current_span().add_link(link.context, {"agents.link": "continuation"})
        session = lock_session(continuation.session_id)
        active = run_requested(session)
        updated = None if active else doc.apply_result(session.document, str(token), response)
        # only a Resume ends a pause (docs/sessions.md §5): the result waits in the document
        paused = session.status == Session.Status.PAUSED
        runs = active or (
            resume and not paused and updated is not None and doc.status_of(updated) == Session.Status.READY
        )
        new_params = None if from_helper else _check_params(session, params, caller, runs=runs)
        now = db_now()
        continuation.result = response
        continuation.completed_at = now
        if not from_helper:
            # a helper's answer has its subcall.completed; a worker's result is this call's end
            _announce_result(continuation, session.owner)
        if active:
            continuation.save(update_fields=["result", "completed_at"])
            if new_params is not None:
                session = store_params(session, new_params)
            return session
        continuation.applied_at = now
        continuation.save(update_fields=["result", "completed_at", "applied_at"])
        extra = {"params": new_params} if new_params is not None else {}
        if updated is None:
            # the call is no longer at the head (e.g. the session was forked past it): keep the
            # result on the continuation only
            return store(session, session.document, **extra) if extra else session
        if runs:
            session = store(session, updated, **extra, **run_fields(Session.RunMode.UNTIL_BLOCKED))
            enqueue_run(session.pk, session.run_id)
        else:
            status = Session.Status.PAUSED if paused else doc.status_of(updated)
            session = store(
                session, updated, status=status, status_detail=session.status_detail if paused else None, **extra
            )
    return session


def _announce_result(continuation: Continuation, owner: str | None) -> None:
    """``tool.completed`` for a deferred call whose result was just posted (docs/api.md §9.2),
    with the model's call id as the other ``tool.*`` events have it."""
    events.emit(
        EventKind.TOOL_COMPLETED,
        continuation.session_id,
        owner,
        ToolFinished(
            tool_call_id=continuation.provider_call_id or continuation.tool_call_id,
            tool=continuation.tool,
            status="completed",
            result=bounded(continuation.result, settings.AGENTS["EVENT_VALUE_MAX_BYTES"]),
        ),
    )


def _check_params(session: Session, params: dict[str, Any] | None, caller: str | None, *, runs: bool) -> Any:
    """Check a continuation's ``params`` and hold its values on commit; the session row's new
    ``params`` when they change, else ``None``. A run that goes on needs its required values.

    A session whose agent is gone takes a result without ``params`` (its run fails later, as any).
    """
    try:
        agent = runtime_agent(session.agent_slug)
    except UnknownAgent:
        if params:
            raise
        return None
    checked = values.check_request(agent, params, session=session, caller=caller)
    fields = values.held(session.pk)
    if runs:
        given = values.merged(agent, values.given_values(session, fields), checked.session)
        current = values.active_run_values(session, fields) if run_requested(session) else {}
        message = values.message_values(agent, checked.message)
        values.require(agent, given, {**current, **message}, ["session", "message"])
    else:
        checked.refuse_message_scope()
    values.hold_on_commit(
        session.pk,
        secrets=values.secret_updates(agent, checked.session),
        message=values.message_values(agent, checked.message),
    )
    new_params = values.stored_params(agent, session.params, checked.session)
    return new_params if new_params != (session.params or {}) else None


def apply_completed_continuations(session: Session, document: dict[str, Any]) -> tuple[dict[str, Any], list[uuid.UUID]]:
    """Fold results posted during a run into ``document`` (the run calls this before each step).

    Returns:
        The new document and the tokens applied (to mark with the step's store).
    """
    head = doc.head(document)
    if head is None or head.get("tag") != "PartialUserTurn":
        # only a partial head holds deferred calls: no result can apply, so none is looked for
        return document, []
    pending = Continuation.objects.filter(session=session, completed_at__isnull=False, applied_at__isnull=True)
    applied = []
    for continuation in pending.order_by("completed_at"):
        updated = doc.apply_result(document, str(continuation.token), continuation.result)
        if updated is not None:
            document = updated
        applied.append(continuation.token)
    return document, applied


def create_continuations(session: Session, new: list[NewContinuation]) -> None:
    """Create the Continuation rows of newly deferred calls (inside the step's transaction), and
    publish those whose ``defer`` names a ``queue`` to it after commit (docs/guide-deferred.md §1)."""
    now = db_now()
    for item in new:
        queue = flatten_disposition(item.disposition).get("queue")
        if isinstance(queue, str) and queue:
            publish_deferred_call(queue, deferred_call_payload(session, item))
    Continuation.objects.bulk_create(
        [
            Continuation(
                token=uuid.UUID(item.token),
                session=session,
                tool_call_id=item.tool_call_id,
                provider_call_id=str(item.call.get("id") or ""),
                tool=str((item.call.get("function") or {}).get("name") or ""),
                call=item.call,
                disposition=item.disposition,
                created_at=now,
                traceparent=item.traceparent,
            )
            for item in new
        ]
    )


def deferred_call_payload(session: Session, item: NewContinuation) -> dict[str, Any]:
    """The keyword arguments of a published ``agents.deferred_call`` task: ``token``,
    ``session_id``, ``agent``, ``tool_call_id`` (the model's id), ``tool`` (its wire name),
    ``arguments`` (the model's arguments, decoded when they are JSON), ``reason``."""
    function = item.call.get("function") or {}
    raw = function.get("arguments")
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        arguments = raw
    return {
        "token": item.token,
        "session_id": str(session.pk),
        "agent": session.agent_slug,
        "tool_call_id": str(item.call.get("id") or item.tool_call_id),
        "tool": function.get("name") or "",
        "arguments": arguments,
        "reason": flatten_disposition(item.disposition).get("reason"),
    }


def adopt_deferred_calls(session: Session, document: dict[str, Any]) -> None:
    """Create the Continuation rows of an imported document's deferred calls (docs/sessions.md §5).

    A document written elsewhere (agents-exe, or another server) names its deferred calls'
    tokens only in its head partial turn; each gets its row here, so that posting a result to
    the token works as for a call deferred by this server. Helper calls are not concerned.

    Raises:
        ApiError: 400 ``bad_request`` for a token that is not a UUID, or that another session's
            call already holds.
    """
    head = doc.head(document)
    if head is None or head.get("tag") != "PartialUserTurn":
        return
    new: list[NewContinuation] = []
    for tc in doc.tracked_calls(head):
        if tc["tcState"] != "Deferred" or tc.get("tcChild"):
            continue
        try:
            token = uuid.UUID(str(tc.get("tcContinuation")))
        except ValueError:
            raise BadRequest(f"the deferred call {tc['tcId']} has no continuation token (a UUID)") from None
        holder = Continuation.objects.filter(pk=token).values_list("session_id", flat=True).first()
        if holder == session.pk:
            # a session file stored again over its own session keeps its rows
            continue
        if holder is not None:
            raise BadRequest(f"continuation token {token} already belongs to session {holder}")
        new.append(NewContinuation(str(token), tc["tcId"], tc["tcCall"], tc.get("tcPolicy") or {"tag": "defer"}))
    create_continuations(session, new)


def mark_applied(tokens: list[uuid.UUID]) -> None:
    """Record that these continuations' results are now in the session document."""
    if tokens:
        Continuation.objects.filter(pk__in=tokens).update(applied_at=db_now())
