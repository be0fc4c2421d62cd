"""The Celery app: Redis broker when ``REDIS_URL`` is set, the in-memory broker otherwise."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

app = Celery("agentsite")
# the current app of every thread, not only of the one that made it: the apps send their tasks to
# ``celery.current_app`` (sessions_app.dispatch) from daphne's and the embedded worker's threads
app.set_default()
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["sessions_app"])


@setup_logging.connect
def keep_project_logging(**kwargs: object) -> None:
    """Celery configures logging unless someone answers this signal: keep Django's LOGGING (JSON
    lines on stderr) in worker processes too."""
