"""The sessions REST API (docs/api.md §7): viewsets that parse, call one service, and render.

Each action reads its input with an input serializer, calls a service (writes) or a selector
(reads), and answers through an output serializer; the OpenAPI document is generated from the
same serializers. Who may call what is said by the view's attributes and checked by the
permission classes of ``foundation.permissions``.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from django.db import transaction
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentfiles import document as doc
from agentfiles.turns import SESSION_DOCUMENT_REF
from foundation.api import (
    ApiViewSet,
    error_responses,
    json_object_body,
    parse_uuid,
    query_bool,
    require_name,
    wait_params,
)
from foundation.auth import Principal, caller, new_session_token
from foundation.common import render
from foundation.errors import BadRequest, Forbidden, UnknownSession, UnknownToken
from sessions_app import run_webhooks, selectors, values
from sessions_app.idempotent import (
    IDEMPOTENCY_KEY_PARAMETER,
    DeferredWait,
    defers_wait,
    idempotent,
    replayed_header,
)
from sessions_app.models import Session
from sessions_app.serializers import (
    ContinuationSerializer,
    DeletionPlanSerializer,
    ForkSerializer,
    HealthSerializer,
    MailListSerializer,
    MailSerializer,
    MessageSerializer,
    PendingSerializer,
    ReceiptSerializer,
    ResumeSerializer,
    SessionCreateSerializer,
    SessionImportSerializer,
    SessionListQuerySerializer,
    SessionListSerializer,
    SessionMetaSerializer,
    SessionViewSerializer,
    validated,
)
from sessions_app.services import continuations, owner, sessions, tree
from sessions_app.services import mail as mail_services

#: Seconds a cancel waits for the run to stop before answering.
CANCEL_WAIT_SECONDS = 30.0

WAIT_PARAMETERS = [
    OpenApiParameter("wait", bool, description="answer when the run stops (default false)"),
    OpenApiParameter(
        "timeout",
        {"type": "number", "minimum": 0},
        description="seconds to wait, default 120; more than 600 waits 600",
    ),
]
_STATUS = "|".join(Session.Status.values)
#: ``status`` of the session list in the document: known statuses, comma-separated (docs/api.md §7.2).
STATUS_LIST_PATTERN = f"^({_STATUS})(,({_STATUS}))*$"
#: ``q`` in the document: one character at least that is neither a space nor a control character.
SEARCH_PATTERN = r"^[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"
SESSION_ID = OpenApiParameter("session_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the session")
TOKEN = OpenApiParameter("token", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the continuation token")


def _session_id(value: str) -> uuid.UUID:
    return parse_uuid(value, UnknownSession(value))


def _found(session_id: str) -> Session:
    """The session a ``/v1/sessions/:id`` route names, looked up once, before its body is read:
    an unknown session answers 404 ``unknown_session`` whatever the body holds."""
    return selectors.session_get(_session_id(session_id))


def _run_webhook(principal: Principal, session: Session, data: dict[str, Any]) -> None:
    """Record the request's ``webhook`` URL, in the transaction of the change that starts the run,
    so that the run cannot stop before it is known (docs/webhooks.md §10).

    Raises:
        Forbidden: 403 for a session token: the server would send requests where its holder, a
            less trusted client (docs/security.md §1), says; the change is rolled back with it.
    """
    if data.get("webhook") is None:
        return
    if principal.is_session_token:
        raise Forbidden("a session token cannot ask for a webhook; an owner's token can")
    run_webhooks.request_run_webhook(owner=principal.owner, session_id=session.pk, url=data["webhook"])


def session_answer(
    request: Request,
    session: Session,
    wait_for: tuple[bool, float],
    *,
    created: bool = False,
    read_only: bool = False,
) -> Response:
    """Answer with the SessionView, after waiting for the run when ``wait=true``.

    Create answers 201; the others 202 while the run is still going, else 200 (docs/api.md §4.3).
    A plain read (``GET`` without ``wait``) always answers 200. A session token issued by this
    request (``session.session_token``) is shown in the answer, this once. A request with an
    ``Idempotency-Key`` waits only once its change has committed: its answer is the session as the
    change left it, carrying the wait as a :class:`~sessions_app.idempotent.DeferredWait`.
    ``wait_for`` is ``(wait, timeout)`` as :func:`~foundation.api.wait_params` read it, before the
    change (a malformed ``timeout`` is refused before anything is written).
    """
    wait, timeout = wait_for
    token = getattr(session, "session_token", None)

    def render_answer(shown: Session, waited: bool) -> Response:
        if created:
            status = 201
        elif read_only and not waited:
            status = 200
        else:
            status = 202 if shown.status == Session.Status.RUNNING else 200
        if token is not None:
            shown.session_token = token
        headers = {"Location": f"/v1/sessions/{shown.pk}"} if created else None
        return Response(render(SessionViewSerializer, shown), status=status, headers=headers)

    if wait and defers_wait(request):
        response = render_answer(session, True)
        setattr(  # noqa: B010 - DRF's Response declares no such attribute; idempotent.py reads it back
            response,
            "deferred_wait",
            DeferredWait(
                finish=lambda: render_answer(selectors.wait_for_run(session.pk, timeout), True), seconds=timeout
            ),
        )
        return response
    if wait:
        session = selectors.wait_for_run(session.pk, timeout)
    return render_answer(session, wait)


class SessionViewSet(ApiViewSet):
    """``/v1/sessions`` and everything under ``/v1/sessions/:id`` but the event streams."""

    lookup_url_kwarg = "session_id"
    session_token_actions = frozenset({"retrieve", "messages", "cancel"})
    session_token_body_actions = frozenset({"messages", "cancel"})

    @extend_schema(
        operation_id="listSessions",
        parameters=[
            OpenApiParameter("agent", str),
            OpenApiParameter("status", str, pattern=STATUS_LIST_PATTERN, description="comma-separated statuses"),
            OpenApiParameter("parent", OpenApiTypes.UUID, description="list the children of this session"),
            OpenApiParameter("limit", {"type": "integer", "minimum": 1, "maximum": 500}, description="default 50"),
            OpenApiParameter("before", OpenApiTypes.DATETIME, description="RFC 3339 updated_at, strictly older"),
            OpenApiParameter(
                "q",
                {"type": "string", "maxLength": selectors.SEARCH_MAX_CHARS, "pattern": SEARCH_PATTERN},
                description="only sessions whose conversation says this, case-insensitive",
            ),
        ],
        responses={200: SessionListSerializer, **error_responses(400, 404)},
    )
    def list(self, request: Request) -> Response:
        """List sessions, newest first: the caller's top-level sessions, or a parent's children."""
        visible = functools.partial(selectors.require_visible, caller(request))
        query = SessionListQuerySerializer(data=request.query_params, context={"visible": visible})
        rows, next_before = selectors.session_list(**query.filters(), owner=caller(request).owner)
        for row, title in zip(rows, selectors.session_titles(rows).values(), strict=True):
            setattr(row, "title", title)  # noqa: B010 - a list row's extra attribute, not a Session field
        return Response(render(SessionListSerializer, {"sessions": rows, "next_before": next_before}))

    @extend_schema(
        operation_id="createSession",
        request=SessionCreateSerializer,
        parameters=[*WAIT_PARAMETERS, IDEMPOTENCY_KEY_PARAMETER, replayed_header(201)],
        responses={201: SessionViewSerializer, **error_responses(400, 403, 404, 409, 413, 422)},
    )
    @idempotent
    def create(self, request: Request) -> Response:
        """Create a session, and run it unless ``run`` is ``none`` or there is no prompt."""
        data = validated(SessionCreateSerializer, json_object_body(request))
        principal = caller(request)
        if (data.get("seal") or data.get("session_token")) and principal.kind == "anonymous":
            raise BadRequest("seal and session_token need authentication, which this server does not have enabled")
        session_token, token_digest = new_session_token() if data.get("session_token") else (None, None)
        prompt = data.get("prompt")
        media = doc.media_from_api(data.get("media") or [])
        alias = data.get("message")
        if alias is not None and prompt is None:
            prompt = alias.get("text")
            media = media or doc.media_from_api(alias.get("media") or [])
        parent_id = None
        if data.get("parent"):
            parent_id = _session_id(data["parent"])
            selectors.require_visible(principal, parent_id)
        wait_for = wait_params(request)
        with transaction.atomic():
            session = sessions.session_create(
                agent_slug=data["agent"],
                prompt=prompt or None,
                media=media,
                run=data["run"],
                parent_id=parent_id,
                owner=principal.owner,
                sealed=bool(data.get("seal")),
                session_token_sha256=token_digest,
                params=data.get("params"),
            )
            _run_webhook(principal, session, data)
        if session_token is not None:
            # shown this once; only its digest is stored (docs/api.md §10.5)
            session.session_token = session_token
        return session_answer(request, session, wait_for, created=True)

    @extend_schema(
        operation_id="importSession",
        request=SessionImportSerializer,
        parameters=[IDEMPOTENCY_KEY_PARAMETER, replayed_header(201)],
        responses={201: SessionViewSerializer, **error_responses(400, 403, 404, 409, 413, 422)},
    )
    @action(detail=False, methods=["post"], url_path="import")
    @idempotent
    def import_session(self, request: Request) -> Response:
        """Store an agents-exe session file as a session of ``agent`` (our extension: docs/api.md §7.16)."""
        data = validated(SessionImportSerializer, json_object_body(request))
        wait_for = wait_params(request)
        session = sessions.session_import(
            document=data["session"], agent_slug=data["agent"], owner=caller(request).owner, require_agent=True
        )
        return session_answer(request, session, wait_for, created=True)

    @extend_schema(
        operation_id="exportSession",
        parameters=[
            SESSION_ID,
            OpenApiParameter("usage", bool, description="add the usage totals as a top-level usage key"),
        ],
        responses={200: SESSION_DOCUMENT_REF, **error_responses(403, 404, 422)},
    )
    @action(detail=True, methods=["get"])
    def export(self, request: Request, session_id: str) -> HttpResponse | Response:
        """The session as an agents-exe session file: the bytes agents-exe writes, in the layout of the
        file it was imported from (docs/api.md §7.16, docs/sessions.md §1.12); with ``usage=true``
        the document plus its totals under ``usage``, a key agents-exe skips (docs/sessions.md §1.11)."""
        session = _found(session_id)
        if query_bool(request, "usage"):
            return Response({**session.parsed_document(), "usage": session.usage_totals})
        return HttpResponse(session.session_file_text().encode("utf-8"), content_type="application/json")

    @extend_schema(
        operation_id="getSession",
        parameters=[SESSION_ID, *WAIT_PARAMETERS],
        responses={200: SessionViewSerializer, 202: SessionViewSerializer, **error_responses(400, 403, 404, 422)},
    )
    def retrieve(self, request: Request, session_id: str) -> Response:
        """The session; with ``wait=true``, once its run stops (202 if still running at timeout)."""
        session = _found(session_id)
        return session_answer(request, session, wait_params(request), read_only=True)

    @extend_schema(
        operation_id="deleteSession",
        parameters=[SESSION_ID, OpenApiParameter("dry_run", bool, description="answer the plan, delete nothing")],
        responses={200: DeletionPlanSerializer, **error_responses(400, 403, 404, 409)},
    )
    def destroy(self, request: Request, session_id: str) -> Response:
        """Delete the session and its descendants (leaves first); refused while a run is active."""
        plan = tree.session_delete(session_id=_session_id(session_id), dry_run=query_bool(request, "dry_run"))
        return Response(render(DeletionPlanSerializer, plan))

    @extend_schema(
        operation_id="postMessage",
        request=MessageSerializer,
        parameters=[SESSION_ID, *WAIT_PARAMETERS, IDEMPOTENCY_KEY_PARAMETER, replayed_header(200, 202)],
        responses={
            200: SessionViewSerializer,
            202: SessionViewSerializer,
            **error_responses(400, 403, 404, 409, 413, 422, 429),
        },
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def messages(self, request: Request, session_id: str) -> Response:
        """Add a user message and run; to a busy session it is queued as mail (never refused)."""
        sid = _found(session_id).pk
        data = validated(MessageSerializer, json_object_body(request))
        wait_for = wait_params(request)
        with transaction.atomic():
            session = sessions.message_post(
                session_id=sid,
                prompt=data.get("prompt") or None,
                media=doc.media_from_api(data.get("media") or []),
                run=data["run"],
                interrupt=data["interrupt"],
                owner=caller(request).owner,
                params=data.get("params"),
            )
            _run_webhook(caller(request), session, data)
        return session_answer(request, session, wait_for)

    @extend_schema(
        operation_id="resumeSession",
        request=ResumeSerializer,
        parameters=[SESSION_ID, *WAIT_PARAMETERS, IDEMPOTENCY_KEY_PARAMETER, replayed_header(200, 202)],
        responses={
            200: SessionViewSerializer,
            202: SessionViewSerializer,
            **error_responses(400, 403, 404, 409, 413, 422),
        },
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def resume(self, request: Request, session_id: str) -> Response:
        """Start a run on a stored session (``mode``: step or until_blocked)."""
        sid = _found(session_id).pk
        data = validated(ResumeSerializer, json_object_body(request))
        wait_for = wait_params(request)
        with transaction.atomic():
            session = sessions.session_resume(
                session_id=sid, mode=data["mode"], owner=caller(request).owner, params=data.get("params")
            )
            _run_webhook(caller(request), session, data)
        return session_answer(request, session, wait_for)

    @extend_schema(
        operation_id="listPendingCalls",
        parameters=[SESSION_ID],
        responses={200: PendingSerializer, **error_responses(403, 404, 422)},
    )
    @action(detail=True, methods=["get"])
    def pending(self, request: Request, session_id: str) -> Response:
        """The deferred calls waiting for a continuation."""
        session = _found(session_id)
        return Response(render(PendingSerializer, {"calls": session.pending_calls}))

    @extend_schema(
        operation_id="listMail",
        parameters=[SESSION_ID, OpenApiParameter("unread", bool, description="only mail not consumed yet")],
        responses={200: MailListSerializer, **error_responses(400, 403, 404, 422)},
    )
    @action(detail=True, methods=["get"])
    def mail(self, request: Request, session_id: str) -> Response:
        """The session's mail, oldest first."""
        session = _found(session_id)
        envelopes = selectors.mail_list(session, unread=query_bool(request, "unread"))
        return Response(render(MailListSerializer, {"mail": envelopes}))

    @extend_schema(
        operation_id="sendMail",
        request=MailSerializer,
        parameters=[SESSION_ID],
        responses={202: ReceiptSerializer, **error_responses(400, 403, 404, 413, 422, 429)},
    )
    @mail.mapping.post
    def send_mail(self, request: Request, session_id: str) -> Response:
        """Queue mail for the session; never refused for the session's status."""
        sid = _found(session_id).pk
        posted = json_object_body(request)
        data = validated(MailSerializer, posted)
        body = values.validate_body(posted.get("body"))
        receipt = mail_services.mail_send(
            session_id=sid,
            body=body,
            priority=data["priority"],
            sender={"tag": "user", "owner": caller(request).owner},
            mail_id=data.get("id"),
        )
        return Response(render(ReceiptSerializer, receipt), status=202)

    @extend_schema(
        operation_id="forkSession",
        request=ForkSerializer,
        parameters=[SESSION_ID, IDEMPOTENCY_KEY_PARAMETER, replayed_header(201)],
        responses={201: SessionViewSerializer, **error_responses(400, 403, 404, 409, 413, 422)},
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def fork(self, request: Request, session_id: str) -> Response:
        """A new session with the turns from ``at_turn`` (newest first) down, optionally another agent."""
        sid = _found(session_id).pk
        data = validated(ForkSerializer, json_object_body(request))
        session = tree.session_fork(
            session_id=sid, at_turn=data.get("at_turn"), agent_slug=data.get("agent"), params=data.get("params")
        )
        headers = {"Location": f"/v1/sessions/{session.pk}"}
        return Response(render(SessionViewSerializer, session), status=201, headers=headers)

    @extend_schema(
        operation_id="pauseSession",
        request=None,
        parameters=[SESSION_ID, *WAIT_PARAMETERS],
        responses={200: SessionViewSerializer, 202: SessionViewSerializer, **error_responses(400, 403, 404, 422)},
    )
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, session_id: str) -> Response:
        """Pause: the run stops at its next step and the session is stored ``paused``."""
        sid = _found(session_id).pk
        wait_for = wait_params(request)
        return session_answer(request, sessions.session_pause(session_id=sid, owner=caller(request).owner), wait_for)

    @extend_schema(
        operation_id="cancelRun",
        request=None,
        parameters=[SESSION_ID],
        responses={200: SessionMetaSerializer, **error_responses(403, 404, 409, 422)},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, session_id: str) -> Response:
        """Stop the active run and its background calls; answers once the run has stopped."""
        sid = _found(session_id).pk
        sessions.session_cancel(session_id=sid, owner=caller(request).owner)
        return Response(render(SessionMetaSerializer, selectors.wait_for_run(sid, CANCEL_WAIT_SECONDS)))

    @extend_schema(
        operation_id="cancelAttached",
        request=None,
        parameters=[SESSION_ID, *WAIT_PARAMETERS],
        responses={200: SessionViewSerializer, 202: SessionViewSerializer, **error_responses(400, 403, 404, 422)},
    )
    @action(detail=True, methods=["post"], url_path="cancel-attached")
    def cancel_attached(self, request: Request, session_id: str) -> Response:
        """Cancel every attached tool call, without stopping the run."""
        sid = _found(session_id).pk
        wait_for = wait_params(request)
        cancelled = sessions.session_cancel_attached(session_id=sid, owner=caller(request).owner)
        return session_answer(request, cancelled, wait_for)

    @extend_schema(
        operation_id="setSessionParams",
        request={"application/json": {"$ref": "#/components/schemas/Params"}},
        description='A bare object of name -> value, or {"params": {...}}; null clears a value.',
        parameters=[SESSION_ID],
        responses={200: SessionViewSerializer, **error_responses(400, 403, 404, 409, 413, 422)},
    )
    @action(detail=True, methods=["put"])
    def params(self, request: Request, session_id: str) -> Response:
        """Merge session-scope parameter values into the session; starts no run."""
        sid = _found(session_id).pk
        body = json_object_body(request)
        # an object whose only key is "params", holding an object, is the wrapped form
        values = body["params"] if set(body) == {"params"} and isinstance(body["params"], dict) else body
        for name in values:
            require_name(name, "params")
        return Response(render(SessionViewSerializer, owner.session_params_put(session_id=sid, params=values)))

    @extend_schema(
        operation_id="revokeSessionToken",
        parameters=[SESSION_ID],
        responses={200: SessionViewSerializer, **error_responses(403, 404, 422)},
    )
    @action(detail=True, methods=["delete"])
    def token(self, request: Request, session_id: str) -> Response:
        """Revoke the session token: it answers 401 from now on."""
        sid = _found(session_id).pk
        return Response(render(SessionViewSerializer, owner.session_token_revoke(session_id=sid)))


