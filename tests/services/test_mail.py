"""The mail service in process: envelopes in order, idempotent ids, controls, and who wakes a session."""

from __future__ import annotations

import uuid

import pytest

from foundation.errors import UnknownSession
from sessions_app import mailbox
from sessions_app.models import MailEnvelope, Session
from sessions_app.services.mail import mail_send
from tests.factories import LlmTurnFactory, MailFactory, SessionFactory, UserTurnFactory
from tests.services.conftest import RecordingWorker

pytestmark = pytest.mark.django_db

USER = {"tag": "user", "owner": None}


def idle_session() -> Session:
    """A session whose last turn is a final answer (``idle``)."""
    return SessionFactory(turns=[LlmTurnFactory(text="done"), UserTurnFactory()])


def test_envelopes_take_the_next_seq_of_their_session() -> None:
    session = idle_session()
    other = idle_session()
    assert [MailFactory(session=session).seq for _ in range(3)] == [1, 2, 3]
    assert MailFactory(session=other).seq == 1
    assert Session.objects.get(pk=session.pk).last_mail_seq == 3


def test_a_user_message_wakes_an_idle_session_with_one_run_after_commit(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = idle_session()
    body = {"tag": "userMessage", "query": "wake up"}
    with django_capture_on_commit_callbacks(execute=True):
        receipt = mail_send(session_id=session.pk, body=body, sender=USER)
        assert worker.sent == []
    assert receipt["seq"] == 1 and receipt["duplicate"] is False
    [envelope] = MailEnvelope.objects.filter(session=session)
    assert str(envelope.mail_id) == receipt["id"] and envelope.body == body
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.RUNNING
    assert worker.runs() == [[str(stored.pk), str(stored.run_id)]]


def test_the_same_mail_id_twice_stores_one_envelope_and_starts_one_run(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = idle_session()
    mail_id = uuid.uuid4()
    body = {"tag": "userMessage", "query": "once"}
    with django_capture_on_commit_callbacks(execute=True):
        first = mail_send(session_id=session.pk, body=body, sender=USER, mail_id=mail_id)
    with django_capture_on_commit_callbacks(execute=True):
        again = mail_send(session_id=session.pk, body=body, sender=USER, mail_id=mail_id)
    assert again == {**first, "duplicate": True}
    assert MailEnvelope.objects.filter(session=session).count() == 1
    assert len(worker.runs()) == 1


def test_a_pause_control_pauses_a_ready_session_without_a_run(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = SessionFactory()
    with django_capture_on_commit_callbacks(execute=True):
        mail_send(session_id=session.pk, body=mailbox.PAUSE, sender=USER)
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.PAUSED
    assert stored.document["controlCursor"] == 1
    assert worker.sent == []


def test_mail_to_an_unknown_session_is_refused_and_stores_nothing(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(UnknownSession) as raised:
        mail_send(session_id=uuid.uuid4(), body={"tag": "userMessage", "query": "x"}, sender=USER)
    assert raised.value.code == "unknown_session" and raised.value.status == 404
    assert callbacks == [] and worker.sent == [] and not MailEnvelope.objects.exists()
