"""Reading subscriptions and their deliveries, owner-scoped like sessions (docs/webhooks.md §6).

Authentication off: everything is visible. An owner sees their own subscriptions; an admin owner
(``--admin-owners``) sees everyone's. Someone else's subscription answers exactly as a missing
one: 404 ``unknown_webhook``.
"""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model, QuerySet

from foundation.api import parse_uuid
from foundation.auth import Principal
from foundation.errors import ApiError, UnknownDelivery, UnknownSchedule, UnknownWebhook
from hooks_app.models import Attempt, Delivery, Schedule, ScheduleRun, Webhook

_Row = TypeVar("_Row", bound=Model)


def _owned(query: QuerySet[_Row], principal: Principal) -> QuerySet[_Row]:
    """``query`` narrowed to what ``principal`` may see (the rule of the module's docstring)."""
    if principal.kind == "anonymous" or principal.admin:
        return query
    return query.filter(owner=principal.owner)


def _one(query: QuerySet[_Row], raw_id: str, missing: ApiError) -> _Row:
    """The row of ``query`` whose key is ``raw_id`` as written in the path, else ``missing``."""
    found = query.filter(pk=parse_uuid(raw_id, missing)).first()
    if found is None:
        raise missing
    return found


def visible_webhooks(principal: Principal) -> QuerySet[Webhook]:
    """The subscriptions ``principal`` may see, newest first."""
    return _owned(Webhook.objects.filter(one_off=False).order_by("-created_at"), principal)


def webhook_get(principal: Principal, webhook_id: str) -> Webhook:
    """The subscription ``webhook_id`` (as written in the path).

    Raises:
        UnknownWebhook: malformed, missing, or not visible to ``principal``.
    """
    return _one(visible_webhooks(principal), webhook_id, UnknownWebhook(webhook_id))


def visible_schedules(principal: Principal) -> QuerySet[Schedule]:
    """The schedules ``principal`` may see, newest first (the rule of :func:`visible_webhooks`)."""
    return _owned(Schedule.objects.order_by("-created_at"), principal)


def schedule_get(principal: Principal, schedule_id: str) -> Schedule:
    """The schedule ``schedule_id`` (as written in the path).

    Raises:
        UnknownSchedule: malformed, missing, or not visible to ``principal``.
    """
    return _one(visible_schedules(principal), schedule_id, UnknownSchedule(schedule_id))


def schedule_runs(schedule: Schedule, *, limit: int = 100) -> list[ScheduleRun]:
    """The schedule's newest ``limit`` firings, newest tick first."""
    return list(schedule.runs.order_by("-tick_at")[:limit])


def delivery_list(webhook: Webhook, *, limit: int = 100) -> list[Delivery]:
    """The subscription's newest ``limit`` deliveries, newest first, with their attempts."""
    return list(webhook.deliveries.order_by("-created_at", "-event_seq").prefetch_related("attempt_rows")[:limit])


def delivery_get(webhook: Webhook, delivery_id: str) -> Delivery:
    """Delivery ``delivery_id`` of ``webhook``.

    Raises:
        UnknownDelivery: missing, or of another subscription.
    """
    found = webhook.deliveries.filter(pk=delivery_id).first()
    if found is None:
        raise UnknownDelivery(delivery_id)
    return found


def attempts(delivery: Delivery) -> list[Attempt]:
    """The delivery's attempts, oldest first."""
    return list(delivery.attempt_rows.order_by("number"))
