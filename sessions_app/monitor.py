"""One watcher per process for every run it executes: leases renewed, mailboxes watched.

A run holds a lease on its session (docs/sessions.md §4.2) that must be renewed every
``AGENTS_LEASE_RENEW_SECONDS``, and must notice a StopRun or an interrupt soon after it is
posted, while it waits on its model or its tools. One thread does both for all the runs of the
process: every :data:`MAILBOX_CHECK_SECONDS` it reads the newest mail seq of every watched
session in one query, and looks at a session's unread mail only when that number moved.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

from django.conf import settings

from foundation.common import db_now
from sessions_app import mailbox
from sessions_app.engine import RunSignals
from sessions_app.models import Session
from sessions_app.store import lease_deadline

log = logging.getLogger("sessions.monitor")

#: Seconds between two looks at the mailboxes of the running sessions.
MAILBOX_CHECK_SECONDS = 0.25


@dataclass
class RunWatch:
    """What the monitor tells one run: ``signals`` (stop, interrupt) and ``lost`` (its lease)."""

    session_id: uuid.UUID
    run_id: uuid.UUID
    owner: str
    signals: RunSignals = field(default_factory=RunSignals)
    lost: threading.Event = field(default_factory=threading.Event)
    seen_mail_seq: int = 0


class RunMonitor:
    """The watcher of this process's runs (use :func:`watch_run`)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._watches: dict[uuid.UUID, RunWatch] = {}
        self._thread: threading.Thread | None = None

    def watch(self, session_id: uuid.UUID, run_id: uuid.UUID, owner: str) -> RunWatch:
        """Start watching a run this process just claimed (``owner``: its ``run_owner``)."""
        run = RunWatch(session_id, run_id, owner)
        with self._lock:
            self._watches[session_id] = run
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="run-monitor", daemon=True)
                self._thread.start()
            self._lock.notify_all()
        return run

    def forget(self, run: RunWatch) -> None:
        """Stop watching a run that ended."""
        with self._lock:
            if self._watches.get(run.session_id) is run:
                del self._watches[run.session_id]

    def _loop(self) -> None:
        last_renewal = time.monotonic()
        while True:
            with self._lock:
                while not self._watches:
                    self._lock.wait()
            time.sleep(MAILBOX_CHECK_SECONDS)
            with self._lock:
                runs = list(self._watches.values())
            if not runs:
                continue
            try:
                self._check_mail(runs)
                if time.monotonic() - last_renewal >= settings.AGENTS["LEASE_RENEW_SECONDS"]:
                    last_renewal = time.monotonic()
                    self._renew(runs)
            except Exception:
                # a database hiccup must not end the watching; the next round tries again
                log.exception("run monitor failed a round", extra={"kind": "runs.monitor_failed"})

    def _check_mail(self, runs: list[RunWatch]) -> None:
        newest = dict(Session.objects.filter(pk__in=[r.session_id for r in runs]).values_list("pk", "last_mail_seq"))
        for run in runs:
            last_mail_seq = newest.get(run.session_id)
            if last_mail_seq is None:
                # deleted under the run
                run.signals.stop.set()
                continue
            if last_mail_seq == run.seen_mail_seq:
                continue
            run.seen_mail_seq = last_mail_seq
            session = Session.objects.filter(pk=run.session_id).first()
            if session is None:
                run.signals.stop.set()
                continue
            for envelope in mailbox.unread(session, session.parsed_document()):
                control = mailbox.control_of(envelope)
                if control == mailbox.Control.STOP_RUN:
                    run.signals.stop.set()
                elif control is None and envelope.priority == "interrupt":
                    run.signals.interrupt.set()

    def _renew(self, runs: list[RunWatch]) -> None:
        deadline = lease_deadline(db_now())
        for run in runs:
            renewed = Session.objects.filter(pk=run.session_id, run_id=run.run_id, run_owner=run.owner).update(
                run_lease_until=deadline
            )
            if renewed != 1:
                run.lost.set()
                run.signals.stop.set()


_monitor = RunMonitor()


def watch_run(session_id: uuid.UUID, run_id: uuid.UUID, owner: str) -> RunWatch:
    """Watch a run this process claimed; call :func:`forget_run` when it ends."""
    return _monitor.watch(session_id, run_id, owner)


def forget_run(run: RunWatch) -> None:
    """Stop watching a run."""
    _monitor.forget(run)
