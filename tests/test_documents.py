"""Session files written by agents-exe load and dump unchanged, and the engine can read them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from sessions_app import document as doc
from sessions_app.models import Session
from sessions_app.services import store
from tests.harness import FIXTURES

# a missing fixtures folder must fail the tests below, not skip them
SESSION_FILES = sorted((FIXTURES / "sessions").glob("*.json")) or [FIXTURES / "sessions" / "(missing)"]


def test_the_fixtures_are_there() -> None:
    assert len(SESSION_FILES) >= 5


@pytest.mark.django_db
@pytest.mark.parametrize("path", SESSION_FILES, ids=lambda p: p.name)
def test_a_session_file_round_trips(path: Path) -> None:
    original = json.loads(path.read_text())
    now = timezone.now()
    session = Session.objects.create(
        id=uuid.UUID(original["sessionId"]),
        agent_slug="imported",
        status=doc.status_of(original),
        version=1,
        created_at=now,
        updated_at=now,
        document_json=path.read_text(),
    )
    loaded = Session.objects.get(pk=session.pk).document
    assert loaded == original
    # storing a new version of it keeps it equal too
    store(Session.objects.get(pk=session.pk), loaded)
    assert Session.objects.get(pk=session.pk).document == original
    # and the API hands it back unchanged
    answer = APIClient().get(f"/v1/sessions/{session.pk}")
    assert answer.status_code == 200
    assert answer.json()["session"] == original
    # the engine reads these documents: every tool call answered, head first
    messages = doc.openai_messages(loaded, "system")
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == answered
    assert doc.status_of(loaded) == "idle"
    assert doc.pending_calls(loaded) == []
