"""Who may see which session, and whose a session token is (docs/api.md §10.3-10.5).

The platform identifies callers (``foundation.access``) but knows no session: it asks the
:class:`~foundation.access.SessionAccess` registered at start, which is :data:`RULES`, registered
by ``SessionsAppConfig.ready``. The session event streams, websockets and selectors call the
functions here directly.
"""

from __future__ import annotations

import uuid

from foundation.auth import Principal, session_token_matches
from sessions_app.models import Session


def session_owner(session_id: uuid.UUID) -> tuple[bool, str | None]:
    """``(exists, owner)``: a session's owner is its root's owner (docs/api.md §10.3).

    Sub-sessions are created with their root's owner; the walk up the parents still answers for
    a child stored without one.
    """
    row = Session.objects.filter(pk=session_id).values_list("owner", "parent_id").first()
    if row is None:
        return False, None
    owner, parent_id = row
    seen = {session_id}
    while parent_id is not None and parent_id not in seen:
        seen.add(parent_id)
        parent = Session.objects.filter(pk=parent_id).values_list("owner", "parent_id").first()
        if parent is None:
            break
        owner, parent_id = parent
    return True, owner


def can_see(principal: Principal, session_id: uuid.UUID) -> bool:
    """Whether the caller may see the session: it exists and (with authentication) is theirs.

    A session-token holder sees only its own session.
    """
    exists, owner = session_owner(session_id)
    if not exists:
        return False
    if principal.kind == "anonymous":
        return True
    if principal.is_session_token:
        return principal.session_id == str(session_id)
    return owner == principal.owner


def session_token_principal(token: str, session_id: str | None) -> Principal | None:
    """The principal of session token ``token`` presented on session ``session_id`` (as written in
    the path), or ``None`` when it is not that session's token (docs/api.md §10.5)."""
    try:
        sid = uuid.UUID(session_id) if session_id else None
    except ValueError:
        return None
    if sid is None:
        return None
    row = Session.objects.filter(pk=sid).values_list("session_token_sha256", flat=True).first()
    if not session_token_matches(token, row):
        return None
    _, owner = session_owner(sid)
    return Principal(kind="session", owner=owner, session_id=str(sid))


class SessionRules:
    """The sessions app's answers to the platform's :class:`~foundation.access.SessionAccess`."""

    def token_principal(self, token: str, session_id: str | None) -> Principal | None:
        """See :func:`session_token_principal`."""
        return session_token_principal(token, session_id)

    def can_see(self, principal: Principal, session_id: uuid.UUID) -> bool:
        """See :func:`can_see`."""
        return can_see(principal, session_id)


#: The instance ``SessionsAppConfig.ready`` registers.
RULES = SessionRules()
