"""The operators' console: the Django admin pages of agents, sessions and deferred calls."""

from django.apps import AppConfig


class ConsoleAppConfig(AppConfig):
    """The console registers the admin of the other apps' models (docs/guide-console.md §1)."""

    name = "console_app"
    verbose_name = "Console"
