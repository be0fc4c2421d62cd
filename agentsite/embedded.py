"""The embedded worker: the project's Celery tasks run in threads of the server process.

On the embedded default (no ``REDIS_URL``) nothing else runs beside ``agents serve``, so a broker
would only carry messages from one thread of the process to another. Tasks are handed to thread
pools directly instead: one for runs and one for background (``runAsync``) tool calls, so that
runs waiting on their background calls can never take every thread those calls need. The
periodic tasks (run sweep, event retention) run on a thread of their own, as in every worker
(``sessions_app.periodic``). Nothing is lost that a broker would have kept: a requested run lives in
the database, and the startup recovery sends the runs nobody claimed again (the docs/running.md §4).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import close_old_connections

from sessions_app.periodic import PeriodicRunner

log = logging.getLogger("agentsite.embedded")


class EmbeddedWorker:
    """Thread pools that run tasks by name, and the periodic tasks' thread.

    Args:
        concurrency: runs at once (``--worker-concurrency``); as many background calls at once.
        task_lookup: the task registry (``celery_app.tasks``): name -> callable task.
    """

    def __init__(self, concurrency: int, task_lookup: Any) -> None:
        self.tasks = task_lookup
        self.runs = ThreadPoolExecutor(concurrency, thread_name_prefix="embedded-run")
        self.calls = ThreadPoolExecutor(concurrency, thread_name_prefix="embedded-call")
        self.periodic = PeriodicRunner()
        self._lock = threading.Lock()
        self._in_flight = 0

    def submit(self, name: str, args: list[str], *, background_call: bool = False) -> None:
        """Run task ``name`` with ``args`` on a pool thread (never blocks the caller)."""
        pool = self.calls if background_call else self.runs
        with self._lock:
            self._in_flight += 1
        try:
            # the task runs in the trace context it was sent in, as a Celery task would
            pool.submit(contextvars.copy_context().run, self._counted, name, args)
        except RuntimeError:
            with self._lock:
                self._in_flight -= 1
            raise

    def idle(self) -> bool:
        """Whether every task submitted so far has ended: nothing this process runs can start
        another (``agents run`` waits for that, docs/cli.md §3.1)."""
        with self._lock:
            return self._in_flight == 0

    def _counted(self, name: str, args: list[str]) -> None:
        try:
            self._execute(name, args)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _execute(self, name: str, args: list[str]) -> None:
        close_old_connections()
        try:
            self.tasks[name](*args)
        except Exception:
            log.exception("embedded task failed", extra={"kind": "worker.task_failed", "task": name})
        finally:
            close_old_connections()

    def stop(self) -> None:
        """Stop the periodic tasks and stop taking new tasks (tasks going on are not waited for)."""
        self.periodic.stop()
        self.runs.shutdown(wait=False, cancel_futures=True)
        self.calls.shutdown(wait=False, cancel_futures=True)


def start(concurrency: int, install: Callable[[EmbeddedWorker], None]) -> EmbeddedWorker:
    """Start the embedded worker of this process and hand it to ``install`` (the dispatcher).

    Returns:
        The worker (``.stop()`` ends it).
    """
    from agentsite.celery import app

    # what a Celery worker does when it starts: import the apps' task modules
    app.loader.import_default_modules()
    worker = EmbeddedWorker(concurrency, app.tasks)
    install(worker)
    worker.periodic.start()
    return worker
