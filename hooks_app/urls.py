"""The webhooks API's routes."""

from __future__ import annotations

from foundation.routers import ApiRouter
from hooks_app.views import WebhookViewSet

router = ApiRouter()
router.register("v1/webhooks", WebhookViewSet, basename="webhook")

urlpatterns = [*router.urls]
