"""The queue of deferred calls across sessions, and each session's mail, events and watches (docs/guide-console.md §1).

Every deferred call is a :class:`sessions_app.models.Continuation`. The list shows the calls
waiting for an answer first (oldest first), with filters on state, agent, tool, owner and age;
answered ones stay browsable under "answered" or "all". A waiting call is answered (text or
JSON) from its row or its page with :class:`CompleteCallForm`, through
:func:`sessions_app.services.continuations.continuation_complete`, as
``POST /v1/continuations/:token`` does. Reading the queue needs the view or the answer
permission of deferred calls; answering needs the answer permission
(``sessions_app.answer_continuation``), which editing agents does not imply nor need.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.timesince import timesince

from console_app.readonly import ReadOnlyAdmin
from console_app.sessions_admin import ANSWER_PERMISSION, CompleteCallForm
from foundation.errors import ApiError
from sessions_app.models import Continuation, Event, MailEnvelope, SessionWatch
from sessions_app.services import continuations

#: How many characters of a call's arguments its row in the queue shows.
ARGUMENTS_SHOWN = 120


def _can_answer(request: HttpRequest) -> bool:
    return request.user.has_perm(ANSWER_PERMISSION)


class StateFilter(admin.SimpleListFilter):
    """Waiting (the default), answered, or all."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """The three states offered (``None``, the default, means waiting)."""
        return [("answered", "answered"), ("all", "all")]

    def choices(self, changelist: Any) -> Any:
        """"waiting" in place of Django's "All", which is offered as its own choice."""
        for index, choice in enumerate(super().choices(changelist)):
            yield {**choice, "display": "waiting"} if index == 0 else choice

    def queryset(self, request: HttpRequest, queryset: QuerySet[Continuation]) -> QuerySet[Continuation]:
        """Filter on ``completed_at``."""
        if self.value() == "all":
            return queryset
        return queryset.filter(completed_at__isnull=self.value() != "answered")


class AgeFilter(admin.SimpleListFilter):
    """How long ago the call was deferred."""

    title = "age"
    parameter_name = "age"
    SPANS = {"hour": ("under an hour", timedelta(hours=1)), "day": ("under a day", timedelta(days=1))}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        """Under an hour, under a day, older."""
        return [*((key, label) for key, (label, _) in self.SPANS.items()), ("older", "a day or more")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Continuation]) -> QuerySet[Continuation]:
        """Filter on ``created_at``."""
        value = self.value()
        if value in self.SPANS:
            return queryset.filter(created_at__gt=timezone.now() - self.SPANS[value][1])
        if value == "older":
            return queryset.filter(created_at__lte=timezone.now() - timedelta(days=1))
        return queryset


