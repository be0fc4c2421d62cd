"""URL routes: the REST API under /v1, health, the OpenAPI document and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.http import require_GET
from drf_spectacular.views import SpectacularJSONAPIView

from agents_app.apis import AgentDetailApi, AgentListApi
from sessions_app import sse
from sessions_app.apis import (
    ContinuationApi,
    SessionCancelApi,
    SessionCancelAttachedApi,
    SessionCollectionApi,
    SessionDetailApi,
    SessionForkApi,
    SessionMailApi,
    SessionMessagesApi,
    SessionPauseApi,
    SessionPendingApi,
    SessionResumeApi,
)
from sessions_app.models import Session
from sessions_app.owner_apis import SessionParamsApi, SessionTokenApi


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """``GET /healthz``: ``{"ok": true, "live_sessions": N, "active_runs": N}``.

    ``live_sessions`` counts sessions that are neither idle nor failed (work is pending or
    going on); ``active_runs`` counts sessions whose status is ``running``.
    """
    active = Session.objects.filter(status=Session.Status.RUNNING).count()
    live = Session.objects.exclude(status__in=[Session.Status.IDLE, Session.Status.FAILED]).count()
    return JsonResponse({"ok": True, "live_sessions": live, "active_runs": active})


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("v1/agents", AgentListApi.as_view(), name="agent-list"),
    path("v1/agents/<str:slug>", AgentDetailApi.as_view(), name="agent-detail"),
    path("v1/sessions", SessionCollectionApi.as_view(), name="session-collection"),
    path("v1/sessions/<str:session_id>", SessionDetailApi.as_view(), name="session-detail"),
    path("v1/sessions/<str:session_id>/messages", SessionMessagesApi.as_view(), name="session-messages"),
    path("v1/sessions/<str:session_id>/resume", SessionResumeApi.as_view(), name="session-resume"),
    path("v1/sessions/<str:session_id>/pending", SessionPendingApi.as_view(), name="session-pending"),
    path("v1/sessions/<str:session_id>/events", sse.session_events, name="session-events"),
    path("v1/sessions/<str:session_id>/mail", SessionMailApi.as_view(), name="session-mail"),
    path("v1/sessions/<str:session_id>/fork", SessionForkApi.as_view(), name="session-fork"),
    path("v1/sessions/<str:session_id>/pause", SessionPauseApi.as_view(), name="session-pause"),
    path("v1/sessions/<str:session_id>/cancel", SessionCancelApi.as_view(), name="session-cancel"),
    path(
        "v1/sessions/<str:session_id>/cancel-attached",
        SessionCancelAttachedApi.as_view(),
        name="session-cancel-attached",
    ),
    path("v1/events", sse.all_events, name="events"),
    path("v1/continuations/<str:token>", ContinuationApi.as_view(), name="continuation"),
    path("v1/sessions/<str:session_id>/params", SessionParamsApi.as_view(), name="session-params"),
    path("v1/sessions/<str:session_id>/token", SessionTokenApi.as_view(), name="session-token"),
    path("admin/", admin.site.urls),
]

handler400 = "agentsite.errors.handler400"
handler404 = "agentsite.errors.handler404"
handler500 = "agentsite.errors.handler500"
