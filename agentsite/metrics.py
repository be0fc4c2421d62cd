"""``GET /metrics`` for admin owners, and the separate listener of ``AGENTS_METRICS_PORT``
(docs/observability.md §2.2)."""

from __future__ import annotations

import os
from typing import Any

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request

from foundation import metrics
from foundation.api import ApiViewSet, error_responses
from foundation.auth import caller
from foundation.errors import Forbidden
from sessions_app.gauges import SharedStateCollector


class MetricsViewSet(ApiViewSet):
    """``GET /metrics``: the Prometheus text exposition of this process (of the host's processes
    in multiprocess mode) and the fleet's shared gauges; admin owners only."""

    @extend_schema(
        operation_id="metrics",
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="Prometheus text format 0.0.4"),
            **error_responses(403),
        },
    )
    def metrics(self, request: Request) -> HttpResponse:
        """The exposition; 403 ``forbidden`` for anyone but an admin owner (``--admin-owners``).

        Raises:
            Forbidden: the caller is not an admin owner (always so with authentication off: use
                ``AGENTS_METRICS_PORT`` then).
        """
        principal = caller(request)
        if not principal.admin or principal.owner is None:
            raise Forbidden("/metrics is for admin owners (--admin-owners), or use AGENTS_METRICS_PORT")
        body, content_type = metrics.exposition([SharedStateCollector()])
        return HttpResponse(body, content_type=content_type)


def start_listener(*, shared_state: bool) -> int | None:
    """Start the metrics listener when ``AGENTS_METRICS_PORT`` is set (``0``: any free port); it
    binds ``AGENTS_METRICS_BIND`` (default ``127.0.0.1``).

    Args:
        shared_state: whether this process also reports the database gauges.
    Returns:
        The port bound (logged as ``metrics.listening``), or ``None`` when not asked for.
    Raises:
        OSError: the address cannot be bound.
    """
    port = os.environ.get("AGENTS_METRICS_PORT", "").strip()
    if not port:
        return None
    collectors: list[Any] = [SharedStateCollector()] if shared_state else []
    return metrics.listen(int(port), os.environ.get("AGENTS_METRICS_BIND", "127.0.0.1"), collectors)