class ContinuationViewSet(ApiViewSet):
    """``POST /v1/continuations/:token``."""

    lookup_url_kwarg = "token"

    @extend_schema(
        operation_id="completeCall",
        request=ContinuationSerializer,
        parameters=[TOKEN, *WAIT_PARAMETERS, IDEMPOTENCY_KEY_PARAMETER, replayed_header(200, 202)],
        responses={
            200: SessionViewSerializer,
            202: SessionViewSerializer,
            **error_responses(400, 403, 404, 409, 413, 422),
        },
    )
    @idempotent
    def complete(self, request: Request, token: str) -> Response:
        """Post a deferred call's result; the session resumes when its last deferred call is in."""
        parsed = parse_uuid(token, UnknownToken(token))
        body = json_object_body(request)
        if "result" not in body:
            raise BadRequest("result: This field is required.")
        data = validated(ContinuationSerializer, body)
        wait_for = wait_params(request)
        selectors.require_visible_token(caller(request), parsed)
        session = continuations.continuation_complete(
            token=parsed,
            result=body["result"],
            resume=data["resume"],
            params=data.get("params"),
            caller=caller(request).owner,
        )
        return session_answer(request, session, wait_for)


class HealthViewSet(viewsets.ViewSet):
    """``GET /healthz``: answered to everyone, before the origin check."""

    authentication_classes: list[Any] = []
    permission_classes: list[Any] = []

    @extend_schema(operation_id="health", responses={200: HealthSerializer}, auth=[])
    def health(self, request: Request) -> Response:
        """``{"ok": true, "live_sessions": N, "active_runs": N, "recovery": {...}}``."""
        return Response(render(HealthSerializer, selectors.health()))
