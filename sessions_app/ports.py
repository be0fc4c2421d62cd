"""The sessions as tools see them: ``tools_app.ports.SessionsPort`` over the database.

:class:`DbSessionsPort` is bound to the session whose tool call is running; it shows only that
session's owner's sessions, and only that session's own tool calls. Each method closes the
thread's database connection when done, since tools run in threads of their own.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.db import close_old_connections
from django.db.models import Q, QuerySet
from django.utils import timezone

from agentfiles import document as doc
from agents_app.runtime import runtime_agent
from sessions_app import hub
from sessions_app.background import CANCELLED_TEXT, ORPHANED_TEXT
from sessions_app.models import BackgroundCall, MailEnvelope, Session
from sessions_app.services import agentmail
from tools_app.ports import (
    Scope,
    SessionAccessDenied,
    SessionInfo,
    SessionNotFound,
    ToolCallInfo,
    ToolCallNotFound,
    WaitOutcome,
)

#: How often a wait for a tool call looks at the database (seconds).
POLL_SECONDS = 0.05
#: How often ``wait`` looks at the database when nothing announced a change (seconds).
WAIT_POLL_SECONDS = 0.25
#: How far up and down the session tree introspection walks.
MAX_TREE_DEPTH = 64

_CALL_STATES: dict[str, str] = {
    BackgroundCall.State.COMPLETED: "completed",
    BackgroundCall.State.FAILED: "failed",
    BackgroundCall.State.CANCELLED: "cancelled",
}


@contextmanager
def _connection_closed() -> Iterator[None]:
    try:
        yield
    finally:
        close_old_connections()


class DbSessionsPort:
    """``SessionsPort`` for the calling session ``session_id`` (a UUID string)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id

    # --- sessions ---------------------------------------------------------------------------

    def _owned(self) -> QuerySet[Session]:
        owner = Session.objects.filter(pk=self.session_id).values_list("owner", flat=True).first()
        return Session.objects.filter(owner=owner) if owner is not None else Session.objects.filter(owner__isnull=True)

    def _relatives(self, owned: QuerySet[Session]) -> tuple[set[str], set[str]]:
        """``(ancestors, descendants)`` of the calling session: through ``parent`` (sub-sessions)
        and ``forked_from`` (forks), within its owner's sessions."""
        ancestors: set[str] = set()
        current = owned.filter(pk=self.session_id).values("parent_id", "forked_from").first()
        frontier = [current] if current else []
        for _ in range(MAX_TREE_DEPTH):
            ids = {str(v) for row in frontier for v in (row["parent_id"], row["forked_from"]) if v} - ancestors
            ids.discard(self.session_id)
            if not ids:
                break
            ancestors |= ids
            frontier = list(owned.filter(pk__in=ids).values("parent_id", "forked_from"))
        descendants: set[str] = set()
        level = {self.session_id}
        for _ in range(MAX_TREE_DEPTH):
            found = owned.filter(Q(parent_id__in=level) | Q(forked_from__in=level)).values_list("pk", flat=True)
            level = {str(pk) for pk in found} - descendants - {self.session_id}
            if not level:
                break
            descendants |= level
        return ancestors, descendants

    def _in_scope(self, scope: Scope) -> tuple[QuerySet[Session], set[str], set[str]]:
        owned = self._owned()
        ancestors, descendants = self._relatives(owned)
        allowed = {
            "parents-only": ancestors,
            "children-only": descendants,
            "subtree": ancestors | descendants | {self.session_id},
        }.get(scope)
        query = owned if allowed is None else owned.filter(pk__in=allowed)
        return query, ancestors, descendants

    def _info(self, row: Session, ancestors: set[str], descendants: set[str]) -> SessionInfo:
        key = str(row.pk)
        relation: Literal["self", "parent", "child", "other"]
        relation = "self" if key == self.session_id else "parent" if key in ancestors else "other"
        if key in descendants:
            relation = "child"
        return SessionInfo(
            session_id=key,
            agent=row.agent_slug,
            status=row.status,
            updated_at=row.updated_at,
            turns=row.parsed_document().get("turns") or [],
            relation=relation,
            locked=row.run_owner is not None and row.status == Session.Status.RUNNING,
        )

    def sessions(self, scope: Scope, *, limit: int, contains: str | None = None) -> tuple[list[SessionInfo], int]:
        """See ``tools_app.ports.SessionsPort.sessions``."""
        with _connection_closed():
            query, ancestors, descendants = self._in_scope(scope)
            total = query.count()
            if contains:
                query = query.filter(
                    Q(header_json__icontains=contains) | Q(turn_rows__turn_json__icontains=contains)
                ).distinct()
            rows = list(query.order_by("-updated_at")[:limit])
            return [self._info(row, ancestors, descendants) for row in rows], total

    def session(self, session_id: str, scope: Scope) -> SessionInfo:
        """See ``tools_app.ports.SessionsPort.session``."""
        try:
            wanted = str(uuid.UUID(session_id))
        except ValueError:
            raise SessionNotFound(session_id) from None
        with _connection_closed():
            query, ancestors, descendants = self._in_scope(scope)
            row = query.filter(pk=wanted).first()
            if row is None:
                if self._owned().filter(pk=wanted).exists():
                    raise SessionAccessDenied(session_id)
                raise SessionNotFound(session_id)
            return self._info(row, ancestors, descendants)

    # --- tool calls -------------------------------------------------------------------------

    def _row(self, tool_call_id: str) -> BackgroundCall | None:
        rows = BackgroundCall.objects.filter(session_id=self.session_id)
        matching = rows.filter(Q(provider_call_id=tool_call_id) | Q(tool_call_id=tool_call_id))
        return matching.order_by("-created_at").first()

    def _from_row(self, row: BackgroundCall) -> ToolCallInfo:
        status = _CALL_STATES.get(row.state, "running")
        if status == "running":
            stale = timezone.now() - timedelta(seconds=settings.AGENTS["LEASE_SECONDS"])
            if row.heartbeat_at < stale:
                status = "orphaned"
        return ToolCallInfo(
            tool_call_id=row.provider_call_id or row.tool_call_id,
            internal_id=row.tool_call_id,
            tool_name=row.tool,
            status=status,
            started_at=row.created_at,
            completed_at=row.finished_at,
            result=row.result if status != "running" else None,
        )

    def _from_history(self, tool_call_id: str) -> ToolCallInfo | None:
        """A call that never ran in the background, as the session document tells it."""
        session = Session.objects.filter(pk=self.session_id).first()
        turns = (session.parsed_document().get("turns") or []) if session else []
        for turn in turns:
            if turn.get("tag") == "PartialUserTurn":
                for tracked in doc.tracked_calls(turn):
                    call = tracked.get("tcCall") or {}
                    if tool_call_id in (call.get("id"), tracked.get("tcId")):
                        return _tracked_info(tracked, call)
            elif turn.get("tag") == "UserTurn":
                for call, response in (turn.get("contents") or {}).get("userToolResponses") or []:
                    if call.get("id") == tool_call_id:
                        status = "cancelled" if response == CANCELLED_TEXT else "completed"
                        return _call_info(call, tool_call_id, status, response)
        return None

    def _find(self, tool_call_id: str) -> ToolCallInfo:
        row = self._row(tool_call_id)
        found = self._from_row(row) if row is not None else self._from_history(tool_call_id)
        if found is None:
            raise ToolCallNotFound(tool_call_id)
        return found

    def tool_call(self, tool_call_id: str, *, wait_seconds: float = 0.0) -> ToolCallInfo:
        """See ``tools_app.ports.SessionsPort.tool_call``."""
        deadline = time.monotonic() + wait_seconds
        with _connection_closed():
            found = self._find(tool_call_id)
            while not found.is_final and time.monotonic() < deadline:
                time.sleep(POLL_SECONDS)
                found = self._find(tool_call_id)
            return found

    def running_tool_calls(self) -> list[ToolCallInfo]:
        """See ``tools_app.ports.SessionsPort.running_tool_calls``."""
        with _connection_closed():
            rows = BackgroundCall.objects.filter(session_id=self.session_id, state=BackgroundCall.State.RUNNING)
            calls = [self._from_row(row) for row in rows.order_by("created_at")]
            session = Session.objects.filter(pk=self.session_id).first()
            head = doc.head(session.parsed_document()) if session else None
            if head is not None and head.get("tag") == "PartialUserTurn":
                for tracked in doc.tracked_calls(head):
                    if tracked["tcState"] in ("Deferred", "Ready"):
                        calls.append(_tracked_info(tracked, tracked.get("tcCall") or {}))
            return [call for call in calls if not call.is_final]

    def cancel_tool_call(self, tool_call_id: str) -> tuple[bool, str]:
        """See ``tools_app.ports.SessionsPort.cancel_tool_call``."""
        with _connection_closed():
            row = self._row(tool_call_id)
            if row is None:
                return False, self._find(tool_call_id).status
            previous = self._from_row(row).status
            if row.state != BackgroundCall.State.RUNNING or previous == "orphaned":
                return False, previous
            changed = BackgroundCall.objects.filter(pk=row.pk, state=BackgroundCall.State.RUNNING).update(
                cancel_requested=True
            )
            return changed == 1, previous

    # --- mail (docs/guide-sessions.md §3) -------------------------------------------------

    def send_message(
        self, to: str, text: str, *, in_reply_to: str | None, expects_reply: bool, interrupt: bool
    ) -> dict[str, Any]:
        """See ``tools_app.ports.MailPort.send_message``."""
        with _connection_closed():
            return agentmail.message_send(
                sender_id=self.session_id,
                to=to,
                text=text,
                in_reply_to=in_reply_to,
                expects_reply=expects_reply,
                interrupt=interrupt,
            )

    def spawn_session(self, agent: str, message: str) -> dict[str, Any]:
        """See ``tools_app.ports.MailPort.spawn_session``."""
        with _connection_closed():
            return agentmail.session_spawn(parent_id=self.session_id, agent=agent, message=message)

    def watch_session(self, session: str, events: list[str], tool: str | None, ttl_seconds: float) -> dict[str, Any]:
        """See ``tools_app.ports.MailPort.watch_session``."""
        with _connection_closed():
            return agentmail.watch_create(
                watcher_id=self.session_id, session=session, events=events, tool=tool, ttl=ttl_seconds
            )

    def unwatch_session(self, session: str) -> dict[str, Any]:
        """See ``tools_app.ports.MailPort.unwatch_session``."""
        with _connection_closed():
            return agentmail.watch_delete(watcher_id=self.session_id, session=session)

    def _unread_messages(self) -> int:
        session = Session.objects.filter(pk=self.session_id).first()
        if session is None:
            return 0
        cursor = int(session.parsed_document().get("mailCursor") or 0)
        bodies = MailEnvelope.objects.filter(session_id=self.session_id, seq__gt=cursor).values_list("body", flat=True)
        return sum(1 for body in bodies if body.get("tag") != "control")

    def _final_call(self, calls: list[str] | Literal["any-call"], running: set[str]) -> str | None:
        if calls == "any-call":
            finished = BackgroundCall.objects.filter(pk__in=running).exclude(state=BackgroundCall.State.RUNNING)
            row = finished.order_by("finished_at").first()
            return (row.provider_call_id or row.tool_call_id) if row is not None else None
        return next((call_id for call_id in calls if self._find(call_id).is_final), None)

    def wait(
        self,
        calls: list[str] | Literal["any-call"] | None,
        timeout_seconds: float,
        cancel: threading.Event | None = None,
    ) -> WaitOutcome:
        """See ``tools_app.ports.MailPort.wait``: woken by this session's announcements (new
        mail, stored steps) and otherwise looking every :data:`WAIT_POLL_SECONDS`."""
        with _connection_closed(), hub.SessionWatch(self.session_id) as watch:
            slug = Session.objects.filter(pk=self.session_id).values_list("agent_slug", flat=True).get()
            timeout = min(timeout_seconds, runtime_agent(slug).loaded.spec.maxWaitSeconds)
            deadline = time.monotonic() + timeout
            running: set[str] = set()
            if calls == "any-call":
                rows = BackgroundCall.objects.filter(session_id=self.session_id, state=BackgroundCall.State.RUNNING)
                running = {str(pk) for pk in rows.values_list("pk", flat=True)}
            while True:
                unread = self._unread_messages()
                if unread:
                    return WaitOutcome(woken_by="mail", tool_call_id=None, unread=unread)
                final = self._final_call(calls, running) if calls is not None else None
                if final is not None:
                    return WaitOutcome(woken_by="call", tool_call_id=final, unread=0)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (cancel is not None and cancel.is_set()) or hub.shutting_down.is_set():
                    return WaitOutcome(woken_by="timeout", tool_call_id=None, unread=0)
                watch.wait(min(remaining, WAIT_POLL_SECONDS))


def _call_info(call: dict[str, Any], internal_id: str, status: str, result: Any) -> ToolCallInfo:
    return ToolCallInfo(
        tool_call_id=str(call.get("id") or internal_id),
        internal_id=internal_id,
        tool_name=(call.get("function") or {}).get("name") or "",
        status=status,
        started_at=None,
        completed_at=None,
        result=result,
    )


def _tracked_info(tracked: dict[str, Any], call: dict[str, Any]) -> ToolCallInfo:
    state, result = tracked.get("tcState"), tracked.get("tcResult")
    if state == "Completed":
        status = "completed"
    elif state == "Failed":
        status = "cancelled" if result == CANCELLED_TEXT else "orphaned" if result == ORPHANED_TEXT else "failed"
    elif state == "Running":
        status, result = "orphaned", None  # running without a background row: its process is gone
    else:
        status, result = "pending", None
    return _call_info(call, str(tracked.get("tcId")), status, result)
