"""Agents: the agent-file schema, loading, API keys and the LLM client."""

from django.apps import AppConfig


class AgentsAppConfig(AppConfig):
    """App config for agents."""

    name = "agents_app"
    verbose_name = "Agents"
    default_auto_field = "django.db.models.BigAutoField"
