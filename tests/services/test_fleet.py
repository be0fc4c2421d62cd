"""The dashboard's figures in process (docs/console.md §2): latencies and their buckets from step
timings, the runs' outcomes and failures' reasons from events (hostile payloads skipped), the
timings pruned with the events, and chart labels escaped."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from console_app.charts import horizontal_bars
from foundation.common import db_now
from sessions_app import periodic, timings
from sessions_app.event_types import EventKind
from sessions_app.fleet import fleet_figures
from sessions_app.models import Event, StepTiming
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db


def _event(session_id: object, kind: EventKind, payload: str, minutes_ago: float = 0) -> None:
    Event.objects.create(
        session_id=session_id,
        owner=None,
        kind=kind,
        payload_json=payload,
        created_at=db_now() - timedelta(minutes=minutes_ago),
    )


def test_latencies_outcomes_and_failures_of_the_window() -> None:
    session = SessionFactory()
    for seconds in (0.05, 0.2, 0.3, 1.2, 40.0):
        timings.record(session, StepTiming.Kind.MODEL, seconds)
    timings.record(session, StepTiming.Kind.TOOLS, 0.01)
    _event(session.pk, EventKind.RUN_STOPPED, json.dumps({"status": "idle"}))
    _event(session.pk, EventKind.RUN_STOPPED, json.dumps({"status": "failed"}))
    _event(session.pk, EventKind.RUN_STOPPED, "not json")
    _event(session.pk, EventKind.RUN_STOPPED, json.dumps(["a list"]))
    _event(session.pk, EventKind.RUN_STOPPED, json.dumps({"status": "idle"}), minutes_ago=90)
    _event(session.pk, EventKind.SESSION_FAILED, json.dumps({"message": "LLM provider answered HTTP 500\nmore"}))
    _event(session.pk, EventKind.SESSION_FAILED, json.dumps({"message": "LLM provider answered HTTP 500"}))
    _event(session.pk, EventKind.SESSION_FAILED, json.dumps({"message": None}))

    figures = fleet_figures(60)
    assert figures.model.count == 5 and figures.steps.count == 6
    assert (figures.model.p50_ms, figures.model.p95_ms, figures.model.max_ms) == (300, 40_000, 40_000)
    assert dict(figures.model.buckets) == {
        "≤ 100 ms": 1,
        "≤ 250 ms": 1,
        "≤ 500 ms": 1,
        "≤ 1 s": 0,
        "≤ 2.5 s": 1,
        "≤ 5 s": 0,
        "≤ 10 s": 0,
        "≤ 30 s": 0,
        "> 30 s": 1,
    }
    # the one outside the window does not count; text that is not JSON is skipped, and a payload
    # that is not an object is a run of unknown outcome
    assert figures.outcomes == {"unknown": 1, "idle": 1, "failed": 1}
    assert len(figures.runs) == 61
    assert {(f["reason"], f["count"]) for f in figures.failures} == {
        ("LLM provider answered HTTP 500", 2),
        ("no reason given", 1),
    }
    assert fleet_figures(1).model.count == 5


def test_timings_are_pruned_with_the_events() -> None:
    session = SessionFactory()
    timings.record(session, StepTiming.Kind.MODEL, 0.5)
    timings.record(session, StepTiming.Kind.TOOLS, 0.5)
    StepTiming.objects.filter(kind=StepTiming.Kind.TOOLS).update(finished_at=db_now() - timedelta(days=30))
    periodic.prune()
    assert list(StepTiming.objects.values_list("kind", flat=True)) == [StepTiming.Kind.MODEL]


def test_chart_labels_are_escaped() -> None:
    svg = str(horizontal_bars("c", "tokens <per> agent", [('<script>alert("x")</script>', 5), (None, 0)]))
    assert "<script>" not in svg
    assert 'data-label="&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"' in svg
    assert 'data-label="(none)" data-value="0"' in svg
    assert "tokens &lt;per&gt; agent" in svg
