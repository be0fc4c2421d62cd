"""What the fleet did lately, for the operators' dashboard (docs/console.md §2). Reads only.

Every figure covers one window ending now: runs that stopped per minute by the status they left
(``run.stopped`` events), step and model latencies (``StepTiming`` rows), token spend per agent
and owner (``sessions_app.usage``, the same numbers ``GET /v1/usage?since=`` answers), the
deferred calls waiting now and the oldest wait, and the failures (``session.failed`` events) by
reason. Each query is bounded by the window and by :data:`ROWS_READ`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Min

from foundation.common import db_now
from sessions_app.event_types import EventKind
from sessions_app.models import Continuation, Event, StepTiming
from sessions_app.usage import UsageScope, usage_report

#: The most event or timing rows one figure reads (the newest, for a very busy window).
ROWS_READ = 20_000
#: The upper bounds of the latency buckets, in milliseconds (the last bucket is open).
LATENCY_BUCKETS_MS = (100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000)
#: The longest a failure's reason is shown, in characters.
REASON_CHARS = 160


@dataclass
class Latency:
    """The latencies of one kind of step in the window.

    Attributes:
        count: how many steps.
        p50_ms, p95_ms, max_ms: their median, 95th percentile and longest, in milliseconds (0
            without steps).
        buckets: ``[(label, count)]`` over :data:`LATENCY_BUCKETS_MS`.
    """

    count: int = 0
    p50_ms: int = 0
    p95_ms: int = 0
    max_ms: int = 0
    buckets: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class FleetFigures:
    """The dashboard's figures (see the module's docstring); times are UTC.

    Attributes:
        since: the window's start; ``minutes`` its length.
        runs: ``[(minute, {status: count})]``, one entry per minute of the window, oldest first.
        outcomes: the runs of the window by status.
        steps: every step's latency; ``model``: the model calls'.
        agents, owners: ``[(key, total_tokens)]`` of the window, biggest first.
        tokens: the window's totals (``usage_report``'s ``totals``).
        waiting: deferred calls waiting now; ``oldest_wait_seconds`` the longest wait (0 without);
        waiting_by_tool: ``[(tool, count)]``, most first.
        failures: ``[{"reason", "count", "last"}]``, most recent first.
    """

    since: datetime
    minutes: int
    runs: list[tuple[datetime, dict[str, int]]]
    outcomes: dict[str, int]
    steps: Latency
    model: Latency
    agents: list[tuple[str | None, int]]
    owners: list[tuple[str | None, int]]
    tokens: dict[str, int]
    waiting: int
    oldest_wait_seconds: int
    waiting_by_tool: list[tuple[str, int]]
    failures: list[dict[str, Any]]


def _payloads(kind: EventKind, since: datetime) -> list[tuple[datetime, dict[str, Any]]]:
    rows = Event.objects.filter(kind=kind, created_at__gte=since).order_by("-seq")
    found = []
    for created_at, text in rows.values_list("created_at", "payload_json")[:ROWS_READ]:
        try:
            payload = json.loads(text)
        except ValueError:
            continue
        found.append((created_at, payload if isinstance(payload, dict) else {}))
    return found


def _runs(since: datetime, minutes: int) -> list[tuple[datetime, dict[str, int]]]:
    start = since.replace(second=0, microsecond=0)
    per_minute: dict[datetime, Counter[str]] = {start + timedelta(minutes=n): Counter() for n in range(minutes + 1)}
    for created_at, payload in _payloads(EventKind.RUN_STOPPED, since):
        minute = created_at.replace(second=0, microsecond=0)
        if minute in per_minute:
            per_minute[minute][str(payload.get("status") or "unknown")] += 1
    return [(minute, dict(counts)) for minute, counts in sorted(per_minute.items())]


def _percentile(ordered: list[int], share: float) -> int:
    """The nearest-rank percentile of an ascending list (0 for an empty one)."""
    if not ordered:
        return 0
    rank = max(1, -(-len(ordered) * share // 1))
    return ordered[int(rank) - 1]


def _latency(durations: list[int]) -> Latency:
    ordered = sorted(durations)
    counts = Counter(next((b for b in LATENCY_BUCKETS_MS if d <= b), None) for d in ordered)
    buckets = [(f"≤ {_duration(bound)}", counts.get(bound, 0)) for bound in LATENCY_BUCKETS_MS]
    buckets.append((f"> {_duration(LATENCY_BUCKETS_MS[-1])}", counts.get(None, 0)))
    return Latency(
        count=len(ordered),
        p50_ms=_percentile(ordered, 0.5),
        p95_ms=_percentile(ordered, 0.95),
        max_ms=ordered[-1] if ordered else 0,
        buckets=buckets,
    )


def _duration(bound_ms: int) -> str:
    return f"{bound_ms} ms" if bound_ms < 1_000 else f"{bound_ms / 1000:g} s"


def _failures(since: datetime) -> list[dict[str, Any]]:
    reasons: dict[str, dict[str, Any]] = {}
    for created_at, payload in _payloads(EventKind.SESSION_FAILED, since):
        reason = str(payload.get("message") or "no reason given").splitlines()[0][:REASON_CHARS]
        entry = reasons.setdefault(reason, {"reason": reason, "count": 0, "last": created_at})
        entry["count"] += 1
        entry["last"] = max(entry["last"], created_at)
    return sorted(reasons.values(), key=lambda entry: entry["last"], reverse=True)


def _spend(rows: list[dict[str, Any]]) -> list[tuple[str | None, int]]:
    """``[(key, total_tokens)]`` of a usage report's rows, biggest spender first."""
    return sorted(((row["key"], row["total_tokens"]) for row in rows), key=lambda item: (-item[1], str(item[0])))


def fleet_figures(minutes: int) -> FleetFigures:
    """The dashboard's figures over the last ``minutes`` minutes (1..1440)."""
    now = db_now()
    since = now - timedelta(minutes=minutes)
    timings = StepTiming.objects.filter(finished_at__gte=since).order_by("-finished_at")
    rows = list(timings.values_list("kind", "duration_ms")[:ROWS_READ])
    runs = _runs(since, minutes)
    outcomes: Counter[str] = Counter()
    for _, counts in runs:
        outcomes.update(counts)
    scope = UsageScope(since=since)
    by_agent = usage_report(scope, "agent")
    waiting = Continuation.objects.filter(completed_at__isnull=True)
    oldest = waiting.aggregate(oldest=Min("created_at"))["oldest"]
    by_tool = waiting.values_list("tool").annotate(n=Count("token")).order_by("-n", "tool")
    return FleetFigures(
        since=since,
        minutes=minutes,
        runs=runs,
        outcomes=dict(outcomes.most_common()),
        steps=_latency([ms for _, ms in rows]),
        model=_latency([ms for kind, ms in rows if kind == StepTiming.Kind.MODEL]),
        agents=_spend(by_agent["rows"]),
        owners=_spend(usage_report(scope, "owner")["rows"]),
        tokens=by_agent["totals"],
        waiting=waiting.count(),
        oldest_wait_seconds=int((now - oldest).total_seconds()) if oldest is not None else 0,
        waiting_by_tool=[(tool or "?", n) for tool, n in by_tool],
        failures=_failures(since),
    )
