"""The sessions REST API (spec/server-api.md §1): thin views over services and selectors."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.api import json_object_body, parse_uuid, query_bool, wait_params
from agentsite.errors import BadRequest, UnknownSession, UnknownToken
from sessions_app import document as doc
from sessions_app import mailbox, selectors
from sessions_app.models import Session
from sessions_app.owner_apis import caller, issue_session_token, require_visible, require_visible_token
from sessions_app.serializers import (
    ContinuationSerializer,
    DeletionPlanSerializer,
    ErrorSerializer,
    ForkSerializer,
    MailListSerializer,
    MailSerializer,
    MessageSerializer,
    PendingSerializer,
    ReceiptSerializer,
    ResumeSerializer,
    SessionCreateSerializer,
    SessionListSerializer,
    SessionMetaSerializer,
    SessionViewSerializer,
    validated,
)
from sessions_app.services import continuations, mail, sessions, tree

WAIT_PARAMETERS = [
    OpenApiParameter("wait", bool, description="answer when the run stops (default false)"),
    OpenApiParameter("timeout", float, description="seconds to wait, default 120, at most 600"),
]
#: Seconds a cancel waits for the run to stop before answering.
CANCEL_WAIT_SECONDS = 30.0
ERRORS = {400: ErrorSerializer, 404: ErrorSerializer, 409: ErrorSerializer, 413: ErrorSerializer}


def _answer(request: Request, session: Session, *, created: bool = False, read_only: bool = False) -> Response:
    """Answer with the SessionView, after waiting for the run when ``wait=true``.

    Create answers 201; the others 202 while the run is still going, else 200 (§1.0). A plain
    read (``GET`` without ``wait``) always answers 200.
    """
    wait, timeout = wait_params(request)
    if wait:
        session = selectors.wait_for_run(session.pk, timeout)
    else:
        session = selectors.session_get(session.pk)
    if created:
        status = 201
    elif read_only and not wait:
        status = 200
    else:
        status = 202 if session.status == Session.Status.RUNNING else 200
    headers = {"Location": f"/v1/sessions/{session.pk}"} if created else None
    return Response(selectors.session_view(session), status=status, headers=headers)


def _session_id(value: str) -> uuid.UUID:
    return parse_uuid(value, UnknownSession(value))


def _media(data: dict[str, Any]) -> list[dict[str, Any]]:
    return doc.media_from_api(data.get("media") or [])


class SessionCollectionApi(APIView):
    """``GET /v1/sessions`` (list) and ``POST /v1/sessions`` (create)."""

    @extend_schema(
        operation_id="listSessions",
        parameters=[
            OpenApiParameter("agent", str),
            OpenApiParameter("status", str, description="comma-separated statuses"),
            OpenApiParameter("parent", str, description="list the children of this session"),
            OpenApiParameter("limit", int, description="1..500, default 50"),
            OpenApiParameter("before", str, description="RFC 3339 updated_at, strictly older"),
        ],
        responses={200: SessionListSerializer, 400: ErrorSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request) -> Response:
        """List sessions, newest first."""
        params = request.query_params
        statuses = None
        if params.get("status"):
            statuses = [s.strip() for s in params["status"].split(",") if s.strip()]
            unknown = [s for s in statuses if s not in Session.Status.values]
            if unknown:
                raise BadRequest(f"unknown status {unknown[0]!r}; expected one of {', '.join(Session.Status.values)}")
        parent = None
        if params.get("parent"):
            parent = _session_id(params["parent"])
            require_visible(request, parent)
        try:
            limit = int(params.get("limit", "50"))
        except ValueError as exc:
            raise BadRequest("limit must be an integer between 1 and 500") from exc
        if not 1 <= limit <= 500:
            raise BadRequest("limit must be an integer between 1 and 500")
        before = None
        if params.get("before"):
            try:
                before = datetime.fromisoformat(params["before"].replace("Z", "+00:00"))
            except ValueError as exc:
                raise BadRequest("before must be an RFC 3339 timestamp") from exc
            if before.tzinfo is None:
                raise BadRequest("before must be an RFC 3339 timestamp with a time zone")
        rows, next_before = selectors.session_list(
            agent=params.get("agent") or None,
            statuses=statuses,
            parent=parent,
            limit=limit,
            before=before,
            owner=caller(request).owner,
        )
        return Response(
            {"sessions": [selectors.meta_view(s) for s in rows], "next_before": selectors.rfc3339(next_before)}
        )

    @extend_schema(
        operation_id="createSession",
        request=SessionCreateSerializer,
        parameters=WAIT_PARAMETERS,
        responses={201: SessionViewSerializer, **ERRORS},
    )
    def post(self, request: Request) -> Response:
        """Create a session, and run it unless ``run`` is ``none`` or there is no prompt."""
        data = validated(SessionCreateSerializer, json_object_body(request))
        principal = caller(request)
        if (data.get("seal") or data.get("session_token")) and principal.kind == "anonymous":
            raise BadRequest("seal and session_token need authentication, which this server does not have enabled")
        session_token, token_digest = issue_session_token(bool(data.get("session_token")))
        prompt = data.get("prompt")
        media = _media(data)
        alias = data.get("message")
        if alias is not None and prompt is None:
            prompt = alias.get("text")
            media = media or doc.media_from_api(alias.get("media") or [])
        parent_id = None
        if data.get("parent"):
            parent_id = _session_id(data["parent"])
            require_visible(request, parent_id)
        wait_params(request)
        session = sessions.session_create(
            agent_slug=data["agent"],
            prompt=prompt or None,
            media=media,
            run=data["run"],
            parent_id=parent_id,
            owner=principal.owner,
            sealed=bool(data.get("seal")),
            session_token_sha256=token_digest,
        )
        response = _answer(request, session, created=True)
        if session_token is not None:
            # shown this once; only its digest is stored (spec §5.4)
            response.data["session_token"] = session_token
        return response


class SessionDetailApi(APIView):
    """``GET /v1/sessions/:id`` and ``DELETE /v1/sessions/:id``."""

    @extend_schema(
        operation_id="deleteSession",
        parameters=[OpenApiParameter("dry_run", bool, description="answer the plan, delete nothing")],
        responses={200: DeletionPlanSerializer, 404: ErrorSerializer, 409: ErrorSerializer},
    )
    def delete(self, request: Request, session_id: str) -> Response:
        """Delete the session and its descendants (leaves first); refused while a run is active."""
        plan = tree.session_delete(session_id=_session_id(session_id), dry_run=query_bool(request, "dry_run"))
        return Response(plan)

    @extend_schema(
        operation_id="getSession", parameters=WAIT_PARAMETERS, responses={200: SessionViewSerializer, **ERRORS}
    )
    def get(self, request: Request, session_id: str) -> Response:
        """The session; with ``wait=true``, once its run stops (202 if still running at timeout)."""
        session = selectors.session_get(_session_id(session_id))
        return _answer(request, session, read_only=True)


class SessionMessagesApi(APIView):
    """``POST /v1/sessions/:id/messages``."""

    @extend_schema(
        operation_id="postMessage",
        request=MessageSerializer,
        parameters=WAIT_PARAMETERS,
        responses={200: SessionViewSerializer, 202: SessionViewSerializer, **ERRORS},
    )
    def post(self, request: Request, session_id: str) -> Response:
        """Add a user message and run."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        data = validated(MessageSerializer, json_object_body(request))
        wait_params(request)
        session = sessions.message_post(
            session_id=sid,
            prompt=data.get("prompt") or None,
            media=_media(data),
            run=data["run"],
            interrupt=data["interrupt"],
            owner=caller(request).owner,
        )
        return _answer(request, session)


