"""The error catalogue: every wire code, the error classes services raise, and the one answer shape.

Every failure answers ``{"error": code, "message": text}`` (docs/api.md §2); clients decode
the code string into their own error type, so the strings of :class:`ErrorCode` never change.
Services raise the classes below, which carry their code and HTTP status; only this module turns
them into answers: the DRF exception handler for the API, :func:`json_error` for plain Django
views, and the ``handler*`` functions for what Django answers itself.
"""

from __future__ import annotations

import logging
from enum import StrEnum
from typing import Any, ClassVar

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.response import Response

log = logging.getLogger("foundation.errors")


class ErrorCode(StrEnum):
    """Every code an answer of this server can carry."""

    BAD_REQUEST = "bad_request"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    FORBIDDEN_ORIGIN = "forbidden_origin"
    FORBIDDEN_PARAMS = "forbidden_params"
    NOT_FOUND = "not_found"
    UNKNOWN_SESSION = "unknown_session"
    UNKNOWN_TOKEN = "unknown_token"  # noqa: S105 - a name or a code, not a credential
    UNKNOWN_AGENT = "unknown_agent"
    UNKNOWN_TURN = "unknown_turn"
    UNREADABLE_SESSION = "unreadable_session"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    RUN_IN_PROGRESS = "run_in_progress"
    NO_ACTIVE_RUN = "no_active_run"
    TOKEN_ALREADY_COMPLETED = "token_already_completed"  # noqa: S105 - a name or a code, not a credential
    CONFLICT = "conflict"
    AGENT_DEFINED_BY_FILE = "agent_defined_by_file"
    AGENT_IN_USE = "agent_in_use"
    REQUEST_TIMEOUT = "request_timeout"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    URI_TOO_LONG = "uri_too_long"
    HEADERS_TOO_LARGE = "headers_too_large"
    UNKNOWN_PARAMS = "unknown_params"
    INVALID_PARAMS = "invalid_params"
    PARAMS_REQUIRED = "params_required"
    AGENT_USES_FILES = "agent_uses_files"
    AGENT_FAILED_TO_LOAD = "agent_failed_to_load"
    AGENT_INVALID_PATHS = "agent_invalid_paths"
    AGENT_RUNS_COMMANDS = "agent_runs_commands"
    UNKNOWN_HELPER = "unknown_helper"
    HELPER_CYCLE = "helper_cycle"
    MAILBOX_FULL = "mailbox_full"
    INVALID_IDEMPOTENCY_KEY = "invalid_idempotency_key"
    IDEMPOTENCY_KEY_IN_PROGRESS = "idempotency_key_in_progress"
    IDEMPOTENCY_KEY_REUSED = "idempotency_key_reused"
    UNKNOWN_WEBHOOK = "unknown_webhook"
    UNKNOWN_DELIVERY = "unknown_delivery"
    WEBHOOK_URL_REFUSED = "webhook_url_refused"
    UNKNOWN_SCHEDULE = "unknown_schedule"
    INTERNAL_ERROR = "internal_error"


class ApiError(Exception):
    """An error a client is told about: a wire code, an HTTP status and one sentence.

    Subclasses set ``code``, ``status`` and ``template``; they are built from the template's
    arguments, e.g. ``UnknownSession(session_id)`` says ``no session <id>``. Without arguments
    (or with an empty message) the message is ``default_message``, else the code in words.
    """

    code: ClassVar[ErrorCode] = ErrorCode.INTERNAL_ERROR
    status: ClassVar[int] = 500
    template: ClassVar[str] = "{}"
    default_message: ClassVar[str] = ""

    def __init__(self, *args: Any) -> None:
        message = self.template.format(*args) if args else ""
        self.message = message or self.default_message or str(self.code).replace("_", " ")
        super().__init__(self.message)

    @classmethod
    def _worded(cls, message: str) -> Any:
        """An error of this class saying ``message`` as it is, past the class's template: for a
        second wording of one code (one class per code, docs/api.md §2)."""
        error = cls()
        error.message = message
        error.args = (message,)
        return error

    def body(self) -> dict[str, str]:
        """The JSON body of the answer."""
        return {"error": str(self.code), "message": self.message}


class BadRequest(ApiError):
    """400: a malformed body or query parameter; the message says which."""

    code, status = ErrorCode.BAD_REQUEST, 400


