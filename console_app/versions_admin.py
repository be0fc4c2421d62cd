"""Kept versions of stored agents (docs/guide-console.md §1): a list, a page per version with its diff
against the previous one, and "restore this version", which stores it again through every check
of ``PUT /v1/agents/:slug`` (:func:`agents_app.services.stored_agent_restore`).

Reading versions needs the view (or change) permission on stored agents; restoring needs the
change permission.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse

from agents_app import services
from agents_app.models import StoredAgent, StoredAgentVersion
from console_app.diff import version_diff
from console_app.readonly import ReadOnlyAdmin
from foundation.errors import ApiError


def _can_edit(request: HttpRequest) -> bool:
    return request.user.has_perm("agents_app.change_storedagent")


@admin.register(StoredAgentVersion)
class StoredAgentVersionAdmin(ReadOnlyAdmin):
    """Read-only versions, newest first per agent, with a restore button on each page."""

    change_form_template = "admin/agents_app/storedagentversion/change_form.html"
    list_display = ("slug", "version", "current", "created_at", "created_by", "change_list", "restored_from")
    list_filter = ("slug",)
    search_fields = ("=slug", "created_by")
    ordering = ("slug", "-version")
    fields = ("slug", "version", "created_at", "created_by", "change_list", "restored_from")
    readonly_fields = fields

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whoever may read stored agents may read their versions."""
        return request.user.has_perm("agents_app.view_storedagent") or _can_edit(request)

    @admin.display(description="changes")
    def change_list(self, obj: StoredAgentVersion) -> str:
        """What this version changed, comma-separated."""
        return ", ".join(obj.changes or []) or "nothing"

    @admin.display(description="current", boolean=True)
    def current(self, obj: StoredAgentVersion) -> bool:
        """Whether this is the version stored now."""
        return StoredAgent.objects.filter(pk=obj.slug, version=obj.version).exists()

    def get_urls(self) -> list[URLPattern]:
        """The restore action, before the stock routes (whose ``<path:object_id>/`` would take it)."""
        restore = path(
            "<path:object_id>/restore/",
            self.admin_site.admin_view(self.restore_view),
            name="agents_app_storedagentversion_restore",
        )
        return [restore, *super().get_urls()]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The version's page: its diff against the previous kept version of the agent."""
        version = self.get_object(request, object_id)
        context: dict[str, Any] = {}
        if version is not None:
            previous = (
                StoredAgentVersion.objects.filter(slug=version.slug, version__lt=version.version)
                .order_by("-version")
                .first()
            )
            before = (previous.contents, previous.files) if previous else None
            context = {
                "diff": version_diff(before, (version.contents, version.files)),
                "previous": previous,
                "can_restore": _can_edit(request),
            }
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **context})

    def restore_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Store this version again (POST), then go to the agent's page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not _can_edit(request):
            raise PermissionDenied
        version = StoredAgentVersion.objects.filter(pk=object_id).first()
        if version is None:
            raise Http404("no such version")
        try:
            _, row = services.stored_agent_restore(
                version.slug, version.version, updated_by=f"admin:{request.user.get_username()}"
            )
        except ApiError as error:
            messages.error(request, f"{error.code}: {error.message}")
            return HttpResponseRedirect(reverse("admin:agents_app_storedagentversion_change", args=[version.pk]))
        messages.success(request, f"Restored version {version.version} of {row.slug} as version {row.version}.")
        return HttpResponseRedirect(reverse("admin:agents_app_storedagent_change", args=[row.slug]))
