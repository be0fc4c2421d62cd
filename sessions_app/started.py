"""The tool calls a step started: written before each call runs, forgotten with the step's store.

A call that ran but whose step was never stored (the worker was killed, the server crashed, the
lease was lost) would otherwise run again on the next step of the same head, repeating whatever
it did to the world. So the step records a :class:`~sessions_app.models.StartedCall` row, in its
own committed transaction, before it runs a call; the store of the step deletes the session's
rows in the step's transaction. A later step that finds a row for a call knows the call started
and never finished (docs/sessions.md §3.2).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from sessions_app.models import StartedCall


class StartedCalls:
    """The calls of one LlmTurn of one session that a step started (the engine's call ledger).

    Args:
        session_id: the session.
        turn: the position (oldest first) of the LlmTurn whose calls the step runs.
    """

    def __init__(self, session_id: uuid.UUID | str, turn: int) -> None:
        self.session_id = session_id
        self.turn = turn
        rows = StartedCall.objects.filter(session_id=session_id, turn=turn)
        self._earlier = set(rows.values_list("call_index", flat=True))

    def interrupted(self, index: int) -> bool:
        """Whether call ``index`` was started by an earlier step that never stored its result."""
        return index in self._earlier

    def record(self, index: int, call: dict[str, Any]) -> None:
        """Record, durably and before it runs, that call ``index`` starts now."""
        if index in self._earlier:
            return  # a call safe to retry runs again under the row of its first start
        try:
            with transaction.atomic():
                StartedCall.objects.create(
                    session_id=self.session_id,
                    turn=self.turn,
                    call_index=index,
                    provider_call_id=str(call.get("id") or ""),
                    tool=str((call.get("function") or {}).get("name") or ""),
                    started_at=timezone.now(),
                )
        except IntegrityError:
            # another process recorded it meanwhile: it is started either way
            pass


def forget_started(session_id: uuid.UUID | str) -> None:
    """Drop the session's rows: the step whose calls they record is being stored (call this in
    the store's transaction)."""
    StartedCall.objects.filter(session_id=session_id).delete()