class Unauthorized(ApiError):
    """401: a missing or unknown token (the answer carries ``WWW-Authenticate: Bearer``)."""

    code, status = ErrorCode.UNAUTHORIZED, 401
    default_message = "a valid bearer token is required"


class Forbidden(ApiError):
    """403: the caller is known but may not do this."""

    code, status = ErrorCode.FORBIDDEN, 403


class ForbiddenOrigin(ApiError):
    """403: a browser page from an origin this server does not trust; built from the origin."""

    code, status, template = ErrorCode.FORBIDDEN_ORIGIN, 403, "requests from origin {!r} are not allowed"


class ForbiddenParams(ApiError):
    """403: parameters this caller may not set."""

    code, status = ErrorCode.FORBIDDEN_PARAMS, 403


class NotFound(ApiError):
    """404: no route; built from the path. :meth:`agent_version` is the other thing not found."""

    code, status, template = ErrorCode.NOT_FOUND, 404, "no route for {}"

    @classmethod
    def agent_version(cls, slug: str, version: int) -> NotFound:
        """A stored agent has no kept version ``version`` (the admin's restore)."""
        return cls._worded(f"agent {slug!r} has no version {version}")


class UnknownSession(ApiError):
    """404: a session that is missing, malformed or not visible to the caller; built from its id."""

    code, status, template = ErrorCode.UNKNOWN_SESSION, 404, "no session {}"


class UnknownToken(ApiError):
    """404: a continuation token that is missing, malformed or not visible; built from the token."""

    code, status, template = ErrorCode.UNKNOWN_TOKEN, 404, "no continuation token {}"


class UnknownAgent(ApiError):
    """404: no agent with that slug is loaded; built from the slug."""

    code, status, template = ErrorCode.UNKNOWN_AGENT, 404, "no agent {!r}"


class AgentRunsCommands(UnknownAgent):
    """400: a stored agent names an MCP ``executable``, a ``Command`` or ``EnvVar`` source, or a
    ``${VAR}`` reference, and the operator has not allowed them (docs/agents.md §9); the message
    names each field path. Raised when storing, and when a version stored before the rule is
    looked up to run; a kind of :class:`UnknownAgent`, so what handles a gone agent (recovery, a
    continuation) handles one that may not run the same way."""

    code, status, template = ErrorCode.AGENT_RUNS_COMMANDS, 400, "{}"


class UnknownTurn(ApiError):
    """404: a fork's ``at_turn`` out of range; built from the session id, the turn and the count."""

    code, status, template = ErrorCode.UNKNOWN_TURN, 404, "session {} has no turn {} (it has {})"


class UnreadableSession(ApiError):
    """422: a stored session document this server cannot read; built from the session id and what
    is wrong with it (docs/sessions.md §1). Only that session is concerned."""

    code, status, template = ErrorCode.UNREADABLE_SESSION, 422, "session {} cannot be read: {}"


class MethodNotAllowed(ApiError):
    """405: the path exists, the method does not."""

    code, status = ErrorCode.METHOD_NOT_ALLOWED, 405


class RunInProgress(ApiError):
    """409: the session (or one of its tree) has an active run; built from the session id."""

    code, status, template = ErrorCode.RUN_IN_PROGRESS, 409, "session {} has a run in progress"


class NoActiveRun(ApiError):
    """409: cancel without a run; built from the session id."""

    code, status, template = ErrorCode.NO_ACTIVE_RUN, 409, "session {} has no active run"


class Conflict(ApiError):
    """409: what the request would store exists already (an imported session's id); the message
    says what."""

    code, status = ErrorCode.CONFLICT, 409


class TokenAlreadyCompleted(ApiError):
    """409: a continuation that was already completed; built from the token."""

    code, status, template = ErrorCode.TOKEN_ALREADY_COMPLETED, 409, "continuation {} was already completed"


class AgentDefinedByFile(ApiError):
    """409: an agent file has that slug (files always win); built from the slug."""

    code, status, template = ErrorCode.AGENT_DEFINED_BY_FILE, 409, "agent {!r} is defined by an agent file"


class AgentInUse(ApiError):
    """409: another stored agent names this one as a helper; built from the slug and the dependents."""

    code, status, template = ErrorCode.AGENT_IN_USE, 409, "agent {!r} is a helper of {}"


class RequestTimeout(ApiError):
    """408: the request's body did not all arrive in time; answered by the HTTP server
    (``foundation.http_limits``), which closes the connection; built from the limit."""

    code, status, template = ErrorCode.REQUEST_TIMEOUT, 408, "the request body did not arrive within {}"


