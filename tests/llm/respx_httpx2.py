"""respx for the openai SDK's HTTP client: a respx mocker (``respx.mock(using="httpx2")``).

The openai SDK sends its requests with ``httpx2``, which respx does not patch by itself (it knows
``httpx`` and ``httpcore``). respx's own extension point is a ``Mocker`` subclass registered by
name: this one makes every ``httpx2.Client`` send through respx's routes, translating the
request to the ``httpx`` shape respx matches on, and the answer (or the transport error a route
raises) back to ``httpx2``. Importing this module registers it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import httpx2
from respx.mocks import Mocker


def _to_httpx2_error(error: httpx.TransportError, request: httpx2.Request) -> Exception:
    """The ``httpx2`` exception of the same name as a route's ``httpx`` one (``ConnectError``...)."""
    kind = getattr(httpx2, type(error).__name__, httpx2.TransportError)
    return kind(str(error), request=request)


class HTTPX2Mocker(Mocker):
    """Patches ``httpx2.Client._transport_for_url`` to a mock transport answering from respx."""

    name = "httpx2"
    targets = ["httpx2._client.Client"]
    target_methods = ["_transport_for_url"]

    @classmethod
    def mock(cls, spec: Callable[..., Any]) -> Callable[..., httpx2.BaseTransport]:
        """The replacement of ``spec``: every request goes to :meth:`answer`."""

        def _transport_for_url(self: httpx2.Client, *args: Any, **kwargs: Any) -> httpx2.BaseTransport:
            return httpx2.MockTransport(cls.answer)

        return _transport_for_url

    @classmethod
    def answer(cls, request: httpx2.Request) -> httpx2.Response:
        """Route one ``httpx2`` request through the active respx routers.

        Raises:
            respx.models.AllMockedAssertionError: no route matches.
            httpx2.TransportError: the matching route's side effect raised an ``httpx`` one.
        """
        legacy = httpx.Request(request.method, str(request.url), headers=request.headers.raw, content=request.read())
        try:
            response = cls.handler(legacy)
        except httpx.TransportError as error:
            raise _to_httpx2_error(error, request) from error
        return httpx2.Response(
            response.status_code, headers=response.headers.raw, content=response.read(), request=request
        )
