"""Fields and helpers shared by every app: JSON kept as text, timestamps, base64, the database clock.

They live here, below the apps, so that no app imports another one for a helper.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.functions import Now
from django.utils import timezone
from rest_framework import serializers

T = TypeVar("T")


def dump_json_text(value: Any) -> str:
    """JSON text for a TEXT column: ASCII-only, so that PostgreSQL takes any string (a NUL
    character becomes the six characters ``\\u0000``) and the value reads back equal."""
    return json.dumps(value, ensure_ascii=True)


class TextJSONField(models.TextField):
    """A JSON value stored as text (see :func:`dump_json_text`): PostgreSQL's jsonb refuses NUL
    and reorders keys, and session files must come back as they were written."""

    # the types django-stubs' plugin gives the attribute: any JSON value, not TextField's str
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def to_python(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def get_prep_value(self, value: Any) -> str | None:
        return None if value is None else dump_json_text(value)


def rfc3339(value: datetime | None) -> str | None:
    """An aware datetime as RFC 3339 UTC with a ``Z`` (microseconds kept); ``None`` stays ``None``."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Rfc3339Field(serializers.DateTimeField):
    """A timestamp as RFC 3339 UTC with a ``Z`` and microseconds (:func:`rfc3339`), as every answer
    writes them; a text already in that form is kept."""

    # DRF's own DateTimeField.to_representation answers None for an empty value; its stubs say str
    def to_representation(self, value: Any) -> str | None:  # type: ignore[override]  # see above
        return value if isinstance(value, str) else rfc3339(value)


_shared_serializers: dict[type[serializers.Serializer], serializers.Serializer] = {}


def render(serializer_class: type[serializers.Serializer], instance: Any) -> dict[str, Any]:
    """``serializer_class``'s representation of ``instance``, through one shared serializer.

    Making a serializer copies its declared fields every time; rendering only reads them, so one
    instance per class serves every thread.
    """
    shared = _shared_serializers.get(serializer_class)
    if shared is None:
        shared = _shared_serializers.setdefault(serializer_class, serializer_class())
    return shared.to_representation(instance)


def is_base64(value: str) -> bool:
    """Whether ``value`` is standard base64 (padding required, no other characters)."""
    try:
        binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        return value == ""
    return True


def base64_size(value: str) -> int:
    """The number of bytes that the strict base64 ``value`` (see :func:`is_base64`) decodes to:
    three per four characters, less the padding."""
    return len(value) // 4 * 3 - (len(value) - len(value.rstrip("=")))


def db_now() -> datetime:
    """The current time from the database's clock on PostgreSQL (shared by every process),
    from this process's clock on SQLite (one machine).

    PostgreSQL's ``now()`` is the start of the transaction, the same at every call in it, so it
    is asked once per transaction (:func:`once_per_transaction`).
    """
    if connection.vendor == "postgresql":
        return once_per_transaction("now", _database_now)
    return timezone.now()


def db_now_in_statement() -> datetime | Now:
    """What :func:`db_now` stands for, to put inside a statement: PostgreSQL's ``now()`` as SQL
    (no round trip of its own), this process's clock on SQLite.

    Use it where the time is only written or compared by the statement, never read back in
    Python; ``Now() + timedelta(...)`` is a valid expression too.
    """
    if connection.vendor == "postgresql":
        return Now()
    return timezone.now()


def _database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def once_per_transaction(name: str, compute: Callable[[], T]) -> T:
    """``compute()``, made once per database transaction of this thread and then reused.

    Outside a transaction (autocommit) it is made at every call. The transaction is known by its
    outermost ``atomic`` block, so a value never outlives the transaction it was made in, even
    one that rolled back.
    """
    if not connection.in_atomic_block or not connection.atomic_blocks:
        return compute()
    # the block itself is kept, not its id: an id can come back with a later block
    block = connection.atomic_blocks[0]
    # the thread's own connection: ``django.db.connection`` is one proxy object for every thread
    own = connections[DEFAULT_DB_ALIAS].__dict__
    cached = own.get(f"agents_once_{name}")
    if cached is not None and cached[0] is block:
        return cached[1]
    value = compute()
    own[f"agents_once_{name}"] = (block, value)
    return value
