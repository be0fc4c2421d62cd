"""Stored agents in the console (docs/guide-console.md §1; docs/decisions.md §17).

Operators edit an agent's fields, helpers and files with the checks of ``PUT /v1/agents/:slug``
(:class:`console_app.agent_form.StoredAgentForm`); "Check" loads the agent and lists what
``agents check`` would say, storing nothing; "Save" stores it through
:func:`agents_app.services.stored_agent_commit`, which keeps a version. ``updated_by`` is
``admin:<username>``. Editing needs Django's add or change permission on stored agents.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.options import csrf_protect_m
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from agents_app import services
from agents_app.models import StoredAgent
from agents_app.registry import get_registry
from agents_app.runtime import runtime_agent
from console_app.agent_form import StoredAgentForm
from foundation.errors import ApiError
from sessions_app.models import Session
from tools_app.toolset import ToolBuildError

admin.site.site_header = "agents-server"
admin.site.site_title = "agents-server"
admin.site.index_title = "Operators' console"

FIELDSETS = [
    (None, {"fields": ["slug", "announce"]}),
    ("Model", {"fields": ["modelUrl", "modelName", "flavor", "apiKeyId"]}),
    ("Prompt", {"fields": ["systemPrompt"]}),
    ("Tools", {"fields": ["toolDirectory", "helpers", "bashToolboxes", "mcpServers", "builtinToolboxes"]}),
    ("Tool-call policy", {"fields": ["policy_default", "policy_reason", "policy_rules"]}),
    (
        "Execution",
        {
            "classes": ["collapse"],
            "fields": [
                "executionMode",
                "maxConcurrency",
                "asyncCallTimeoutSeconds",
                "mailInToolResult",
                "interruptCompletions",
                "pauseCancelsCalls",
                "resumeOnAnyMail",
            ],
        },
    ),
    ("Parameters and sandboxes", {"classes": ["collapse"], "fields": ["parameters", "bindings", "fileSandboxes"]}),
    ("Other keys", {"classes": ["collapse"], "fields": ["other"]}),
]
STORED_FIELDS = ["version_links", "created_at", "updated_at", "updated_by"]


@admin.register(StoredAgent)
class StoredAgentAdmin(admin.ModelAdmin):
    """Stored agents: a form per field, a check before saving, every save a version."""

    form = StoredAgentForm
    change_form_template = "admin/agents_app/storedagent/change_form.html"
    list_display = ("slug", "llm", "tools_count", "session_count", "last_used", "version", "updated_at", "updated_by")
    search_fields = ("slug", "updated_by")
    readonly_fields = STORED_FIELDS

    def get_queryset(self, request: HttpRequest) -> QuerySet[StoredAgent]:
        """The agents with their sessions' count and latest activity (one query for the page)."""
        sessions = Session.objects.filter(agent_slug=OuterRef("slug")).order_by().values("agent_slug")
        return (
            super()
            .get_queryset(request)
            .annotate(
                sessions=Coalesce(Subquery(sessions.annotate(n=Count("id")).values("n")), 0),
                used=Subquery(sessions.annotate(at=Max("updated_at")).values("at")),
            )
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, str] | None = None) -> HttpResponse:
        """The list, reading the stored agents once for all its rows' tool counts (rendered inside
        the block, since the rows are counted while the template renders)."""
        with get_registry().one_look():
            response = super().changelist_view(request, extra_context)
            if isinstance(response, TemplateResponse):
                response.render()
            return response

    @admin.display(description="model")
    def llm(self, obj: StoredAgent) -> str:
        """``modelName`` at ``modelUrl``."""
        return f"{obj.contents.get('modelName', '?')} at {obj.contents.get('modelUrl', '?')}"

    @admin.display(description="tools")
    def tools_count(self, obj: StoredAgent) -> str:
        """How many tools the agent offers in this process (``-`` when it does not load)."""
        try:
            return str(len(runtime_agent(obj.slug).toolset.names()))
        except (ApiError, ToolBuildError):
            return "-"

    @admin.display(description="sessions", ordering="sessions")
    def session_count(self, obj: StoredAgent) -> int:
        """The sessions of this agent (helpers' child sessions included)."""
        return obj.sessions  # type: ignore[attr-defined]  # get_queryset annotates it; the model's stubs cannot know

    @admin.display(description="last used", ordering="used")
    def last_used(self, obj: StoredAgent) -> Any:
        """The latest change of any of its sessions."""
        return obj.used  # type: ignore[attr-defined]  # get_queryset annotates it; the model's stubs cannot know

    @admin.display(description="version")
    def version_links(self, obj: StoredAgent) -> str:
        """The current version and a link to every kept version."""
        url = reverse("admin:agents_app_storedagentversion_changelist") + f"?slug={obj.slug}"
        return format_html('{} &mdash; <a href="{}" id="agent-versions">all versions</a>', obj.version, url)

    def get_fieldsets(self, request: HttpRequest, obj: StoredAgent | None = None) -> list[Any]:
        """The editor's sections; once stored, the version and who stored it."""
        fieldsets = [(name, {**options, "fields": list(options["fields"])}) for name, options in FIELDSETS]
        if obj is not None:
            fieldsets[0][1]["fields"].remove("slug")
            fieldsets.append(("Stored", {"fields": STORED_FIELDS}))
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: StoredAgent | None = None) -> list[str]:
        """The slug is fixed once stored (another slug is another agent)."""
        return ["slug", *STORED_FIELDS] if obj is not None else STORED_FIELDS

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """No bulk delete: agents are deleted one at a time, so the in-use rule is shown per agent."""
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @csrf_protect_m
    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        """The add and change pages, outside a transaction; "Check" answers without storing.

        Validating writes the agent's files out and reads the stored agents; inside the admin's
        usual transaction that would hold SQLite's write lock (and so block every run) meanwhile.
        The store is a transaction of its own. The CSRF check of the stock view is kept.
        """
        if request.method == "POST" and "_check" in request.POST:
            return self._check_view(request, object_id, form_url, extra_context)
        return self._changeform_view(request, object_id, form_url, extra_context)  # type: ignore[attr-defined]  # Django's own private view, which django-stubs leaves out

    def _check_view(
        self, request: HttpRequest, object_id: str | None, form_url: str, extra_context: Any
    ) -> HttpResponse:
        """The page again, as typed, with the check's report (or the refusal at its fields)."""
        obj = self.get_object(request, unquote(object_id)) if object_id else None
        if object_id and obj is None:
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]  # Django's own private helper, which django-stubs leaves out
        allowed = self.has_change_permission(request, obj) if obj else self.has_add_permission(request)
        if not allowed:
            raise PermissionDenied
        form_class = self.get_form(request, obj, change=obj is not None)
        # get_form makes a subclass of this admin's form, StoredAgentForm
        form = cast(StoredAgentForm, form_class(request.POST, request.FILES, instance=obj))
        report = form.check_report() if form.is_valid() else None
        admin_form = helpers.AdminForm(
            form,
            self.get_fieldsets(request, obj),
            self.get_prepopulated_fields(request, obj),
            self.get_readonly_fields(request, obj),
            model_admin=self,
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Check {obj or 'a new stored agent'}",
            "subtitle": None,
            "adminform": admin_form,
            "object_id": object_id,
            "original": obj,
            "is_popup": False,
            "to_field": None,
            "media": self.media + admin_form.media,
            "inline_admin_formsets": [],
            "errors": helpers.AdminErrorList(form, []),
            "preserved_filters": self.get_preserved_filters(request),
            "check_report": report,
            **(extra_context or {}),
        }
        return self.render_change_form(request, context, add=obj is None, change=obj is not None, obj=obj)

    def save_model(self, request: HttpRequest, obj: StoredAgent, form: StoredAgentForm, change: bool) -> None:
        """Store the agent the form prepared, as ``PUT /v1/agents/:slug`` does (a new version)."""
        if form.prepared is None:  # clean() prepares every valid form
            raise ValueError("the stored agent form was saved without being validated")
        row, _ = services.stored_agent_commit(form.prepared, updated_by=f"admin:{request.user.get_username()}")
        for name in ("slug", "contents", "files", "helpers", "version", "created_at", "updated_at", "updated_by"):
            setattr(obj, name, getattr(row, name))

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, ...]:
        """Refuse on the confirmation page to delete a helper that other stored agents name."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        protected = list(protected)
        for obj in objs:
            dependents = services.stored_agent_dependents(obj.slug)
            if dependents:
                protected.append(f"{obj.slug} is a helper of {', '.join(dependents)}")
        return deleted, counts, perms_needed, protected

    def delete_model(self, request: HttpRequest, obj: StoredAgent) -> None:
        """Delete through the service (it re-checks the in-use rule and tells every process)."""
        services.stored_agent_delete(obj.slug)
