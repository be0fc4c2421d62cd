"""Sessions: models, the step engine, the run loop, services, selectors and the REST API."""

from django.apps import AppConfig


class SessionsAppConfig(AppConfig):
    """App config for sessions."""

    name = "sessions_app"
    verbose_name = "Sessions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the session access rules with the platform (``foundation.access``)."""
        # both import models (the rules query them; the platform's middleware, Django's auth),
        # which may be imported only once the app registry is ready
        from foundation.access import register_session_access
        from sessions_app.access import RULES

        register_session_access(RULES)
