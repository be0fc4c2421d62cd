"""Access control on every request: CORS and the origin check, bearer and session tokens, owners.

Implements spec/server-api.md §5 on the request side (the configuration is ``agentsite.auth``):

* :class:`CorsMiddleware` (outermost): answers every ``OPTIONS`` as a preflight (204, §5.7), lets
  ``/healthz``, ``/openapi.json`` and ``/`` through before the origin check, refuses other
  requests from a non-loopback, unlisted ``Origin`` with 403 ``forbidden_origin`` when
  authentication is off (§5.6), and puts the CORS headers on every answer to a listed origin.
* :class:`AuthMiddleware`: with ``--auth-tokens``, every other path needs ``Authorization: Bearer``
  (``?access_token=`` on the two event streams only, DECISIONS 8), 401 ``unauthorized`` otherwise.
  A session token is valid on its own session's four routes only (§5.4). A session path of
  another owner answers 404 ``unknown_session`` as a missing one does (§5.2).
* :class:`WebsocketAccess`: the same rules for the websocket streams.

The Django admin (``/admin/``, ``/static/``) has its own login and needs no bearer token.
Nothing here logs a header, a token or a query string.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils.cache import patch_vary_headers

from agentsite.auth import (
    ANONYMOUS,
    SESSION_TOKEN_PREFIX,
    AuthConfig,
    Principal,
    auth_config,
    bearer_token,
    session_token_matches,
)
from agentsite.errors import (
    ApiError,
    Forbidden,
    ForbiddenOrigin,
    ForbiddenParams,
    Unauthorized,
    UnknownSession,
    json_error,
)

#: Answered before the origin check and without a token (spec §1.1 rows 1-3, DECISIONS 8).
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/"})
#: Django's admin and its static files: operators log in with a Django account instead.
ADMIN_PREFIXES = ("/admin/", "/static/")

PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Last-Event-ID",
    "Access-Control-Max-Age": "600",
}

#: ``/v1/sessions/<id>`` and what follows it (``""``, ``/messages``, ...).
SESSION_PATH = re.compile(r"^/v1/sessions/(?P<id>[^/]+)(?P<rest>/.*)?$")
WS_SESSION_PATH = re.compile(r"^/v1/ws/sessions/(?P<id>[^/]+)$")
#: Where ``?access_token=`` is read (EventSource cannot send headers).
STREAM_PATHS = (re.compile(r"^/v1/events$"), re.compile(r"^/v1/sessions/[^/]+/events$"))
#: What a session token may do on its own session (spec §5.4): (method, path after the id).
SESSION_TOKEN_ROUTES = frozenset({("GET", ""), ("GET", "/events"), ("POST", "/messages"), ("POST", "/cancel")})
#: Of those, the routes with a body that may not carry ``params``.
SESSION_TOKEN_BODY_ROUTES = frozenset({"/messages", "/cancel"})


def principal_of(request: Any) -> Principal:
    """The caller of a request that went through :class:`AuthMiddleware` (DRF or Django request).

    Raises:
        ApiError: 401 ``unauthorized`` on a path that is open to everyone (it has no caller).
    """
    principal = getattr(request, "agents_principal", None)
    if principal is None:
        raise Unauthorized()
    return principal


def session_owner(session_id: uuid.UUID) -> tuple[bool, str | None]:
    """``(exists, owner)``: a session's owner is its root's owner (spec §5.2).

    Sub-sessions are created with their root's owner; the walk up the parents still answers for
    a child stored without one.
    """
    from sessions_app.models import Session

    row = Session.objects.filter(pk=session_id).values_list("owner", "parent_id").first()
    if row is None:
        return False, None
    owner, parent_id = row
    seen = {session_id}
    while parent_id is not None and parent_id not in seen:
        seen.add(parent_id)
        parent = Session.objects.filter(pk=parent_id).values_list("owner", "parent_id").first()
        if parent is None:
            break
        owner, parent_id = parent
    return True, owner


def can_see(principal: Principal, session_id: uuid.UUID) -> bool:
    """Whether the caller may see the session: it exists and (with authentication) is theirs.

    A session-token holder sees only its own session.
    """
    exists, owner = session_owner(session_id)
    if not exists:
        return False
    if principal.kind == "anonymous":
        return True
    if principal.is_session_token:
        return principal.session_id == str(session_id)
    return owner == principal.owner


def _session_principal(token: str, session_id: str | None) -> Principal | None:
    """The principal of session token ``token`` presented on session ``session_id``, or ``None``."""
    from sessions_app.models import Session

    try:
        sid = uuid.UUID(session_id) if session_id else None
    except ValueError:
        return None
    if sid is None:
        return None
    row = Session.objects.filter(pk=sid).values_list("session_token_sha256", flat=True).first()
    if not session_token_matches(token, row):
        return None
    _, owner = session_owner(sid)
    return Principal(kind="session", owner=owner, session_id=str(sid))


def authenticate(config: AuthConfig, token: str | None, session_id: str | None) -> Principal | None:
    """The caller presenting ``token`` on a path about session ``session_id`` (``None``: other paths).

    Returns:
        An owner's principal, a session token's principal (only when ``session_id`` is the
        token's session), or ``None``: the request answers 401.
    """
    if not token:
        return None
    owner = config.owner_of(token)
    if owner is not None:
        return config.principal_for(owner)
    if token.startswith(SESSION_TOKEN_PREFIX):
        return _session_principal(token, session_id)
    return None


def _add_cors_headers(response: HttpResponse, origin: str) -> None:
    response["Access-Control-Allow-Origin"] = origin
    response["Access-Control-Expose-Headers"] = "Location"
    patch_vary_headers(response, ("Origin",))


class CorsMiddleware:
    """Preflights, the origin check without authentication, and CORS headers (spec §5.6-5.7)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        config = auth_config()
        origin = request.headers.get("Origin")
        if request.method == "OPTIONS":
            # a preflight is answered before authentication, on any path
            if not config.origin_allowed(origin):
                response: HttpResponse = json_error(ForbiddenOrigin(origin or ""))
            else:
                response = HttpResponse(status=204)
                del response["Content-Type"]
                for name, value in PREFLIGHT_HEADERS.items():
                    response[name] = value
        elif request.path_info in OPEN_PATHS or config.origin_allowed(origin):
            response = self.get_response(request)
        else:
            response = json_error(ForbiddenOrigin(origin or ""))
        if origin is not None and config.origin_listed(origin):
            _add_cors_headers(response, origin)
        return response


def _handled_by_class_view(request: HttpRequest) -> bool:
    """Whether the path resolves to a class-based view that has a handler for the method.

    Unknown paths and wrong methods answer 404 ``not_found`` / 405 whether or not the session
    exists, so they are left to the view: another owner's session must look exactly missing.
    """
    try:
        match = resolve(request.path_info)
    except Resolver404:
        return False
    view_class = getattr(match.func, "view_class", None)
    if view_class is None:
        # function views (the event streams) check the session themselves
        return False
    method = request.method.lower() if request.method else ""
    if method == "head":
        method = "get"
    return method in view_class.http_method_names and hasattr(view_class, method)


class AuthMiddleware:
    """Bearer tokens, session tokens and session ownership (spec §5.1-5.4).

    Sets ``request.agents_principal``: :data:`~agentsite.auth.ANONYMOUS` without authentication,
    ``None`` on the open paths and the admin, else the caller.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        config = auth_config()
        path = request.path_info
        if not config.enabled:
            request.agents_principal = ANONYMOUS
            return self.get_response(request)
        if path in OPEN_PATHS or path.startswith(ADMIN_PREFIXES):
            request.agents_principal = None
            return self.get_response(request)
        try:
            request.agents_principal = self._check(request, config, path)
        except ApiError as error:
            return json_error(error)
        return self.get_response(request)

    def _check(self, request: HttpRequest, config: AuthConfig, path: str) -> Principal:
        """Identify the caller and apply the session rules; raise the refusal as an ApiError."""
        token = bearer_token(request.headers.get("Authorization"))
        if token is None and any(pattern.match(path) for pattern in STREAM_PATHS):
            token = request.GET.get("access_token") or None
        match = SESSION_PATH.match(path)
        principal = authenticate(config, token, match["id"] if match else None)
        if principal is None:
            raise Unauthorized()
        if match is None:
            return principal
        rest = match["rest"] or ""
        if principal.is_session_token:
            method = "GET" if request.method == "HEAD" else request.method
            if (method, rest) not in SESSION_TOKEN_ROUTES:
                raise Forbidden("a session token allows only reading the session, its events, messages and cancel")
            if rest in SESSION_TOKEN_BODY_ROUTES and _body_has_params(request):
                raise ForbiddenParams("params cannot be sent with a session token")
            return principal
        try:
            sid = uuid.UUID(match["id"])
        except ValueError:
            # a malformed id is the view's own 404 unknown_session
            return principal
        if _handled_by_class_view(request) and not can_see(principal, sid):
            raise UnknownSession(sid)
        return principal


def _body_has_params(request: HttpRequest) -> bool:
    """Whether the JSON body is an object with a ``params`` key (any other body is the view's)."""
    try:
        body = json.loads(request.body or b"null")
    except (ValueError, RecursionError):
        return False
    return isinstance(body, dict) and "params" in body


class WebsocketAccess:
    """ASGI wrapper of the websocket routes: origin check and tokens, as for HTTP.

    A refused handshake is closed before it is accepted (the client sees HTTP 403). The caller
    is passed on as ``scope["agents_principal"]``; the consumer checks the session and the scope.
    Tokens come from ``Authorization: Bearer`` or ``?access_token=``.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        """Check the handshake, then hand it to the routed consumer."""
        if scope["type"] != "websocket":
            return await self.inner(scope, receive, send)
        config = auth_config()
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        if not config.origin_allowed(headers.get("origin")):
            return await _refuse(receive, send, 4403)
        principal: Principal | None = ANONYMOUS
        if config.enabled:
            token = bearer_token(headers.get("authorization"))
            if token is None:
                query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
                token = (query.get("access_token") or [None])[0]
            match = WS_SESSION_PATH.match(scope["path"])
            principal = await database_sync_to_async(authenticate)(config, token, match["id"] if match else None)
        if principal is None:
            return await _refuse(receive, send, 4401)
        return await self.inner(dict(scope, agents_principal=principal), receive, send)


async def _refuse(receive: Any, send: Any, code: int) -> None:
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": code})
