"""The changes of a session's status, as data: from, to, and the code that makes each one.

The store (``sessions_app.store``) is the only writer of a session row, and it refuses a change
that is not a row of :data:`TRANSITIONS` (:func:`check`). The same table is written on
``Session`` and in docs/sessions.md §2.1; a test reads both and compares them with this one.

A store that leaves the status as it is changes nothing here (a control that is not Pause or
Resume, a run that goes on, a run that stops with its helpers still working). Two names stand
for groups of statuses:

- ``at rest``: the statuses of a session without a run, ``ready``, ``idle``,
  ``waiting_external``, ``failed`` and ``paused``;
- ``implied``: what the turns imply (``document.status_of``, docs/sessions.md §2), ``ready``,
  ``idle``, ``waiting_external``, or ``running`` when the session waits on a helper session.
"""

from __future__ import annotations

from dataclasses import dataclass

from sessions_app.models import Session

Status = Session.Status

#: The statuses of a session that no run holds.
AT_REST = frozenset({Status.READY, Status.IDLE, Status.WAITING_EXTERNAL, Status.FAILED, Status.PAUSED})
#: The statuses the turns imply (``document.status_of``).
IMPLIED = frozenset({Status.READY, Status.IDLE, Status.WAITING_EXTERNAL, Status.RUNNING})
#: A session that is being inserted has no status yet.
NEW = "(new)"
#: The names of the groups, as the written tables spell them.
GROUPS: dict[str, frozenset[str]] = {"at rest": AT_REST, "implied": IMPLIED}


@dataclass(frozen=True)
class Transition:
    """One row: any status of ``sources`` may become any of ``targets``, made by ``by``.

    ``sources`` holds :data:`NEW` for a session being created. ``by`` names the functions that
    make the change, as ``module.function`` under ``sessions_app/services/`` (``runner.`` for
    the run loop in ``sessions_app/runner.py``).
    """

    sources: frozenset[str]
    targets: frozenset[str]
    by: tuple[str, ...]


def _row(sources: str | frozenset[str], targets: str | frozenset[str], *by: str) -> Transition:
    def statuses(value: str | frozenset[str]) -> frozenset[str]:
        return value if isinstance(value, frozenset) else frozenset({value})

    return Transition(statuses(sources), statuses(targets), by)


#: Every change of status a session may go through (docs/sessions.md §2.1).
TRANSITIONS: tuple[Transition, ...] = (
    _row(NEW, Status.READY, "sessions.session_create"),
    _row(NEW, Status.RUNNING, "sessions.session_create", "tree.child_create", "agentmail.session_spawn"),
    _row(NEW, IMPLIED, "sessions.session_import", "tree.session_fork"),
    _row(
        AT_REST,
        Status.RUNNING,
        "sessions.message_post",
        "sessions.session_resume",
        "continuations.continuation_complete",
        "mail.request_run",
        "tree.free_stranded_children",
    ),
    _row(AT_REST, Status.READY, "sessions.message_post"),
    _row(AT_REST, Status.PAUSED, "mail.after_mail"),
    _row(AT_REST, IMPLIED, "mail.after_mail", "continuations.continuation_complete", "sessions.session_from_file"),
    _row(
        Status.RUNNING,
        IMPLIED,
        "runner._store_step",
        "runner._finish",
        "continuations.continuation_complete",
        "tree.cancel_helpers",
        "recovery.recover_stale_runs",
    ),
    _row(Status.RUNNING, Status.PAUSED, "runner._finish", "recovery.recover_stale_runs"),
    _row(Status.RUNNING, Status.FAILED, "runner._finish", "runner._fail_unreadable", "recovery.recover_stale_runs"),
)

_ALLOWED = frozenset((source, target) for row in TRANSITIONS for source in row.sources for target in row.targets)


class StatusTransitionRefused(Exception):
    """A store asked for a change of status that :data:`TRANSITIONS` does not hold: a bug in the
    code that asked, answered as any unexpected error (500 ``internal_error``, logged)."""


def check(session_id: object, source: str | None, target: str) -> None:
    """Refuse a change of status that is not in the table.

    Args:
        session_id: the session's id (for the message).
        source: its status as read, ``None`` for a session being inserted.
        target: the status to store.
    Raises:
        StatusTransitionRefused: ``(source, target)`` is a change and no row of
            :data:`TRANSITIONS` allows it.
    """
    before = NEW if source is None else str(source)
    after = str(target)
    if before != after and (before, after) not in _ALLOWED:
        raise StatusTransitionRefused(
            f"session {session_id}: the status {before} -> {after} is not in the transition table"
            " (sessions_app/transitions.py, docs/sessions.md §2.1)"
        )