class SessionResumeApi(APIView):
    """``POST /v1/sessions/:id/resume``."""

    @extend_schema(
        operation_id="resumeSession",
        request=ResumeSerializer,
        parameters=WAIT_PARAMETERS,
        responses={200: SessionViewSerializer, 202: SessionViewSerializer, **ERRORS},
    )
    def post(self, request: Request, session_id: str) -> Response:
        """Start a run on a stored session (``mode``: step or until_blocked)."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        data = validated(ResumeSerializer, json_object_body(request))
        wait_params(request)
        session = sessions.session_resume(session_id=sid, mode=data["mode"], owner=caller(request).owner)
        return _answer(request, session)


class SessionPendingApi(APIView):
    """``GET /v1/sessions/:id/pending``."""

    @extend_schema(operation_id="listPendingCalls", responses={200: PendingSerializer, 404: ErrorSerializer})
    def get(self, request: Request, session_id: str) -> Response:
        """The deferred calls waiting for a continuation."""
        session = selectors.session_get(_session_id(session_id))
        return Response({"calls": doc.pending_calls(session.document)})


class ContinuationApi(APIView):
    """``POST /v1/continuations/:token``."""

    @extend_schema(
        operation_id="completeCall",
        request=ContinuationSerializer,
        parameters=WAIT_PARAMETERS,
        responses={200: SessionViewSerializer, 202: SessionViewSerializer, **ERRORS},
    )
    def post(self, request: Request, token: str) -> Response:
        """Post a deferred call's result; the session resumes when its last deferred call is in."""
        parsed = parse_uuid(token, UnknownToken(token))
        body = json_object_body(request)
        if "result" not in body:
            raise BadRequest("result: This field is required.")
        data = validated(ContinuationSerializer, body)
        wait_params(request)
        require_visible_token(request, parsed)
        session = continuations.continuation_complete(token=parsed, result=body["result"], resume=data["resume"])
        return _answer(request, session)


