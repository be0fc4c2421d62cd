"""Helpers shared by the LLM tests (plain functions; the fixtures are in conftest.py)."""

from __future__ import annotations

from typing import Any

from agentfiles.schema import AgentSpec


def make_spec(url: str, flavor: str = "OpenAIv1", model: str = "mock-model") -> AgentSpec:
    """A minimal agent whose ``modelUrl`` is ``url``."""
    return AgentSpec(
        slug="tester",
        apiKeyId="main-key",
        flavor=flavor,
        modelUrl=url,
        modelName=model,
        announce="an agent for tests",
        systemPrompt=["You are a test agent."],
    )


def user(text: str) -> list[dict[str, Any]]:
    """A conversation of a system prompt and one user message."""
    return [{"role": "system", "content": "You are a test agent."}, {"role": "user", "content": text}]


def weather_tool() -> dict[str, Any]:
    """An OpenAI tool definition named ``get_weather``."""
    return {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
