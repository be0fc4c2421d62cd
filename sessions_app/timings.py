"""Step timings: how long each stored step took, kept for the operators' dashboard
(docs/console.md §2). Written by the run loop in the transaction that stores the step."""

from __future__ import annotations

from datetime import timedelta

from foundation.common import db_now
from sessions_app.models import Session, StepTiming


def record(session: Session, kind: str, seconds: float) -> None:
    """Store the timing of one step of ``session``.

    Args:
        session: the session the step belongs to (its agent and owner are copied).
        kind: ``model`` or ``tools`` (``StepTiming.Kind``).
        seconds: the step's wall time, in seconds (rounded to whole milliseconds).
    """
    StepTiming.objects.create(
        session_id=session.pk,
        agent_slug=session.agent_slug,
        owner=session.owner,
        kind=kind,
        duration_ms=max(0, round(seconds * 1000)),
        finished_at=db_now(),
    )


def prune(kept: timedelta) -> int:
    """Delete the timings older than ``kept``; returns how many went."""
    deleted, _ = StepTiming.objects.filter(finished_at__lt=db_now() - kept).delete()
    return deleted
