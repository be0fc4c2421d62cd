"""Sessions in the Django admin (docs/decisions.md §17): read them, and complete deferred calls.

A session's page shows its conversation oldest first (user messages, assistant answers, tool
calls and their results), its pending deferred calls, its continuations and its latest events.
Nothing is edited in place: runs own the row. An operator with the change permission completes
a pending call with a small form under the page, which goes through
:func:`sessions_app.services.continuation_complete` exactly as ``POST /v1/continuations/:token``
does (so the session resumes the same way).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from agentsite.errors import ApiError
from sessions_app import document as doc
from sessions_app.models import Continuation, Event, Session
from sessions_app.services import continuations

#: Events shown on a session's page, newest first.
EVENTS_SHOWN = 50
#: The separator of listed items (format_html_join escapes a plain string).
LINE_BREAK = mark_safe("<br>")


def _call_label(call: dict[str, Any]) -> str:
    """``name(arguments)`` of an OpenAI tool call."""
    function = call.get("function") or {}
    return f"{function.get('name') or '?'}({function.get('arguments') or ''})"


def _query_text(query: Any) -> str:
    if isinstance(query, dict):
        media = query.get("media") or []
        names = ", ".join(m.get("filename") or m.get("mimeType", "?") for m in media)
        return (query.get("text") or "") + (f" [attachments: {names}]" if names else "")
    return "" if query is None else str(query)


def _block(role: str, body: SafeString | str, css: str) -> SafeString:
    return format_html(
        '<div class="turn {}" style="margin:0 0 12px 0;padding:6px 10px;border-left:4px solid #999">'
        '<strong>{}</strong><div style="white-space:pre-wrap">{}</div></div>',
        css,
        role,
        body,
    )


def render_turn(turn: dict[str, Any]) -> SafeString:
    """One turn as HTML: who speaks, what they say, the calls and results it carries."""
    tag = turn.get("tag")
    contents = turn.get("contents") or {}
    if tag == "LlmTurn":
        parts = []
        thinking = (
            (contents.get("llmResponse") or {}).get("responseThinking")
            if isinstance(contents.get("llmResponse"), dict)
            else None
        )
        if thinking:
            parts.append(format_html("<em>thinking: {}</em>\n", thinking))
        parts.append(format_html("{}", doc.response_text(contents)))
        for call in doc.tool_calls_of(contents):
            parts.append(format_html("\n→ tool call <code>{}</code>", _call_label(call)))
        return _block("Assistant", format_html_join("", "{}", ((p,) for p in parts)), "assistant")
    if tag == "PartialUserTurn":
        rows = format_html_join(
            "\n",
            "<code>{}</code>: {} {}",
            (
                (_call_label(tc.get("tcCall") or {}), tc.get("tcState"), doc.render_tool_response(tc.get("tcResult")))
                for tc in doc.tracked_calls(turn)
            ),
        )
        return _block("Tool calls in progress", rows, "partial")
    results = format_html_join(
        "",
        "\n← result of <code>{}</code>: {}",
        (
            (_call_label(call), doc.render_tool_response(response))
            for call, response in contents.get("userToolResponses") or []
        ),
    )
    query = _query_text(contents.get("userQuery"))
    return _block("User" if query else "Tool results", format_html("{}{}", query, results), "user")


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    """Sessions, read-only, with a form per pending call."""

    change_form_template = "admin/sessions_app/session/change_form.html"
    list_display = ("id", "agent_slug", "owner", "status", "version", "updated_at")
    list_filter = ("status", "agent_slug")
    search_fields = ("=id", "agent_slug", "owner")
    ordering = ("-updated_at",)
    fields = (
        "id",
        "agent_slug",
        "owner",
        "parent",
        "status",
        "status_detail",
        "version",
        "created_at",
        "updated_at",
        "sealed",
        "params",
        "run_owner",
        "run_lease_until",
        "conversation",
        "pending_calls",
        "continuation_list",
        "recent_events",
    )
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        """Sessions are created over the API."""
        return False

    def has_change_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        """Runs own the row: the page is for reading (completing a call has its own form)."""
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Session | None = None) -> bool:
        """Deleting goes through the API, which cascades and emits events."""
        return False

    def can_complete(self, request: HttpRequest) -> bool:
        """Whether the operator may complete pending calls (Django's change permission on sessions)."""
        return request.user.has_perm("sessions_app.change_session")

    @admin.display(description="conversation (oldest first)")
    def conversation(self, obj: Session) -> SafeString:
        """Every turn, oldest first."""
        turns = list(reversed(obj.document.get("turns") or []))
        if not turns:
            return format_html("<em>{}</em>", "no turn yet")
        return format_html_join("", "{}", ((render_turn(turn),) for turn in turns))

    @admin.display(description="pending calls")
    def pending_calls(self, obj: Session) -> SafeString:
        """The deferred calls waiting for a result (the forms below the page complete them)."""
        calls = doc.pending_calls(obj.document)
        if not calls:
            return format_html("<em>{}</em>", "none")
        return format_html_join(
            LINE_BREAK, "<code>{}</code> (token {})", ((_call_label(c["call"]), c["continuation_token"]) for c in calls)
        )

    @admin.display(description="continuations")
    def continuation_list(self, obj: Session) -> SafeString:
        """Every continuation of the session, with when it was completed and applied."""
        rows = Continuation.objects.filter(session=obj).order_by("created_at")
        if not rows:
            return format_html("<em>{}</em>", "none")
        return format_html_join(
            LINE_BREAK,
            "<code>{}</code> {}: completed {}, applied {}",
            ((_call_label(c.call), c.token, c.completed_at or "-", c.applied_at or "-") for c in rows),
        )

    @admin.display(description=f"latest events (up to {EVENTS_SHOWN})")
    def recent_events(self, obj: Session) -> SafeString:
        """The newest stored events of the session."""
        rows = Event.objects.filter(session_id=obj.pk).order_by("-seq")[:EVENTS_SHOWN]
        if not rows:
            return format_html("<em>{}</em>", "none")
        return format_html_join(
            LINE_BREAK, "{} <code>{}</code> {}", ((e.seq, e.kind, e.created_at.isoformat()) for e in rows)
        )

    def get_urls(self) -> list[URLPattern]:
        """The completion form's target, before the stock routes (whose ``<path:object_id>/`` would take it)."""
        extra = [
            path(
                "<path:object_id>/complete/<uuid:token>/",
                self.admin_site.admin_view(self.complete_view),
                name="sessions_app_session_complete",
            )
        ]
        return extra + super().get_urls()

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The session's page, with a completion form per pending call."""
        session = self.get_object(request, object_id)
        calls = []
        if session is not None and self.can_complete(request):
            calls = [{**call, "label": _call_label(call["call"])} for call in doc.pending_calls(session.document)]
        return super().change_view(
            request, object_id, form_url, extra_context={**(extra_context or {}), "completable_calls": calls}
        )

    def complete_view(self, request: HttpRequest, object_id: str, token: uuid.UUID) -> HttpResponse:
        """Complete one deferred call of the session from the admin (POST).

        The form sends ``result`` (text), ``kind`` (``text`` or ``json``) and ``resume``.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.can_complete(request):
            raise PermissionDenied
        continuation = Continuation.objects.filter(pk=token, session_id=object_id).first()
        if continuation is None:
            raise Http404("no such pending call")
        page = reverse("admin:sessions_app_session_change", args=[object_id])
        text = request.POST.get("result", "")
        result: Any = text
        if request.POST.get("kind") not in ("text", "json"):
            messages.error(request, "Choose whether the result is text or JSON.")
            return HttpResponseRedirect(page)
        if request.POST.get("kind") == "json":
            try:
                result = {"type": "json", "content": json.loads(text)}
            except ValueError as error:
                messages.error(request, f"The result is not valid JSON: {error}")
                return HttpResponseRedirect(page)
        try:
            session = continuations.continuation_complete(
                token=continuation.pk, result=result, resume=request.POST.get("resume") == "on"
            )
        except ApiError as error:
            messages.error(request, f"{error.code}: {error.message}")
        else:
            messages.success(request, f"Completed {_call_label(continuation.call)}; the session is {session.status}.")
        return HttpResponseRedirect(page)
