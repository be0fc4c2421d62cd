"""Subscriptions, the outbox of deliveries, and every attempt at sending one (docs/webhooks.md)."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q


class Webhook(models.Model):
    """An owner's subscription: where to send which events, and the secret that signs them.

    ``events`` is the list of event kinds wanted; ``agent`` and ``session`` narrow them (a session
    filter matches that session and its whole tree below). A subscription that keeps failing is
    disabled (``enabled`` false, ``disabled_reason`` says why) after
    ``AGENTS_WEBHOOK_DISABLE_AFTER`` failed deliveries in a row, or at once when the receiver
    answers 410 (docs/webhooks.md §5).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.TextField(null=True, blank=True)
    url = models.TextField()
    events = models.JSONField(default=list)
    agent = models.TextField(null=True, blank=True)
    session = models.UUIDField(null=True, blank=True)
    description = models.TextField(blank=True, default="")
    #: ``whsec_`` and base64: the Standard Webhooks secret format; never logged nor shown again.
    secret = models.TextField()
    enabled = models.BooleanField(default=True)
    #: made by a request's ``webhook`` URL: told of one run's end of ``session`` only, then
    #: disabled; never listed (docs/webhooks.md §10)
    one_off = models.BooleanField(default=False)
    disabled_reason = models.TextField(null=True, blank=True)
    failures_in_a_row = models.IntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            # outbox_write looks up the enabled subscriptions of an event's owner at every event it wants
            models.Index(fields=["owner"], name="webhook_enabled_owner", condition=Q(enabled=True)),
        ]

    def __str__(self) -> str:
        return f"{self.url} ({self.owner or 'no owner'})"


class Delivery(models.Model):
    """One event for one subscription: a row of the outbox, written with the event.

    PENDING -> DELIVERED | FAILED; ``resend`` makes a delivered or failed one PENDING again.
    ``id`` is the ``webhook-id`` of every attempt: receivers deduplicate on it. A sender holds
    the row while it sends (``claimed_until``); a sender that dies lets the hold run out and the
    sweep sends it again.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed"

    id = models.CharField(max_length=40, primary_key=True)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event_kind = models.CharField(max_length=64)
    event_seq = models.BigIntegerField()
    session_id = models.UUIDField()
    #: the exact bytes signed and sent (UTF-8 JSON), the same at every attempt
    body = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # the sweep (outbox.deliver_due) scans the pending rows that are due
            models.Index(fields=["next_attempt_at"], name="delivery_pending_due", condition=Q(state="pending")),
            models.Index(fields=["webhook", "session_id", "event_seq"], name="delivery_order"),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.event_kind} ({self.state})"


class Attempt(models.Model):
    """One try at sending a delivery: when, the HTTP status (``None``: no answer), how long it took
    and the first bytes of the answer, or why it was not sent (``error``)."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.IntegerField()
    started_at = models.DateTimeField()
    status_code = models.IntegerField(null=True, blank=True)
    latency_ms = models.IntegerField()
    response_head = models.TextField(blank=True, default="")
    error = models.TextField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["delivery", "number"], name="attempt_number_once")]

    def __str__(self) -> str:
        return f"{self.delivery_id} #{self.number}: {self.status_code or self.error}"


class Schedule(models.Model):
    """An owner's scheduled run: an agent, a prompt (and params), and when (docs/webhooks.md §9).

    Exactly one of ``cron`` (five fields, read in ``timezone``) and ``interval_seconds`` is set.
    ``next_fire_at`` is the next tick; the process whose conditional UPDATE moves it on fires
    that tick, so one firing happens per tick however many processes sweep. ``mode`` ``new``
    starts a session at each firing; ``continue`` posts the prompt to ``session`` (made at the
    first firing when not given).
    """

    class Mode(models.TextChoices):
        NEW = "new"
        CONTINUE = "continue"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.TextField(null=True, blank=True)
    agent = models.TextField()
    prompt = models.TextField()
    params = models.JSONField(null=True, blank=True)
    cron = models.TextField(null=True, blank=True)
    interval_seconds = models.FloatField(null=True, blank=True)
    timezone = models.TextField(default="UTC")
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.NEW)
    session = models.UUIDField(null=True, blank=True)
    enabled = models.BooleanField(default=True)
    next_fire_at = models.DateTimeField()
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            # schedules.fire_due scans the enabled schedules whose tick has come
            models.Index(fields=["next_fire_at"], name="schedule_enabled_due", condition=Q(enabled=True)),
        ]

    def __str__(self) -> str:
        return f"{self.agent} {self.cron or f'every {self.interval_seconds:g} s'} ({self.owner or 'no owner'})"


class ScheduleRun(models.Model):
    """One firing: the tick it is for, when it fired, whether it caught up missed ticks, and the
    session it started or continued (``error`` when it could not)."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    tick_at = models.DateTimeField()
    fired_at = models.DateTimeField()
    caught_up = models.BooleanField(default=False)
    session_id = models.UUIDField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["schedule", "tick_at"], name="schedule_run_once_per_tick")]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.tick_at}"
