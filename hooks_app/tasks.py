"""Celery tasks: the delivery of one webhook (docs/webhooks.md §4)."""

from __future__ import annotations

from celery import shared_task

from hooks_app.outbox import DELIVER_TASK, deliver


@shared_task(name=DELIVER_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def deliver_task(delivery_id: str) -> None:
    """Send one delivery once; a duplicate finds it held, delivered or not yet due, and exits."""
    deliver(delivery_id)
