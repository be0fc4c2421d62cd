"""The Celery app: Redis broker when ``REDIS_URL`` is set, the in-memory broker otherwise."""

from __future__ import annotations

import os
import sys
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_postrun, task_prerun
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

_cwd_was_on_path = os.getcwd() in sys.path
app = Celery("agentsite")
# Celery's Django fix-up puts the working directory first on sys.path: a command run in a
# directory someone else wrote (a project of agent files, a tool's workspace) would then import
# that directory's `foundation/` or `mcp/` in place of ours (docs/security.md). `python -m`
# puts it there already, by the interpreter's own rule, and keeps it.
if not _cwd_was_on_path and sys.path[:1] == [os.getcwd()]:
    del sys.path[0]
# the current app of every thread, not only of the one that made it: the apps send their tasks to
# ``celery.current_app`` (sessions_app.dispatch) from daphne's and the embedded worker's threads
app.set_default()
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["sessions_app", "hooks_app"])


@setup_logging.connect
def keep_project_logging(**kwargs: object) -> None:
    """Celery configures logging unless someone answers this signal: keep Django's LOGGING (JSON
    lines on stderr) in worker processes too."""


@task_prerun.connect
@task_postrun.connect
def recycle_database_connections(task: Any = None, **kwargs: object) -> None:
    """Around each task, what Django does around each request: close the thread's connections
    that are broken or older than ``CONN_MAX_AGE`` and keep the others (Celery's own closing is
    turned down by ``CELERY_DB_REUSE_MAX`` in the settings; docs/sessions.md §9).

    An eager task (run inline, inside its caller's transaction) is left alone.
    """
    if task is not None and getattr(task.request, "is_eager", False):
        return
    close_old_connections()
