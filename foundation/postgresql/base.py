"""Django's PostgreSQL backend with :func:`before_commit` hooks (docs/api.md §9.7).

A hook runs inside the transaction, right before its ``COMMIT``: the event sequence takes its
fleet-wide lock there, so that the lock is held for one statement and the commit, not for the
whole transaction that wrote the events. Settings select this backend for every PostgreSQL
``DATABASE_URL`` (``agentsite/settings/base.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.postgresql import base

_HOOKS = "agents_before_commit"
#: Set while the hooks run: ``transaction.on_commit`` made by a hook then still waits for the commit.
_COMMITTING = "agents_committing"


def before_commit(hook: Callable[[], None]) -> None:
    """Run ``hook()`` in the current transaction of the default database just before it commits; forget it on rollback.

    Args:
        hook: takes nothing; it may run SQL (still inside the transaction) and register
            ``transaction.on_commit`` callbacks, which run once the commit is done. Whatever it
            raises rolls the transaction back, as a failed ``COMMIT`` would (as a
            :class:`~django.db.DatabaseError`, the error Django's ``atomic`` rolls back on).
    Raises:
        RuntimeError: there is no transaction (autocommit), or the backend is not this one.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    if not isinstance(connection, DatabaseWrapper):
        raise RuntimeError("before_commit() needs the foundation.postgresql backend")
    if not connection.in_atomic_block:
        raise RuntimeError("before_commit() needs a transaction")
    connection.__dict__.setdefault(_HOOKS, []).append(hook)


class DatabaseWrapper(base.DatabaseWrapper):
    """Django's PostgreSQL connection, running :func:`before_commit` hooks in ``commit()``."""

    def _commit(self) -> Any:
        hooks: list[Callable[[], None]] = self.__dict__.pop(_HOOKS, [])
        self.__dict__[_COMMITTING] = True
        try:
            for hook in hooks:
                hook()
        except DatabaseError:
            raise
        except Exception as error:
            raise DatabaseError(f"a before-commit hook failed: {error!r}") from error
        finally:
            self.__dict__.pop(_COMMITTING, None)
        return super()._commit()  # type: ignore[misc]  # django-stubs leave the private methods out

    def on_commit(self, func: Callable[[], Any], robust: bool = False) -> None:
        """``transaction.on_commit``; during the :func:`before_commit` hooks (Django has left the
        atomic block by then, and would refuse) the callback waits for the commit as any other."""
        if self.__dict__.get(_COMMITTING):
            self.run_on_commit.append((set(), func, robust))  # type: ignore[arg-type]  # Django 5 keeps three items, the stubs two
            return
        super().on_commit(func, robust)

    def _rollback(self) -> Any:
        self.__dict__.pop(_HOOKS, None)
        return super()._rollback()  # type: ignore[misc]  # as above

    def connect(self) -> None:
        """Open the connection; hooks of a transaction lost with the previous one are dropped."""
        self.__dict__.pop(_HOOKS, None)
        super().connect()
