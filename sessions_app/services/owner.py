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
from foundation.errors import RunInProgress, UnknownSession
from sessions_app.models import Session
from sessions_app.services import params as values
from sessions_app.store import run_is_active, store


def session_params_put(*, session_id: uuid.UUID, params: dict[str, Any]) -> Session:
    """Set or clear session-scope parameter values (``PUT /v1/sessions/:id/params``, docs/api.md §7.13).

    ``params`` is merged over the session's values; ``null`` removes one. Checked as
    docs/api.md §7.15 says before anything is stored: non-secret values are stored as a new version
    (and a ``session.updated`` event), secret ones held outside the database once it commits. It
    starts no run, so message-scope values are refused.

    Args:
        session_id: the session (its visibility, and that the caller owns it, are the view's).
        params: parameter name -> JSON value or ``None``.
    Returns:
        The session as stored.
    Raises:
        ApiError: 404 ``unknown_session`` / ``unknown_agent``; 422 ``unknown_params``; 403
            ``forbidden_params`` (process-scope or pinned names); 422 ``invalid_params``
            (message-scope names, a secret that is not a string); 409 ``run_in_progress``: the
            run's own stores are fenced by the version, so values change between runs only.
    """
    with transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=session_id).first()
        if session is None:
            raise UnknownSession(session_id)
        if not params:
            return session
        agent = runtime_agent(session.agent_slug)
        checked = values.check_request(agent, params)
        checked.refuse_message_scope()
        if run_is_active(session):
            raise RunInProgress(session.pk)
        values.hold_on_commit(session.pk, secrets=values.secret_updates(agent, checked.session))
        return store(session, session.document, params=values.stored_params(agent, session.params, checked.session))


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
