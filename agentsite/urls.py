"""URL routes: each app's API, the OpenAPI document, the chat page and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from agentsite.chat import chat_page
from foundation.openapi import OpenApiDocumentViewSet

urlpatterns = [
    path("openapi.json", OpenApiDocumentViewSet.as_view({"get": "list"}), name="openapi"),
    path("", include("sessions_app.urls")),
    path("", include("agents_app.urls")),
    path("", include("hooks_app.urls")),
    path("admin/", admin.site.urls),
    path("", chat_page, name="chat"),
]

handler400 = "foundation.errors.handler400"
handler404 = "foundation.access.not_found"
handler500 = "foundation.errors.handler500"
