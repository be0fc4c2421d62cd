"""Who is calling: origins and CORS, bearer and session tokens, and who may see which session.

Implements docs/api.md §10 on the request side (the configuration is ``foundation.auth``);
docs/access.md §1 says it for users.

* :class:`CorsMiddleware` (outermost): answers every ``OPTIONS`` as a preflight (204, docs/api.md §10.8), lets
  ``/healthz``, ``/openapi.json`` and ``/`` through before the origin check, refuses other
  requests from a non-loopback, unlisted ``Origin`` with 403 ``forbidden_origin`` when
  authentication is off (docs/api.md §10.7), and puts the CORS headers on every answer to a listed origin.
* :func:`principal_for` identifies the caller of a request from its token: the DRF
  authentication class (``foundation.permissions``), the event-stream views and the answer to an
  unknown path all call it, so a request is identified the same way everywhere.
* :class:`WebsocketAccess`: the same rules for the websocket streams.
* :class:`SessionAccess`: whose a session token is and who may see a session are the sessions
  app's rules (``sessions_app.access``); it registers them here at start.

The Django admin (``/admin/``, ``/static/``) has its own login and needs no bearer token.
Nothing here logs a header, a token or a query string.
"""

from __future__ import annotations

import uuid
from typing import Any, Protocol

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import patch_vary_headers

from foundation.auth import (
    ANONYMOUS,
    SESSION_TOKEN_PREFIX,
    AuthConfig,
    Principal,
    auth_config,
    bearer_token,
)
from foundation.errors import (
    ForbiddenOrigin,
    NotFound,
    Unauthorized,
    json_error,
)
from foundation.middleware import HybridMiddleware

#: Answered before the origin check and without a token (docs/api.md §13, docs/decisions.md §8).
OPEN_PATHS = frozenset({"/healthz", "/openapi.json", "/"})
#: Django's admin and its static files: operators log in with a Django account instead.
ADMIN_PREFIXES = ("/admin/", "/static/")

PREFLIGHT_HEADERS = {
    "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, Idempotency-Key, Last-Event-ID",
    "Access-Control-Max-Age": "600",
}

def identify(authorization: str | None, query_token: str | None, session_id: str | None) -> Principal:
    """The caller presenting these credentials (docs/api.md §10.2-10.5).

    Args:
        authorization: the ``Authorization`` header, if any.
        query_token: the ``?access_token=`` value where the route reads one (the event streams:
            a browser's EventSource cannot send headers), else ``None``.
        session_id: the session the path is about (as written in the path), or ``None``; a
            session token is valid on that session only.
    Returns:
        :data:`~foundation.auth.ANONYMOUS` when authentication is off, else the caller.
    Raises:
        Unauthorized: authentication is on and no valid token was presented.
    """
    config = auth_config()
    if not config.enabled:
        return ANONYMOUS
    token = bearer_token(authorization) or query_token or None
    principal = authenticate(config, token, session_id)
    if principal is None:
        raise Unauthorized()
    return principal


def principal_for(request: HttpRequest, *, session_id: str | None, query_token: bool = False) -> Principal:
    """The caller of an HTTP request: :func:`identify` with its header and, when ``query_token``,
    its ``?access_token=``.

    Raises:
        Unauthorized: authentication is on and no valid token was presented.
    """
    token = request.GET.get("access_token") if query_token else None
    return identify(request.headers.get("Authorization"), token, session_id)


