"""Event ``seq`` given at commit on PostgreSQL (docs/api.md §9.7).

An event is inserted with a provisional negative ``seq`` from ``sessions_app_event_pending`` (no
lock), and ``sessions_app_number_events`` gives the transaction's events their final numbers
under the fleet-wide advisory lock just before commit. SQLite keeps numbering at insert: it runs
one writer at a time.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

_CREATE = """
CREATE SEQUENCE IF NOT EXISTS sessions_app_event_pending;
CREATE OR REPLACE FUNCTION sessions_app_number_events(lock_key bigint)
RETURNS TABLE (provisional bigint, final bigint) LANGUAGE plpgsql AS $$
DECLARE
    numbers regclass := pg_get_serial_sequence('sessions_app_event', 'seq')::regclass;
BEGIN
    -- the only caller of nextval on the final sequence, and always under this lock: so numbers
    -- are handed out in commit order
    PERFORM pg_advisory_xact_lock(lock_key);
    -- the negative rows this transaction sees are its own (others' are not committed, and
    -- committed rows are numbered); the most negative is the newest
    RETURN QUERY
    WITH mine AS MATERIALIZED (
        SELECT e.seq FROM sessions_app_event e WHERE e.seq < 0 ORDER BY e.seq DESC
    ), numbered AS MATERIALIZED (
        SELECT mine.seq AS provisional, nextval(numbers) AS final FROM mine
    )
    UPDATE sessions_app_event e SET seq = numbered.final FROM numbered
    WHERE e.seq = numbered.provisional
    RETURNING numbered.provisional, numbered.final;
END
$$;
"""

_DROP = """
DROP FUNCTION IF EXISTS sessions_app_number_events(bigint);
DROP SEQUENCE IF EXISTS sessions_app_event_pending;
"""


def _create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_CREATE)


def _drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_DROP)


class Migration(migrations.Migration):
    dependencies = [
        ("sessions_app", "0011_idempotency_keys"),
    ]

    operations = [migrations.RunPython(_create, _drop)]
