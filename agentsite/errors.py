"""The one error shape of the API: ``{"error": code, "message": text}`` (spec/server-api.md §2).

Services raise :class:`ApiError` (or one of the named constructors below); the DRF exception
handler and the plain-Django handlers turn every failure into that shape, so clients can decode
the code string into their own error type.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

log = logging.getLogger("agentsite.errors")


class ApiError(Exception):
    """An error with an HTTP status and a documented wire code.

    Args:
        status: the HTTP status (400, 404, 409, ...).
        code: the wire code from spec/server-api.md §2, e.g. ``unknown_session``.
        message: one human-readable sentence.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> dict[str, str]:
        """The JSON body of the answer."""
        return {"error": self.code, "message": self.message}


def bad_request(message: str) -> ApiError:
    """400 ``bad_request``: a malformed body or query parameter."""
    return ApiError(400, "bad_request", message)


def unknown_session(session_id: Any) -> ApiError:
    """404 ``unknown_session``: missing, malformed or not visible to the caller."""
    return ApiError(404, "unknown_session", f"no session {session_id}")


def unknown_token(token: Any) -> ApiError:
    """404 ``unknown_token``: a continuation token that is missing, malformed or not visible."""
    return ApiError(404, "unknown_token", f"no continuation token {token}")


def unknown_agent(slug: str) -> ApiError:
    """404 ``unknown_agent``: no agent with that slug is loaded."""
    return ApiError(404, "unknown_agent", f"no agent {slug!r}")


def run_in_progress(session_id: Any) -> ApiError:
    """409 ``run_in_progress``: the session has an active run."""
    return ApiError(409, "run_in_progress", f"session {session_id} has a run in progress")


def payload_too_large(limit: int) -> ApiError:
    """413 ``payload_too_large``: the body is over the limit (bytes)."""
    return ApiError(413, "payload_too_large", f"request body is larger than {limit} bytes")


#: The same JSON text as DRF's renderer, so every error reads alike.
COMPACT = {"separators": (",", ":"), "ensure_ascii": False}


def json_error(error: ApiError) -> JsonResponse:
    """A plain Django JSON answer for an :class:`ApiError` (outside DRF views)."""
    return JsonResponse(error.body(), status=error.status, json_dumps_params=COMPACT)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF exception handler: every failure becomes ``{"error", "message"}``."""
    if isinstance(exc, ApiError):
        return Response(exc.body(), status=exc.status)
    if isinstance(exc, drf_exceptions.ParseError):
        return Response({"error": "bad_request", "message": str(exc.detail)}, status=400)
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return Response({"error": "method_not_allowed", "message": str(exc.detail)}, status=405)
    if isinstance(exc, drf_exceptions.NotFound):
        return Response({"error": "not_found", "message": str(exc.detail)}, status=404)
    if isinstance(exc, drf_exceptions.UnsupportedMediaType | drf_exceptions.ValidationError):
        return Response({"error": "bad_request", "message": str(exc.detail)}, status=400)
    if isinstance(exc, drf_exceptions.APIException):
        return Response({"error": exc.default_code, "message": str(exc.detail)}, status=exc.status_code)
    log.exception("unexpected error", extra={"kind": "http.internal_error"})
    return Response({"error": "internal_error", "message": "internal server error"}, status=500)


def handler400(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Requests Django itself cannot read (e.g. a broken multipart body), or whose Host header is
    not an allowed host (``DJANGO_ALLOWED_HOSTS``), answer 400 ``bad_request``."""
    if isinstance(exception, DisallowedHost):
        return json_error(bad_request("the Host header names a host this server does not answer to"))
    return json_error(bad_request("the request could not be read"))


def handler404(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Unknown paths answer 404 ``not_found`` in the API's error shape."""
    return json_error(ApiError(404, "not_found", f"no route for {request.path}"))


def handler500(request: HttpRequest) -> JsonResponse:
    """Unexpected failures outside DRF answer 500 ``internal_error``."""
    return json_error(ApiError(500, "internal_error", "internal server error"))
