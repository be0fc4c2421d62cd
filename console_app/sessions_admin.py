"""Sessions in the console (docs/guide-console.md §1; docs/decisions.md §17): read them, answer their
deferred calls.

A session's page puts the conversation (oldest first: user messages, assistant answers, tool
calls and their results) and its pending calls first, then links to follow it live on the chat
page and to its mail, events and deferred calls, then its metadata in a collapsed section. It is
rendered by the templates of ``templates/admin/sessions_app/session/``. Nothing is edited in
place: runs own the row. An operator with the answer permission
(``sessions_app.answer_continuation``) completes a pending call with a :class:`CompleteCallForm`
under the page, which goes through
:func:`sessions_app.services.continuations.continuation_complete` exactly as
``POST /v1/continuations/:token`` does (so the session resumes the same way).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse

from agentfiles import document as doc
from console_app.readonly import ReadOnlyAdmin
from foundation.errors import ApiError
from sessions_app.models import Continuation, Event, MailEnvelope, Session
from sessions_app.services import continuations

#: The permission to answer deferred calls (``Continuation.Meta.permissions``).
ANSWER_PERMISSION = "sessions_app.answer_continuation"
#: Events shown on a session's page, newest first.
EVENTS_SHOWN = 50
#: How many helper sessions a session's page links by name (the rest through the filtered list).
CHILDREN_SHOWN = 20
TEMPLATES = "admin/sessions_app/session"


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


def turn_view(turn: dict[str, Any]) -> dict[str, Any]:
    """What the conversation template shows of one turn: who speaks, the text, calls and results.

    Returns:
        ``{"role", "css", "thinking", "text", "calls": [label], "results": [(label, text)],
        "tracked": [(label, state, text)]}``.
    """
    tag = turn.get("tag")
    contents = turn.get("contents") or {}
    view: dict[str, Any] = {"thinking": None, "text": "", "calls": [], "results": [], "tracked": []}
    if tag == "LlmTurn":
        response = contents.get("llmResponse")
        view.update(
            role="Assistant",
            css="assistant",
            thinking=response.get("responseThinking") if isinstance(response, dict) else None,
            text=doc.response_text(contents),
            calls=[_call_label(call) for call in doc.tool_calls_of(contents)],
        )
    elif tag == "PartialUserTurn":
        view.update(
            role="Tool calls in progress",
            css="partial",
            tracked=[
                (_call_label(tc.get("tcCall") or {}), tc.get("tcState"), doc.render_tool_response(tc.get("tcResult")))
                for tc in doc.tracked_calls(turn)
            ],
        )
    else:
        query = _query_text(contents.get("userQuery"))
        view.update(
            role="User" if query else "Tool results",
            css="user",
            text=query,
            results=[
                (_call_label(call), doc.render_tool_response(response))
                for call, response in contents.get("userToolResponses") or []
            ],
        )
    return view


class CompleteCallForm(forms.Form):
    """The result of one pending deferred call, typed by an operator (text, or JSON)."""

    result = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 90}), required=False, strip=False)
    kind = forms.ChoiceField(choices=[("text", "text"), ("json", "JSON")], initial="text", label="as")
    resume = forms.BooleanField(required=False, initial=True, label="resume the session")

    def tool_result(self) -> Any:
        """The continuation ``result`` the form stands for (after :meth:`is_valid`)."""
        return self.cleaned_data["parsed"]

    def clean(self) -> dict[str, Any]:
        """Parse a JSON result; a text result is taken as it is."""
        data = super().clean()
        assert data is not None  # noqa: S101 - narrows the type (Form.clean answers cleaned_data)
        text = data.get("result", "")
        if data.get("kind") == "json":
            try:
                data["parsed"] = {"type": "json", "content": json.loads(text)}
            except ValueError as error:
                raise forms.ValidationError(f"The result is not valid JSON: {error}") from None
        else:
            data["parsed"] = text
        return data


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    """Sessions, read-only, with a form per pending call."""

    change_form_template = "admin/sessions_app/session/change_form.html"
    list_display = ("id", "agent_slug", "owner", "status", "version", "updated_at")
    list_filter = ("status", "agent_slug")
    search_fields = ("=id", "agent_slug", "owner")
    ordering = ("-updated_at",)
    fieldsets = (
        (None, {"fields": ("conversation", "pending_calls", "links", "usage")}),
        (
            "Metadata",
            {
                "classes": ("collapse",),
                "fields": (
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
                ),
            },
        ),
        ("Continuations and events", {"classes": ("collapse",), "fields": ("continuation_list", "recent_events")}),
    )
    # every field of these fieldsets stands alone (the stubs' type allows groups of fields too)
    readonly_fields = tuple(name for _, options in fieldsets for name in options["fields"] if isinstance(name, str))

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """``?parent__id__exact=`` (a session page's link to its helper sessions) filters on the column."""
        return lookup == "parent__id__exact" or super().lookup_allowed(lookup, value, request)

    def can_complete(self, request: HttpRequest) -> bool:
        """Whether the operator may answer pending calls (the answer permission of deferred calls)."""
        return request.user.has_perm(ANSWER_PERMISSION)

    @admin.display(description="conversation (oldest first)")
    def conversation(self, obj: Session) -> str:
        """Every turn, oldest first."""
        turns = [turn_view(turn) for turn in reversed(obj.parsed_document().get("turns") or [])]
        return render_to_string(f"{TEMPLATES}/conversation.html", {"turns": turns})

    @admin.display(description="pending calls")
    def pending_calls(self, obj: Session) -> str:
        """The deferred calls waiting for a result (the forms below the page complete them)."""
        calls = [(_call_label(c["call"]), c["continuation_token"]) for c in obj.pending_calls]
        return render_to_string(f"{TEMPLATES}/pending_calls.html", {"calls": calls})

    @admin.display(description="more")
    def links(self, obj: Session) -> str:
        """Follow the session live on the chat page; its calling session and helper sessions
        (the page of each, up to :data:`CHILDREN_SHOWN` children); its mail, events, deferred
        calls (waiting and all) and watches."""
        change = "admin:sessions_app_session_change"
        children = list(obj.children.order_by("created_at").only("id", "agent_slug", "status")[: CHILDREN_SHOWN + 1])
        calls = reverse("admin:sessions_app_continuation_changelist") + f"?session__id__exact={obj.pk}"
        return render_to_string(
            f"{TEMPLATES}/links.html",
            {
                "session": obj,
                "parent": reverse(change, args=[obj.parent_id]) if obj.parent_id else None,
                "children": [(reverse(change, args=[child.pk]), child) for child in children[:CHILDREN_SHOWN]],
                "more_children": len(children) > CHILDREN_SHOWN,
                "children_list": reverse("admin:sessions_app_session_changelist") + f"?parent__id__exact={obj.pk}",
                "waiting_calls": calls,
                "waiting_count": Continuation.objects.filter(session=obj, completed_at__isnull=True).count(),
                "watches": reverse("admin:sessions_app_sessionwatch_changelist") + f"?watcher__id__exact={obj.pk}",
                "live": f"/#session={obj.pk}",
                "mail": reverse("admin:sessions_app_mailenvelope_changelist") + f"?session__id__exact={obj.pk}",
                "events": reverse("admin:sessions_app_event_changelist") + f"?session_id={obj.pk}",
                "calls": reverse("admin:sessions_app_continuation_changelist")
                + f"?session__id__exact={obj.pk}&state=all",
                "mail_count": MailEnvelope.objects.filter(session=obj).count(),
                "event_count": Event.objects.filter(session_id=obj.pk).count(),
            },
        )

    @admin.display(description="usage")
    def usage(self, obj: Session) -> str:
        """The session's token and byte totals, as its API answer gives them (docs/console.md §1)."""
        return render_to_string(f"{TEMPLATES}/usage.html", {"usage": obj.usage_totals})

    @admin.display(description="continuations")
    def continuation_list(self, obj: Session) -> str:
        """Every continuation of the session, with when it was completed and applied."""
        rows = [
            (_call_label(c.call), c.token, c.completed_at, c.applied_at)
            for c in Continuation.objects.filter(session=obj).order_by("created_at")
        ]
        return render_to_string(f"{TEMPLATES}/continuations.html", {"rows": rows})

    @admin.display(description=f"latest events (up to {EVENTS_SHOWN})")
    def recent_events(self, obj: Session) -> str:
        """The newest stored events of the session."""
        rows = Event.objects.filter(session_id=obj.pk).order_by("-seq")[:EVENTS_SHOWN]
        return render_to_string(f"{TEMPLATES}/events.html", {"events": rows})

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
            calls = [
                {
                    **call,
                    "label": _call_label(call["call"]),
                    "form": CompleteCallForm(prefix=call["continuation_token"]),
                }
                for call in session.pending_calls
            ]
        return super().change_view(
            request, object_id, form_url, extra_context={**(extra_context or {}), "completable_calls": calls}
        )

    def complete_view(self, request: HttpRequest, object_id: str, token: uuid.UUID) -> HttpResponse:
        """Complete one deferred call of the session from the admin (POST of a :class:`CompleteCallForm`)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.can_complete(request):
            raise PermissionDenied
        continuation = Continuation.objects.filter(pk=token, session_id=object_id).first()
        if continuation is None:
            raise Http404("no such pending call")
        page = reverse("admin:sessions_app_session_change", args=[object_id])
        form = CompleteCallForm(request.POST, prefix=str(token))
        if not form.is_valid():
            for problems in form.errors.values():
                for problem in problems:
                    messages.error(request, str(problem))
            return HttpResponseRedirect(page)
        try:
            session = continuations.continuation_complete(
                token=continuation.pk, result=form.tool_result(), resume=form.cleaned_data["resume"]
            )
        except ApiError as error:
            messages.error(request, f"{error.code}: {error.message}")
        else:
            messages.success(request, f"Completed {_call_label(continuation.call)}; the session is {session.status}.")
        return HttpResponseRedirect(page)
