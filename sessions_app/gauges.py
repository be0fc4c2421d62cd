"""Gauges of shared state, read from the database and the broker at scrape time
(docs/observability.md §2.1): deferred calls waiting and the oldest one's age, leases held, and
the depth of the Celery queue the runs are sent to."""

from __future__ import annotations

import logging
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Min
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from foundation.common import db_now
from sessions_app.models import Continuation, Session

log = logging.getLogger("sessions.gauges")

#: The Celery queue the runs and background calls are sent to (Celery's default).
QUEUE = "celery"


class SharedStateCollector(Collector):
    """The gauges every server and worker of a fleet would report alike: the same database is
    read, so take ``max`` over the targets, not ``sum`` (docs/observability.md §2.1)."""

    def collect(self) -> Iterator[Metric]:
        """Read the gauges now (three queries, and ``LLEN`` on the broker when it is Redis)."""
        now = db_now()
        waiting = Continuation.objects.filter(completed_at__isnull=True)
        oldest = waiting.aggregate(oldest=Min("created_at"))["oldest"]
        yield GaugeMetricFamily("agents_deferred_calls_waiting", "Deferred calls without a result", waiting.count())
        yield GaugeMetricFamily(
            "agents_deferred_call_oldest_age_seconds",
            "Age of the oldest deferred call without a result (0 when none waits)",
            (now - oldest).total_seconds() if oldest is not None else 0.0,
        )
        held = Session.objects.filter(run_owner__isnull=False, run_lease_until__gte=now).count()
        yield GaugeMetricFamily("agents_leases_held", "Runs whose lease a live worker holds", held)
        depth = _queue_depth()
        if depth is not None:
            yield GaugeMetricFamily("agents_celery_queue_depth", "Tasks waiting on the Celery queue", depth)


def _queue_depth() -> int | None:
    """``LLEN`` of the run queue on the Redis broker; ``None`` without one or when it is down."""
    if not settings.REDIS_URL:
        return None
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        try:
            return int(client.llen(QUEUE))
        finally:
            client.close()
    except redis.RedisError as error:
        log.warning("queue depth unknown", extra={"kind": "metrics.queue_depth_unknown", "error": str(error)})
        return None