class PayloadTooLarge(ApiError):
    """413: the body is over the limit; built from the limit in bytes. :meth:`attachment` is the
    other thing too large."""

    code, status, template = ErrorCode.PAYLOAD_TOO_LARGE, 413, "request body is larger than {} bytes"

    @classmethod
    def attachment(cls, name: str, size: int, limit: int) -> PayloadTooLarge:
        """One attachment (a media item) is over ``AGENTS_MAX_ATTACHMENT_BYTES`` once decoded;
        ``name`` as it is to be shown, ``size`` and ``limit`` in bytes."""
        return cls._worded(f"attachment {name} is {size} bytes, over the limit of {limit} bytes")


class UriTooLong(ApiError):
    """414: a request line (its URL) over the limit; built from the limit. Answered by the HTTP
    server itself (``foundation.http_limits``), which then closes the connection."""

    code, status, template = ErrorCode.URI_TOO_LONG, 414, "the request line is longer than {}"


class HeadersTooLarge(ApiError):
    """431: a request head (request line and headers) over the limit; built from the limit.
    Answered by the HTTP server itself (``foundation.http_limits``), which closes the connection."""

    code, status, template = ErrorCode.HEADERS_TOO_LARGE, 431, "the request headers are larger than {}"


class UnknownParams(ApiError):
    """422: parameter names the agent does not declare."""

    code, status = ErrorCode.UNKNOWN_PARAMS, 422


class InvalidParams(ApiError):
    """422: parameter values that cannot be taken here."""

    code, status = ErrorCode.INVALID_PARAMS, 422


class ParamsRequired(ApiError):
    """422: required parameters have no value; built from their names."""

    code, status, template = ErrorCode.PARAMS_REQUIRED, 422, "parameters required: {}"


class AgentUsesFiles(ApiError):
    """400: a stored agent names something only an agent file may use."""

    code, status = ErrorCode.AGENT_USES_FILES, 400


class AgentInvalidPaths(ApiError):
    """400: a stored agent's path is absolute, climbs out, or is too deep or too long."""

    code, status = ErrorCode.AGENT_INVALID_PATHS, 400


class AgentFailedToLoad(ApiError):
    """400: a stored agent does not load; the message lists the loader's problems."""

    code, status = ErrorCode.AGENT_FAILED_TO_LOAD, 400
    default_message = "the agent failed to load"


class UnknownHelper(ApiError):
    """400: an ``extraAgents`` slug that is not a stored agent."""

    code, status = ErrorCode.UNKNOWN_HELPER, 400


class HelperCycle(ApiError):
    """400: stored agents whose helpers lead back to themselves; built from the cycle's text."""

    code, status, template = ErrorCode.HELPER_CYCLE, 400, "helpers would form a cycle: {}"


class MailboxFull(ApiError):
    """429: the session holds as much unread mail as its agent's ``mailboxMaxUnread``; built from
    the session id and the limit. Controls and tool-call results are never refused."""

    code, status = ErrorCode.MAILBOX_FULL, 429
    template = "session {} already holds {} unread messages (mailboxMaxUnread)"


class InvalidIdempotencyKey(ApiError):
    """400: an ``Idempotency-Key`` header that is empty, too long or holds characters outside
    the allowed ones (docs/api.md §1.7); built from what is wrong with it."""

    code, status, template = ErrorCode.INVALID_IDEMPOTENCY_KEY, 400, "Idempotency-Key {}"


class IdempotencyKeyInProgress(ApiError):
    """409: another request with this ``Idempotency-Key`` is still being answered (docs/api.md §1.7)."""

    code, status = ErrorCode.IDEMPOTENCY_KEY_IN_PROGRESS, 409
    default_message = "a request with this Idempotency-Key is still in progress; retry later"


class IdempotencyKeyReused(ApiError):
    """422: an ``Idempotency-Key`` already used for another request (another method, path or
    body) (docs/api.md §1.7)."""

    code, status = ErrorCode.IDEMPOTENCY_KEY_REUSED, 422
    default_message = "this Idempotency-Key was used for another request (another method, path or body)"


class UnknownWebhook(ApiError):
    """404: a webhook subscription that is missing, malformed or someone else's; built from its id
    (docs/webhooks.md §6)."""

    code, status, template = ErrorCode.UNKNOWN_WEBHOOK, 404, "no webhook {}"


