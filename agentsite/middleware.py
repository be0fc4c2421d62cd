"""Middleware that must run before Django reads a request body."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from agentsite.errors import BadRequest, PayloadTooLarge, json_error


class BodyLimitMiddleware:
    """Refuse a declared body over the limit with 413 ``payload_too_large`` (docs/api.md §1.1).

    Bodies without a Content-Length are checked again by the JSON parser as they are read.
    Query parameters holding NUL are refused here too: PostgreSQL text cannot hold them.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
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
        return self.get_response(request)
