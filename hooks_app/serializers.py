"""Request and answer shapes of ``/v1/webhooks`` (docs/webhooks.md §6)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from hooks_app.models import Attempt, Delivery, Webhook
from hooks_app.outbox import WEBHOOK_KINDS

#: Characters of a URL at most (longer ones are refused, 400).
MAX_URL_CHARS = 2048


class WebhookCreateSerializer(serializers.Serializer):
    """``POST /v1/webhooks``: where to send which event kinds, and the optional filters."""

    url = serializers.CharField(max_length=MAX_URL_CHARS, help_text="an http or https URL")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=sorted(str(kind) for kind in WEBHOOK_KINDS)),
        allow_empty=False,
        max_length=len(WEBHOOK_KINDS),
        help_text="the event kinds wanted",
    )
    agent = serializers.CharField(
        required=False, allow_null=True, max_length=200, help_text="only this agent's sessions"
    )
    session = serializers.UUIDField(
        required=False, allow_null=True, help_text="only this session and the sessions below it"
    )
    description = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class WebhookUpdateSerializer(WebhookCreateSerializer):
    """``PATCH /v1/webhooks/{id}``: any of the create fields, and ``enabled``."""

    enabled = serializers.BooleanField(required=False, help_text="true enables a disabled subscription again")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["partial"] = True
        super().__init__(*args, **kwargs)


class WebhookSerializer(serializers.ModelSerializer):
    """A subscription as answered: never its secret, except on create (:class:`WebhookCreatedSerializer`)."""

    webhook_id = serializers.UUIDField(source="id")
    events = serializers.ListField(child=serializers.CharField())

    class Meta:
        model = Webhook
        fields = [
            "webhook_id",
            "owner",
            "url",
            "events",
            "agent",
            "session",
            "description",
            "enabled",
            "disabled_reason",
            "failures_in_a_row",
            "created_at",
            "updated_at",
        ]


class WebhookCreatedSerializer(WebhookSerializer):
    """The answer to create: the subscription and its signing ``secret``, shown this once."""

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]


class WebhookListSerializer(serializers.Serializer):
    """``GET /v1/webhooks``."""

    webhooks = WebhookSerializer(many=True)


class AttemptSerializer(serializers.ModelSerializer):
    """One attempt: when, the HTTP status (``null``: no answer), milliseconds, the answer's first bytes."""

    class Meta:
        model = Attempt
        fields = ["number", "started_at", "status_code", "latency_ms", "response_head", "error"]


class DeliverySerializer(serializers.ModelSerializer):
    """A delivery: its ``webhook-id`` (``delivery_id``), its event, its state and every attempt."""

    delivery_id = serializers.CharField(source="id")
    attempt_log = AttemptSerializer(source="attempt_rows", many=True)

    class Meta:
        model = Delivery
        fields = [
            "delivery_id",
            "event_kind",
            "event_seq",
            "session_id",
            "state",
            "attempts",
            "next_attempt_at",
            "created_at",
            "delivered_at",
            "attempt_log",
        ]


class DeliveryListSerializer(serializers.Serializer):
    """``GET /v1/webhooks/{id}/deliveries``."""

    deliveries = DeliverySerializer(many=True)
