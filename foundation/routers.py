"""The API's router: DRF's default router without trailing slashes, format suffixes or root view.

Paths are those of the reference API exactly (``/v1/sessions/:id``, never ``/v1/sessions/:id/``
or ``.json``); ``/`` belongs to the chat page. Ids are anything but a slash, so that a malformed
id reaches its view and answers that view's 404 (``unknown_session``, ``unknown_token``). One
route is added: ``POST`` on a detail path runs the viewset's ``complete`` action, for
``POST /v1/continuations/:token``. Every view runs on the API's thread pool
(``foundation.threads``).
"""

from __future__ import annotations

from typing import Any

from rest_framework.routers import DefaultRouter, Route

from foundation.threads import pooled


class ApiRouter(DefaultRouter):
    """``DefaultRouter(trailing_slash=False)`` with the rules above."""

    include_root_view = False
    include_format_suffixes = False

    def __init__(self) -> None:
        super().__init__(trailing_slash=False)
        detail = next(route for route in self.routes if isinstance(route, Route) and route.detail)
        self.routes = [
            Route(
                url=detail.url,
                mapping={**detail.mapping, "post": "complete"},
                name=detail.name,
                detail=True,
                initkwargs=detail.initkwargs,
            )
            if route is detail
            else route
            for route in self.routes
        ]

    def get_lookup_regex(self, viewset: type, lookup_prefix: str = "") -> str:
        """Ids match any text up to the next slash (dots included)."""
        lookup = getattr(viewset, "lookup_field", "pk")
        name = getattr(viewset, "lookup_url_kwarg", None) or lookup
        return f"(?P<{lookup_prefix}{name}>[^/]+)"

    def get_urls(self) -> list[Any]:
        """The routes, each view run on the API's thread pool."""
        urls = super().get_urls()
        for pattern in urls:
            assert pattern.callback is not None  # noqa: S101 - narrows the type (every route has a view)
            pattern.callback = pooled(pattern.callback)
        return urls
