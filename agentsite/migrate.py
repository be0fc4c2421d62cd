"""Migrations at startup, run by one process at a time (docs/running.md §4).

``agents serve`` and ``agents worker`` both migrate before they start. Started at the same moment
on a fresh database, two of them would both find a table missing and both create it; the second
fails with ``relation ... already exists``. So each takes a lock first: on PostgreSQL a
session-level advisory lock (every process on every machine shares it through the database), on
SQLite an exclusive ``flock`` on the database's directory (only processes of one machine can
share a SQLite file). The first process migrates; the others wait for the lock, then find nothing left to
do.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.core.management import call_command
from django.db import connection

log = logging.getLogger("agentsite.migrate")

#: The advisory lock of migrations: any constant, the same in every process (not the events' one).
MIGRATION_LOCK_KEY = 0x6167656E74736D67


@contextmanager
def _migration_lock() -> Iterator[None]:
    """Hold this database's migration lock (blocks while another process holds it)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
        return
    name = str(connection.settings_dict["NAME"])
    if connection.vendor != "sqlite" or name == ":memory:" or name.startswith("file:"):
        yield
        return
    # The database's directory is locked, not the file: closing a descriptor of the database
    # file would drop the POSIX locks SQLite holds on it in this process.
    directory = os.open(Path(name).resolve().parent, os.O_RDONLY)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        yield
    finally:
        os.close(directory)


def migrate() -> None:
    """Apply the migrations once, under the database's migration lock, and log how long it took."""
    started = time.monotonic()
    with _migration_lock():
        waited = time.monotonic() - started
        call_command("migrate", interactive=False, verbosity=0)
    took = time.monotonic() - started
    timings = {"waited_ms": round(waited * 1000), "ms": round(took * 1000)}
    log.info("database migrated", extra={"kind": "db.migrated", **timings})
