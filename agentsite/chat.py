"""The chat page at ``/`` (docs/guide-chat.md §1; docs/api.md §13).

The page is one template (``templates/chat/page.html``) and a script (``static/chat/``) that
speak the public API in the browser: everything it shows comes from ``/v1/...`` and the event
stream, so the page can do nothing a ``curl`` user cannot. This view only decides whether the
page is served and hands the script the few settings it needs.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from foundation.auth import auth_config
from foundation.env import LOOPBACK_HOSTS
from foundation.errors import MethodNotAllowed, NotFound, json_error


def is_loopback_bind(bind: str) -> bool:
    """Whether ``--bind`` names a loopback address (``127.0.0.0/8``, ``::1``) or ``localhost``."""
    host = bind.strip().strip("[]")
    if host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def chat_enabled() -> bool:
    """Whether ``/`` serves the chat page (docs/api.md §13).

    Served when authentication is on (the page asks for a token), or without it on a loopback
    bind (only the machine's own users reach it, as the origin check intends); never with
    ``--no-ui`` (``AGENTS_NO_UI``).
    """
    if settings.AGENTS["NO_UI"]:
        return False
    return auth_config().enabled or is_loopback_bind(settings.AGENTS["BIND"])


def chat_page(request: HttpRequest) -> HttpResponse:
    """``GET /``: the chat page; 404 ``not_found`` when it is not served, 405 for another method.

    Answered without a token and before the origin check, as ``/healthz`` is; the page itself
    asks for the token when authentication is on and sends it with every API call.
    """
    if not chat_enabled():
        return json_error(NotFound(request.path))
    if request.method not in ("GET", "HEAD"):
        return json_error(MethodNotAllowed())
    config = {
        "auth": auth_config().enabled,
        "maxAttachmentBytes": settings.AGENTS["MAX_ATTACHMENT_BYTES"],
        "streamTokens": settings.AGENTS["STREAM_TOKENS"],
    }
    response = render(request, "chat/page.html", {"config": config})
    # the page holds no data of its own, but a cached copy would outlive a --no-ui restart
    response["Cache-Control"] = "no-store"
    return response
