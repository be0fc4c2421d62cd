"""The webhooks API's routes."""

from __future__ import annotations

from foundation.routers import ApiRouter
from hooks_app.views import ScheduleViewSet, WebhookViewSet

router = ApiRouter()
router.register("v1/webhooks", WebhookViewSet, basename="webhook")
router.register("v1/schedules", ScheduleViewSet, basename="schedule")

urlpatterns = [*router.urls]
