"""The webhooks app's wiring: its event hook and its periodic sweep are registered at start."""

from django.apps import AppConfig


class HooksAppConfig(AppConfig):
    """App config for webhooks."""

    name = "hooks_app"
    verbose_name = "Webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Write the outbox beside every event (``sessions_app.events``), sweep due deliveries and
        fire due schedules with the other periodic tasks (``sessions_app.periodic``), and record
        the ``webhook`` URLs of requests (docs/webhooks.md §3, §4, §9, §10)."""
        # both import models, which may be imported only once the app registry is ready
        from hooks_app import schedules, services
        from hooks_app.outbox import outbox_write, periodic_tasks
        from sessions_app.events import register_event_hook
        from sessions_app.periodic import register_periodic_tasks
        from sessions_app.run_webhooks import register_run_webhook

        register_event_hook(outbox_write)
        register_periodic_tasks(periodic_tasks)
        register_periodic_tasks(schedules.periodic_tasks)
        register_run_webhook(services.run_webhook_record)
