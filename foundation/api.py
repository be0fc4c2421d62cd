"""What every API view shares: the viewset base, the error answers it documents, and helpers
that read requests (bodies are parsed by ``foundation.parsers``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from drf_spectacular.utils import OpenApiResponse
from rest_framework import viewsets
from rest_framework.request import Request

from foundation.errors import ApiError, BadRequest, ErrorSerializer
from foundation.permissions import AdminOwner, BearerAuthentication, SessionTokenScope, SessionVisible

#: Seconds a ``wait=true`` request waits by default, and at most (docs/api.md §4.2).
DEFAULT_WAIT_TIMEOUT = 120.0
MAX_WAIT_TIMEOUT = 600.0


def require_unicode(value: Any, what: str) -> None:
    """Refuse a JSON value holding a lone surrogate (it could be stored, but never sent again).

    Raises:
        ApiError: 400 ``bad_request``.
    """
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequest(f"{what} contains a lone surrogate (\\ud800-\\udfff), which is not Unicode text") from error
    except RecursionError as error:
        raise BadRequest(f"{what} is nested too deeply") from error


def require_name(value: str, what: str) -> str:
    """Refuse a name or identifier holding a NUL character (docs/api.md §1.6: text keeps them,
    names never do); return it.

    Raises:
        ApiError: 400 ``bad_request``.
    """
    if "\x00" in value:
        raise BadRequest(f"{what}: Null characters are not allowed.")
    return value


def json_object_body(request: Request) -> dict[str, Any]:
    """The request body as a JSON object; no body (empty, only whitespace, or JSON ``null``) is
    ``{}`` (docs/api.md §1.6).

    Raises:
        ApiError: 400 ``bad_request`` when the body is JSON but not an object.
    """
    data = request.data
    if data is None or data == {}:
        return {}
    if not isinstance(data, dict):
        raise BadRequest("request body must be a JSON object")
    return data


def parse_uuid(value: str, error: ApiError) -> uuid.UUID:
    """Parse a path UUID, raising ``error`` (e.g. ``unknown_session``) when malformed."""
    try:
        return uuid.UUID(str(value))
    except ValueError as exc:
        raise error from exc


def query_bool(request: Request, name: str, default: bool = False) -> bool:
    """A boolean query parameter: ``true``/``false``/``1``/``0``; a bare ``?name`` is true.

    Raises:
        ApiError: 400 ``bad_request`` for any other value.
    """
    if name not in request.query_params:
        return default
    value = request.query_params.get(name, "").strip().lower()
    if value in ("", "true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise BadRequest(f"query parameter {name!r} must be true or false, not {value!r}")


def wait_params(request: Request) -> tuple[bool, float]:
    """``(wait, timeout_seconds)`` from the query; timeout defaults to 120 s, clamped to 600 s.

    Raises:
        ApiError: 400 ``bad_request`` for a non-numeric or negative timeout.
    """
    wait = query_bool(request, "wait")
    raw = request.query_params.get("timeout")
    if raw is None or raw == "":
        return wait, DEFAULT_WAIT_TIMEOUT
    try:
        timeout = float(raw)
    except ValueError as exc:
        raise BadRequest(f"timeout must be a number of seconds, not {raw!r}") from exc
    if timeout < 0 or timeout != timeout:
        raise BadRequest("timeout must be a non-negative number of seconds")
    return wait, min(timeout, MAX_WAIT_TIMEOUT)


class ApiViewSet(viewsets.ViewSet):
    """The base of every viewset of ``/v1``: bearer tokens and the permission classes of
    ``foundation.permissions`` (each view says what they allow by its attributes)."""

    authentication_classes = [BearerAuthentication]
    permission_classes = [SessionTokenScope, SessionVisible, AdminOwner]


#: What any route of ``/v1`` may answer before its view runs: 400 (a NUL in the query), 401 (no
#: valid token, with authentication on), 403 ``forbidden_origin`` (a browser page from an origin
#: not allowed, without authentication), 413 (a body over the limit), and, from the HTTP server
#: itself, 414 (a request line over 16 KiB) and 431 (a request head over 16 KiB).
ANY_ROUTE_ERRORS = (400, 401, 403, 413, 414, 431)


def error_responses(*statuses: int) -> dict[int, OpenApiResponse]:
    """The error answers of an operation for the OpenAPI document, in the one error shape: its own
    ``statuses`` and :data:`ANY_ROUTE_ERRORS`."""
    return {status: OpenApiResponse(ErrorSerializer) for status in sorted({*statuses, *ANY_ROUTE_ERRORS})}
