"""For your own Celery workers: answer deferred calls the server publishes to a queue (docs/guide-deferred.md §1).

A ``defer`` disposition with a ``queue`` makes the server publish the task
``agents.deferred_call`` to that queue, with the call as keyword arguments (:class:`DeferredCall`).
Register a handler with :func:`deferred_call_task`; what it returns completes the call's
continuation, and an exception it raises becomes an error result the model reads. Or answer a
call yourself, from anywhere, with :func:`complete_continuation`.

This module imports neither Django nor the server's models until it completes a continuation
through the database, so a worker that only has HTTP access to the server needs no database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

#: The task name the server publishes (``sessions_app.dispatch.DEFERRED_CALL_TASK``).
DEFERRED_CALL_TASK = "agents.deferred_call"
#: Seconds an HTTP completion may take.
HTTP_TIMEOUT = 30.0


class ContinuationError(Exception):
    """The server refused a completion; ``code`` is its error code (``unknown_token``, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


@dataclass(frozen=True)
class DeferredCall:
    """One deferred call, as published.

    Attributes:
        token: the continuation token (a UUID string) that completes it.
        session_id: the session that made the call.
        agent: that session's agent slug.
        tool_call_id: the model's id for the call (``call_...``).
        tool: the tool's wire name.
        arguments: the model's arguments (an object when they were JSON, else the raw text).
        reason: the ``reason`` of the disposition, if any.
    """

    token: str
    session_id: str
    agent: str
    tool_call_id: str
    tool: str
    arguments: Any
    reason: str | None = None


def complete_continuation(
    token: str,
    result: Any,
    *,
    server_url: str | None = None,
    auth_token: str | None = None,
    resume: bool = True,
) -> None:
    """Complete a deferred call with ``result`` and (``resume``) let its session go on.

    ``result`` is a tool result as ``POST /v1/continuations/:token`` takes it: a string (text) or
    ``{"type": "text" | "json" | "media" | "mixed", ...}``. Over HTTP when ``server_url`` (or
    the environment's ``AGENTS_SERVER_URL``) is given, with ``auth_token`` (or
    ``AGENTS_SERVER_TOKEN``) as bearer token; otherwise straight through the server's database,
    with its settings (``DATABASE_URL``, ``REDIS_URL``). A call completed already counts as done,
    so a task delivered twice is harmless.

    Raises:
        ContinuationError: the server refused the result (``unknown_token``, ``bad_request``, ...).
        httpx.HTTPError: the server could not be reached.
    """
    url = server_url or os.environ.get("AGENTS_SERVER_URL")
    if url:
        _complete_over_http(url, token, result, auth_token or os.environ.get("AGENTS_SERVER_TOKEN"), resume)
    else:
        _complete_in_database(token, result, resume)


def _complete_over_http(url: str, token: str, result: Any, auth_token: str | None, resume: bool) -> None:
    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else {}
    answer = httpx.post(
        f"{url.rstrip('/')}/v1/continuations/{token}",
        json={"result": result, "resume": resume},
        headers=headers,
        timeout=HTTP_TIMEOUT,
    )
    if answer.is_success:
        return
    try:
        body = answer.json()
        code, message = str(body["error"]), str(body.get("message", ""))
    except (ValueError, KeyError, TypeError):
        code, message = f"http_{answer.status_code}", answer.text[:200]
    if code != "token_already_completed":
        raise ContinuationError(code, message)


def _complete_in_database(token: str, result: Any, resume: bool) -> None:
    import django
    from django.conf import settings

    if not settings.configured:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")
        # the worker's own logging (Celery's) stays as it is: the server's would replace it
        settings.LOGGING_CONFIG = None
    django.setup()
    from foundation.errors import ApiError
    from sessions_app.services.continuations import continuation_complete

    try:
        key = uuid.UUID(token)
    except ValueError:
        raise ContinuationError("unknown_token", f"no continuation token {token}") from None
    try:
        continuation_complete(token=key, result=result, resume=resume)
    except ApiError as error:
        if error.code != "token_already_completed":
            raise ContinuationError(str(error.code), error.message) from None


def error_result(error: BaseException) -> str:
    """The text the model reads for a handler that raised ``error``."""
    return f"Error: {type(error).__name__}: {error}"


def deferred_call_task(app: Any, **task_options: Any) -> Callable[[Callable[[DeferredCall], Any]], Any]:
    """Register a handler as this Celery ``app``'s ``agents.deferred_call`` task.

    Usage::

        app = Celery("billing", broker=os.environ["REDIS_URL"])

        @deferred_call_task(app)
        def answer(call: DeferredCall) -> Any:
            return {"type": "json", "content": {"charged": call.arguments["amount"]}}

    and run ``celery -A <module> worker -Q <queue>``. The handler's return value completes the
    call (:func:`complete_continuation`); if it raises, the call is completed with
    ``Error: <type>: <message>`` and the exception goes on to Celery (the task fails).

    Args:
        app: a ``celery.Celery`` application connected to the server's broker.
        **task_options: more options for ``app.task`` (``acks_late``, ``max_retries``, ...).
    Returns:
        A decorator that returns the registered task.
    """

    def register(handler: Callable[[DeferredCall], Any]) -> Any:
        @app.task(name=DEFERRED_CALL_TASK, **task_options)
        def deferred_call(**payload: Any) -> None:
            fields: dict[str, Any] = {name: payload.get(name) for name in DeferredCall.__dataclass_fields__}
            call = DeferredCall(**fields)
            try:
                result = handler(call)
            except Exception as error:
                complete_continuation(call.token, error_result(error))
                raise
            complete_continuation(call.token, result)

        return deferred_call

    return register
