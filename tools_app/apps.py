"""Tools: one tool interface, bash tools (protocol v1) and the tool-call policy."""

from django.apps import AppConfig


class ToolsAppConfig(AppConfig):
    """App config for tools."""

    name = "tools_app"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"
