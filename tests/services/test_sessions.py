"""The sessions services in process: what they store, and the run task each sends after commit."""

from __future__ import annotations

import uuid

import pytest

from foundation.errors import ApiError, BadRequest, RunInProgress, UnknownAgent
from sessions_app.models import Event, MailEnvelope, Session, Turn
from sessions_app.services import sessions
from tests.factories import LlmTurnFactory, SessionFactory, UserTurnFactory
from tests.services.conftest import RecordingWorker

pytestmark = pytest.mark.django_db


def test_create_with_a_prompt_stores_the_turn_and_sends_one_run_after_commit(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
        assert worker.sent == [], "the run task waits for the commit"
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.RUNNING and stored.run_mode == "until_blocked"
    assert stored.run_owner is None and stored.version == 1
    [turn] = stored.document["turns"]
    assert turn["tag"] == "UserTurn" and turn["contents"]["userQuery"] == "hello"
    assert Turn.objects.filter(session=stored).count() == 1
    kinds = list(Event.objects.filter(session_id=stored.pk).order_by("seq").values_list("kind", flat=True))
    assert kinds == ["session.created", "session.updated"]
    assert worker.runs() == [[str(stored.pk), str(stored.run_id)]]


def test_create_with_run_none_stores_the_turn_and_sends_nothing(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="none")
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.READY and stored.run_id is None
    assert len(stored.document["turns"]) == 1
    assert worker.sent == []


def test_create_for_an_unknown_agent_stores_nothing_and_sends_nothing(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(UnknownAgent) as raised:
        sessions.session_create(agent_slug="nobody", prompt="hello", media=None, run="until_blocked")
    assert raised.value.code == "unknown_agent" and raised.value.status == 404
    assert callbacks == [] and worker.sent == []
    assert not Session.objects.exists() and not Event.objects.exists()


def test_create_under_a_missing_parent_rolls_back_and_sends_nothing(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ApiError) as raised:
        sessions.session_create(
            agent_slug="single", prompt="hello", media=None, run="until_blocked", parent_id=uuid.uuid4()
        )
    assert raised.value.code == "unknown_session"
    assert not Session.objects.exists() and worker.sent == []


def test_a_message_to_an_idle_session_becomes_its_next_turn_and_starts_one_run(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = SessionFactory(turns=[LlmTurnFactory(text="done"), UserTurnFactory(query="first")])
    assert session.status == Session.Status.IDLE
    with django_capture_on_commit_callbacks(execute=True):
        sessions.message_post(session_id=session.pk, prompt="again", media=None, run="until_blocked")
    stored = Session.objects.get(pk=session.pk)
    assert [t["tag"] for t in stored.document["turns"]] == ["UserTurn", "LlmTurn", "UserTurn"]
    assert stored.document["turns"][0]["contents"]["userQuery"] == "again"
    assert stored.status == Session.Status.RUNNING and stored.version == session.version + 1
    assert worker.runs() == [[str(stored.pk), str(stored.run_id)]]
    assert not MailEnvelope.objects.filter(session=stored).exists()


def test_a_message_to_a_running_session_is_queued_as_mail_without_a_second_run(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    with django_capture_on_commit_callbacks(execute=True):
        sessions.message_post(session_id=session.pk, prompt="and this", media=None, run="until_blocked")
    [envelope] = MailEnvelope.objects.filter(session=session)
    assert envelope.seq == 1 and envelope.body == {"tag": "userMessage", "query": "and this"}
    stored = Session.objects.get(pk=session.pk)
    assert stored.run_id == session.run_id and stored.last_mail_seq == 1
    assert len(stored.document["turns"]) == 1, "the message waits in the mailbox, not in the turns"
    assert worker.runs() == []


def test_an_empty_message_is_refused_and_changes_nothing(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = SessionFactory(turns=[LlmTurnFactory(), UserTurnFactory()])
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(BadRequest):
        sessions.message_post(session_id=session.pk, prompt=None, media=None, run="until_blocked")
    assert callbacks == [] and worker.sent == []
    stored = Session.objects.get(pk=session.pk)
    assert stored.version == session.version and stored.status == Session.Status.IDLE


def test_resume_while_a_run_is_going_is_refused_and_sends_nothing(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = sessions.session_create(agent_slug="single", prompt="hello", media=None, run="until_blocked")
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RunInProgress) as raised:
        sessions.session_resume(session_id=session.pk, mode="step")
    assert raised.value.status == 409
    assert Session.objects.get(pk=session.pk).run_id == session.run_id
    assert worker.sent == []


def test_resume_of_a_ready_session_requests_a_fresh_run(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = SessionFactory()
    assert session.status == Session.Status.READY
    with django_capture_on_commit_callbacks(execute=True):
        sessions.session_resume(session_id=session.pk, mode="step")
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.RUNNING and stored.run_mode == "step"
    assert worker.runs() == [[str(stored.pk), str(stored.run_id)]]


def test_a_session_file_older_than_the_stored_session_is_refused_and_changes_nothing() -> None:
    import json

    from tests.harness import FIXTURES

    newer = json.loads((FIXTURES / "sessions" / "gh-155.session.json").read_text())
    assert len(newer["turns"]) >= 2
    older = {**newer, "turns": newer["turns"][1:]}
    session = sessions.session_from_file(document=newer, agent_slug="single")
    with pytest.raises(BadRequest, match="newer version"):
        sessions.session_from_file(document=older, agent_slug="single")
    assert Session.objects.get(pk=session.pk).document == newer
