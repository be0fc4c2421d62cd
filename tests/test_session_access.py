"""The platform's session port (``foundation.access.SessionAccess``): the sessions app registers its
rules at start, and without them no session token is valid and no session visible."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.utils import timezone

from foundation import access
from foundation.auth import ANONYMOUS, AuthConfig, Principal, new_session_token
from sessions_app.access import RULES
from sessions_app.models import Session


@pytest.fixture
def token_session() -> Iterator[tuple[Session, str]]:
    now = timezone.now()
    token, digest = new_session_token()
    session = Session.objects.create(
        agent_slug="asker", owner="ada", status="idle", created_at=now, updated_at=now, header_json="{}",
        session_token_sha256=digest,
    )
    yield session, token
    access.register_session_access(RULES)


@pytest.mark.django_db
def test_the_sessions_app_registers_its_rules_at_start(token_session: tuple[Session, str]) -> None:
    session, token = token_session
    config = AuthConfig(enabled=True)
    principal = access.authenticate(config, token, str(session.pk))
    assert principal == Principal(kind="session", owner="ada", session_id=str(session.pk))
    assert access.authenticate(config, token, None) is None
    assert access.can_see(ANONYMOUS, session.pk)
    assert access.can_see(principal, session.pk)
    assert not access.can_see(Principal(kind="owner", owner="bob"), session.pk)


@pytest.mark.django_db
def test_without_registered_rules_no_session_token_is_valid_and_no_session_visible(
    token_session: tuple[Session, str],
) -> None:
    session, token = token_session
    access.register_session_access(None)
    assert access.authenticate(AuthConfig(enabled=True), token, str(session.pk)) is None
    assert not access.can_see(ANONYMOUS, session.pk)
