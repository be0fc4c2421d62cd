"""Scheduled runs: when a schedule fires, and firing it (docs/webhooks.md §9).

Every worker and embedded server sweeps the due schedules with the other periodic tasks
(``schedules.fire_due``, every ``AGENTS_SCHEDULE_SWEEP_SECONDS``). A schedule is fired by the
process whose conditional UPDATE moves its ``next_fire_at`` from the tick it read to the next
one after now: exactly one firing per tick, on SQLite as on PostgreSQL. Moving on to the next
tick **after now** is the catch-up rule: ticks missed while every process was down come to one
firing, for the latest of them, marked ``caught_up``.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter
from django.conf import settings
from django.db import transaction

from foundation.common import db_now
from foundation.errors import ApiError, BadRequest
from hooks_app.models import Schedule, ScheduleRun
from sessions_app.periodic import PeriodicTask
from sessions_app.services import sessions

log = logging.getLogger("hooks.schedules")

#: The periodic sweep's lease name.
SWEEP_TASK = "schedules.fire_due"
#: How many next firing times a schedule's answer shows.
SHOWN_TIMES = 5


def check_timing(cron: str | None, interval_seconds: float | None, timezone: str) -> None:
    """Refuse a timing that cannot be fired.

    Raises:
        BadRequest: neither or both of ``cron`` and ``interval_seconds``; a cron expression that
            is not five valid fields, or that never fires (``0 0 31 2 *``); an interval under
            ``AGENTS_SCHEDULE_MIN_INTERVAL_SECONDS``; an unknown time zone.
    """
    if (cron is None) == (interval_seconds is None):
        raise BadRequest("a schedule needs exactly one of cron and interval_seconds")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadRequest(f"unknown time zone {timezone!r}") from None
    if cron is not None:
        if len(cron.split()) != 5:
            raise BadRequest(f"cron must be five fields (minute hour day month weekday), not {cron!r}")
        if not croniter.is_valid(cron):
            raise BadRequest(f"cron {cron!r} is not valid: a field is out of its range or malformed")
        try:
            # a day that no month has (February 31st) is valid syntax and never fires
            croniter(cron, datetime.now(ZoneInfo(timezone))).get_next(datetime)
        except CroniterBadDateError:
            raise BadRequest(f"cron {cron!r} never fires") from None
    minimum = settings.AGENTS["SCHEDULE_MIN_INTERVAL_SECONDS"]
    if interval_seconds is not None and not (minimum <= interval_seconds <= 366 * 86400):
        raise BadRequest(f"interval_seconds must be from {minimum:g} to {366 * 86400}")


def next_after(schedule: Schedule, moment: datetime) -> datetime:
    """The schedule's first tick strictly after ``moment``: interval ticks count from
    ``created_at``; cron ticks are read in the schedule's time zone."""
    if schedule.interval_seconds is not None:
        step = schedule.interval_seconds
        passed = (moment - schedule.created_at).total_seconds()
        return schedule.created_at + timedelta(seconds=(math.floor(passed / step) + 1) * step)
    local = moment.astimezone(ZoneInfo(schedule.timezone))
    return croniter(str(schedule.cron), local).get_next(datetime).astimezone(moment.tzinfo)


def latest_at_or_before(schedule: Schedule, moment: datetime) -> datetime:
    """The schedule's last tick at or before ``moment`` (the tick a catch-up firing is for)."""
    if schedule.interval_seconds is not None:
        step = schedule.interval_seconds
        passed = (moment - schedule.created_at).total_seconds()
        return schedule.created_at + timedelta(seconds=math.floor(passed / step) * step)
    local = (moment + timedelta(microseconds=1)).astimezone(ZoneInfo(schedule.timezone))
    return croniter(str(schedule.cron), local).get_prev(datetime).astimezone(moment.tzinfo)


def upcoming(schedule: Schedule, count: int = SHOWN_TIMES) -> list[datetime]:
    """The next ``count`` firing times, from ``next_fire_at`` on (none when disabled)."""
    if not schedule.enabled:
        return []
    times = [schedule.next_fire_at]
    while len(times) < count:
        times.append(next_after(schedule, times[-1]))
    return times


