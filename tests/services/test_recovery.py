"""Recovery in process: dead workers' runs are released, lost run tasks are sent again once."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from agentsite.common import db_now
from sessions_app import mailbox
from sessions_app.models import Event, Session
from sessions_app.services.recovery import recover_stale_runs
from tests.factories import LlmTurnFactory, MailFactory, SessionFactory, UserTurnFactory
from tests.services.conftest import RecordingWorker

pytestmark = pytest.mark.django_db


def claimed(*, lease_left: timedelta, **kwargs: object) -> Session:
    """A session whose run a worker claimed, its lease ending ``lease_left`` from now."""
    return SessionFactory(
        status=Session.Status.RUNNING,
        run_id=uuid.uuid4(),
        run_mode="until_blocked",
        run_owner="w1@test",
        run_lease_until=db_now() + lease_left,
        **kwargs,
    )


def test_a_run_whose_lease_expired_is_released_with_the_status_its_turns_imply(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = claimed(lease_left=timedelta(seconds=-5), turns=[LlmTurnFactory(), UserTurnFactory()])
    with django_capture_on_commit_callbacks(execute=True):
        recovered, resent = recover_stale_runs(all_claimed=False)
    assert (recovered, resent) == ([str(session.pk)], [])
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.IDLE
    assert (stored.run_id, stored.run_owner, stored.run_lease_until) == (None, None, None)
    assert Event.objects.filter(session_id=session.pk, kind="run.stopped").count() == 1
    assert worker.sent == [], "a recovered run does not start again on its own"


def test_a_run_whose_lease_holds_is_left_alone() -> None:
    session = claimed(lease_left=timedelta(seconds=60))
    assert recover_stale_runs(all_claimed=False) == ([], [])
    stored = Session.objects.get(pk=session.pk)
    assert stored.run_owner == "w1@test" and stored.version == session.version


def test_at_start_every_claimed_run_is_released_and_an_unread_pause_is_kept() -> None:
    session = claimed(lease_left=timedelta(seconds=60))
    MailFactory(session=session, body=mailbox.PAUSE)
    recovered, _ = recover_stale_runs(all_claimed=True)
    assert recovered == [str(session.pk)]
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.PAUSED and stored.document["controlCursor"] == 1


def test_a_run_nobody_claimed_for_a_lease_is_sent_again_once_after_commit(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    run_id = uuid.uuid4()
    session = SessionFactory(status=Session.Status.RUNNING, run_id=run_id, run_mode="until_blocked")
    fresh = SessionFactory(status=Session.Status.RUNNING, run_id=uuid.uuid4(), run_mode="until_blocked")
    Session.objects.filter(pk=session.pk).update(updated_at=db_now() - timedelta(minutes=10))
    with django_capture_on_commit_callbacks(execute=True):
        recovered, resent = recover_stale_runs(all_claimed=False)
    assert (recovered, resent) == ([], [str(session.pk)])
    assert worker.runs() == [[str(session.pk), str(run_id)]], "the same run, not a new one; the fresh one waits"
    assert Session.objects.get(pk=fresh.pk).run_id == fresh.run_id