class UnknownDelivery(ApiError):
    """404: a delivery that is missing or not of that subscription; built from its id (docs/webhooks.md §6)."""

    code, status, template = ErrorCode.UNKNOWN_DELIVERY, 404, "no delivery {}"


class UnknownSchedule(ApiError):
    """404: a schedule that is missing, malformed or someone else's; built from its id (docs/webhooks.md §9)."""

    code, status, template = ErrorCode.UNKNOWN_SCHEDULE, 404, "no schedule {}"


class WebhookUrlRefused(ApiError):
    """400: a webhook URL this server will not send to (not http or https, no host, or an address
    the SSRF rule refuses); the message says why (docs/webhooks.md §7)."""

    code, status, template = ErrorCode.WEBHOOK_URL_REFUSED, 400, "webhook URL refused: {}"


class InternalError(ApiError):
    """500: anything unexpected (the details go to the log, never to the client)."""

    default_message = "internal server error"


def error_classes() -> list[type[ApiError]]:
    """Every concrete error class: each subclass of :class:`ApiError`, theirs included
    (:class:`AgentRunsCommands` is an ``UnknownAgent``); the base itself is abstract."""

    def below(cls: type[ApiError]) -> list[type[ApiError]]:
        return [sub for direct in cls.__subclasses__() for sub in (direct, *below(direct))]

    return below(ApiError)


def _catalogue() -> dict[ErrorCode, type[ApiError]]:
    """Every error class by its code; one class per code (a second wording of a code is a
    classmethod of its class, e.g. :meth:`PayloadTooLarge.attachment`).

    Raises:
        TypeError: two classes declare one code (the catalogue would keep only one of them).
    """
    catalogue: dict[ErrorCode, type[ApiError]] = {}
    for cls in error_classes():
        if cls.code in catalogue:
            raise TypeError(f"{cls.__name__} and {catalogue[cls.code].__name__} both declare the code {cls.code}")
        catalogue[cls.code] = cls
    return catalogue


#: Every error class, by code: the catalogue the OpenAPI document and the tests read.
CATALOGUE: dict[ErrorCode, type[ApiError]] = _catalogue()


class ErrorSerializer(serializers.Serializer):
    """Every error answer: ``{"error": code, "message": text}`` (for the OpenAPI document)."""

    error = serializers.ChoiceField(choices=[code.value for code in ErrorCode])
    message = serializers.CharField()


#: The same JSON text as DRF's renderer, so every error reads alike.
COMPACT = {"separators": (",", ":"), "ensure_ascii": False}


def json_error(error: ApiError) -> JsonResponse:
    """A plain Django JSON answer for an :class:`ApiError` (outside DRF views)."""
    response = JsonResponse(error.body(), status=error.status, json_dumps_params=COMPACT)
    if error.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    return response


def _from_drf(exc: drf_exceptions.APIException) -> ApiError:
    """The catalogue's error for one of DRF's own exceptions."""
    detail = str(exc.detail)
    malformed = drf_exceptions.ParseError | drf_exceptions.UnsupportedMediaType | drf_exceptions.ValidationError
    if isinstance(exc, malformed):
        return BadRequest(detail)
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        return MethodNotAllowed(detail)
    if isinstance(exc, drf_exceptions.NotFound):
        return NotFound(detail)
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        return Unauthorized(detail)
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return Forbidden(detail)
    # DRF's other exceptions (throttling and the like) are not used here: a client error stays one
    return BadRequest(detail) if exc.status_code < 500 else InternalError()


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF exception handler: every failure becomes ``{"error", "message"}``."""
    if isinstance(exc, drf_exceptions.APIException):
        exc = _from_drf(exc)
    if not isinstance(exc, ApiError):
        log.exception("unexpected error", extra={"kind": "http.internal_error"})
        exc = InternalError()
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return Response(exc.body(), status=exc.status, headers=headers)


def handler400(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Requests Django itself cannot read (e.g. a broken multipart body), or whose Host header is
    not an allowed host (``DJANGO_ALLOWED_HOSTS``), answer 400 ``bad_request``."""
    if isinstance(exception, DisallowedHost):
        return json_error(BadRequest("the Host header names a host this server does not answer to"))
    return json_error(BadRequest("the request could not be read"))


def handler500(request: HttpRequest) -> JsonResponse:
    """Unexpected failures outside DRF answer 500 ``internal_error``."""
    return json_error(InternalError())
