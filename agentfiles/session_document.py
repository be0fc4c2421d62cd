"""The session document as one object: the operations the run loop needs (docs/sessions.md §1, §3).

:class:`SessionDocument` holds the agents-exe session JSON (``agentfiles.document`` describes
its turns) and answers what a step asks of it: the head turn, its tool calls, its tracked calls
and the deferred ones still pending, the status its turns imply, the model's request; and it
makes the new versions a step stores: a turn pushed, the head replaced, a result applied.

It never changes the JSON it holds: every change returns a new document that shares the older
turns, so storing it writes the changed turn only (``sessions_app.store`` compares turns by
identity first) and the per-process document cache can keep the version it was read at.
Serialised, it is the JSON it was made from, key order included (:meth:`SessionDocument.text`).

:class:`TrackedCall` is one tracked call of a partial turn, a typed view over its JSON entry;
its setters write into that entry, so they are used only on calls of a turn being built or on
the private copy :meth:`SessionDocument.edit_calls` hands out.

Plain Python: no Django and no models, so that the file formats can live without the apps.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from agentfiles import document as doc


class CallState(StrEnum):
    """The ``tcState`` of a tracked call (docs/sessions.md §1.6)."""

    READY = "Ready"
    RUNNING = "Running"
    DEFERRED = "Deferred"
    COMPLETED = "Completed"
    FAILED = "Failed"

    @property
    def final(self) -> bool:
        """Whether a call in this state has its result (``Completed`` or ``Failed``)."""
        return self in (CallState.COMPLETED, CallState.FAILED)


class TrackedCall:
    """One tracked call: ``{"tcId", "tcState", "tcCall", "tcResult", "tcContinuation", "tcPolicy"}``
    and, when they apply, ``tcBackground``, ``tcDetached`` and ``tcChild`` (docs/sessions.md §1.6).

    ``data`` is the JSON entry itself: the setters change it in place, keys keeping their order.
    """

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @classmethod
    def new(
        cls,
        call: dict[str, Any],
        state: CallState,
        policy: dict[str, Any],
        *,
        result: Any = None,
        continuation: str | None = None,
    ) -> TrackedCall:
        """A tracked call of an OpenAI tool call ``call``, with a fresh ``tcId`` (a UUID)."""
        return cls(doc.tracked_call(call, state.value, policy, result=result, continuation=continuation))

    @property
    def id(self) -> str:
        """The internal ``tcId`` (a UUID string)."""
        return str(self.data["tcId"])

    @property
    def state(self) -> CallState:
        """The call's state."""
        return CallState(self.data["tcState"])

    @property
    def call(self) -> dict[str, Any]:
        """The OpenAI tool call the LLM made."""
        return self.data["tcCall"]

    @property
    def name(self) -> str:
        """The tool name the LLM called (``""`` when it gave none)."""
        return str((self.call.get("function") or {}).get("name") or "")

    @property
    def provider_id(self) -> str:
        """The provider's id of the call (``""`` when it gave none)."""
        return str(self.call.get("id") or "")

    @property
    def policy(self) -> dict[str, Any]:
        """The disposition the call was taken with (``tcPolicy``)."""
        return self.data["tcPolicy"]

    @property
    def continuation(self) -> str | None:
        """The continuation token a deferred call waits on."""
        return self.data.get("tcContinuation")

    @property
    def child(self) -> str | None:
        """The id of the helper session answering the call, if a helper answers it."""
        return self.data.get("tcChild")

    @property
    def detached(self) -> Any:
        """Why the call was detached (a text; ``True`` in older documents), else ``None``."""
        return self.data.get("tcDetached")

    @property
    def attached_running(self) -> bool:
        """Whether the call runs in the background while the run waits for it."""
        return self.state is CallState.RUNNING and not self.detached

    def finish(self, state: CallState, result: Any) -> None:
        """Record the call's outcome: ``state`` (final) and its response."""
        self.data["tcState"], self.data["tcResult"] = state.value, result

    def run_in_background(self, detached: str | None) -> None:
        """Mark the call as a background call (``runAsync``), detached at once when a reason is given."""
        self.data["tcBackground"] = True
        if detached is not None:
            self.data["tcDetached"] = detached

    def detach(self, reason: str) -> None:
        """The call goes on alone (running), its result to come as mail; ``reason`` says why."""
        self.data["tcState"] = CallState.RUNNING.value
        self.data["tcDetached"] = reason

    def answer_by_child(self) -> uuid.UUID:
        """Name a new helper session that answers this (deferred) call; returns its id."""
        child = uuid.uuid4()
        self.data["tcChild"] = str(child)
        return child