def _fire(schedule: Schedule, tick: datetime, now: datetime) -> ScheduleRun:
    """Start or continue the schedule's session for ``tick`` (in the caller's transaction)."""
    run = ScheduleRun(schedule=schedule, tick_at=tick, fired_at=now, caught_up=tick != schedule.next_fire_at)
    try:
        with transaction.atomic():
            if schedule.mode == Schedule.Mode.CONTINUE and schedule.session is not None:
                session = sessions.message_post(
                    session_id=schedule.session,
                    prompt=schedule.prompt,
                    media=[],
                    run="until_blocked",
                    owner=schedule.owner,
                    params=schedule.params,
                )
            else:
                session = sessions.session_create(
                    agent_slug=schedule.agent,
                    prompt=schedule.prompt,
                    media=[],
                    run="until_blocked",
                    owner=schedule.owner,
                    params=schedule.params,
                )
                if schedule.mode == Schedule.Mode.CONTINUE:
                    Schedule.objects.filter(pk=schedule.pk).update(session=session.pk)
            run.session_id = session.pk
    except ApiError as error:
        # the agent went away, a parameter is now required...: the firing is kept, with why
        run.error = f"{error.code}: {error.message}"
    run.save()
    return run


def fire_due() -> list[ScheduleRun]:
    """Fire every enabled schedule whose tick has come, each once (see the module's docstring).

    Returns:
        The firings this process made.
    """
    now = db_now()
    fired = []
    for schedule in Schedule.objects.filter(enabled=True, next_fire_at__lte=now).order_by("next_fire_at"):
        tick = latest_at_or_before(schedule, now)
        with transaction.atomic():
            moved = Schedule.objects.filter(pk=schedule.pk, enabled=True, next_fire_at=schedule.next_fire_at).update(
                next_fire_at=next_after(schedule, now), last_fired_at=now
            )
            if moved != 1:
                continue  # another process fired this tick
            run = _fire(schedule, max(tick, schedule.next_fire_at), now)
        fired.append(run)
        log.info(
            "schedule fired",
            extra={
                "kind": "schedule.fired",
                "schedule_id": str(schedule.pk),
                "tick_at": run.tick_at.isoformat(),
                "caught_up": run.caught_up,
                "session_id": str(run.session_id) if run.session_id else None,
                "error": run.error,
            },
        )
    return fired


def sweep() -> None:
    """:func:`fire_due`, as a periodic task."""
    fire_due()


def periodic_tasks() -> list[PeriodicTask]:
    """The schedules' sweep, every ``AGENTS_SCHEDULE_SWEEP_SECONDS``."""
    return [PeriodicTask(SWEEP_TASK, settings.AGENTS["SCHEDULE_SWEEP_SECONDS"], sweep)]


def schedule_create(*, owner: str | None, data: dict[str, Any]) -> Schedule:
    """Store a schedule of ``owner``; its first tick is the first after now.

    Raises:
        BadRequest: see :func:`check_timing`.
    """
    timezone = data.get("timezone") or "UTC"
    check_timing(data.get("cron"), data.get("interval_seconds"), timezone)
    now = db_now()
    schedule = Schedule(
        owner=owner,
        agent=data["agent"],
        prompt=data["prompt"],
        params=data.get("params"),
        cron=data.get("cron"),
        interval_seconds=data.get("interval_seconds"),
        timezone=timezone,
        mode=data.get("mode") or Schedule.Mode.NEW,
        session=data.get("session"),
        created_at=now,
        updated_at=now,
        next_fire_at=now,
    )
    schedule.next_fire_at = next_after(schedule, now)
    schedule.save()
    return schedule


def schedule_update(schedule: Schedule, changes: dict[str, Any]) -> Schedule:
    """Change a schedule; a new timing, or enabling it again, sets its next tick from now.

    Raises:
        BadRequest: see :func:`check_timing`.
    """
    for name in ("agent", "prompt", "params", "cron", "interval_seconds", "timezone", "mode", "session", "enabled"):
        if name in changes:
            setattr(schedule, name, changes[name])
    check_timing(schedule.cron, schedule.interval_seconds, schedule.timezone)
    now = db_now()
    if {"cron", "interval_seconds", "timezone", "enabled"} & set(changes):
        schedule.next_fire_at = next_after(schedule, now)
    schedule.updated_at = now
    schedule.save()
    return schedule
