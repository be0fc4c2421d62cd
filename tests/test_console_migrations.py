"""The console's migrations on a database that already holds data: stored agents get their current
version kept, and deferred calls their tool's name."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("agents_app", "0002_long_identifiers"), ("sessions_app", "0006_started_calls")]
AFTER = [("agents_app", "0003_console"), ("sessions_app", "0007_console")]


@pytest.mark.django_db(transaction=True)
def test_existing_agents_and_calls_are_carried_over() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    apps = executor.loader.project_state(BEFORE).apps
    now = datetime(2026, 11, 30, tzinfo=UTC)
    apps.get_model("agents_app", "StoredAgent").objects.create(
        slug="old", contents={"announce": "stored long ago"}, files={"tools/a": "x"}, helpers=[], version=4,
        created_at=now, updated_at=now, updated_by="root",
    )
    session = apps.get_model("sessions_app", "Session").objects.create(
        agent_slug="old", created_at=now, updated_at=now, header_json="{}"
    )
    token = uuid.uuid4()
    apps.get_model("sessions_app", "Continuation").objects.create(
        token=token, session=session, tool_call_id="c1", call={"id": "c1", "function": {"name": "ask_human"}},
        disposition={"tag": "defer"}, created_at=now,
    )

    executor = MigrationExecutor(connection)
    executor.migrate(AFTER)
    apps = executor.loader.project_state(AFTER).apps
    [kept] = apps.get_model("agents_app", "StoredAgentVersion").objects.all()
    assert (kept.slug, kept.version, kept.contents, kept.files) == ("old", 4, {"announce": "stored long ago"},
                                                                    {"tools/a": "x"})
    assert (kept.changes, kept.created_by, kept.created_at) == (["created"], "root", now)
    assert apps.get_model("sessions_app", "Continuation").objects.get(token=token).tool == "ask_human"


@pytest.fixture(autouse=True)
def _back_to_the_latest_schema():
    """Leave the test database at the newest migrations, whatever this module migrated it to:
    the tests that run after it in the same process need every table."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
