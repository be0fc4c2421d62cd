"""The agents API's routes."""

from __future__ import annotations

from agents_app.views import AgentViewSet
from foundation.routers import ApiRouter

router = ApiRouter()
router.register("v1/agents", AgentViewSet, basename="agent")

urlpatterns = router.urls
