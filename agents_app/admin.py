"""Stored agents in the Django admin (docs/decisions.md §17).

Operators create, edit and delete stored agents here with exactly the checks of
``PUT /v1/agents/:slug``: the form runs :func:`agents_app.services.stored_agent_prepare` (nothing is
stored when it refuses; the refusal is shown on the form) and saving runs
:func:`agents_app.services.stored_agent_commit`. ``updated_by`` is ``admin:<username>``.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.options import csrf_protect_m
from django.http import HttpRequest, HttpResponse

from agents_app import services
from agents_app.models import StoredAgent
from agentsite.errors import ApiError

admin.site.site_header = "agents-server"
admin.site.site_title = "agents-server"


class _PrettyJSONField(forms.JSONField):
    """A JSON text area that shows its value indented."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, str) or value is None:
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)


class StoredAgentForm(forms.ModelForm):
    """The agent's ``contents`` and ``files`` as JSON, checked by the stored-agent service."""

    contents = _PrettyJSONField(
        widget=forms.Textarea(attrs={"rows": 24, "cols": 100, "class": "vLargeTextField"}),
        help_text='What goes under "contents" in an agent file; the slug may be left out.',
    )
    files = _PrettyJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 12, "cols": 100, "class": "vLargeTextField"}),
        help_text="Relative path -> text. Every file is made executable (tools).",
    )

    class Meta:
        model = StoredAgent
        fields = ["slug"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prepared: services.PreparedAgent | None = None
        if self.instance.pk:
            self.initial.setdefault("contents", self.instance.contents)
            self.initial.setdefault("files", self.instance.files)

    def clean(self) -> dict[str, Any]:
        """Load the agent as the API would; its refusal becomes the form's error."""
        data = super().clean()
        slug = self.instance.pk or data.get("slug")
        contents, files = data.get("contents"), data.get("files")
        if self.errors or not slug:
            return data
        if not isinstance(contents, dict):
            self.add_error("contents", "must be a JSON object")
            return data
        body = {**contents, "files": files if files is not None else {}}
        try:
            self.prepared = services.stored_agent_prepare(slug, body)
        except ApiError as error:
            raise forms.ValidationError(f"{error.code}: {error.message}") from None
        return data


@admin.register(StoredAgent)
class StoredAgentAdmin(admin.ModelAdmin):
    """Stored agents: the same validation and storage as the API."""

    form = StoredAgentForm
    list_display = ("slug", "version", "helper_list", "updated_at", "updated_by")
    search_fields = ("slug",)
    readonly_fields = ("version", "helper_list", "created_at", "updated_at", "updated_by")

    @admin.display(description="helpers")
    def helper_list(self, obj: StoredAgent) -> str:
        """The helper slugs, comma-separated."""
        return ", ".join(obj.helpers or []) or "-"

    def get_readonly_fields(self, request: HttpRequest, obj: StoredAgent | None = None) -> tuple[str, ...]:
        """The slug is fixed once stored (another slug is another agent)."""
        fields = tuple(self.readonly_fields)
        return ("slug", *fields) if obj is not None else fields

    def get_fields(self, request: HttpRequest, obj: StoredAgent | None = None) -> list[str]:
        """The slug, the two JSON fields, then (once stored) the metadata."""
        editable = ["slug", "contents", "files"]
        return editable if obj is None else [*editable, *self.readonly_fields]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """No bulk delete: agents are deleted one at a time, so the in-use rule is shown per agent."""
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    @csrf_protect_m
    def changeform_view(
        self, request: HttpRequest, object_id: str | None = None, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        """The add and change pages, outside a transaction.

        Validating runs each tool's ``describe``; inside the admin's usual transaction that would
        hold SQLite's write lock (and so block every run) meanwhile. The store is a transaction of
        its own. The CSRF check of the stock view is kept.
        """
        return self._changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: StoredAgent, form: StoredAgentForm, change: bool) -> None:
        """Store the agent the form prepared, as ``PUT /v1/agents/:slug`` does."""
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
