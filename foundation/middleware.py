"""The project's middleware, cheap on the API's path.

Under ASGI every middleware that can only run synchronously costs the request two trips to a
worker thread. The API's own middleware (:class:`BodyLimitMiddleware` here, and
``foundation.access.CorsMiddleware``) therefore runs in whichever mode the server calls it, and
Django's session, authentication, message, security and common middleware, which only the admin
needs, run for the admin's paths only (:class:`AdminMiddleware`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.middleware.common import CommonMiddleware
from django.middleware.security import SecurityMiddleware

from foundation.errors import BadRequest, PayloadTooLarge, json_error

access_log = logging.getLogger("foundation.access")

#: The paths of Django's admin and its static files.
ADMIN_PREFIXES = ("/admin/", "/static/")


class HybridMiddleware:
    """A middleware that runs in the mode of the handler it wraps (sync under WSGI and in tests,
    async under daphne), without thread hops.

    Subclasses implement :meth:`before` (answer early, or ``None`` to go on) and :meth:`after`
    (change the answer); neither may block.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        response = self.before(request)
        if response is None:
            response = self.get_response(request)
        return self.after(request, response)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        response = self.before(request)
        if response is None:
            response = await self.get_response(request)
        return self.after(request, response)

    def before(self, request: HttpRequest) -> HttpResponse | None:
        """An answer that ends the request here, or ``None``."""
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        """The answer, possibly changed."""
        return response


class AccessLogMiddleware(HybridMiddleware):
    """One log line per request (``http.request``): method, path without its query (which may carry
    ``access_token``), status, and the milliseconds until the answer's head was ready, which for an
    event stream is its first byte, not its end (the docs/running.md §1)."""

    def before(self, request: HttpRequest) -> HttpResponse | None:
        request.META["agents.started"] = time.monotonic()
        return None

    def after(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        started = request.META.get("agents.started", time.monotonic())
        access_log.info(
            "request",
            extra={
                "kind": "http.request",
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "ttfb_ms": round((time.monotonic() - started) * 1000, 1),
            },
        )
        return response


class BodyLimitMiddleware(HybridMiddleware):
    """Refuse a declared body over the limit with 413 ``payload_too_large`` (docs/api.md §1.1).

    Bodies without a Content-Length are checked again by the JSON parser as they are read.
    Query parameters holding NUL are refused here too: PostgreSQL text cannot hold them.
    """

    def before(self, request: HttpRequest) -> HttpResponse | None:
        """The refusals; a chunked body is given its length (it has already been received)."""
        limit = settings.AGENTS["MAX_BODY_BYTES"]
        if any("\x00" in value for values in request.GET.lists() for value in values[1]):
            return json_error(BadRequest("query parameters must not contain NUL characters"))
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return json_error(PayloadTooLarge(limit))
        if not request.META.get("CONTENT_LENGTH") and "chunked" in request.headers.get("Transfer-Encoding", "").lower():
            # A chunked body has no Content-Length, and parsers read nothing without one: read it
            # here (the server has already received it) and give it its length.
            body = request.body
            if len(body) > limit:
                return json_error(PayloadTooLarge(limit))
            request.META["CONTENT_LENGTH"] = str(len(body))
        return None


class AdminMiddleware:
    """Django's security, session, common, authentication and message middleware, for the admin's
    paths only: the API identifies its callers by token and keeps no cookie session."""

    sync_capable = True
    async_capable = True
    STACK = (SecurityMiddleware, SessionMiddleware, CommonMiddleware, AuthenticationMiddleware, MessageMiddleware)

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        admin: Callable[[HttpRequest], Any] = get_response
        for middleware in reversed(self.STACK):
            admin = middleware(admin)
        self.admin = admin
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponse | Awaitable[HttpResponse]:
        if request.path_info.startswith(ADMIN_PREFIXES):
            return self.admin(request)
        return self.get_response(request)


class StaticFiles(ASGIStaticFilesHandler):
    """Django's handler of ``/static/`` (the admin's stylesheets and scripts: there is no other
    web server), for paths it cannot serve too.

    A path that climbs out of the static folders (``/static/%2e%2e/...``) or names no file a
    folder can hold (a NUL) makes Django's finders raise, outside any middleware: daphne answered
    500 in HTML and logged a traceback per request. Such a path is a file that does not exist:
    404 ``not_found`` in the error shape (docs/api.md §2), through the project's 404 handler.
    """

    def serve(self, request: HttpRequest) -> HttpResponse | FileResponse:
        """The file, or :class:`~django.http.Http404` for a path outside the static folders."""
        try:
            return super().serve(request)
        except (SuspiciousOperation, ValueError):
            raise Http404(request.path) from None


class UnixSocketHost:
    """Names a loopback host for every request of the Unix socket (``--socket``, docs/api.md §10.7).

    Nothing but a local process with the socket file's rights can reach a socket, so its Host
    header guards nothing (``curl --unix-socket s http://x/healthz`` says ``x``), while Django's
    Host check (``ALLOWED_HOSTS``) would refuse it. TCP requests are left as they are, and keep
    that check.

    Args:
        app: the ASGI application it wraps.
    """

    HOST = b"localhost"

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        """Serve one connection with the wrapped application; daphne gives a connection without
        a network peer (a Unix socket) no ``server`` address."""
        if scope.get("type") in ("http", "websocket") and scope.get("server") is None:
            headers = [(name, value) for name, value in scope.get("headers", []) if name.lower() != b"host"]
            scope = {**scope, "headers": [(b"host", self.HOST), *headers]}
        return await self.app(scope, receive, send)
