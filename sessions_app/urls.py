"""The sessions API's routes: the viewsets behind the router, and the two event streams."""

from __future__ import annotations

from django.urls import path

from foundation.routers import ApiRouter
from foundation.threads import pooled
from sessions_app import sse
from sessions_app.mcp.http import McpViewSet
from sessions_app.usage_views import UsageViewSet
from sessions_app.views import ContinuationViewSet, HealthViewSet, SessionViewSet

router = ApiRouter()
router.register("v1/sessions", SessionViewSet, basename="session")
router.register("v1/continuations", ContinuationViewSet, basename="continuation")
router.register("v1/usage", UsageViewSet, basename="usage")

urlpatterns = [
    path("healthz", pooled(HealthViewSet.as_view({"get": "health"})), name="health"),
    path("mcp", pooled(McpViewSet.as_view({"post": "create"})), name="mcp"),
    path("v1/sessions/<str:session_id>/events", sse.session_events, name="session-events"),
    path("v1/events", sse.all_events, name="events"),
    *router.urls,
]
