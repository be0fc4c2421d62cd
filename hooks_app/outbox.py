"""The outbox: deliveries written with their events, sent after commit, retried, and swept.

* :func:`outbox_write` is the event hook (``sessions_app.events.register_event_hook``): in the
  transaction that writes an event, one Delivery row per enabled subscription that wants it, and
  the send task enqueued for after the commit.
* :func:`deliver` is the task's body: take the row (a conditional UPDATE), sign, send once, log
  the attempt, and settle the row: delivered, due again later, or failed.
* :func:`deliver_due` is the periodic sweep: it sends again every pending row that is due and
  nobody holds, which is how retries happen and how a delivery whose sender died is sent again.

docs/webhooks.md §3-5 state the rules.
"""

from __future__ import annotations

import json
import logging
import random
import uuid
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from standardwebhooks.webhooks import Webhook as Signer

from foundation.common import db_now
from hooks_app import sender
from hooks_app.models import Attempt, Delivery, Webhook
from sessions_app import dispatch
from sessions_app.event_types import EventKind
from sessions_app.events import event_data
from sessions_app.models import Event, Session
from sessions_app.periodic import PeriodicTask

log = logging.getLogger("hooks.outbox")

#: The task that sends one delivery (``hooks_app.tasks``).
DELIVER_TASK = "hooks.deliver"
#: The periodic sweep's lease name.
SWEEP_TASK = "hooks.deliver_due"

#: The event kinds a subscription may ask for (docs/webhooks.md §2).
WEBHOOK_KINDS = frozenset(
    {
        EventKind.SESSION_CREATED,
        EventKind.SESSION_FAILED,
        EventKind.RUN_STARTED,
        EventKind.RUN_STOPPED,
        EventKind.CALLS_DEFERRED,
    }
)


def _ancestors(session_id: uuid.UUID) -> list[uuid.UUID]:
    """The session and its parents up to the root."""
    chain: list[uuid.UUID] = []
    current: uuid.UUID | None = session_id
    while current is not None and current not in chain:
        chain.append(current)
        current = Session.objects.filter(pk=current).values_list("parent_id", flat=True).first()
    return chain


def _matches(webhook: Webhook, event: Event) -> bool:
    if event.kind not in webhook.events:
        return False
    if webhook.one_off:
        return str(webhook.session) == str(event.session_id)
    if webhook.session is not None and webhook.session not in _ancestors(uuid.UUID(str(event.session_id))):
        return False
    if webhook.agent:
        agent = Session.objects.filter(pk=event.session_id).values_list("agent_slug", flat=True).first()
        if agent != webhook.agent:
            return False
    return True


def payload(event: Event) -> str:
    """The body of ``event``'s deliveries: ``{"type", "timestamp", "data"}`` (the Standard Webhooks
    layout), ``data`` the event's data as its streams carry it; over ``AGENTS_WEBHOOK_MAX_BODY_BYTES``,
    ``data`` keeps only its ``kind``, ``seq``, ``session_id`` and ``owner`` and says ``truncated``."""
    data = json.loads(event_data(event))
    body = {"type": event.kind, "timestamp": event.created_at.isoformat(), "data": data}
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    if len(text.encode()) > settings.AGENTS["WEBHOOK_MAX_BODY_BYTES"]:
        kept = {key: data[key] for key in ("kind", "seq", "session_id", "owner")}
        body["data"] = {**kept, "truncated": True}
        text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return text


def outbox_write(event: Event) -> None:
    """The event hook: a Delivery per enabled subscription of the event's owner that wants it, in
    the event's transaction, each sent once that transaction commits (docs/webhooks.md §3)."""
    if event.kind not in WEBHOOK_KINDS:
        return
    # an event's owner is its session's root's owner (sessions_app.events.emit)
    subscriptions = Webhook.objects.filter(enabled=True)
    if event.owner is not None:
        subscriptions = subscriptions.filter(owner=event.owner)
    else:
        subscriptions = subscriptions.filter(owner__isnull=True)
    wanted = [webhook for webhook in subscriptions if _matches(webhook, event)]
    if not wanted:
        return
    body, now = payload(event), db_now()
    rows = [
        Delivery(
            id=f"msg_{uuid.uuid4().hex}",
            webhook=webhook,
            event_kind=event.kind,
            event_seq=event.seq,
            session_id=event.session_id,
            body=body,
            next_attempt_at=now,
            created_at=now,
        )
        for webhook in wanted
    ]
    Delivery.objects.bulk_create(rows)
    one_offs = [webhook.pk for webhook in wanted if webhook.one_off]
    if one_offs:
        Webhook.objects.filter(pk__in=one_offs).update(enabled=False, disabled_reason="one-off: its run stopped")
    for row in rows:
        dispatch.enqueue_task(DELIVER_TASK, [row.id])


def retry_delays() -> list[float]:
    """Seconds before each retry, from ``AGENTS_WEBHOOK_RETRY_SECONDS`` (docs/webhooks.md §4)."""
    return list(settings.AGENTS["WEBHOOK_RETRY_SECONDS"])


def _lease() -> timedelta:
    return timedelta(seconds=settings.AGENTS["WEBHOOK_TIMEOUT_SECONDS"] * 2 + 5)


