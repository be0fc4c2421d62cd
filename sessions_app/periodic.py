"""The periodic tasks, run by every worker and every embedded server (docs/sessions.md §4.9).

Each task has a :class:`~sessions_app.models.PeriodicLease` row. Every process that runs the
tasks tries, four times a period, to take each task's row with one conditional UPDATE: the task
is due (it last started a period ago, by the database's clock) and nobody holds the row (the last
hold has run out). The process whose UPDATE changed the row runs the task, renewing its hold
while it runs, then writes when it finished and lets the row go. So exactly one process runs a
task at a time, on SQLite as on PostgreSQL, no process has to be started with a flag for
recovery to happen, and a holder that dies frees the row when its hold runs out.

A scaled-out server runs no task: it watches the sweep's row and logs when no process has swept
for :data:`sessions_app.selectors.STALE_PERIODS` periods (``recovery.stale``), and again when
sweeps come back (``recovery.resumed``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import Q

from foundation.common import db_now
from sessions_app import events, selectors, timings
from sessions_app.models import PeriodicLease
from sessions_app.runner import WORKER_NAME
from sessions_app.services import idempotency
from sessions_app.services.recovery import free_stranded_helpers, recover_stale_runs

log = logging.getLogger("sessions.periodic")

#: How many times a period each process tries to take a task's row: a task starts at most a
#: quarter period late.
TRIES_PER_PERIOD = 4


@dataclass(frozen=True)
class PeriodicTask:
    """A task run every ``every`` seconds by one process at a time; ``name`` keys its row."""

    name: str
    every: float
    run: Callable[[], None]


def sweep() -> None:
    """Take over runs whose lease expired, resend runs nobody claimed, and set moving the helpers
    that parents wait on and nothing will move (docs/sessions.md §4.8)."""
    recovered, resent = recover_stale_runs(all_claimed=False)
    freed = free_stranded_helpers(all_claimed=False)
    if recovered:
        log.warning("sessions taken over", extra={"kind": "sessions.taken_over", "session_ids": recovered})
    if resent:
        log.info("runs resent", extra={"kind": "sessions.runs_resent", "session_ids": resent})
    if freed:
        log.warning("stranded helpers set moving", extra={"kind": "sessions.helpers_freed", "session_ids": freed})


def prune() -> None:
    """Delete the events and step timings older than ``AGENTS_EVENT_RETENTION_SECONDS`` (docs/api.md
    §9.7, docs/console.md §2)."""
    kept = timedelta(seconds=settings.AGENTS["EVENT_RETENTION_SECONDS"])
    events.prune(kept)
    timings.prune(kept)


def prune_idempotency_keys() -> None:
    """Delete the idempotency keys older than ``AGENTS_IDEMPOTENCY_TTL_SECONDS`` (docs/api.md §1.7)."""
    idempotency.prune()


#: What higher apps add to the periodic tasks (:func:`register_periodic_tasks`).
_providers: list[Callable[[], list[PeriodicTask]]] = []


def register_periodic_tasks(provider: Callable[[], list[PeriodicTask]]) -> None:
    """Add the tasks ``provider`` returns to :func:`periodic_tasks` from now on; a higher layer (the
    webhooks' delivery sweep, docs/webhooks.md §4) registers its own this way at start. Registering
    the same provider twice keeps one."""
    if provider not in _providers:
        _providers.append(provider)


def periodic_tasks() -> list[PeriodicTask]:
    """The sweep, every ``AGENTS_SWEEP_EVERY_SECONDS`` (10), the event retention, every
    ``AGENTS_PRUNE_EVERY_SECONDS`` (600), and the idempotency keys' expiry, every
    ``AGENTS_IDEMPOTENCY_PRUNE_EVERY_SECONDS`` (600), and those of the registered providers
    (:func:`register_periodic_tasks`)."""
    return [
        PeriodicTask(PeriodicLease.SWEEP, settings.AGENTS["SWEEP_EVERY_SECONDS"], sweep),
        PeriodicTask(PeriodicLease.PRUNE, settings.AGENTS["PRUNE_EVERY_SECONDS"], prune),
        PeriodicTask(
            PeriodicLease.PRUNE_IDEMPOTENCY_KEYS,
            settings.AGENTS["IDEMPOTENCY_PRUNE_EVERY_SECONDS"],
            prune_idempotency_keys,
        ),
        *(task for provider in _providers for task in provider()),
    ]


def _hold_seconds() -> float:
    """How long a holder holds a task's row between two renewals: a run lease (``AGENTS_LEASE_SECONDS``)."""
    return settings.AGENTS["LEASE_SECONDS"]


def claim(name: str, every: float, holder: str) -> bool:
    """Take task ``name``'s row for ``holder`` if the task is due and nobody holds the row.

    Args:
        name: the task's name (its row is made on first use).
        every: the task's period, in seconds.
        holder: the process's name (``runner.WORKER_NAME``).
    Returns:
        Whether ``holder`` now runs the task.
    """
    PeriodicLease.objects.bulk_create([PeriodicLease(name=name)], ignore_conflicts=True)
    now = db_now()
    return (
        PeriodicLease.objects.filter(name=name)
        .filter(Q(held_until__isnull=True) | Q(held_until__lt=now))
        .filter(Q(started_at__isnull=True) | Q(started_at__lte=now - timedelta(seconds=every)))
        .update(holder=holder, held_until=now + timedelta(seconds=_hold_seconds()), started_at=now)
        == 1
    )


def renew(name: str, holder: str) -> bool:
    """Extend ``holder``'s hold of task ``name``'s row; ``False`` when it holds it no more."""
    until = db_now() + timedelta(seconds=_hold_seconds())
    return PeriodicLease.objects.filter(name=name, holder=holder).update(held_until=until) == 1


def release(name: str, holder: str, *, finished: bool) -> None:
    """Let task ``name``'s row go; ``finished``: the task ran to its end (``finished_at`` is now)."""
    fields = {"held_until": None, **({"finished_at": db_now()} if finished else {})}
    PeriodicLease.objects.filter(name=name, holder=holder).update(**fields)


def run_if_due(task: PeriodicTask, holder: str) -> bool:
    """Run ``task`` in this thread if ``holder`` can take its row (see :func:`claim`).

    The hold is renewed every third of its length while the task runs. A task that raises is
    logged (``periodic.failed``) and not recorded as finished.

    Returns:
        Whether the task ran.
    """
    if not claim(task.name, task.every, holder):
        return False
    done = threading.Event()
    renewer = threading.Thread(target=_renew_until, args=(task.name, holder, done), name="periodic-renew", daemon=True)
    renewer.start()
    finished = False
    try:
        task.run()
        finished = True
    except Exception:
        log.exception("periodic task failed", extra={"kind": "periodic.failed", "task": task.name})
    finally:
        done.set()
        renewer.join()
        release(task.name, holder, finished=finished)
    return True


def _renew_until(name: str, holder: str, done: threading.Event) -> None:
    try:
        while not done.wait(_hold_seconds() / 3):
            renew(name, holder)
    except Exception:
        # the hold then runs out, and another process may take the task: it is safe to run twice
        log.exception("periodic hold not renewed", extra={"kind": "periodic.renew_failed", "task": name})
    finally:
        connection.close()


class PeriodicRunner:
    """A daemon thread that runs every periodic task when it is due and this process can take it.

    Args:
        holder: the name the process holds rows under (default ``runner.WORKER_NAME``).
        tasks: the tasks (default :func:`periodic_tasks`).
    """

    def __init__(self, holder: str = WORKER_NAME, tasks: list[PeriodicTask] | None = None) -> None:
        self.holder = holder
        self.tasks = tasks if tasks is not None else periodic_tasks()
        self.stopped = threading.Event()

    def start(self) -> None:
        """Start the thread; each task is tried at once, then :data:`TRIES_PER_PERIOD` times a period."""
        threading.Thread(target=self._loop, name="periodic", daemon=True).start()

    def stop(self) -> None:
        """Stop trying (a task under way finishes)."""
        self.stopped.set()

    def _loop(self) -> None:
        due = {task.name: time.monotonic() for task in self.tasks}
        while not self.stopped.wait(max(0.0, min(due.values()) - time.monotonic())):
            for task in self.tasks:
                if due[task.name] > time.monotonic():
                    continue
                due[task.name] = time.monotonic() + max(task.every / TRIES_PER_PERIOD, 0.05)
                close_old_connections()
                try:
                    run_if_due(task, self.holder)
                except Exception:
                    # a database that is away: the next try may find it back
                    log.exception("periodic task not tried", extra={"kind": "periodic.failed", "task": task.name})


def watch_recovery() -> None:
    """Start a daemon thread, in a server without a worker inside, that logs when no process has
    swept runs for :data:`sessions_app.selectors.STALE_PERIODS` periods (``recovery.stale``, a
    warning) and when sweeps come back (``recovery.resumed``). Its first look is that many periods
    after the start, so that workers started with the server have time to sweep once."""
    threading.Thread(target=_watch, name="recovery-watch", daemon=True).start()


def _watch() -> None:
    every = settings.AGENTS["SWEEP_EVERY_SECONDS"]
    stale = False
    time.sleep(selectors.STALE_PERIODS * every)
    while True:
        try:
            state = selectors.recovery_health()
        except Exception:
            log.exception("recovery not watched", extra={"kind": "recovery.watch_failed"})
        else:
            if state["stale"] != stale:
                stale = state["stale"]
                last = state["last_sweep_at"].isoformat() if state["last_sweep_at"] else None
                if stale:
                    log.warning(
                        "no process sweeps runs: start an agents worker",
                        extra={"kind": "recovery.stale", "last_sweep_at": last, "every_seconds": every},
                    )
                else:
                    log.info("runs are swept again", extra={"kind": "recovery.resumed", "last_sweep_at": last})
        close_old_connections()
        time.sleep(every)