@admin.register(Continuation)
class ContinuationAdmin(ReadOnlyAdmin):
    """Deferred calls: the queue of those waiting for a person, and the history of answers."""

    change_list_template = "admin/sessions_app/continuation/change_list.html"
    change_form_template = "admin/sessions_app/continuation/change_form.html"
    list_display = ("tool_name", "asked", "session_link", "agent", "owner", "age", "answered", "answer")
    list_filter = (StateFilter, ("session__agent_slug", admin.AllValuesFieldListFilter), "tool",
                   ("session__owner", admin.AllValuesFieldListFilter), AgeFilter)
    search_fields = ("=token", "=session__id", "tool", "session__agent_slug", "session__owner")
    list_select_related = ("session",)
    # a waiting call is answered from its row: 50 of them on a page (the queue's acceptance)
    list_per_page = 50
    # each filter's choices say how many calls they keep (the queue is filtered by agent, with counts)
    show_facets = admin.ShowFacets.ALWAYS
    ordering = ("created_at",)
    fields = ("token", "session_link", "agent", "owner", "tool", "arguments", "created_at", "completed_at", "outcome")
    readonly_fields = fields

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Whoever may answer calls may read them."""
        return super().has_view_permission(request, obj) or _can_answer(request)

    @admin.display(description="tool", ordering="tool")
    def tool_name(self, obj: Continuation) -> str:
        """The called tool."""
        return obj.tool or str((obj.call.get("function") or {}).get("name") or "?")

    @admin.display(description="session")
    def session_link(self, obj: Continuation) -> str:
        """A link to the session's page."""
        url = reverse("admin:sessions_app_session_change", args=[obj.session_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.session_id)[:8])

    @admin.display(description="agent", ordering="session__agent_slug")
    def agent(self, obj: Continuation) -> str:
        """The session's agent."""
        return obj.session.agent_slug

    @admin.display(description="owner", ordering="session__owner")
    def owner(self, obj: Continuation) -> str:
        """The session's owner (``-`` without authentication)."""
        return obj.session.owner or "-"

    @admin.display(description="age", ordering="created_at")
    def age(self, obj: Continuation) -> str:
        """How long ago the call was deferred."""
        return timesince(obj.created_at)

    @admin.display(description="answered", boolean=True)
    def answered(self, obj: Continuation) -> bool:
        """Whether a result was posted."""
        return obj.completed_at is not None

    @admin.display(description="arguments")
    def asked(self, obj: Continuation) -> str:
        """The call's arguments on one line, cut at :data:`ARGUMENTS_SHOWN` characters (the whole
        text in the cell's title): what is asked, read without opening the call."""
        text = " ".join(self.arguments(obj).split())
        short = text if len(text) <= ARGUMENTS_SHOWN else text[: ARGUMENTS_SHOWN - 1] + "…"
        return format_html('<span class="call-arguments" title="{}">{}</span>', text, short)

    @admin.display(description="arguments")
    def arguments(self, obj: Continuation) -> str:
        """The call's arguments, as the model wrote them."""
        return str((obj.call.get("function") or {}).get("arguments") or "")

    @admin.display(description="result")
    def outcome(self, obj: Continuation) -> str:
        """The posted result, as JSON (``-`` while waiting)."""
        return "-" if obj.completed_at is None else json.dumps(obj.result, ensure_ascii=False)

    @admin.display(description="answer")
    def answer(self, obj: Continuation) -> str:
        """Inputs of the row's answer form (the forms themselves follow the list: forms cannot nest)."""
        if obj.completed_at is not None:
            return "-"
        form_id = f"answer-{obj.pk}"
        return format_html(
            '<textarea name="result" rows="2" cols="22" form="{0}" aria-label="answer"></textarea> '
            '<select name="kind" form="{0}" aria-label="answer as"><option value="text">text</option>'
            '<option value="json">JSON</option>'
            '</select> <input type="submit" value="Answer" form="{0}">',
            form_id,
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list, with the answer forms of its waiting rows when the operator may answer."""
        return super().changelist_view(request, {**(extra_context or {}), "can_answer": _can_answer(request)})

    def get_list_display(self, request: HttpRequest) -> tuple[str, ...]:
        """No answer column for operators who may not answer."""
        shown = tuple(self.list_display)
        return shown if _can_answer(request) else shown[:-1]

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The call's page, with its answer form while it waits."""
        call = self.get_object(request, object_id)
        form = None
        if call is not None and call.completed_at is None and _can_answer(request):
            form = CompleteCallForm(prefix=str(call.pk))
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), "answer_form": form})

    def get_urls(self) -> list[URLPattern]:
        """The answer action, before the stock routes (whose ``<path:object_id>/`` would take it)."""
        view = self.admin_site.admin_view(self.answer_view)
        answer = path("<uuid:token>/answer/", view, name="sessions_app_continuation_answer")
        return [answer, *super().get_urls()]

    def answer_view(self, request: HttpRequest, token: Any) -> HttpResponse:
        """Answer one waiting call (POST ``result``, ``kind``, optional ``resume`` and ``next``).

        The form posted from a row carries no prefix and always resumes; the call's own page
        posts a prefixed :class:`CompleteCallForm`.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not _can_answer(request):
            raise PermissionDenied
        if not Continuation.objects.filter(pk=token).exists():
            raise Http404("no such deferred call")
        prefixed = f"{token}-result" in request.POST
        data = request.POST if prefixed else {**request.POST.dict(), "resume": "on"}
        form = CompleteCallForm(data, prefix=str(token) if prefixed else None)
        back = request.POST.get("next", "")
        if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}):
            back = reverse("admin:sessions_app_continuation_changelist")
        if not form.is_valid():
            for problems in form.errors.values():
                for problem in problems:
                    messages.error(request, str(problem))
            return HttpResponseRedirect(back)
        try:
            session = continuations.continuation_complete(
                token=token, result=form.tool_result(), resume=form.cleaned_data["resume"]
            )
        except ApiError as error:
            messages.error(request, f"{error.code}: {error.message}")
        else:
            call = Continuation.objects.get(pk=token)
            messages.success(request, f"Answered {self.tool_name(call)}; the session is {session.status}.")
        return HttpResponseRedirect(back)


@admin.register(MailEnvelope)
class MailEnvelopeAdmin(ReadOnlyAdmin):
    """Mail envelopes, per session (the session page links here filtered on it)."""

    list_display = ("session_id", "seq", "priority", "sender", "hops", "sent_at")
    list_filter = ("priority",)
    search_fields = ("=session__id", "=mail_id")
    ordering = ("session_id", "seq")
    fields = ("session", "seq", "mail_id", "sender", "priority", "hops", "body", "sent_at")
    readonly_fields = fields


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    """Stored events, per session (the session page links here filtered on it)."""

    list_display = ("seq", "session_id", "kind", "created_at")
    list_filter = ("kind",)
    search_fields = ("=session_id",)
    ordering = ("-seq",)
    fields = ("seq", "session_id", "owner", "kind", "payload_json", "created_at")
    readonly_fields = fields

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """``?session_id=`` (the session page's link) filters on the plain column."""
        return lookup == "session_id" or super().lookup_allowed(lookup, value, request)


@admin.register(SessionWatch)
class SessionWatchAdmin(ReadOnlyAdmin):
    """``watch-session`` watches: which session forwards its events to which, until when
    (docs/guide-sessions.md §3); a session's page links here filtered on it."""

    list_display = ("watcher_link", "watched_link", "watched_events", "tool", "created_at", "expires_at", "live")
    list_select_related = ("watcher", "watched")
    search_fields = ("=watcher__id", "=watched__id", "tool")
    ordering = ("-created_at",)
    fields = ("watcher", "watched", "events", "tool", "created_at", "expires_at")
    readonly_fields = fields

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """``?watcher__id__exact=`` and ``?watched__id__exact=`` (a session page's link) filter on the columns."""
        return lookup in ("watcher__id__exact", "watched__id__exact") or super().lookup_allowed(lookup, value, request)

    @admin.display(description="watcher")
    def watcher_link(self, obj: SessionWatch) -> str:
        """The watching session's page."""
        url = reverse("admin:sessions_app_session_change", args=[obj.watcher_id])
        return format_html('<a href="{}">{} {}</a>', url, obj.watcher.agent_slug, str(obj.watcher_id)[:8])

    @admin.display(description="watched")
    def watched_link(self, obj: SessionWatch) -> str:
        """The watched session's page."""
        url = reverse("admin:sessions_app_session_change", args=[obj.watched_id])
        return format_html('<a href="{}">{} {}</a>', url, obj.watched.agent_slug, str(obj.watched_id)[:8])

    @admin.display(description="events")
    def watched_events(self, obj: SessionWatch) -> str:
        """The event kinds forwarded (``all`` when the watch names none)."""
        return ", ".join(str(kind) for kind in obj.events or []) or "all"

    @admin.display(description="live", boolean=True)
    def live(self, obj: SessionWatch) -> bool:
        """Whether the watch is still before its deadline."""
        return obj.expires_at > timezone.now()
