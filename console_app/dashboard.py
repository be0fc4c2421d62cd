"""The operators' dashboard (docs/console.md §2): what the fleet did in the last minutes, as
server-rendered SVG charts, refreshed by polling its own figures.

``GET /admin/dashboard/`` (staff only, through the admin's login) renders the page;
``?fragment=1`` answers the figures alone, which ``static/console/dashboard.js`` fetches every
:data:`REFRESH_SECONDS` to replace them; ``?minutes=N`` sets the window (1..1440, default 60). The
figures come from ``sessions_app.fleet``; the token spend is the one ``GET /v1/usage`` answers for
the same ``since``, shown on the page as ``data-since``.
"""

from __future__ import annotations

import re
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.loader import render_to_string

from console_app import charts
from sessions_app.fleet import FleetFigures, fleet_figures

#: The window when the page does not say, in minutes, and its bounds.
DEFAULT_MINUTES = 60
MAX_MINUTES = 1440
#: How often the page fetches its figures again, in seconds.
REFRESH_SECONDS = 15


def _figures_context(figures: FleetFigures) -> dict[str, Any]:
    return {
        "figures": figures,
        "since": figures.since.isoformat().replace("+00:00", "Z"),
        "runs_chart": charts.runs_per_minute("chart-runs", figures.runs),
        "legend": [
            (status, charts.OUTCOME_COLOURS.get(status, charts.OTHER_COLOUR), count)
            for status, count in figures.outcomes.items()
        ],
        "steps_chart": charts.horizontal_bars("chart-steps", "step latency", figures.steps.buckets, unit="steps"),
        "model_chart": charts.horizontal_bars("chart-model", "model latency", figures.model.buckets, unit="calls"),
        "agents_chart": charts.horizontal_bars("chart-agents", "tokens per agent", figures.agents, unit="tokens"),
        "owners_chart": charts.horizontal_bars("chart-owners", "tokens per owner", figures.owners, unit="tokens"),
        "waiting_chart": charts.horizontal_bars(
            "chart-waiting", "deferred calls waiting per tool", figures.waiting_by_tool, unit="calls"
        ),
    }


def dashboard_view(request: HttpRequest) -> HttpResponse:
    """The dashboard page, or its figures alone with ``?fragment=1`` (staff only: wrapped in
    ``admin.site.admin_view`` by ``agentsite.urls``).

    Answers 400 for a ``minutes`` that is not a whole number from 1 to :data:`MAX_MINUTES`.
    """
    written = request.GET.get("minutes") or str(DEFAULT_MINUTES)
    # ASCII digits only: str.isdigit() also takes "²", which int() refuses
    if not re.fullmatch(r"[0-9]{1,4}", written) or not 1 <= int(written) <= MAX_MINUTES:
        return HttpResponseBadRequest(f"minutes must be a whole number from 1 to {MAX_MINUTES}")
    context = _figures_context(fleet_figures(int(written)))
    if request.GET.get("fragment") == "1":
        return HttpResponse(render_to_string("admin/console/dashboard_figures.html", context, request))
    page = {
        **admin.site.each_context(request),
        **context,
        "title": "Dashboard",
        "refresh_seconds": REFRESH_SECONDS,
        "fragment_url": f"{request.path}?fragment=1&minutes={written}",
    }
    return HttpResponse(render_to_string("admin/console/dashboard.html", page, request))
