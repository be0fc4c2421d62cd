"""ASGI entry point: HTTP through Django (static files for the admin included), websockets through Channels."""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402  (needs Django set up)
from django.urls import path, re_path  # noqa: E402

from foundation.access import WebsocketAccess  # noqa: E402
from foundation.middleware import StaticFiles, UnixSocketHost  # noqa: E402
from sessions_app import hub  # noqa: E402
from sessions_app.consumers import EventsConsumer, NotFoundConsumer  # noqa: E402


class JoinChannelLayer:
    """Joins this process to the channel layer's server group at its first connection, on the
    server's event loop (``sessions_app.hub.start_listener``; docs/api.md §9.8).

    Args:
        app: the ASGI application it wraps.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        """Serve one connection with the wrapped application."""
        hub.start_listener()
        return await self.app(scope, receive, send)


_routes = ProtocolTypeRouter(
    {
        # the admin's stylesheets and scripts are served by the app itself: there is no other web server
        "http": StaticFiles(django_application),
        "websocket": WebsocketAccess(
            URLRouter(
                [
                    path("v1/ws/sessions/<str:session_id>", EventsConsumer.as_asgi()),  # type: ignore[list-item, arg-type]  # django-stubs' path() takes Django views; Channels routes ASGI apps
                    path("v1/ws/events", EventsConsumer.as_asgi()),  # type: ignore[list-item, arg-type]  # django-stubs' path() takes Django views; Channels routes ASGI apps
                    re_path(r".*", NotFoundConsumer.as_asgi()),  # type: ignore[list-item, arg-type]  # django-stubs' path() takes Django views; Channels routes ASGI apps
                ]
            )
        ),
    }
)
application = JoinChannelLayer(UnixSocketHost(_routes))
