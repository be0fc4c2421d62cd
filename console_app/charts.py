"""Charts as server-rendered SVG for the operators' dashboard (docs/console.md §2): no script, no
build step, readable without colour (each bar carries its number and a ``<title>``).

Every label is escaped here: agent slugs, owners and failure reasons come from API callers.
Each bar has ``data-label`` and ``data-value`` attributes, so a test or a script reads the figures
a chart shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from django.utils.safestring import SafeString, mark_safe

#: Fill colours of the run outcomes (a status not listed is grey); the legend names them too.
OUTCOME_COLOURS = {
    "idle": "#2e7d32",
    "waiting_external": "#1565c0",
    "paused": "#6a1b9a",
    "failed": "#c62828",
    "cancelled": "#ef6c00",
    "ready": "#00838f",
}
OTHER_COLOUR = "#616161"
BAR_COLOUR = "#1565c0"


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def horizontal_bars(
    chart_id: str, title: str, rows: Sequence[tuple[object, int]], *, unit: str = "", width: int = 520
) -> SafeString:
    """A horizontal bar chart, one bar per row, longest bar = biggest value.

    Args:
        chart_id: the ``id`` of the ``<svg>`` element.
        title: what the chart shows (its ``<title>`` and ``aria-label``).
        rows: ``[(label, value)]`` in the order shown; a ``None`` label is shown as ``(none)``.
        unit: words after each value (``tokens``, ``calls``).
        width: the width of the chart, in CSS pixels.
    Returns:
        The ``<svg>`` element, safe to put in a template.
    """
    bar_height, gap, label_width, value_width = 22, 6, 170, 120
    height = max(1, len(rows)) * (bar_height + gap) + gap
    widest = max((value for _, value in rows), default=0) or 1
    room = width - label_width - value_width
    parts = [
        f'<svg id="{_attr(chart_id)}" class="chart" role="img" aria-label="{_attr(title)}" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
    ]
    if not rows:
        parts.append(f'<text x="0" y="{bar_height - 6}" class="empty">nothing in this window</text>')
    for index, (label, value) in enumerate(rows):
        shown = "(none)" if label is None else str(label)
        y = gap + index * (bar_height + gap)
        length = max(1, round(room * value / widest)) if value else 0
        short = shown if len(shown) <= 24 else shown[:23] + "…"
        parts += [
            f'<text x="{label_width - 8}" y="{y + bar_height - 6}" text-anchor="end">{escape(short)}</text>',
            f'<rect class="bar" x="{label_width}" y="{y}" width="{length}" height="{bar_height}" fill="{BAR_COLOUR}" '
            f'data-label="{_attr(shown)}" data-value="{value}"><title>{escape(shown)}: {value} {escape(unit)}</title>'
            "</rect>",
            f'<text x="{label_width + length + 6}" y="{y + bar_height - 6}">{value} {escape(unit)}</text>',
        ]
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped


def runs_per_minute(chart_id: str, runs: Sequence[tuple[datetime, dict[str, int]]], *, width: int = 760) -> SafeString:
    """Stacked columns: the runs that stopped each minute, one colour per outcome (status).

    Args:
        chart_id: the ``id`` of the ``<svg>`` element.
        runs: ``[(minute, {status: count})]``, oldest first (``sessions_app.fleet``).
        width: the width of the chart, in CSS pixels.
    Returns:
        The ``<svg>`` element: each segment a ``rect`` with ``data-label`` (``HH:MM status``) and
        ``data-value``, the time axis labelled every ten minutes.
    """
    height, axis, top = 200, 24, 8
    count = max(1, len(runs))
    step = (width - 40) / count
    tallest = max((sum(c.values()) for _, c in runs), default=0) or 1
    room = height - axis - top
    parts = [
        f'<svg id="{_attr(chart_id)}" class="chart" role="img" aria-label="runs per minute by outcome" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">',
        "<title>runs per minute by outcome</title>",
        f'<text x="0" y="{top + 10}">{tallest}</text>',
        f'<line x1="36" y1="{height - axis}" x2="{width}" y2="{height - axis}" stroke="#999"/>',
    ]
    for index, (minute, counts) in enumerate(runs):
        x = 40 + index * step
        y = float(height - axis)
        for status in sorted(counts):
            value = counts[status]
            tall = room * value / tallest
            y -= tall
            colour = OUTCOME_COLOURS.get(status, OTHER_COLOUR)
            label = f"{minute:%H:%M} {status}"
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{max(1.0, step - 1):.1f}" height="{tall:.1f}" '
                f'fill="{colour}" data-label="{_attr(label)}" data-value="{value}">'
                f"<title>{escape(label)}: {value} runs</title></rect>"
            )
        if minute.minute % 10 == 0:
            parts.append(f'<text x="{x:.1f}" y="{height - 6}" font-size="11">{minute:%H:%M}</text>')
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every text above is escaped
