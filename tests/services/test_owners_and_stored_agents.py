"""Owners and stored agents in process: who a session belongs to, and sessions of stored agents."""

from __future__ import annotations

import uuid

import pytest

from agents_app.models import StoredAgentsGeneration
from foundation.auth import token_sha256
from foundation.errors import UnknownSession
from sessions_app.models import Session
from sessions_app.services import sessions
from sessions_app.services.owner import session_token_revoke
from tests.factories import OwnerFactory, SessionFactory, StoredAgentFactory
from tests.services.conftest import RecordingWorker

pytestmark = pytest.mark.django_db


def test_a_sub_session_belongs_to_its_parents_owner_whoever_creates_it() -> None:
    alice, bob = OwnerFactory(), OwnerFactory()
    assert alice.name != bob.name and alice.principal().owner == alice.name
    parent = SessionFactory(owner=alice.name)
    child = sessions.session_create(
        agent_slug="single", prompt="hi", media=None, run="none", parent_id=parent.pk, owner=bob.name
    )
    assert Session.objects.get(pk=child.pk).owner == alice.name


def test_revoking_a_session_token_keeps_the_conversations_version() -> None:
    owner = OwnerFactory()
    session = SessionFactory(owner=owner.name, session_token_sha256=token_sha256("session-secret"))
    revoked = session_token_revoke(session_id=session.pk)
    assert revoked.session_token_sha256 is None and revoked.version == session.version
    with pytest.raises(UnknownSession):
        session_token_revoke(session_id=uuid.uuid4())


def test_a_stored_agent_takes_sessions_like_a_file_agent(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    stored = StoredAgentFactory()
    assert stored.version == 1
    assert StoredAgentsGeneration.objects.get(pk=1).generation == 1
    with django_capture_on_commit_callbacks(execute=True):
        session = sessions.session_create(agent_slug=stored.slug, prompt="hello", media=None, run="until_blocked")
    assert session.agent_slug == stored.slug
    assert worker.runs() == [[str(session.pk), str(session.run_id)]]


def test_storing_an_agent_again_counts_its_versions() -> None:
    first = StoredAgentFactory(slug="notes")
    again = StoredAgentFactory(slug="notes", contents={**first.contents, "announce": "second version"})
    assert (first.version, again.version) == (1, 2)
    assert again.contents["announce"] == "second version"
    assert StoredAgentsGeneration.objects.get(pk=1).generation == 2
