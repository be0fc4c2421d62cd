"""Recovery in process: dead workers' runs are released, lost run tasks are sent again once."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest

from agentfiles import document as doc
from foundation.common import db_now
from foundation.errors import RunInProgress
from sessions_app import mailbox
from sessions_app.models import Continuation, Event, Session
from sessions_app.outcomes import NewContinuation
from sessions_app.services import sessions
from sessions_app.services.continuations import create_continuations
from sessions_app.services.recovery import MAX_HELPER_RESUMES, free_stranded_helpers, recover_stale_runs
from tests.factories import LlmTurnFactory, MailFactory, SessionFactory, ToolCallFactory, UserTurnFactory
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


def waiting_parent(child_id: uuid.UUID) -> Session:
    """A parent whose head waits on one helper call answered by session ``child_id`` (made later),
    as a step that started a helper stores it: ``running`` without a run, its call ``Deferred``."""
    call = ToolCallFactory(function={"name": "io_prompt_agent_single", "arguments": json.dumps({"what": "help"})})
    token = str(uuid.uuid4())
    tracked = doc.tracked_call(call, "Deferred", {"tag": "runSync"}, continuation=token)
    tracked["tcChild"] = str(child_id)
    head = doc.partial_turn("You are single.", [], [tracked])
    parent = SessionFactory(turns=[head, LlmTurnFactory(text="", tool_calls=[call]), UserTurnFactory()])
    assert parent.status == Session.Status.RUNNING and parent.run_id is None
    create_continuations(parent, [NewContinuation(token, tracked["tcId"], call, {"tag": "runSync"})])
    return parent


def test_a_helper_taken_over_in_its_step_is_resumed_at_once_for_the_parent_waiting_on_it(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    child_id = uuid.uuid4()
    parent = waiting_parent(child_id)
    child = claimed(lease_left=timedelta(seconds=-5), id=child_id, parent=parent)
    root = claimed(lease_left=timedelta(seconds=-5))
    # a helper whose parent no longer waits on it (its call was cancelled, say)
    orphan = claimed(lease_left=timedelta(seconds=-5), parent=SessionFactory())
    with django_capture_on_commit_callbacks(execute=True):
        recovered, _ = recover_stale_runs(all_claimed=False)
    assert sorted(recovered) == sorted([str(child.pk), str(root.pk), str(orphan.pk)])
    assert Session.objects.get(pk=root.pk).status == Session.Status.READY, "nothing else resumes by itself"
    assert Session.objects.get(pk=orphan.pk).status == Session.Status.READY
    stored = Session.objects.get(pk=child.pk)
    assert stored.status == Session.Status.RUNNING and stored.takeovers == 1
    assert stored.run_id not in (None, child.run_id) and stored.run_owner is None
    assert worker.runs() == [[str(child.pk), str(stored.run_id)]], "a new run of the helper, sent once"
    assert not Event.objects.filter(session_id=child.pk, kind="run.stopped").exists()
    assert Session.objects.get(pk=parent.pk).version == parent.version, "the parent goes on waiting"


def test_a_helper_taken_over_too_often_fails_and_its_parent_reads_why(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    child_id = uuid.uuid4()
    parent = waiting_parent(child_id)
    child = claimed(lease_left=timedelta(seconds=-5), id=child_id, parent=parent)
    Session.objects.filter(pk=child.pk).update(takeovers=MAX_HELPER_RESUMES)
    with django_capture_on_commit_callbacks(execute=True):
        recover_stale_runs(all_claimed=False)
    stored = Session.objects.get(pk=child.pk)
    assert stored.status == Session.Status.FAILED and stored.run_id is None
    assert stored.status_detail == f"taken over {MAX_HELPER_RESUMES + 1} times: the worker running it stopped each time"
    [failed] = Event.objects.filter(session_id=child.pk, kind="session.failed")
    assert json.loads(failed.payload_json)["message"] == stored.status_detail
    waiting = Session.objects.get(pk=parent.pk)
    [response] = doc.head(waiting.document)["contents"]["userToolResponses"]
    assert "the helper agent single failed: taken over 4 times" in json.dumps(response)
    assert waiting.status == Session.Status.RUNNING and waiting.run_id is not None, "the parent's next run"
    assert worker.runs() == [[str(parent.pk), str(waiting.run_id)]]


def test_a_stop_left_for_a_dead_helper_reaches_its_parent_as_a_cancellation(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    child_id = uuid.uuid4()
    parent = waiting_parent(child_id)
    child = claimed(lease_left=timedelta(seconds=-5), id=child_id, parent=parent)
    MailFactory(session=child, body=mailbox.STOP_RUN)
    with django_capture_on_commit_callbacks(execute=True):
        recover_stale_runs(all_claimed=False)
    assert Session.objects.get(pk=child.pk).status == Session.Status.READY
    [response] = doc.head(Session.objects.get(pk=parent.pk).document)["contents"]["userToolResponses"]
    assert "the helper agent single was cancelled" in json.dumps(response)


def test_a_helper_whose_answer_was_never_delivered_is_delivered_by_the_sweep_once_settled(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    child_id = uuid.uuid4()
    parent = waiting_parent(child_id)
    child = SessionFactory(id=child_id, parent=parent, turns=[LlmTurnFactory(text="the answer"), UserTurnFactory()])
    assert free_stranded_helpers(all_claimed=False) == [], "a helper just stopped may be delivering"
    Session.objects.filter(pk=child.pk).update(updated_at=db_now() - timedelta(minutes=5))
    with django_capture_on_commit_callbacks(execute=True):
        assert free_stranded_helpers(all_claimed=False) == [str(child.pk)]
    waiting = Session.objects.get(pk=parent.pk)
    [response] = doc.head(waiting.document)["contents"]["userToolResponses"]
    assert "the answer" in json.dumps(response)
    assert worker.runs() == [[str(parent.pk), str(waiting.run_id)]]


def test_resume_on_a_parent_sets_its_stranded_helper_moving_and_is_refused_when_none_is(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    child_id = uuid.uuid4()
    parent = waiting_parent(child_id)
    child = SessionFactory(id=child_id, parent=parent)
    assert child.status == Session.Status.READY
    with django_capture_on_commit_callbacks(execute=True):
        answered = sessions.session_resume(session_id=parent.pk, mode="until_blocked")
    assert answered.status == Session.Status.RUNNING and answered.run_id is None
    moving = Session.objects.get(pk=child.pk)
    assert moving.status == Session.Status.RUNNING
    assert worker.runs() == [[str(child.pk), str(moving.run_id)]]
    # the helper runs now: the parent's resume is refused as before, and nothing is stored
    with pytest.raises(RunInProgress) as refused:
        sessions.session_resume(session_id=parent.pk, mode="until_blocked")
    assert refused.value.code == "run_in_progress"
    assert Session.objects.get(pk=child.pk).version == moving.version
    assert len(worker.runs()) == 1


def test_a_result_posted_for_a_run_that_died_starts_the_run_that_folds_it_in(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    # the run deferred a call and was still going when the worker answered it (the result was
    # queued for that run), then its worker died: the session must not wait for a result it has
    call = ToolCallFactory(function={"name": "lookup", "arguments": "{}"})
    token = str(uuid.uuid4())
    tracked = doc.tracked_call(call, "Deferred", {"tag": "defer"}, continuation=token)
    head = doc.partial_turn("You look things up.", [], [tracked])
    session = claimed(
        lease_left=timedelta(seconds=-5), turns=[head, LlmTurnFactory(text="", tool_calls=[call]), UserTurnFactory()]
    )
    Continuation.objects.filter(pk=token).update(result=json.dumps("42"), completed_at=db_now())
    untouched = claimed(lease_left=timedelta(seconds=-5), turns=[LlmTurnFactory(), UserTurnFactory()])
    with django_capture_on_commit_callbacks(execute=True):
        recover_stale_runs(all_claimed=False)
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.RUNNING and stored.run_id not in (None, session.run_id)
    assert worker.runs() == [[str(session.pk), str(stored.run_id)]]
    assert Session.objects.get(pk=untouched.pk).status == Session.Status.IDLE, "nothing else resumes by itself"
