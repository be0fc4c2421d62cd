"""Middleware that must run before Django reads a request body."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from agentsite.errors import json_error, payload_too_large


class BodyLimitMiddleware:
    """Refuse a declared body over the limit with 413 ``payload_too_large`` (spec/server-api.md §0).

    Bodies without a Content-Length are checked again by the JSON parser as they are read.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = settings.AGENTS["MAX_BODY_BYTES"]
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            return json_error(payload_too_large(limit))
        return self.get_response(request)
