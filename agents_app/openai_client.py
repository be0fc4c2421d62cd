"""The ``openai`` SDK client of :mod:`agents_app.llm`, whose only credential is the agent's own key.

A module of its own so that the SDK, slow to import, is loaded with the first LLM call rather
than when the server starts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import openai
from openai._streaming import ServerSentEvent, SSEDecoder

if TYPE_CHECKING:
    # the mixin's super() is the SDK client it is mixed into (OpenAI or AsyncOpenAI)
    from openai._base_client import BaseClient

    _SdkClient = BaseClient[Any, Any]
else:
    _SdkClient = object


class _AgentCredentials(_SdkClient):
    """The header hooks of an SDK client whose only credential is the agent's own key, possibly none.

    The stock client insists on a key (reading ``OPENAI_API_KEY`` when given none) and adds
    organization/project and custom headers from the environment. Here the ``Authorization``
    header is exactly ``Bearer <agent key>`` or absent.
    """

    def __init__(self, *, agent_api_key: str | None, **kwargs: Any) -> None:
        self._agent_api_key = agent_api_key
        # A placeholder satisfies the SDK's "credentials required" check; it is never sent,
        # because every header hook below answers from _agent_api_key instead.
        super().__init__(**{**kwargs, "api_key": agent_api_key or "no-key"})

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


class UnfinishedEvent(Exception):
    """The stream ended in the middle of a server-sent event (its blank line never came)."""


class _WholeEventsDecoder(SSEDecoder):
    """The SDK's SSE decoder, except that a stream ending inside an event raises
    :class:`UnfinishedEvent`.

    The stock decoder drops such an event without a word, as the SSE rules say; a provider
    whose connection closes half-way through its answer then looks like one that answered
    (docs/sessions.md §4.5, a cut stream).
    """

    def __init__(self) -> None:
        super().__init__()
        self._open_event = False

    def decode(self, line: str) -> ServerSentEvent | None:
        """Decode one line, noting whether an event has fields not yet dispatched."""
        sse = super().decode(line)
        if not line:
            self._open_event = False
        elif not line.startswith(":"):
            # A last `data: [DONE]` without its blank line still ends the stream whole.
            self._open_event = self._data != ["[DONE]"]
        return sse

    def iter_bytes(self, iterator: Iterator[bytes]) -> Iterator[ServerSentEvent]:
        """The events of a synchronous stream; raises UnfinishedEvent at a cut one."""
        self._open_event = False
        yield from super().iter_bytes(iterator)
        if self._open_event:
            raise UnfinishedEvent()

    async def aiter_bytes(self, iterator: AsyncIterator[bytes]) -> AsyncIterator[ServerSentEvent]:
        """The events of an asynchronous stream; raises UnfinishedEvent at a cut one."""
        self._open_event = False
        async for sse in super().aiter_bytes(iterator):
            yield sse
        if self._open_event:
            raise UnfinishedEvent()


class _WholeEvents:
    """The client hook that gives each stream a :class:`_WholeEventsDecoder`."""

    def _make_sse_decoder(self) -> SSEDecoder:
        return _WholeEventsDecoder()


class AgentClient(_WholeEvents, _AgentCredentials, openai.OpenAI):
    """``openai.OpenAI`` whose only credential is the agent's own key, possibly none."""


class AsyncAgentClient(_WholeEvents, _AgentCredentials, openai.AsyncOpenAI):
    """``openai.AsyncOpenAI`` with the same credentials: for a request that may be cancelled
    while in flight (cancelling its task closes the connection)."""
