"""Request and answer shapes of ``/v1/webhooks`` (docs/webhooks.md §6)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from hooks_app.models import Attempt, Delivery, Schedule, ScheduleRun, Webhook
from hooks_app.outbox import WEBHOOK_KINDS
from hooks_app.schedules import upcoming
from sessions_app.serializers import StrictCharField, TextCharField

#: Characters of a URL at most (longer ones are refused, 400).
MAX_URL_CHARS = 2048


class StrictNumberField(serializers.FloatField):
    """A number field that takes JSON numbers only: not ``"60"``, not ``true`` (docs/api.md §1.6)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_URL_CHARS,
        "pattern": r"^[Hh][Tt][Tt][Pp][Ss]?://[^\s/?#]+([/?#][!-~]*)?$",
        "description": "an http or https URL",
    }
)
class UrlField(StrictCharField):
    """A subscription's URL. The outbound rules check it (docs/webhooks.md §7: 400
    ``webhook_url_refused``); the document says only that it is an http or https URL."""



class WebhookCreateSerializer(serializers.Serializer):
    """``POST /v1/webhooks``: where to send which event kinds, and the optional filters."""

    url = UrlField(min_length=1, max_length=MAX_URL_CHARS, help_text="an http or https URL")
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=sorted(str(kind) for kind in WEBHOOK_KINDS)),
        allow_empty=False,
        min_length=1,
        max_length=len(WEBHOOK_KINDS),
        help_text="the event kinds wanted",
    )
    agent = StrictCharField(
        required=False, allow_null=True, min_length=1, max_length=200, help_text="only this agent's sessions"
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


class ScheduleCreateSerializer(serializers.Serializer):
    """``POST /v1/schedules``: an agent, a prompt (and params), and exactly one of ``cron`` and
    ``interval_seconds``."""

    agent = StrictCharField(min_length=1, max_length=200)
    # text for the model, stored as sent (docs/api.md §1.6)
    prompt = TextCharField(min_length=1, max_length=100_000, trim_whitespace=False)
    params = serializers.DictField(required=False, allow_null=True, help_text="the sessions' parameters")
    cron = StrictCharField(
        required=False,
        allow_null=True,
        min_length=1,
        max_length=200,
        help_text="five fields: minute hour day month weekday",
    )
    interval_seconds = StrictNumberField(required=False, allow_null=True, help_text="seconds between two runs")
    timezone = StrictCharField(
        required=False, min_length=1, max_length=64, default="UTC", help_text="an IANA time zone"
    )
    mode = serializers.ChoiceField(
        choices=["new", "continue"], required=False, default="new", help_text="a new session each run, or one continued"
    )
    session = serializers.UUIDField(required=False, allow_null=True, help_text="the session continued (mode continue)")


class ScheduleUpdateSerializer(ScheduleCreateSerializer):
    """``PATCH /v1/schedules/{id}``: any of the create fields, and ``enabled``."""

    enabled = serializers.BooleanField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["partial"] = True
        super().__init__(*args, **kwargs)

    def to_internal_value(self, data: Any) -> Any:
        """Only the fields sent: the create defaults (``timezone``, ``mode``) do not apply."""
        values = super().to_internal_value(data)
        return {name: value for name, value in values.items() if name in data}


class ScheduleSerializer(serializers.ModelSerializer):
    """A schedule as answered, with its next firing times."""

    schedule_id = serializers.UUIDField(source="id")
    next_fire_times = serializers.SerializerMethodField()

    class Meta:
        model = Schedule
        fields = [
            "schedule_id",
            "owner",
            "agent",
            "prompt",
            "params",
            "cron",
            "interval_seconds",
            "timezone",
            "mode",
            "session",
            "enabled",
            "next_fire_times",
            "last_fired_at",
            "created_at",
            "updated_at",
        ]

    @extend_schema_field(serializers.ListField(child=serializers.DateTimeField()))
    def get_next_fire_times(self, schedule: Schedule) -> list[str]:
        """The next firing times (none while disabled)."""
        shown = serializers.DateTimeField()
        return [shown.to_representation(moment) for moment in upcoming(schedule)]


class ScheduleListSerializer(serializers.Serializer):
    """``GET /v1/schedules``."""

    schedules = ScheduleSerializer(many=True)


class ScheduleRunSerializer(serializers.ModelSerializer):
    """One firing: its tick, when it fired, whether it caught up missed ticks, its session or error."""

    class Meta:
        model = ScheduleRun
        fields = ["tick_at", "fired_at", "caught_up", "session_id", "error"]


class ScheduleRunListSerializer(serializers.Serializer):
    """``GET /v1/schedules/{id}/runs``."""

    runs = ScheduleRunSerializer(many=True)
