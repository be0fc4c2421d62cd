"""URL routes: each app's API, the OpenAPI document, the chat page and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from agentsite.chat import chat_page
from agentsite.metrics import MetricsViewSet
from console_app.dashboard import dashboard_view
from foundation.openapi import OpenApiDocumentViewSet
from foundation.threads import pooled

urlpatterns = [
    path("openapi.json", OpenApiDocumentViewSet.as_view({"get": "list"}), name="openapi"),
    path("metrics", pooled(MetricsViewSet.as_view({"get": "metrics"})), name="metrics"),
    path("", include("sessions_app.urls")),
    path("", include("agents_app.urls")),
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="console-dashboard"),
    path("", include("hooks_app.urls")),
    path("admin/", admin.site.urls),
    path("", chat_page, name="chat"),
]

handler400 = "foundation.errors.handler400"
handler404 = "foundation.access.not_found"
handler500 = "foundation.errors.handler500"
