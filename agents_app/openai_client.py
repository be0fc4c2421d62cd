"""The ``openai`` SDK client of :mod:`agents_app.llm`, whose only credential is the agent's own key.

A module of its own so that the SDK, slow to import, is loaded with the first LLM call rather
than when the server starts.
"""

from __future__ import annotations

from typing import Any

import openai


class _AgentCredentials:
    """The header hooks of an SDK client whose only credential is the agent's own key, possibly none.

    The stock client insists on a key (reading ``OPENAI_API_KEY`` when given none) and adds
    organization/project and custom headers from the environment. Here the ``Authorization``
    header is exactly ``Bearer <agent key>`` or absent.
    """

    def __init__(self, *, agent_api_key: str | None, **kwargs: Any) -> None:
        self._agent_api_key = agent_api_key
        # A placeholder satisfies the SDK's "credentials required" check; it is never sent,
        # because every header hook below answers from _agent_api_key instead.
        super().__init__(api_key=agent_api_key or "no-key", **kwargs)

    def _agent_auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._agent_api_key}"} if self._agent_api_key else {}

    @property
    def auth_headers(self) -> dict[str, str]:
        return self._agent_auth()

    def _auth_headers(self, security: Any) -> dict[str, str]:
        return self._agent_auth()

    @property
    def default_headers(self) -> dict[str, Any]:
        # Drop what the SDK derived from the environment (OPENAI_ORG_ID, OPENAI_PROJECT_ID,
        # OPENAI_CUSTOM_HEADERS' Authorization); the agent's key is re-added by the auth hooks.
        dropped = {"authorization", "openai-organization", "openai-project"}
        headers = {k: v for k, v in super().default_headers.items() if k.lower() not in dropped}
        return {**headers, **self._agent_auth()}

    @property
    def user_agent(self) -> str:
        # The SDK builds it from the class name, which would advertise this private class.
        return f"agents-server (openai-python/{openai.__version__})"

    def _validate_headers(self, headers: Any, custom_headers: Any) -> None:
        # No Authorization header is a legitimate request here (docs/decisions.md §5).
        return None


class AgentClient(_AgentCredentials, openai.OpenAI):
    """``openai.OpenAI`` whose only credential is the agent's own key, possibly none."""


class AsyncAgentClient(_AgentCredentials, openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` with the same credentials: for a request that may be cancelled
    while in flight (cancelling its task closes the connection)."""
