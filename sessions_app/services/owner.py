"""Writes only a session's owner makes: its parameters and its session token (docs/api.md §7.13, §7.14).

Like every other write they go through here (services write, selectors read), kept apart from
the other services because they are about who may change what rather than how a session
runs.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from agents_app.runtime import runtime_agent
from agentsite.errors import (
    ForbiddenParams,
    InvalidParams,
    RunInProgress,
    UnknownParams,
    UnknownSession,
)
from sessions_app.models import Session
from sessions_app.store import run_is_active, store


def session_params_put(*, session_id: uuid.UUID, params: dict[str, Any]) -> Session:
    """Set or clear session-scope parameter values (``PUT /v1/sessions/:id/params``, docs/api.md §7.13).

    ``params`` is merged over the stored values; ``null`` removes one. Names are checked against
    the agent's ``parameters`` before anything is stored. The change is a stored version (and a
    ``session.updated`` event); it starts no run.

    Args:
        session_id: the session (its visibility is checked by the caller).
        params: parameter name -> JSON value or ``None``.
    Returns:
        The session as stored.
    Raises:
        ApiError: 404 ``unknown_session`` / ``unknown_agent``; 422 ``unknown_params`` (names the
            agent does not declare); 403 ``forbidden_params`` (process-scope names); 422
            ``invalid_params`` (message-scope names, which only a request that runs can carry, and
            secrets, which this server does not hold yet); 409 ``run_in_progress``: the run's own
            stores are fenced by the version, so values change between runs only.
    """
    with transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        if session is None:
            raise UnknownSession(session_id)
        if not params:
            return session
        declared = {p.name: p for p in runtime_agent(session.agent_slug).loaded.spec.parameters}
        unknown = sorted(name for name in params if name not in declared)
        if unknown:
            raise UnknownParams(f"agent {session.agent_slug!r} declares no parameter {', '.join(unknown)}"
            )
        process = sorted(name for name in params if declared[name].scope == "process")
        if process:
            raise ForbiddenParams(f"process-scope parameters cannot be set per session: {', '.join(process)}"
            )
        message = sorted(name for name in params if declared[name].scope == "message")
        if message:
            raise InvalidParams(f"message-scope parameters go with a request that runs: {', '.join(message)}"
            )
        secret = sorted(name for name in params if declared[name].secret)
        if secret:
            raise InvalidParams(
                f"secret parameters are not kept by this server yet, so they cannot be set: {', '.join(secret)}"
            )
        if run_is_active(session):
            raise RunInProgress(session.pk)
        merged = dict(session.params or {})
        for name, value in params.items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        return store(session, session.document, params=merged)


def session_token_revoke(*, session_id: uuid.UUID) -> Session:
    """Forget the session token (``DELETE /v1/sessions/:id/token``, docs/api.md §7.14).

    Only the digest column changes: the conversation does not, so the version stays and a run in
    progress is not disturbed. Revoking a session that has no token is not an error.

    Raises:
        ApiError: 404 ``unknown_session``.
    """
    updated = Session.objects.filter(pk=session_id).update(session_token_sha256=None)
    if updated != 1:
        raise UnknownSession(session_id)
    return Session.objects.get(pk=session_id)
