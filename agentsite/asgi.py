"""ASGI entry point: HTTP through Django (static files for the admin included), websockets through Channels."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

django_application = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402  (needs Django set up)
from django.urls import path, re_path  # noqa: E402

from agentsite.access import WebsocketAccess  # noqa: E402
from agentsite.middleware import StaticFiles  # noqa: E402
from sessions_app.consumers import EventsConsumer, NotFoundConsumer  # noqa: E402

application = ProtocolTypeRouter(
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
