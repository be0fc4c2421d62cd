"""The console's pages of webhooks and schedules (docs/webhooks.md): browse subscriptions (never
their secret), their deliveries with every attempt, and schedules with their next firing times
and firings; "send again" on deliveries goes through ``hooks_app.services.delivery_resend``, as
``POST /v1/webhooks/{id}/deliveries/{delivery_id}/resend`` does."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join

from console_app.readonly import ReadOnlyAdmin
from hooks_app import schedules, services
from hooks_app.models import Attempt, Delivery, Schedule, ScheduleRun, Webhook

#: The permission "send again" needs: changing deliveries (no page edits them otherwise).
RESEND_PERMISSION = "hooks_app.change_delivery"


class AttemptInline(admin.TabularInline):
    """Every attempt of a delivery, oldest first."""

    model = Attempt
    fields = readonly_fields = ("number", "started_at", "status_code", "latency_ms", "error", "response_head")
    extra = 0
    can_delete = False
    ordering = ["number"]

    def has_add_permission(self, request: HttpRequest, obj: Delivery | None = None) -> bool:
        """Attempts are made by senders."""
        return False


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdmin):
    """Subscriptions: URL, events, filters, and why a disabled one was disabled."""

    list_display = ["url", "owner", "events", "enabled", "disabled_reason", "failures_in_a_row", "created_at"]
    list_filter = ["enabled", "one_off", "owner"]
    search_fields = ["url", "owner", "description"]
    exclude = ["secret"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: each delivery's state and attempts, with "send again"."""

    list_display = ["id", "webhook", "event_kind", "session_id", "state", "attempts", "next_attempt_at", "created_at"]
    list_filter = ["state", "event_kind"]
    search_fields = ["id", "=session_id"]
    inlines = [AttemptInline]
    actions = ["send_again"]

    @admin.action(description="Send again", permissions=["resend"])
    def send_again(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        """Make each chosen delivery pending and due now, same ``webhook-id`` and body."""
        for delivery in queryset:
            services.delivery_resend(delivery)
        self.message_user(request, f"{queryset.count()} deliveries will be sent again", messages.SUCCESS)

    def has_resend_permission(self, request: HttpRequest) -> bool:
        """Whether the user may send deliveries again."""
        return request.user.has_perm(RESEND_PERMISSION)


class ScheduleRunInline(admin.TabularInline):
    """A schedule's firings, newest first."""

    model = ScheduleRun
    fields = readonly_fields = ("tick_at", "fired_at", "caught_up", "session_id", "error")
    extra = 0
    can_delete = False
    ordering = ["-tick_at"]

    def has_add_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        """Firings are made by the sweep."""
        return False


@admin.register(Schedule)
class ScheduleAdmin(ReadOnlyAdmin):
    """Schedules: agent, timing, and the next firing times."""

    list_display = ["agent", "owner", "cron", "interval_seconds", "timezone", "mode", "enabled", "next_fire_at"]
    list_filter = ["enabled", "mode", "owner"]
    search_fields = ["agent", "prompt", "owner"]
    readonly_fields = ["next_fire_times"]
    inlines = [ScheduleRunInline]

    @admin.display(description="next firing times")
    def next_fire_times(self, schedule: Schedule) -> str:
        """The next five firing times, one a line."""
        return format_html_join("", "<div>{}</div>", ((moment.isoformat(),) for moment in schedules.upcoming(schedule)))
