"""Run as a script on a PostgreSQL database: two writers' events, numbered at commit.

``python -m tests.event_numbering`` with ``DATABASE_URL`` set migrates the database, then:

- writer A emits an event and keeps its transaction open; writer B emits one and commits
  meanwhile (with a 5 s ``lock_timeout``: a lock held from A's first event would stop it);
- a reader then sees B's event, and A's once A commits, A's numbered after B's;
- an event emitted in a savepoint that rolls back is neither stored nor numbered, and a
  transaction that rolls back leaves nothing behind for the next one.

Prints one line of JSON with what it saw, for tests/test_event_order.py.
"""

from __future__ import annotations

import json
import os
import threading
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

import django  # noqa: E402 - the settings module is named first

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from sessions_app import events  # noqa: E402
from sessions_app.event_types import EventKind, TextDelta  # noqa: E402


def _emit(session: uuid.UUID, text: str) -> events.Event:
    return events.emit(EventKind.TEXT_DELTA, session, None, TextDelta(text=text))


def _texts(session: uuid.UUID) -> list[str]:
    return [json.loads(e.payload_json)["text"] for e in events.read_after(0, session_id=session)]


def main() -> None:
    """Run the writers and print what each saw."""
    call_command("migrate", verbosity=0)
    session = uuid.uuid4()
    seen: dict[str, object] = {}
    a_emitted, b_committed = threading.Event(), threading.Event()

    def writer_a() -> None:
        with transaction.atomic():
            first = _emit(session, "a")
            seen["a_provisional"] = first.seq
            a_emitted.set()
            seen["b_committed_while_a_open"] = b_committed.wait(30)
            second = _emit(session, "a2")
        seen["a_final"] = [first.seq, second.seq]
        connection.close()

    def writer_b() -> None:
        a_emitted.wait(30)
        try:
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '5s'")
                event = _emit(session, "b")
            seen["b_final"] = event.seq
            b_committed.set()
            seen["read_after_b"] = [e.seq for e in events.read_after(0, session_id=session)]
        except Exception as error:  # noqa: BLE001 - reported to the test, which fails on it
            seen["b_error"] = f"{type(error).__name__}: {error}"
        finally:
            connection.close()

    threads = [threading.Thread(target=writer_a), threading.Thread(target=writer_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with transaction.atomic():
        kept = _emit(session, "kept")
        try:
            with transaction.atomic():
                _emit(session, "dropped")
                raise RuntimeError("roll the savepoint back")
        except RuntimeError:
            pass
    seen["savepoint"] = {"kept": kept.seq, "texts": _texts(session)}
    try:
        with transaction.atomic():
            _emit(session, "rolled back")
            raise RuntimeError("roll the transaction back")
    except RuntimeError:
        pass
    seen["after_rollback"] = _emit(session, "after").seq
    seen["rows"] = [[e.seq, json.loads(e.payload_json)["text"]] for e in events.read_after(0, session_id=session)]
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
