"""The port through which a request asks to be told when its run stops (docs/webhooks.md §10).

``POST /v1/sessions``, ``.../messages`` and ``.../resume`` take a ``webhook`` URL; the webhooks
app, a higher layer, registers the handler that records it at start
(:func:`register_run_webhook`). Without one the request is refused: a URL that would silently
never be called is worse than an error.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from foundation.errors import BadRequest

#: ``(owner, session_id, url)``: record a one-off notification of the session's next run end, in
#: the caller's transaction; raises an ``ApiError`` for a URL it refuses.
RunWebhookHandler = Callable[[str | None, uuid.UUID, str], None]
_handler: RunWebhookHandler | None = None


def register_run_webhook(handler: RunWebhookHandler | None) -> None:
    """Record ``webhook`` URLs with ``handler`` from now on (``None``: refuse them)."""
    global _handler
    _handler = handler


def request_run_webhook(*, owner: str | None, session_id: uuid.UUID, url: str) -> None:
    """Ask for one notification of ``session_id``'s next ``run.stopped`` at ``url``.

    Raises:
        BadRequest: no handler is registered.
        WebhookUrlRefused: the handler refuses the URL (docs/webhooks.md §7).
    """
    if _handler is None:
        raise BadRequest("this server sends no webhooks")
    _handler(owner, session_id, url)
