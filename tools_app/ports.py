"""What tools may ask of the sessions around them, without importing the sessions app.

The System toolbox reads sessions (``list-sessions``, ``read-session``, ...) and the calling
session's own tool calls (``get-tool-call-status``, ``cancel-tool-call``, ...), and sends mail
(``send-message``, ``spawn-session``, ``watch-session``, ``wait``, ...). It does so through
:class:`SessionsPort`; ``sessions_app`` implements it over the database, bound to the calling
session, and hands it to each call in ``ToolContext.sessions``. Every answer comes from the
database, so it is the same whichever worker runs the call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

#: Which sessions introspection may see, relative to the calling session: its ancestors (the
#: sessions it is a sub-session or a fork of), its descendants, both with itself, or all the
#: sessions of its owner.
Scope = Literal["parents-only", "children-only", "subtree", "all"]

#: The statuses of a tool call (a final one never changes again).
FINAL_CALL_STATUSES = frozenset({"completed", "failed", "cancelled", "orphaned"})


class SessionNotFound(Exception):
    """No session with that id for the caller's owner (or the id is not a session id)."""


class SessionAccessDenied(Exception):
    """The session exists but lies outside the introspection scope."""


class ToolCallNotFound(Exception):
    """The calling session has no tool call with that id."""


@dataclass(frozen=True)
class SessionInfo:
    """One session as introspection sees it.

    Attributes:
        session_id: its id (a UUID string).
        agent: its agent's slug.
        status: its status (``idle``, ``running``, ...).
        updated_at: when it last changed (aware).
        turns: its turns, newest first (session-document JSON).
        relation: ``self``, ``parent`` (an ancestor of the caller), ``child`` (a descendant) or
            ``other``.
        locked: whether a run holds it now.
    """

    session_id: str
    agent: str
    status: str
    updated_at: datetime
    turns: list[dict[str, Any]]
    relation: Literal["self", "parent", "child", "other"]
    locked: bool


@dataclass(frozen=True)
class ToolCallInfo:
    """One tool call of the calling session.

    Attributes:
        tool_call_id: the model's id (``call_...``) when there is one, else the internal id.
        internal_id: the id the session document tracks it by.
        tool_name: the tool's wire name.
        status: ``pending`` (waiting for an external result), ``running``, ``completed``,
            ``failed``, ``cancelled`` or ``orphaned`` (its process died).
        started_at, completed_at: when known.
        result: the tool response once final, else ``None``.
    """

    tool_call_id: str
    internal_id: str
    tool_name: str
    status: str
    started_at: datetime | None
    completed_at: datetime | None
    result: Any

    @property
    def is_final(self) -> bool:
        """Whether the status can no longer change."""
        return self.status in FINAL_CALL_STATUSES


class SendRefused(Exception):
    """Mail the sessions app would not accept (docs/guide-sessions.md §3).

    Attributes:
        code: ``unknown_recipient`` (no such session for the caller's owner), ``not_permitted``
            (outside the sender's ``mailScope`` or ``interruptScope``, or not one of its
            helpers), ``too_many_hops`` (the reply chain passed ``maxMailHops``) or
            ``mailbox_full`` (the recipient holds ``mailboxMaxUnread`` unread messages).
        message: one sentence for the model.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class WaitOutcome:
    """What ended a ``wait``.

    Attributes:
        woken_by: ``mail`` (unread mail is waiting), ``call`` (a call it waited for is final) or
            ``timeout``.
        tool_call_id: the final call's id when ``woken_by`` is ``call``.
        unread: how many unread messages the calling session holds now.
    """

    woken_by: Literal["mail", "call", "timeout"]
    tool_call_id: str | None
    unread: int


class MailPort(Protocol):
    """Agent-to-agent mail for the calling session (docs/guide-sessions.md §3).

    Every method raises :class:`SendRefused` for a refusal the model should read.
    """

    def send_message(
        self, to: str, text: str, *, in_reply_to: str | None, expects_reply: bool, interrupt: bool
    ) -> dict[str, Any]:
        """Mail ``text`` to session ``to`` as the calling session.

        Returns:
            ``{"id", "seq", "duplicate", "hops", "recipient_status"}``.
        """
        ...

    def spawn_session(self, agent: str, message: str) -> dict[str, Any]:
        """Start a child session of helper ``agent`` with ``message``; it answers by mail.

        Returns:
            ``{"session_id", "agent", "status"}``.
        """
        ...

    def watch_session(self, session: str, events: list[str], tool: str | None, ttl_seconds: float) -> dict[str, Any]:
        """Forward the matching events of ``session`` into the caller's mailbox until the TTL.

        Returns:
            ``{"watch_id", "session", "events", "tool", "expires_at"}``.
        """
        ...

    def unwatch_session(self, session: str) -> dict[str, Any]:
        """Drop the caller's watches of ``session``.

        Returns:
            ``{"session", "removed": n}``.
        """
        ...

    def wait(
        self,
        calls: list[str] | Literal["any-call"] | None,
        timeout_seconds: float,
        cancel: threading.Event | None = None,
    ) -> WaitOutcome:
        """Block until unread mail, a final call among ``calls`` (``any-call``: any background
        call running when the wait began), ``cancel`` set, or the timeout (capped by the agent's
        ``maxWaitSeconds``); never consumes mail.

        Raises:
            ToolCallNotFound: a call named in ``calls`` is not one of the session's.
        """
        ...


class SessionsPort(MailPort, Protocol):
    """The sessions and tool calls a tool may see, and the mail it may send, bound to the calling
    session and its owner."""

    def sessions(self, scope: Scope, *, limit: int, contains: str | None = None) -> tuple[list[SessionInfo], int]:
        """The sessions of the caller's owner within ``scope``, newest change first.

        Args:
            scope: see :data:`Scope`.
            limit: the most sessions returned.
            contains: when given, only sessions whose stored document may hold this text
                (case-insensitive; a cheap filter the caller refines).
        Returns:
            ``(sessions, total)``: at most ``limit`` sessions, and how many are in scope.
        """
        ...

    def session(self, session_id: str, scope: Scope) -> SessionInfo:
        """One session, if the caller may see it.

        Raises:
            SessionNotFound: no such session for this owner, or not a session id.
            SessionAccessDenied: it is outside ``scope``.
        """
        ...

    def tool_call(self, tool_call_id: str, *, wait_seconds: float = 0.0) -> ToolCallInfo:
        """A call of the calling session by the model's id or the internal one; with
        ``wait_seconds`` > 0, waits up to that long for it to become final.

        Raises:
            ToolCallNotFound: the session has no such call.
        """
        ...

    def running_tool_calls(self) -> list[ToolCallInfo]:
        """The calling session's calls that are not final (running, or pending a result)."""
        ...

    def cancel_tool_call(self, tool_call_id: str) -> tuple[bool, str]:
        """Ask a running background call of the calling session to stop.

        Returns:
            ``(cancelled, previous_status)``; ``cancelled`` is false for a call that is final,
            or that is not running in the background (a call pending an external result).
        Raises:
            ToolCallNotFound: the session has no such call.
        """
        ...