class SessionDocument:
    """One version of a session document (docs/sessions.md §1).

    ``data`` is the JSON: ``{"turns", "sessionId", "forkedFromSessionId", "turnId", ...}`` with
    the turns newest first. It is never changed: the methods that change the document return a
    new one.
    """

    __slots__ = ("data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @classmethod
    def new(cls, session_id: str) -> SessionDocument:
        """An empty document for session ``session_id`` (a UUID string)."""
        return cls(doc.new_document(session_id))

    @classmethod
    def from_text(cls, text: str) -> SessionDocument:
        """The document of a session file's JSON text.

        Raises:
            json.JSONDecodeError: the text is not JSON.
        """
        return cls(json.loads(text))

    def text(self) -> str:
        """The document as the store keeps it and exports it: JSON with ASCII escapes, the keys in
        their order (the form of ``foundation.common.dump_json_text``)."""
        return json.dumps(self.data, ensure_ascii=True)

    # --- reading ----------------------------------------------------------------------------

    @property
    def turns(self) -> list[dict[str, Any]]:
        """The turns, newest first (read them, never change them)."""
        return self.data.get("turns") or []

    @property
    def head(self) -> dict[str, Any] | None:
        """The newest turn, ``None`` for an empty session."""
        return doc.head(self.data)

    @property
    def head_tag(self) -> str | None:
        """The head turn's tag (``UserTurn``, ``LlmTurn``, ``PartialUserTurn``), ``None`` when empty."""
        head = self.head
        return head.get("tag") if head is not None else None

    @property
    def turn_id(self) -> str:
        """The ``turnId`` of this version (``""`` when the document has none)."""
        return str(self.data.get("turnId") or "")

    def head_tool_calls(self) -> list[dict[str, Any]]:
        """The tool calls of a head ``LlmTurn`` (empty for any other head)."""
        head = self.head
        return doc.tool_calls_of(head["contents"]) if head is not None and head.get("tag") == "LlmTurn" else []

    def tracked_calls(self) -> list[TrackedCall]:
        """The tracked calls of a head ``PartialUserTurn`` (empty for any other head), read-only:
        to change them use :meth:`edit_calls`."""
        head = self.head
        if head is None or head.get("tag") != "PartialUserTurn":
            return []
        return [TrackedCall(entry) for entry in doc.tracked_calls(head)]

    def wants_model(self) -> bool:
        """Whether the next step asks the LLM: the head is a user turn, or a partial turn whose open
        calls are all detached (their results will come as mail, docs/sessions.md §4.6)."""
        if self.head_tag == "UserTurn":
            return True
        if self.head_tag != "PartialUserTurn":
            return False
        return all(tc.detached for tc in self.tracked_calls() if not tc.state.final)

    def wants_tools(self) -> bool:
        """Whether the next step runs tool calls: the head is an ``LlmTurn`` with calls."""
        return bool(self.head_tool_calls())

    def has_attached_background(self) -> bool:
        """Whether a call of the head runs in the background while the run waits for it."""
        return any(tc.attached_running for tc in self.tracked_calls())

    def status(self) -> str:
        """The status the turns imply when no run is active (``document.status_of``)."""
        return doc.status_of(self.data)

    def pending_calls(self) -> list[dict[str, Any]]:
        """The deferred calls still waiting, as DeferredCallView dicts (``document.pending_calls``)."""
        return doc.pending_calls(self.data)

    def answered_calls(self) -> list[tuple[dict[str, Any], Any]]:
        """Every answered tool call with its response, oldest first (``document.answered_calls``)."""
        return doc.answered_calls(self.data)

    def openai_messages(self, system_prompt: str) -> list[dict[str, Any]]:
        """The chat-completions messages of the session (``document.openai_messages``)."""
        return doc.openai_messages(self.data, system_prompt)

    # --- new versions -----------------------------------------------------------------------

    def push(self, turn: dict[str, Any]) -> SessionDocument:
        """This document with ``turn`` as the new head and a fresh ``turnId``."""
        return SessionDocument(doc.push_turn(self.data, turn))

    def replace_head(self, turn: dict[str, Any]) -> SessionDocument:
        """This document with its head replaced by ``turn`` and a fresh ``turnId``."""
        return SessionDocument(doc.replace_head(self.data, turn))

    def push_answer(
        self,
        raw_response: dict[str, Any],
        text: str,
        thinking: str | None,
        tool_calls: list[dict[str, Any]],
        usage: dict[str, Any] | None,
    ) -> SessionDocument:
        """This document with the LLM's answer pushed as an ``LlmTurn`` (docs/sessions.md §1.4)."""
        return self.push(doc.llm_turn(raw_response, text, thinking, tool_calls, usage))

    def push_calls(
        self, system_prompt: str, system_tools: list[dict[str, Any]], calls: list[TrackedCall]
    ) -> SessionDocument:
        """This document with the user turn answering the head's tool calls pushed: a full
        ``UserTurn`` when every call is final, else a ``PartialUserTurn`` (docs/sessions.md §1.6)."""
        return self.push(_settled(doc.partial_turn(system_prompt, system_tools, [tc.data for tc in calls])))

    def edit_calls(self, change: Callable[[TrackedCall], bool]) -> SessionDocument:
        """This document with the head's tracked calls changed by ``change``.

        ``change`` is called on each call of a private copy of the head (written in the current
        shape, older three-list turns included) and says whether it changed it. When none did, or
        the head is no partial turn, this same document is returned; else the head is replaced,
        closed into a full ``UserTurn`` once every call is final.
        """
        head = self.head
        if head is None or head.get("tag") != "PartialUserTurn":
            return self
        updated = doc.current_partial(head)
        changed = [change(TrackedCall(entry)) for entry in doc.tracked_calls(updated)]
        return self.replace_head(_settled(updated)) if any(changed) else self

    def apply_result(self, token: str, response: Any) -> SessionDocument | None:
        """This document with a deferred call's result in (``document.apply_result``), ``None``
        when the head holds no deferred call waiting on ``token``."""
        updated = doc.apply_result(self.data, token, response)
        return SessionDocument(updated) if updated is not None else None


def _settled(partial: dict[str, Any]) -> dict[str, Any]:
    """A partial turn, or the full ``UserTurn`` it becomes once all its calls are final."""
    return doc.close_partial(partial) if doc.all_final(partial) else partial
