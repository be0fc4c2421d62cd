"""The continuation service in process: results land in the document once, and resume one run."""

from __future__ import annotations

import json
import uuid

import pytest

from agentfiles import document as doc
from foundation.errors import BadRequest, TokenAlreadyCompleted, UnknownToken
from sessions_app.models import Continuation, Event, Session
from sessions_app.services.continuations import continuation_complete
from sessions_app.services.sessions import session_pause, session_resume
from tests.factories import ContinuationFactory, SessionFactory
from tests.services.conftest import RecordingWorker

pytestmark = pytest.mark.django_db


def test_a_factory_session_waits_on_its_continuations() -> None:
    session = SessionFactory(deferred=2)
    assert session.status == Session.Status.WAITING_EXTERNAL
    tokens = {str(c.token) for c in Continuation.objects.filter(session=session)}
    assert tokens == {call["continuation_token"] for call in session.pending_calls} and len(tokens) == 2


def test_a_result_with_resume_is_applied_and_sends_one_run_after_commit(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    continuation = ContinuationFactory()
    with django_capture_on_commit_callbacks(execute=True):
        continuation_complete(token=continuation.token, result="sunny", resume=True)
        assert worker.sent == []
    continuation.refresh_from_db()
    assert continuation.result == "sunny"
    assert continuation.completed_at is not None and continuation.applied_at is not None
    session = Session.objects.get(pk=continuation.session_id)
    head = doc.head(session.document)
    assert head["tag"] == "UserTurn"
    assert [response for _, response in head["contents"]["userToolResponses"]] == ["sunny"]
    assert session.status == Session.Status.RUNNING
    assert worker.runs() == [[str(session.pk), str(session.run_id)]]


def test_a_result_is_announced_as_its_calls_tool_completed_event(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    continuation = ContinuationFactory()
    with django_capture_on_commit_callbacks(execute=True):
        continuation_complete(token=continuation.token, result="sunny", resume=False)
    completed = [json.loads(e.payload_json) for e in Event.objects.filter(kind="tool.completed")]
    assert completed == [
        {
            "tool_call_id": continuation.provider_call_id or continuation.tool_call_id,
            "tool": continuation.tool,
            "status": "completed",
            "result": "sunny",
        }
    ]
    assert continuation.tool


def test_a_result_without_resume_leaves_the_session_ready_and_sends_nothing(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    continuation = ContinuationFactory()
    with django_capture_on_commit_callbacks(execute=True):
        continuation_complete(token=continuation.token, result={"type": "json", "content": {"t": 21}}, resume=False)
    session = Session.objects.get(pk=continuation.session_id)
    assert session.status == Session.Status.READY and session.run_id is None
    assert worker.sent == []


@pytest.mark.parametrize("resume", [True, False])
def test_a_paused_session_keeps_the_result_and_stays_paused(
    resume: bool, worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = SessionFactory(deferred=1)
    continuation = Continuation.objects.get(session=session)
    with django_capture_on_commit_callbacks(execute=True):
        session_pause(session_id=session.pk)
        continuation_complete(token=continuation.token, result="sunny", resume=resume)
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.PAUSED and stored.run_id is None
    assert [response for _, response in doc.head(stored.document)["contents"]["userToolResponses"]] == ["sunny"]
    assert worker.sent == []
    with django_capture_on_commit_callbacks(execute=True):
        resumed = session_resume(session_id=session.pk, mode=Session.RunMode.UNTIL_BLOCKED)
    assert resumed.status == Session.Status.RUNNING
    assert worker.runs() == [[str(session.pk), str(resumed.run_id)]]


def test_one_result_of_two_keeps_the_session_waiting(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    session = SessionFactory(deferred=2)
    first, second = Continuation.objects.filter(session=session).order_by("tool_call_id")
    with django_capture_on_commit_callbacks(execute=True):
        continuation_complete(token=first.token, result="one", resume=True)
    stored = Session.objects.get(pk=session.pk)
    assert stored.status == Session.Status.WAITING_EXTERNAL
    assert [call["continuation_token"] for call in stored.pending_calls] == [str(second.token)]
    assert worker.sent == []


def test_a_second_result_is_refused_and_the_first_is_kept(
    worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    continuation = ContinuationFactory()
    continuation_complete(token=continuation.token, result="first", resume=False)
    version = Session.objects.get(pk=continuation.session_id).version
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(TokenAlreadyCompleted) as raised:
        continuation_complete(token=continuation.token, result="second", resume=True)
    assert raised.value.status == 409 and callbacks == [] and worker.sent == []
    continuation.refresh_from_db()
    assert continuation.result == "first"
    assert Session.objects.get(pk=continuation.session_id).version == version


@pytest.mark.parametrize(
    "result",
    [{"type": "text"}, {"type": "media", "mimeType": "image/png", "base64Data": "not base64!"}, 42, {"content": "x"}],
)
def test_a_malformed_result_is_refused_before_anything_is_stored(
    result: object, worker: RecordingWorker, django_capture_on_commit_callbacks
) -> None:
    continuation = ContinuationFactory()
    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(BadRequest):
        continuation_complete(token=continuation.token, result=result, resume=True)
    assert callbacks == [] and worker.sent == []
    continuation.refresh_from_db()
    assert continuation.completed_at is None and continuation.result is None
    assert Session.objects.get(pk=continuation.session_id).status == Session.Status.WAITING_EXTERNAL


def test_an_unknown_token_is_refused(worker: RecordingWorker) -> None:
    with pytest.raises(UnknownToken) as raised:
        continuation_complete(token=uuid.uuid4(), result="x", resume=True)
    assert raised.value.code == "unknown_token" and worker.sent == []
