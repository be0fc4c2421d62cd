"""The firing-time rules of schedules, in process (docs/webhooks.md §9): interval ticks count
from creation, cron ticks are read in the schedule's time zone, and a catch-up is for the
latest missed tick."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from foundation.errors import BadRequest
from hooks_app.models import Schedule
from hooks_app.schedules import check_timing, latest_at_or_before, next_after

CREATED = datetime(2026, 3, 28, 12, 0, 0, tzinfo=UTC)


def _schedule(**fields: object) -> Schedule:
    return Schedule(created_at=CREATED, updated_at=CREATED, next_fire_at=CREATED, **fields)


def test_interval_ticks_count_from_creation_and_a_catch_up_is_for_the_latest_missed_tick() -> None:
    every_minute = _schedule(interval_seconds=60.0)
    assert next_after(every_minute, CREATED) == CREATED + timedelta(minutes=1)
    assert next_after(every_minute, CREATED + timedelta(seconds=59.9)) == CREATED + timedelta(minutes=1)
    assert next_after(every_minute, CREATED + timedelta(minutes=1)) == CREATED + timedelta(minutes=2)
    # down from 12:01:30 to 12:04:10: one firing, for 12:04, then 12:05
    back = CREATED + timedelta(minutes=4, seconds=10)
    assert latest_at_or_before(every_minute, back) == CREATED + timedelta(minutes=4)
    assert next_after(every_minute, back) == CREATED + timedelta(minutes=5)


def test_cron_ticks_are_read_in_the_schedule_time_zone_across_a_clock_change() -> None:
    # Europe/Paris moves from UTC+1 to UTC+2 in the night of 28 to 29 March 2026
    at_eight = _schedule(cron="0 8 * * *", timezone="Europe/Paris")
    first = next_after(at_eight, CREATED)
    second = next_after(at_eight, first)
    assert first == datetime(2026, 3, 29, 6, 0, tzinfo=UTC)
    assert second == datetime(2026, 3, 30, 6, 0, tzinfo=UTC)
    assert latest_at_or_before(at_eight, second) == second
    assert latest_at_or_before(at_eight, second - timedelta(seconds=1)) == first


@pytest.mark.parametrize(
    ("cron", "interval", "zone", "message"),
    [
        (None, None, "UTC", "exactly one of cron and interval_seconds"),
        ("* * * * *", 60.0, "UTC", "exactly one of cron and interval_seconds"),
        ("0 25 * * *", None, "UTC", "is not valid: a field is out of its range"),
        ("@reboot", None, "UTC", "cron must be five fields"),
        (None, 59.0, "UTC", "interval_seconds must be from 60"),
        (None, 400 * 86400.0, "UTC", "interval_seconds must be from 60"),
        ("0 8 * * *", None, "Nowhere/Town", "unknown time zone"),
        ("0 8 * * *", None, "../../etc/passwd", "unknown time zone"),
    ],
)
def test_a_timing_that_cannot_fire_is_refused(
    cron: str | None, interval: float | None, zone: str, message: str
) -> None:
    with pytest.raises(BadRequest, match=message):
        check_timing(cron, interval, zone)