def is_open_path(path: str) -> bool:
    """Whether ``path`` is answered to everyone: health, the OpenAPI document, ``/`` and the admin."""
    return path in OPEN_PATHS or path.startswith(ADMIN_PREFIXES)


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Django's 404 handler: 404 ``not_found`` in the API's shape. With authentication on, a caller
    without a valid token is told 401 first, so that unknown paths say nothing to strangers."""
    if not is_open_path(request.path_info):
        try:
            principal_for(request, session_id=None)
        except Unauthorized as error:
            return json_error(error)
    return json_error(NotFound(request.path))


class SessionAccess(Protocol):
    """What the platform asks of the sessions app, which registers it at start
    (:func:`register_session_access`) so that this package never imports it."""

    def token_principal(self, token: str, session_id: str | None) -> Principal | None:
        """The principal of session token ``token`` presented on session ``session_id`` (as
        written in the path; ``None``: a path about no session), or ``None`` when it is not valid
        there (docs/api.md §10.5)."""

    def can_see(self, principal: Principal, session_id: uuid.UUID) -> bool:
        """Whether ``principal`` may see session ``session_id`` (docs/api.md §10.3)."""


_session_access: SessionAccess | None = None


def register_session_access(access: SessionAccess | None) -> None:
    """Answer session questions with ``access`` from now on (``None``: no session is known, so no
    session token is valid and no session is visible)."""
    global _session_access
    _session_access = access


def can_see(principal: Principal, session_id: uuid.UUID) -> bool:
    """Whether the caller may see the session, as the registered :class:`SessionAccess` says
    (``False`` when none is registered)."""
    return _session_access is not None and _session_access.can_see(principal, session_id)


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
    if token.startswith(SESSION_TOKEN_PREFIX) and _session_access is not None:
        return _session_access.token_principal(token, session_id)
    return None


def via_unix_socket(request: HttpRequest) -> bool:
    """Whether the request came through ``--socket`` (docs/api.md §10.7): the socket's file mode is
    the trust boundary there, so the origin check does not apply (tokens still do).

    daphne gives a connection without a network peer (a Unix socket) no ``server`` address.
    """
    scope = getattr(request, "scope", None)
    return scope is not None and scope.get("server") is None


def _add_cors_headers(response: HttpResponse, origin: str) -> None:
    response["Access-Control-Allow-Origin"] = origin
    response["Access-Control-Expose-Headers"] = "Location, Idempotent-Replayed"
    patch_vary_headers(response, ("Origin",))


class CorsMiddleware(HybridMiddleware):
    """Preflights, the origin check without authentication, and CORS headers (docs/api.md §10.7, §10.8)."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        """Answer a preflight, or refuse an origin this server does not trust.

        The Host header is checked first, against ``ALLOWED_HOSTS`` (``DisallowedHost``, which
        Django answers 400): Django's own middleware that would check it runs for the admin only.
        """
        request.get_host()
        config = auth_config()
        origin = request.headers.get("Origin")
        if request.method == "OPTIONS":
            # a preflight is answered before authentication, on any path
            if not config.origin_allowed(origin):
                return json_error(ForbiddenOrigin(origin or ""))
            response = HttpResponse(status=204)
            del response["Content-Type"]
            for name, value in PREFLIGHT_HEADERS.items():
                response[name] = value
            return response
        if request.path_info in OPEN_PATHS or config.origin_allowed(origin) or via_unix_socket(request):
            return None
        return json_error(ForbiddenOrigin(origin or ""))

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        """The CORS headers, on every answer to a listed origin."""
        origin = request.headers.get("Origin")
        if origin is not None and auth_config().origin_listed(origin):
            _add_cors_headers(response, origin)
        return response


class WebsocketAccess:
    """ASGI wrapper of the websocket routes: the origin check, as for HTTP (docs/api.md §10.7), and
    not on the Unix socket (:func:`via_unix_socket`).

    A refused handshake is closed before it is accepted (the client sees HTTP 403). Tokens are
    the consumer's to check (:func:`identify`), once its route is known.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        """Check the handshake's origin, then hand it to the routed consumer."""
        if scope["type"] == "websocket":
            headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
            if scope.get("server") is not None and not auth_config().origin_allowed(headers.get("origin")):
                message = await receive()
                if message["type"] == "websocket.connect":
                    await send({"type": "websocket.close", "code": 4403})
                return None
        return await self.inner(scope, receive, send)
