"""Authentication and permission classes of the REST API (docs/access.md §1).

Every viewset uses :class:`BearerAuthentication` and the three permissions below; what differs
between views is said by attributes of the view, not by paths:

* ``session_token_actions``: the actions a session token may call, on its own session only
  (``retrieve``, ``messages``, ``cancel``); ``session_token_body_actions`` those of them whose
  body may not carry ``params``.
* ``admin_actions``: the actions only admin owners may call (storing and deleting agents).

A session that exists but belongs to someone else answers exactly as a missing one
(404 ``unknown_session``); the event streams and websockets apply the same rules through the
functions of ``foundation.access``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from foundation.access import can_see, principal_for
from foundation.auth import Principal, caller
from foundation.errors import Forbidden, ForbiddenParams, UnknownSession


def _session_in_path(view: Any) -> str | None:
    """The session id a session-scoped view's path names, as written."""
    if not getattr(view, "session_token_actions", None):
        return None
    return (getattr(view, "kwargs", None) or {}).get(getattr(view, "lookup_url_kwarg", None) or "pk")


class BearerAuthentication(BaseAuthentication):
    """``Authorization: Bearer <token>``: an owner's token, or a session token on its own session.

    Without ``--auth-tokens`` every caller is the anonymous principal. ``request.user`` is the
    :class:`~foundation.auth.Principal`.
    """

    def authenticate(self, request: Request) -> tuple[Principal, None]:
        """Identify the caller.

        Raises:
            Unauthorized: authentication is on and the token is missing or unknown here.
        """
        view = (request.parser_context or {}).get("view")
        return principal_for(request._request, session_id=_session_in_path(view)), None

    def authenticate_header(self, request: Request) -> str:
        """What a 401 answer's ``WWW-Authenticate`` says."""
        return "Bearer"


class SessionTokenScope(BasePermission):
    """A session token may call only its view's ``session_token_actions`` (403 ``forbidden``),
    without ``params`` in the body of ``session_token_body_actions`` (403 ``forbidden_params``)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        """Raises Forbidden or ForbiddenParams; ``True`` otherwise."""
        principal = caller(request)
        if not principal.is_session_token:
            return True
        if view.action not in getattr(view, "session_token_actions", ()):
            raise Forbidden("a session token allows only reading the session, its events, messages and cancel")
        if view.action in getattr(view, "session_token_body_actions", ()) and _body_has_params(request):
            raise ForbiddenParams("params cannot be sent with a session token")
        return True


def _body_has_params(request: Request) -> bool:
    """Whether the body is a JSON object with a ``params`` key; any other body is the view's to refuse.

    Reads the raw body rather than ``request.data``, so that a malformed body is still refused by
    the view with its own message.
    """
    try:
        body = json.loads(request._request.body or b"null")
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and "params" in body


class SessionVisible(BasePermission):
    """The session of a detail route must be the caller's (404 ``unknown_session`` otherwise).

    Only for actions the view answers: a method the route does not have answers 405 whoever owns
    the session, and a malformed id is the view's own 404.
    """

    def has_permission(self, request: Request, view: Any) -> bool:
        """Raises UnknownSession; ``True`` otherwise."""
        principal = caller(request)
        if principal.kind == "anonymous" or principal.is_session_token or view.action is None:
            return True
        written = _session_in_path(view)
        if written is None:
            return True
        try:
            session_id = uuid.UUID(written)
        except ValueError:
            return True
        if not can_see(principal, session_id):
            raise UnknownSession(session_id)
        return True


class AdminOwner(BasePermission):
    """The view's ``admin_actions`` are for the owners named in ``--admin-owners`` (403 ``forbidden``,
    for everyone when authentication is off)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        """Raises Forbidden; ``True`` otherwise."""
        if view.action not in getattr(view, "admin_actions", ()):
            return True
        principal = caller(request)
        if not principal.admin or principal.owner is None:
            raise Forbidden("storing and deleting agents is for admin owners (--admin-owners)")
        return True


class BearerAuthenticationScheme(OpenApiAuthenticationExtension):
    """Declares :class:`BearerAuthentication` as the ``bearerAuth`` scheme of the OpenAPI document."""

    target_class = "foundation.permissions.BearerAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        """An HTTP bearer scheme (owners' tokens and session tokens alike)."""
        return {"type": "http", "scheme": "bearer", "description": "an owner's token, or a session token (st_...)"}
