"""ASGI entry point: HTTP through Django (websockets join in with the events work)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentsite.settings")

application = get_asgi_application()
