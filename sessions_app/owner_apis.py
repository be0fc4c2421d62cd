"""Who may see what, for the sessions API, and the two routes only a session's owner has.

The access middleware (``agentsite.access``) already answers for session paths; these helpers
cover what a path does not say: a ``parent`` in a body or a query, the session behind a
continuation token, the caller's own listing (spec/server-api.md §5.2). The routes are
``PUT /v1/sessions/:id/params`` and ``DELETE /v1/sessions/:id/token`` (§1.2 #21-22, §5.4).
"""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentsite.access import can_see, principal_of
from agentsite.api import json_object_body, parse_uuid
from agentsite.auth import Principal, new_session_token
from agentsite.errors import UnknownSession, UnknownToken
from sessions_app import selectors
from sessions_app.models import Continuation
from sessions_app.serializers import ErrorSerializer, SessionViewSerializer
from sessions_app.services import owner


def caller(request: Request) -> Principal:
    """The caller of an API request (the anonymous caller when authentication is off)."""
    return principal_of(request)


def require_visible(request: Request, session_id: uuid.UUID) -> None:
    """404 ``unknown_session`` unless the caller may see the session (spec §5.2)."""
    if not can_see(caller(request), session_id):
        raise UnknownSession(session_id)


def require_visible_token(request: Request, token: uuid.UUID) -> None:
    """404 ``unknown_token`` for a continuation of a session the caller may not see (spec §5.2).

    A token that does not exist is left to the service, which answers the same.
    """
    owning = Continuation.objects.filter(pk=token).values_list("session_id", flat=True).first()
    if owning is not None and not can_see(caller(request), owning):
        raise UnknownToken(token)


def issue_session_token(wanted: bool) -> tuple[str | None, str | None]:
    """``(token, sha256)`` of a new session token when ``wanted``, else ``(None, None)`` (spec §5.4)."""
    return new_session_token() if wanted else (None, None)


def _session_id(value: str) -> uuid.UUID:
    return parse_uuid(value, UnknownSession(value))


class SessionParamsApi(APIView):
    """``PUT /v1/sessions/:id/params`` (spec §1.2 #21; the owner, sealed session or not)."""

    @extend_schema(
        operation_id="setSessionParams",
        request=OpenApiTypes.OBJECT,
        description='A bare object of name -> value, or {"params": {...}}; null clears a value.',
        responses={
            200: SessionViewSerializer,
            400: ErrorSerializer,
            403: ErrorSerializer,
            404: ErrorSerializer,
            409: ErrorSerializer,
            422: ErrorSerializer,
        },
    )
    def put(self, request: Request, session_id: str) -> Response:
        """Merge session-scope parameter values into the session; starts no run."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        body = json_object_body(request)
        # DECISIONS 9: an object whose only key is "params", holding an object, is the wrapped form
        params = body["params"] if set(body) == {"params"} and isinstance(body["params"], dict) else body
        session = owner.session_params_put(session_id=sid, params=params)
        return Response(selectors.session_view(session))


class SessionTokenApi(APIView):
    """``DELETE /v1/sessions/:id/token`` (spec §1.2 #22; the owner)."""

    @extend_schema(operation_id="revokeSessionToken", responses={200: SessionViewSerializer, 404: ErrorSerializer})
    def delete(self, request: Request, session_id: str) -> Response:
        """Revoke the session token: it answers 401 from now on."""
        sid = _session_id(session_id)
        selectors.session_get(sid)
        return Response(selectors.session_view(owner.session_token_revoke(session_id=sid)))
