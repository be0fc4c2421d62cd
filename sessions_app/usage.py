"""Usage totals: the provider's tokens of model answers added up per agent, owner and day
(docs/sessions.md §1.11). Reads only; the token columns are written with the turn rows
(``sessions_app.store``); a session's own totals come from its document (``Session.usage_totals``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, F, QuerySet, Sum
from django.db.models.functions import TruncDate

from sessions_app.models import Turn

#: What ``GET /v1/usage`` can group by, and the column of each.
GROUPS = {"agent": "session__agent_slug", "owner": "session__owner", "day": "day"}


@dataclass(frozen=True)
class UsageScope:
    """Whose model answers a report adds up.

    Attributes:
        owner: the owner whose sessions count when ``everyone`` is false (``None`` is sessions
            without an owner).
        everyone: every owner's sessions (authentication off, or an admin's ``scope=all``).
        agent: only the sessions of this agent slug, when given.
        since: only answers recorded at or after this instant, when given.
        until: only answers recorded before this instant, when given.
    """

    owner: str | None = None
    everyone: bool = True
    agent: str | None = None
    since: datetime | None = None
    until: datetime | None = None


def _answers(scope: UsageScope) -> QuerySet[Turn]:
    """The turn rows of model answers that reported usage, within ``scope``."""
    rows = Turn.objects.filter(reports_usage=True)
    if not scope.everyone:
        rows = rows.filter(session__owner=scope.owner)
    if scope.agent:
        rows = rows.filter(session__agent_slug=scope.agent)
    if scope.since is not None:
        rows = rows.filter(recorded_at__gte=scope.since)
    if scope.until is not None:
        rows = rows.filter(recorded_at__lt=scope.until)
    return rows


def usage_report(scope: UsageScope, group_by: str) -> dict[str, Any]:
    """Token totals per agent, owner or day (UTC), biggest spender first (days newest first).

    Args:
        scope: whose answers (:class:`UsageScope`).
        group_by: a key of :data:`GROUPS`.
    Returns:
        ``{"group_by", "rows": [{"key", "input_tokens", "output_tokens", "cached_tokens",
        "total_tokens", "model_turns", "sessions"}], "totals": {... the same counts}}``; ``key``
        is the agent slug, the owner (``null`` for sessions without one) or the day
        (``YYYY-MM-DD``).
    """
    rows = _answers(scope)
    sums = {
        "input_tokens": Sum("input_tokens"),
        "output_tokens": Sum("output_tokens"),
        "cached_tokens": Sum("cached_tokens"),
        "model_turns": Count("id"),
        "sessions": Count("session", distinct=True),
    }
    if group_by == "day":
        rows = rows.annotate(day=TruncDate("recorded_at"))
    grouped = rows.values(key=F(GROUPS[group_by])).annotate(**sums)
    ordered = grouped.order_by("-key") if group_by == "day" else grouped.order_by(F("input_tokens").desc(), "key")
    report_rows = []
    for row in ordered:
        key = row["key"].isoformat() if group_by == "day" and row["key"] is not None else row["key"]
        report_rows.append(_counts(dict(row)) | {"key": key})
    totals = _answers(scope).aggregate(**sums)
    return {"group_by": group_by, "rows": report_rows, "totals": _counts(totals)}


def _counts(row: dict[str, Any]) -> dict[str, Any]:
    counts = {name: int(row.get(name) or 0) for name in ("input_tokens", "output_tokens", "cached_tokens")}
    counts["total_tokens"] = counts["input_tokens"] + counts["output_tokens"]
    counts["model_turns"] = int(row.get("model_turns") or 0)
    counts["sessions"] = int(row.get("sessions") or 0)
    return counts
