"""The agents server project: settings, URLs, ASGI, Celery, the command line."""

from agentsite.celery import app as celery_app

__all__ = ["celery_app"]