def _claim(delivery_id: str) -> Delivery | None:
    """Take the row for one attempt: pending, due, nobody holding it, and no earlier delivery of
    the same subscription and session still pending (order per session, docs/webhooks.md §4)."""
    now = db_now()
    row = Delivery.objects.filter(pk=delivery_id, state=Delivery.State.PENDING).first()
    if row is None:
        return None
    earlier = Delivery.objects.filter(
        webhook_id=row.webhook_id, session_id=row.session_id, event_seq__lt=row.event_seq, state=Delivery.State.PENDING
    )
    if earlier.exists():
        return None
    taken = (
        Delivery.objects.filter(pk=delivery_id, state=Delivery.State.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .update(claimed_until=now + _lease())
    )
    if taken != 1:
        return None
    return Delivery.objects.select_related("webhook").get(pk=delivery_id)


def _retryable(outcome: sender.Outcome) -> bool:
    """Timeouts, connection errors, 429 and 5xx are tried again; a refused URL, a redirect and
    any other 4xx are not."""
    if outcome.status is None:
        return not outcome.refused
    return outcome.status == 429 or outcome.status >= 500


def signed_headers(secret: str, delivery_id: str, body: str, at: datetime) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt: ``webhook-id``, ``webhook-timestamp`` (Unix
    seconds) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256>``, by the ``standardwebhooks``
    library)."""
    at = at.astimezone(UTC)
    return {
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Signer(secret).sign(delivery_id, at, body),
    }


def deliver(delivery_id: str) -> bool:
    """Send delivery ``delivery_id`` once, if it is due and this process can take it.

    Returns:
        Whether an attempt was made. The row ends delivered (2xx), due again after the next
        delay of :func:`retry_delays` (a retryable failure with retries left), or failed; a
        failed one counts against its subscription (:func:`_settle_subscription`).
    """
    row = _claim(delivery_id)
    if row is None:
        return False
    started = db_now()
    outcome = sender.send(row.webhook.url, row.body, signed_headers(row.webhook.secret, row.id, row.body, started))
    number = row.attempts + 1
    delivered = outcome.status is not None and 200 <= outcome.status < 300
    delays = retry_delays()
    with transaction.atomic():
        Attempt.objects.create(
            delivery=row,
            number=number,
            started_at=started,
            status_code=outcome.status,
            latency_ms=outcome.latency_ms,
            response_head=outcome.head,
            error=outcome.error,
        )
        fields: dict[str, object] = {"attempts": number, "claimed_until": None}
        if delivered:
            fields.update(state=Delivery.State.DELIVERED, delivered_at=db_now(), next_attempt_at=None)
        elif _retryable(outcome) and number <= len(delays):
            # jitter spreads the retries of many deliveries failing at once
            delay = delays[number - 1] * random.uniform(0.9, 1.1)  # noqa: S311 - jitter, not a secret
            fields.update(next_attempt_at=db_now() + timedelta(seconds=delay))
        else:
            fields.update(state=Delivery.State.FAILED, next_attempt_at=None)
        Delivery.objects.filter(pk=row.pk).update(**fields)
        if fields.get("state") is not None:
            _settle_subscription(row.webhook_id, delivered=delivered, status=outcome.status, error=outcome.error)
    log.info(
        "webhook attempt",
        extra={
            "kind": "webhook.attempt",
            "delivery_id": row.id,
            "webhook_id": str(row.webhook_id),
            "attempt": number,
            "status": outcome.status,
            "latency_ms": outcome.latency_ms,
        },
    )
    if delivered or fields.get("state") is not None:
        _send_next(row)
    return True


def _settle_subscription(webhook_id: uuid.UUID, *, delivered: bool, status: int | None, error: str | None) -> None:
    """Count a settled delivery against its subscription: a delivered one resets the count; a
    failed one adds one, and disables the subscription at ``AGENTS_WEBHOOK_DISABLE_AFTER`` in a
    row; a 410 disables it at once (docs/webhooks.md §5)."""
    webhook = Webhook.objects.select_for_update().get(pk=webhook_id)
    if delivered:
        webhook.failures_in_a_row = 0
    else:
        webhook.failures_in_a_row += 1
        if status == 410:
            webhook.enabled, webhook.disabled_reason = False, "the receiver answered 410 Gone"
        elif webhook.failures_in_a_row >= settings.AGENTS["WEBHOOK_DISABLE_AFTER"]:
            last = f"HTTP {status}" if status is not None else error
            webhook.enabled = False
            webhook.disabled_reason = f"{webhook.failures_in_a_row} deliveries failed in a row (last: {last})"
    webhook.updated_at = db_now()
    webhook.save(update_fields=["failures_in_a_row", "enabled", "disabled_reason", "updated_at"])


def _send_next(row: Delivery) -> None:
    """Send the next pending delivery of the same subscription and session, which waited for this one."""
    following = (
        Delivery.objects.filter(
            webhook_id=row.webhook_id,
            session_id=row.session_id,
            event_seq__gt=row.event_seq,
            state=Delivery.State.PENDING,
        )
        .order_by("event_seq")
        .values_list("id", flat=True)
        .first()
    )
    if following is not None:
        dispatch.send_task(DELIVER_TASK, [following])


def deliver_due(limit: int = 200) -> int:
    """The sweep: send again the pending deliveries that are due and that nobody holds (retries,
    and the deliveries of a sender that died). Returns how many were sent to a worker."""
    now = db_now()
    due = list(
        Delivery.objects.filter(state=Delivery.State.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
        .order_by("event_seq")
        .values_list("id", flat=True)[:limit]
    )
    for delivery_id in due:
        dispatch.send_task(DELIVER_TASK, [delivery_id])
    return len(due)


def sweep() -> None:
    """:func:`deliver_due`, as a periodic task."""
    deliver_due()


def periodic_tasks() -> list[PeriodicTask]:
    """The sweep, every ``AGENTS_WEBHOOK_SWEEP_SECONDS``, with the other periodic tasks."""
    return [PeriodicTask(SWEEP_TASK, settings.AGENTS["WEBHOOK_SWEEP_SECONDS"], sweep)]
