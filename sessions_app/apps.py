"""Sessions: models, the step engine, the run loop, services, selectors and the REST API."""

from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    """App config for sessions."""

    name = "sessions_app"
    verbose_name = "Sessions"
    default_auto_field = "django.db.models.BigAutoField"
