"""Writing subscriptions: create, change, delete, and send a delivery again (docs/webhooks.md §6)."""

from __future__ import annotations

import base64
import secrets
import uuid
from typing import Any

from django.db import transaction

from foundation.common import db_now
from hooks_app import outbox, sender
from hooks_app.models import Delivery, Webhook
from sessions_app import dispatch

#: Random bytes of a signing secret (the Standard Webhooks specification asks for 24 to 64).
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh signing secret: ``whsec_`` and the base64 of :data:`SECRET_BYTES` random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def webhook_create(
    *,
    owner: str | None,
    url: str,
    events: list[str],
    agent: str | None = None,
    session: uuid.UUID | None = None,
    description: str = "",
) -> Webhook:
    """Store a subscription of ``owner``, with a new secret (shown once, by the caller).

    Raises:
        WebhookUrlRefused: the URL breaks the outbound rules (docs/webhooks.md §7).
    """
    sender.check_url(url)
    now = db_now()
    return Webhook.objects.create(
        owner=owner,
        url=url,
        events=sorted(set(events)),
        agent=agent,
        session=session,
        description=description,
        secret=new_secret(),
        created_at=now,
        updated_at=now,
    )


def run_webhook_record(owner: str | None, session_id: uuid.UUID, url: str) -> None:
    """The handler of ``sessions_app.run_webhooks``: a one-off subscription to ``session_id``'s
    next ``run.stopped`` at ``url`` (docs/webhooks.md §10).

    Raises:
        WebhookUrlRefused: the URL breaks the outbound rules (docs/webhooks.md §7).
    """
    sender.check_url(url)
    now = db_now()
    Webhook.objects.create(
        owner=owner,
        url=url,
        events=["run.stopped"],
        session=session_id,
        one_off=True,
        secret=new_secret(),
        created_at=now,
        updated_at=now,
    )


def webhook_update(webhook: Webhook, changes: dict[str, Any]) -> Webhook:
    """Change the subscription's ``url``, ``events``, filters, ``description`` or ``enabled``;
    enabling it again clears ``disabled_reason`` and its failure count.

    Raises:
        WebhookUrlRefused: a new URL breaks the outbound rules.
    """
    if "url" in changes:
        sender.check_url(changes["url"])
    for name in ("url", "agent", "session", "description"):
        if name in changes:
            setattr(webhook, name, changes[name])
    if "events" in changes:
        webhook.events = sorted(set(changes["events"]))
    if changes.get("enabled") is True and not webhook.enabled:
        webhook.enabled, webhook.disabled_reason, webhook.failures_in_a_row = True, None, 0
    elif changes.get("enabled") is False:
        webhook.enabled, webhook.disabled_reason = False, "disabled by its owner"
    webhook.updated_at = db_now()
    webhook.save()
    return webhook


def webhook_delete(webhook: Webhook) -> None:
    """Delete the subscription with its deliveries and their attempts."""
    webhook.delete()


@transaction.atomic
def delivery_resend(delivery: Delivery) -> Delivery:
    """Make ``delivery`` pending and due now, with the same ``webhook-id`` and body, and send it
    after commit; its earlier attempts stay in the log and the new ones number on."""
    Delivery.objects.filter(pk=delivery.pk).update(
        state=Delivery.State.PENDING, next_attempt_at=db_now(), claimed_until=None, delivered_at=None
    )
    dispatch.enqueue_task(outbox.DELIVER_TASK, [delivery.pk])
    delivery.refresh_from_db()
    return delivery
