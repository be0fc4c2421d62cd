"""The webhooks and schedules REST API (docs/webhooks.md §6, §9): parse, call one service or selector, render."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents_app.runtime import runtime_agent
from foundation.api import ApiViewSet, error_responses, json_object_body
from foundation.auth import caller
from foundation.common import render
from hooks_app import schedules, selectors, services
from hooks_app.serializers import (
    DeliveryListSerializer,
    DeliverySerializer,
    ScheduleCreateSerializer,
    ScheduleListSerializer,
    ScheduleRunListSerializer,
    ScheduleSerializer,
    ScheduleUpdateSerializer,
    WebhookCreatedSerializer,
    WebhookCreateSerializer,
    WebhookListSerializer,
    WebhookSerializer,
    WebhookUpdateSerializer,
)
from sessions_app.selectors import require_visible
from sessions_app.serializers import validated
from sessions_app.services.params import check_request

WEBHOOK_ID = OpenApiParameter("webhook_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the subscription")
DELIVERY_ID = OpenApiParameter("delivery_id", str, OpenApiParameter.PATH, description="the delivery's webhook-id")


class WebhookViewSet(ApiViewSet):
    """``/v1/webhooks`` and everything under ``/v1/webhooks/:id``."""

    lookup_url_kwarg = "webhook_id"

    @extend_schema(operation_id="listWebhooks", responses={200: WebhookListSerializer, **error_responses(403)})
    def list(self, request: Request) -> Response:
        """The caller's subscriptions (an admin's: everyone's), newest first."""
        rows = list(selectors.visible_webhooks(caller(request)))
        return Response(render(WebhookListSerializer, {"webhooks": rows}))

    @extend_schema(
        operation_id="createWebhook",
        request=WebhookCreateSerializer,
        responses={201: WebhookCreatedSerializer, **error_responses(400, 403, 404)},
    )
    def create(self, request: Request) -> Response:
        """Subscribe; the answer holds the signing ``secret``, shown this once."""
        data = validated(WebhookCreateSerializer, json_object_body(request))
        _check_targets(request, data)
        webhook = services.webhook_create(owner=caller(request).owner, **data)
        headers = {"Location": f"/v1/webhooks/{webhook.pk}"}
        return Response(render(WebhookCreatedSerializer, webhook), status=201, headers=headers)

    @extend_schema(
        operation_id="getWebhook",
        parameters=[WEBHOOK_ID],
        responses={200: WebhookSerializer, **error_responses(403, 404)},
    )
    def retrieve(self, request: Request, webhook_id: str) -> Response:
        """One subscription; ``disabled_reason`` says why it was disabled."""
        return Response(render(WebhookSerializer, selectors.webhook_get(caller(request), webhook_id)))

    @extend_schema(
        operation_id="updateWebhook",
        parameters=[WEBHOOK_ID],
        request=WebhookUpdateSerializer,
        responses={200: WebhookSerializer, **error_responses(400, 403, 404)},
    )
    def partial_update(self, request: Request, webhook_id: str) -> Response:
        """Change a subscription; ``"enabled": true`` enables a disabled one again."""
        webhook = selectors.webhook_get(caller(request), webhook_id)
        changes = validated(WebhookUpdateSerializer, json_object_body(request))
        _check_targets(request, changes)
        return Response(render(WebhookSerializer, services.webhook_update(webhook, changes)))

    @extend_schema(
        operation_id="deleteWebhook", parameters=[WEBHOOK_ID], responses={204: None, **error_responses(403, 404)}
    )
    def destroy(self, request: Request, webhook_id: str) -> Response:
        """Delete a subscription and its delivery log."""
        services.webhook_delete(selectors.webhook_get(caller(request), webhook_id))
        return Response(status=204)

    @extend_schema(
        operation_id="listWebhookDeliveries",
        parameters=[WEBHOOK_ID],
        responses={200: DeliveryListSerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, webhook_id: str) -> Response:
        """The subscription's newest 100 deliveries, newest first, each with every attempt."""
        webhook = selectors.webhook_get(caller(request), webhook_id)
        return Response(render(DeliveryListSerializer, {"deliveries": selectors.delivery_list(webhook)}))

    @extend_schema(
        operation_id="resendWebhookDelivery",
        request=None,
        parameters=[WEBHOOK_ID, DELIVERY_ID],
        responses={202: DeliverySerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["post"], url_path=r"deliveries/(?P<delivery_id>[^/]+)/resend")
    def resend(self, request: Request, webhook_id: str, delivery_id: str) -> Response:
        """Send a delivery again, with the same ``webhook-id``; its new attempts join its log."""
        webhook = selectors.webhook_get(caller(request), webhook_id)
        delivery = services.delivery_resend(selectors.delivery_get(webhook, delivery_id))
        return Response(render(DeliverySerializer, delivery), status=202)


SCHEDULE_ID = OpenApiParameter("schedule_id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the schedule")


def _check_targets(request: Request, data: dict[str, Any], *, agent: str | None = None) -> None:
    """The agent (``data``'s, else ``agent``, the one stored) must be a root agent, the session
    named the caller's (404 ``unknown_agent`` / ``unknown_session`` otherwise), and a schedule's
    ``params`` the agent's, as a session's are checked when it is created (docs/api.md §7.15): a
    mistake is refused when it is made, not at every firing."""
    slug = data.get("agent") or agent
    found = runtime_agent(slug) if slug else None
    if data.get("session") is not None:
        require_visible(caller(request), data["session"])
    if found is not None and data.get("params") is not None:
        check_request(found, data["params"], caller=caller(request).owner)


class ScheduleViewSet(ApiViewSet):
    """``/v1/schedules`` and everything under ``/v1/schedules/:id`` (docs/webhooks.md §9)."""

    lookup_url_kwarg = "schedule_id"

    @extend_schema(operation_id="listSchedules", responses={200: ScheduleListSerializer, **error_responses(403)})
    def list(self, request: Request) -> Response:
        """The caller's schedules (an admin's: everyone's), newest first."""
        rows = list(selectors.visible_schedules(caller(request)))
        return Response(render(ScheduleListSerializer, {"schedules": rows}))

    @extend_schema(
        operation_id="createSchedule",
        request=ScheduleCreateSerializer,
        responses={201: ScheduleSerializer, **error_responses(400, 403, 404, 422)},
    )
    def create(self, request: Request) -> Response:
        """Schedule runs of an agent; the answer shows the next firing times."""
        data = validated(ScheduleCreateSerializer, json_object_body(request))
        _check_targets(request, data)
        schedule = schedules.schedule_create(owner=caller(request).owner, data=data)
        headers = {"Location": f"/v1/schedules/{schedule.pk}"}
        return Response(render(ScheduleSerializer, schedule), status=201, headers=headers)

    @extend_schema(
        operation_id="getSchedule",
        parameters=[SCHEDULE_ID],
        responses={200: ScheduleSerializer, **error_responses(403, 404)},
    )
    def retrieve(self, request: Request, schedule_id: str) -> Response:
        """One schedule and its next firing times."""
        return Response(render(ScheduleSerializer, selectors.schedule_get(caller(request), schedule_id)))

    @extend_schema(
        operation_id="updateSchedule",
        parameters=[SCHEDULE_ID],
        request=ScheduleUpdateSerializer,
        responses={200: ScheduleSerializer, **error_responses(400, 403, 404, 422)},
    )
    def partial_update(self, request: Request, schedule_id: str) -> Response:
        """Change a schedule; ``"enabled": false`` stops its firings."""
        schedule = selectors.schedule_get(caller(request), schedule_id)
        changes = validated(ScheduleUpdateSerializer, json_object_body(request))
        _check_targets(request, changes, agent=schedule.agent)
        return Response(render(ScheduleSerializer, schedules.schedule_update(schedule, changes)))

    @extend_schema(
        operation_id="deleteSchedule", parameters=[SCHEDULE_ID], responses={204: None, **error_responses(403, 404)}
    )
    def destroy(self, request: Request, schedule_id: str) -> Response:
        """Delete a schedule and its firings' log (the sessions it started stay)."""
        selectors.schedule_get(caller(request), schedule_id).delete()
        return Response(status=204)

    @extend_schema(
        operation_id="listScheduleRuns",
        parameters=[SCHEDULE_ID],
        responses={200: ScheduleRunListSerializer, **error_responses(403, 404)},
    )
    @action(detail=True, methods=["get"])
    def runs(self, request: Request, schedule_id: str) -> Response:
        """The schedule's newest 100 firings, each with the session it started or continued."""
        schedule = selectors.schedule_get(caller(request), schedule_id)
        return Response(render(ScheduleRunListSerializer, {"runs": selectors.schedule_runs(schedule)}))