class SessionMailApi(APIView):
    """``POST /v1/sessions/:id/mail`` and ``GET /v1/sessions/:id/mail``."""

    @extend_schema(operation_id="sendMail", request=MailSerializer, responses={202: ReceiptSerializer, **ERRORS})
    def post(self, request: Request, session_id: str) -> Response:
        """Queue mail for the session; never refused for the session's status."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        data = validated(MailSerializer, json_object_body(request))
        body = mailbox.validate_body(json_object_body(request).get("body"))
        receipt = mail.mail_send(
            session_id=sid,
            body=body,
            priority=data["priority"],
            sender={"tag": "user", "owner": caller(request).owner},
            mail_id=data.get("id"),
        )
        return Response(receipt, status=202)

    @extend_schema(
        operation_id="listMail",
        parameters=[OpenApiParameter("unread", bool, description="only mail not consumed yet (default false)")],
        responses={200: MailListSerializer, 404: ErrorSerializer},
    )
    def get(self, request: Request, session_id: str) -> Response:
        """The session's mail, oldest first."""
        session = selectors.session_get(_session_id(session_id))
        return Response({"mail": selectors.mail_list(session, unread=query_bool(request, "unread"))})


class SessionPauseApi(APIView):
    """``POST /v1/sessions/:id/pause``."""

    @extend_schema(
        operation_id="pauseSession", request=None, responses={200: SessionViewSerializer, 202: SessionViewSerializer}
    )
    def post(self, request: Request, session_id: str) -> Response:
        """Pause: the run stops at its next step and the session is stored ``paused``."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        return _answer(request, sessions.session_pause(session_id=sid, owner=caller(request).owner))


class SessionCancelApi(APIView):
    """``POST /v1/sessions/:id/cancel``."""

    @extend_schema(operation_id="cancelRun", request=None, responses={200: SessionMetaSerializer, 409: ErrorSerializer})
    def post(self, request: Request, session_id: str) -> Response:
        """Stop the active run and its background calls; answers once the run has stopped."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        sessions.session_cancel(session_id=sid, owner=caller(request).owner)
        session = selectors.wait_for_run(sid, CANCEL_WAIT_SECONDS)
        return Response(selectors.meta_view(session))


class SessionCancelAttachedApi(APIView):
    """``POST /v1/sessions/:id/cancel-attached``."""

    @extend_schema(
        operation_id="cancelAttached", request=None, responses={200: SessionViewSerializer, 202: SessionViewSerializer}
    )
    def post(self, request: Request, session_id: str) -> Response:
        """Cancel every attached tool call, without stopping the run."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        return _answer(request, sessions.session_cancel_attached(session_id=sid, owner=caller(request).owner))


class SessionForkApi(APIView):
    """``POST /v1/sessions/:id/fork``."""

    @extend_schema(operation_id="forkSession", request=ForkSerializer, responses={201: SessionViewSerializer, **ERRORS})
    def post(self, request: Request, session_id: str) -> Response:
        """A new session with the turns up to ``at_turn`` (newest first), optionally another agent."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        data = validated(ForkSerializer, json_object_body(request))
        session = tree.session_fork(session_id=sid, at_turn=data.get("at_turn"), agent_slug=data.get("agent"))
        return Response(selectors.session_view(session), status=201, headers={"Location": f"/v1/sessions/{session.pk}"})
